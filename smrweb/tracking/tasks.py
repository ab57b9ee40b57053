"""Submission verification: run the scenario's validator against the artifact in a sandbox (thin:
the sandbox is `core.sandbox`, the writes are `tracking.submissions`)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError

from smrweb.tracking import services, submissions
from smrweb.tracking.models import Rollback, RollbackStatus, Submission, SubmissionStatus, VerificationOutcome

log = logging.getLogger(__name__)

VALIDATORS_DIR = settings.BASE_DIR / "smrweb" / "validators"


def _cannot(detail: str) -> submissions.VerificationResult:
    return submissions.VerificationResult(VerificationOutcome.CANNOT_VERIFY, None, "", detail)


def confinement():
    """How validators are contained here: bubblewrap with the configured limits, or None when the operator
    chose SMRWEB_SANDBOX=unconfined (finding 4)."""
    from smrweb.core.sandbox import Confinement

    if settings.SMRWEB_SANDBOX == "unconfined":
        return None
    return Confinement(memory_bytes=settings.SMRWEB_SANDBOX_MEMORY_BYTES, cpu_seconds=settings.SMRWEB_SANDBOX_CPU_SECONDS,
                       file_bytes=settings.SMRWEB_SANDBOX_FILE_BYTES, processes=settings.SMRWEB_SANDBOX_PROCESSES,
                       readonly=(str(VALIDATORS_DIR),))


@worker_ready.connect
def remove_stale_validator_workdirs(**kwargs) -> None:
    """Work directories of validators whose worker was killed (finding 12) go when a worker starts."""
    from smrweb.core.sandbox import remove_stale_workdirs

    if removed := remove_stale_workdirs():
        log.warning("removed %d validator work directories left by dead workers: %s", len(removed), removed)


def _running_key(submission_id: int) -> str:
    return f"smrweb:verifying:{submission_id}"


@shared_task(acks_late=True, ignore_result=True)
def verify_submission(submission_id: int) -> str:
    """Verify one submission; a redelivered message after the result is stored does nothing, and a copy
    that arrives while another worker's validator still runs (its heartbeat holds a claim) does not start
    a second one (finding 12)."""
    from smrweb.core.sandbox import HEARTBEAT_S, run_validator

    sub = Submission.objects.select_related("project__scenario", "artifact__blob").get(pk=submission_id)
    if sub.status != SubmissionStatus.VERIFYING:
        return f"skipped: {sub.status}"
    claim_seconds = int(HEARTBEAT_S * 3)
    try:
        claimed = cache.add(_running_key(submission_id), "running", timeout=claim_seconds)
    except Exception:  # the cache (Redis) is down: verify rather than wedge; the result is stored once
        log.exception("could not claim the verification of submission %s; running it", submission_id)
        claimed = True
    if not claimed:
        return "skipped: a validator for it is running on a worker"

    def progress(line: str) -> None:
        try:
            cache.touch(_running_key(submission_id), timeout=claim_seconds)
        except Exception:
            log.warning("could not renew the claim on submission %s", submission_id)
        submissions.record_progress(sub.pk, line)

    try:
        return _verify(sub, run_validator, progress)
    finally:
        try:
            cache.delete(_running_key(submission_id))
        except Exception:
            pass  # it expires on its own


def _verify(sub, run_validator, progress) -> str:
    command = sub.project.scenario.validator_command
    if not command:
        result = _cannot(f"The scenario {sub.project.scenario.key} has no validator command.")
    elif sub.artifact is None:
        result = _cannot(f"No artifact bytes to check: {sub.artifact_ref or 'the score named no artifact'} "
                         "has not been uploaded.")
    else:
        with services.open_blob(sub.artifact.blob) as fh:
            ran = run_validator(
                list(command), fh, artifact_name=sub.artifact.path,
                timeout=settings.SMRWEB_VALIDATOR_TIMEOUT_SECONDS,
                extra_placeholders={"validators": str(VALIDATORS_DIR)},
                on_progress=progress, confinement=confinement(),
            )
        result = submissions.VerificationResult(ran.outcome, ran.exit_code, ran.output_tail, ran.detail)
    stored = submissions.record_verification(sub.pk, result)
    return result.outcome if stored else "already recorded"


@shared_task(bind=True, acks_late=True, max_retries=None)
def dispatch_rollback(self, rollback_id: int) -> str:
    """One dispatch attempt; retried with backoff while the answer says retrying may help (the attempts
    are counted on the rollback, not by Celery, so a re-queued copy cannot exceed the maximum)."""
    from smrweb.sources import rollback as dispatcher

    attempt = dispatcher.dispatch(rollback_id)
    if attempt.outcome == "retry":
        raise self.retry(countdown=attempt.retry_in)
    return attempt.outcome


def dispatch(task, *args) -> bool:
    """Queue `task` after the current transaction commits. False when the broker cannot be reached:
    the request was recorded in the database, and `redispatch_stale_actions` queues it later."""
    try:
        task.delay_on_commit(*args)
    except OperationalError as exc:
        log.warning("could not queue %s%r: %s; it will be re-queued", task.name, args, exc)
        return False
    return True


def queue_quietly(task, *args) -> None:
    """Queue now (called after a commit); a broker that cannot be reached is logged, not raised: the
    caller's work is done, and what this task would do is found again later."""
    try:
        task.delay(*args)
    except OperationalError as exc:
        log.warning("could not queue %s%r: %s", task.name, args, exc)


