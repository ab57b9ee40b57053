"""Submission verification: run the scenario's validator against the artifact in a sandbox (thin:
the sandbox is `core.sandbox`, the writes are `tracking.submissions`)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError

from smrweb.tracking import services, submissions
from smrweb.tracking.models import Rollback, RollbackStatus, Submission, SubmissionStatus, VerificationOutcome

log = logging.getLogger(__name__)
# A verification or rollback still waiting this long after it was asked for is assumed lost in transit.
STALE_AFTER = timedelta(seconds=120)

VALIDATORS_DIR = settings.BASE_DIR / "smrweb" / "validators"


def _cannot(detail: str) -> submissions.VerificationResult:
    return submissions.VerificationResult(VerificationOutcome.CANNOT_VERIFY, None, "", detail)


@shared_task(acks_late=True, ignore_result=True)
def verify_submission(submission_id: int) -> str:
    """Verify one submission; a redelivered message after the result is stored does nothing."""
    from smrweb.core.sandbox import run_validator

    sub = Submission.objects.select_related("project__scenario", "artifact__blob").get(pk=submission_id)
    if sub.status != SubmissionStatus.VERIFYING:
        return f"skipped: {sub.status}"
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
                on_progress=lambda line: submissions.record_progress(sub.pk, line),
            )
        result = submissions.VerificationResult(ran.outcome, ran.exit_code, ran.output_tail, ran.detail)
    stored = submissions.record_verification(sub.pk, result)
    return result.outcome if stored else "already recorded"


@shared_task(bind=True, acks_late=True, max_retries=None)
def dispatch_rollback(self, rollback_id: int) -> str:
    """One dispatch attempt; retried with backoff while the answer says retrying may help."""
    from smrweb.sources import rollback as dispatcher

    last_try = self.request.retries + 1 >= settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS
    attempt = dispatcher.dispatch(rollback_id, last_try=last_try)
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


@shared_task(ignore_result=True)
def redispatch_stale_actions() -> dict:
    """Re-queue verifications and rollbacks that were recorded but never picked up (both tasks are
    safe to run again: a finished one is skipped)."""
    cutoff = timezone.now() - STALE_AFTER
    subs = list(Submission.objects.filter(status=SubmissionStatus.VERIFYING, updated__lt=cutoff)
                .values_list("pk", flat=True)[:100])
    rolls = list(Rollback.objects.filter(status=RollbackStatus.REQUESTED, updated__lt=cutoff)
                 .values_list("pk", flat=True)[:100])
    for pk in subs:
        verify_submission.delay(pk)
    for pk in rolls:
        dispatch_rollback.delay(pk)
    return {"verifications": subs, "rollbacks": rolls}
