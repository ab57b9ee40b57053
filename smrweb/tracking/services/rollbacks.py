"""Typed rollbacks — part of the one write path (with `services`).

A person asks to roll a run back to an earlier submission or checkpoint; a task dispatches it through
the run's source (SMR: restore a checkpoint through the SDK; REST push: a signed webhook to the
project's URL) and records each attempt. requested → dispatched → applied | failed, all audited.

A run has at most one rollback in flight (a partial unique constraint), so double clicks and
concurrent requests get the same rollback back instead of a second one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from smrweb.tracking.errors import NotAllowed, RollbackRefused
from smrweb.tracking.models import (
    NEVER_COUNTED,
    AuditVerb,
    Checkpoint,
    Role,
    Rollback,
    RollbackStatus,
    Run,
    SourceKind,
    Submission,
)
from smrweb.tracking.services import capabilities, dispatched, record_audit
from smrweb.tracking.services.archive import check_writable
from smrweb.tracking.services.capabilities import Action

R = RollbackStatus


@dataclass(frozen=True)
class Requested:
    rollback: Rollback
    created: bool  # False: an open rollback of this run already existed and is returned


def describe_target(rollback: Rollback) -> str:
    if rollback.target_submission_id:
        sub = rollback.target_submission
        return f"submission #{sub.pk} ({sub.score:g}{', ' + sub.commit[:10] if sub.commit else ''})"
    cp = rollback.target_checkpoint
    return f"checkpoint {cp.label or cp.external_id}"


# Who answers a rollback, by source, and what a restore does to a run that has finished.
ANSWERED_BY = {SourceKind.SMR: "SMR", SourceKind.GIT: "git", SourceKind.PUSH: "the project's webhook"}
AFTER_THE_END = {
    SourceKind.SMR: "SMR restores the checkpoint in place and a finished run does not start again",
    SourceKind.GIT: "the files are restored by a commit on the branch; nothing starts again",
    SourceKind.PUSH: "nothing runs again unless the harness starts it",
}


@dataclass(frozen=True)
class Outcome:
    """Where a rollback stands, in one sentence for the top of the run page."""

    status: str
    tone: str  # the banner's colour: info (on its way), good (applied), warn (accepted), bad (failed)
    text: str
    next_run: bool  # the run has finished and nothing runs again: starting the next run is the way on


def outcome(rollback: Rollback, run: Run) -> Outcome:
    """What happened to `rollback` and what the run does now, as true for its source: requested or
    dispatched (on its way), accepted (the source took it, no confirmation), applied, or failed."""
    source = run.project.source
    who = ANSWERED_BY.get(source, "the source")
    head = f"Rollback to {describe_target(rollback)}"
    status = rollback.status
    if status == R.REQUESTED:
        return Outcome(status, "info", f"{head}: requested — a worker is sending it to {who}.", False)
    if status == R.DISPATCHED:
        return Outcome(status, "info", f"{head}: sent to {who}, waiting for its answer.", False)
    if status == R.FAILED:
        lines = [line.strip() for line in (rollback.detail or "").splitlines() if line.strip()]
        why = f" ({lines[-1][:200]})" if lines else ""
        return Outcome(status, "bad", f"{head}: failed{why}. Nothing was restored.", False)
    said = (
        f"applied by {who}, which confirmed the restore"
        if status == R.APPLIED
        else f"accepted by {who}, which took the request and has not confirmed the restore"
    )
    if run.is_terminal:
        after = AFTER_THE_END.get(source, "nothing starts again")
        text = f"{head}: {said}. The run stays {run.state}: {after}; start the next run from it."
        return Outcome(status, "good" if status == R.APPLIED else "warn", text, True)
    text = f"{head}: {said}. The run is {run.state} and goes on from there."
    return Outcome(status, "good" if status == R.APPLIED else "warn", text, False)


def _refuse_uncounted(submission: Submission) -> None:
    """A rollback goes back to work that counts: never to an invalid, rejected, refused or excluded
    submission."""
    if submission.status in NEVER_COUNTED or submission.excluded_at is not None or submission.run.excluded_at:
        why = (
            "is excluded from the project's numbers"
            if submission.excluded_at or submission.run.excluded_at
            else "failed verification"
            if submission.status == "invalid"
            else "was refused by the arena"
            if submission.status == "refused"
            else "was rejected in review"
        )
        raise RollbackRefused(f"Submission #{submission.pk} {why}: a rollback goes back to work that counts.")


def request_rollback(
    *, by: Any, reason: str, submission: Submission | None = None, checkpoint: Checkpoint | None = None
) -> Requested:
    """Record a rollback request (the caller dispatches it on commit when `created`)."""
    if (submission is None) == (checkpoint is None):
        raise RollbackRefused("Roll back to exactly one submission or one checkpoint.")
    run = (submission or checkpoint).run
    project = run.project
    if not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"Rolling back needs the reviewer role in {project.slug}.")
    if checkpoint is not None and (checkpoint.failure_reason or not checkpoint.restorable):
        raise RollbackRefused(
            f"Checkpoint {checkpoint.label or checkpoint.external_id} cannot be restored"
            f"{': ' + checkpoint.failure_reason[:200] if checkpoint.failure_reason else ''}."
        )
    if refusal := capabilities.refusal(project, Action.ROLL_BACK):
        raise RollbackRefused(refusal)
    check_writable(project, run)
    reason = (reason or "").strip() or "rolled back from the dashboard"
    try:
        with transaction.atomic():
            Run.objects.select_for_update().get(pk=run.pk)  # serialise requests for one run
            if submission is not None:
                _refuse_uncounted(Submission.objects.get(pk=submission.pk))
            open_one = Rollback.objects.filter(run=run, status__in=Rollback.OPEN).first()
            if open_one is not None:
                return Requested(open_one, False)
            # The same rollback again with nothing new scored since: it was done; a second click must
            # not send a second restore.
            last = (
                Rollback.objects.filter(run=run).exclude(status=R.FAILED).order_by("-created", "-id").first()
            )
            if (
                last is not None
                and last.target_submission_id == (submission.pk if submission else None)
                and last.target_checkpoint_id == (checkpoint.pk if checkpoint else None)
                and not Submission.objects.filter(run=run, created__gt=last.created).exists()
            ):
                return Requested(last, False)
            rollback = Rollback.objects.create(
                run=run,
                target_submission=submission,
                target_checkpoint=checkpoint,
                reason=reason[:5000],
                requested_by=by,
            )
            record_audit(
                by,
                AuditVerb.ROLLBACK_REQUESTED,
                rollback,
                project=project,
                run=run.external_id,
                target=describe_target(rollback),
                reason=reason[:500],
            )
    except IntegrityError:
        # A concurrent request won the race between our check and insert (the unique constraint).
        return Requested(Rollback.objects.get(run=run, status__in=Rollback.OPEN), False)
    return Requested(rollback, True)


def finish(rollback_id: int, *, ok: bool, detail: str, accepted_only: bool = False) -> Rollback | None:
    """End an attempt: applied, failed (`dispatched.failed`), or (`accepted_only`) taken by the source
    without a confirmation that the restore is done — the run page then says so and shows the run's
    state as polled."""
    if not ok:
        return dispatched.failed(Rollback, rollback_id, detail=detail)
    with transaction.atomic():
        rollback = dispatched.locked(Rollback, rollback_id)
        if rollback.status not in Rollback.OPEN:
            return None
        rollback.status = R.ACCEPTED if accepted_only else R.APPLIED
        rollback.finished_at = timezone.now()
        detail = dispatched.printable(detail)
        dispatched.append(rollback, detail, rollback.finished_at)
        rollback.save()
        record_audit(
            None,
            AuditVerb(f"rollback.{rollback.status}"),
            rollback,
            project=rollback.run.project,
            detail=detail[:500],
        )
        rollback.run.save(update_fields=["updated"])
    return rollback


def checkpoint_for(rollback: Rollback) -> Checkpoint | None:
    """The checkpoint an SMR rollback restores: the chosen one, or for a submission the restorable
    checkpoint of its commit, else the latest restorable one taken at or before the submission."""
    if rollback.target_checkpoint_id:
        return rollback.target_checkpoint
    sub = rollback.target_submission
    usable = Checkpoint.objects.filter(run=sub.run, restorable=True, failure_reason="")
    if sub.commit:
        same = usable.filter(commit=sub.commit).order_by("-ts", "-id").first()
        if same:
            return same
    return usable.filter(ts__lte=sub.ts).order_by("-ts", "-id").first()