@shared_task(ignore_result=True)
def auto_verify_run(run_id: int) -> int:
    """The project verifies every new score: put the run's new candidates up for verification, one
    verification task each. Candidates missed while the broker was down are taken with the next score."""
    started = submissions.automatic_verifications(run_id)
    for sub in started:
        queue_quietly(verify_submission, sub.pk)
    return len(started)


def _stale_after() -> timedelta:
    """A verification or rollback still waiting this long after it was asked for (or last re-queued)
    is assumed lost in transit: the broker was down, or its message died with a worker."""
    return timedelta(seconds=settings.SMRWEB_STALE_ACTION_SECONDS)


def _lost_dispatch_after() -> timedelta:
    """A dispatched rollback is touched by every attempt (start, retry note, finish); between two
    touches come at most one call to the source and one backoff. Silent for longer, its task died with
    a worker (SIGKILL, OOM): the broker would hand the unacknowledged message out again only after its
    visibility timeout, an hour."""
    call = max(settings.SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT, settings.SMR_TIMEOUT, settings.SMR_FIRST_CALL_TIMEOUT)
    return _stale_after() + timedelta(seconds=settings.SMRWEB_ROLLBACK_RETRY_MAX_SECONDS + call)


def _claim(stale, now) -> list[int]:
    """Ids of stale rows, each claimed by bumping `updated` with a conditional UPDATE, so that the next
    tick (or a second beat) does not queue it again while this copy waits for a worker."""
    return [pk for pk in stale.values_list("pk", flat=True)[:100] if stale.filter(pk=pk).update(updated=now)]


@shared_task(ignore_result=True)
def redispatch_stale_actions() -> dict:
    """Re-queue verifications and rollbacks that were recorded but never picked up, or whose worker
    died mid-task (both tasks are safe to run again: a finished one is skipped, and a rollback webhook
    carries the same Idempotency-Key every time)."""
    now = timezone.now()
    cutoff = now - _stale_after()
    subs = _claim(Submission.objects.filter(status=SubmissionStatus.VERIFYING, updated__lt=cutoff), now)
    rolls = _claim(Rollback.objects.filter(
        Q(status=RollbackStatus.REQUESTED, updated__lt=cutoff)
        | Q(status=RollbackStatus.DISPATCHED, updated__lt=now - _lost_dispatch_after())), now)
    for pk in subs:
        verify_submission.delay(pk)
    for pk in rolls:
        dispatch_rollback.delay(pk)
    return {"verifications": subs, "rollbacks": rolls}


@shared_task(ignore_result=True)
def collect_unreferenced_blobs() -> int:
    """Hourly: delete blobs no artifact holds, an hour after they were stored (finding 10)."""
    removed = services.collect_unreferenced_blobs(older_than=timedelta(hours=1))
    if removed:
        log.info("removed %d unreferenced artifact blob(s)", removed)
    return removed
