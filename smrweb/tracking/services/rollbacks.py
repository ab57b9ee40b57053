"""Typed rollbacks — part of the one write path (with `services`).

A person asks to roll a run back to an earlier submission or checkpoint; a task dispatches it through
the run's source (SMR: restore a checkpoint through the SDK; REST push: a signed webhook to the
project's URL) and records each attempt. requested → dispatched → applied | failed, all audited.

A run has at most one rollback in flight (a partial unique constraint), so double clicks and
concurrent requests get the same rollback back instead of a second one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from smrweb.core import outbound
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
from smrweb.tracking.services import record_audit
from smrweb.tracking.services.archive import check_writable

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


# What a rollback does, per source; a source not listed cannot roll back. The one rule of who may roll
# back what: the run page, the project and submission pages, the API and the dispatcher all ask here.
ROLLBACK_EFFECTS = {
    SourceKind.SMR: "Managed Research restores the matching checkpoint in place",
    SourceKind.GIT: "A new commit restores its files on the branch",
    SourceKind.PUSH: "The project's webhook is told to restore it",
}


def rollback_refusal(project) -> str:
    """Why this project cannot roll back at all ("" when it can)."""
    if project.archived_at is not None:
        return f"Project {project.slug} is archived: it is read-only until an admin restores it."
    if project.source not in ROLLBACK_EFFECTS:
        return f"{project.get_source_display()} projects cannot roll back."
    if project.source == SourceKind.PUSH and not project.rollback_webhook_url:
        return (
            "This project has no rollback webhook URL: an admin sets one in the project settings, "
            "so the harness can be told to roll back."
        )
    return ""


def may_roll_back(user: Any, project) -> bool:
    """Whether `user` gets rollback buttons in `project`: reviewers and admins, where the source can."""
    return not rollback_refusal(project) and project.allows(user, Role.REVIEWER)


def _refuse_uncounted(submission: Submission) -> None:
    """A rollback goes back to work that counts: never to an invalid, rejected or excluded submission."""
    if submission.status in NEVER_COUNTED or submission.excluded_at is not None or submission.run.excluded_at:
        why = (
            "is excluded from the project's numbers"
            if submission.excluded_at or submission.run.excluded_at
            else "failed verification"
            if submission.status == "invalid"
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
    if refusal := rollback_refusal(project):
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


def start_attempt(rollback_id: int) -> Rollback | None:
    """Mark a dispatch attempt (requested → dispatched on the first); None if it already finished,
    so a redelivered task does not act twice."""
    with transaction.atomic():
        rollback = (
            Rollback.objects.select_for_update(of=("self",))
            .select_related("run__project", "target_submission", "target_checkpoint", "requested_by")
            .get(pk=rollback_id)
        )
        if rollback.status not in Rollback.OPEN:
            return None
        first = rollback.status == R.REQUESTED
        rollback.status = R.DISPATCHED
        rollback.attempts += 1
        rollback.dispatched_at = rollback.dispatched_at or timezone.now()
        rollback.save()
        if first:
            record_audit(None, AuditVerb.ROLLBACK_DISPATCHED, rollback, project=rollback.run.project)
        rollback.run.save(update_fields=["updated"])
    return rollback


def _printable(text: str) -> str:
    """A source's own words (git's stderr) may hold NUL, which PostgreSQL text and JSON cannot."""
    return text.replace("\x00", "\ufffd")


def note_attempt(rollback_id: int, line: str) -> None:
    """Append what one attempt got back (kept for the person watching and for the audit)."""
    with transaction.atomic():
        rollback = Rollback.objects.select_for_update(of=("self",)).get(pk=rollback_id)
        stamp = timezone.now().strftime("%H:%M:%S")
        rollback.detail = (rollback.detail + f"\n[{stamp}] {_printable(line)}").strip()[-10_000:]
        rollback.save(update_fields=["detail", "updated"])


def finish(rollback_id: int, *, ok: bool, detail: str, accepted_only: bool = False) -> Rollback | None:
    """End an attempt: applied, failed, or (`accepted_only`) taken by the source without a confirmation
    that the restore is done — the run page then says so and shows the run's state as polled."""
    with transaction.atomic():
        rollback = (
            Rollback.objects.select_for_update(of=("self",))
            .select_related("run__project")
            .get(pk=rollback_id)
        )
        if rollback.status not in Rollback.OPEN:
            return None
        rollback.status = (R.ACCEPTED if accepted_only else R.APPLIED) if ok else R.FAILED
        rollback.finished_at = timezone.now()
        stamp = rollback.finished_at.strftime("%H:%M:%S")
        detail = _printable(detail)
        rollback.detail = (rollback.detail + f"\n[{stamp}] {detail}").strip()[-10_000:]
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


# --- the webhook of push projects -------------------------------------------------------------------


def webhook_secret(project) -> str:
    """The key a receiver checks signatures with: derived from SECRET_KEY per project (shown to admins)."""
    return hmac.new(
        settings.SECRET_KEY.encode(), f"smrweb.rollback-webhook:{project.pk}".encode(), hashlib.sha256
    ).hexdigest()


def webhook_request(rollback: Rollback, *, now=None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the rollback POST. The signature covers timestamp and body, so a
    receiver can refuse replays; the Idempotency-Key lets it ignore a retried delivery."""
    now = now or timezone.now()
    run = rollback.run
    target: dict[str, Any]
    if rollback.target_submission_id:
        sub = rollback.target_submission
        artifact = sub.artifact
        target = {
            "type": "submission",
            "id": sub.pk,
            "score": sub.score,
            "commit": sub.commit,
            "artifact_path": artifact.path if artifact else None,
            "artifact_sha256": artifact.blob.sha256 if artifact else None,
            "ts": sub.ts.isoformat(),
        }
    else:
        cp = rollback.target_checkpoint
        target = {
            "type": "checkpoint",
            "id": cp.external_id,
            "label": cp.label,
            "commit": cp.commit,
            "ts": cp.ts.isoformat(),
        }
    payload = {
        "type": "smrweb.rollback",
        "rollback_id": rollback.pk,
        "project": run.project.slug,
        "run": run.external_id,
        "target": target,
        "reason": rollback.reason,
        "requested_by": rollback.requested_by.get_username(),
        "requested_at": rollback.created.isoformat(),
    }
    return _signed_post(
        run.project, payload, key=f"smrweb-rollback-{rollback.pk}", agent="smrweb-rollback/1", now=now
    )


def _signed_post(project, payload: dict, *, key: str, agent: str, now) -> tuple[bytes, dict[str, str]]:
    """A push project's webhook POST: canonical JSON, signed with the project's secret."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = outbound.signed_headers(
        webhook_secret(project), body, timestamp=int(now.timestamp()), idempotency_key=key, agent=agent
    )
    return body, headers


def stop_webhook_request(run, *, reason: str, now=None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the signed `stop` POST to a push project's webhook (the budget guard's
    way to stop a harness); same secret and signature as a rollback."""
    now = now or timezone.now()
    payload = {
        "type": "smrweb.stop",
        "project": run.project.slug,
        "run": run.external_id,
        "reason": reason,
        "requested_at": now.isoformat(),
    }
    return _signed_post(run.project, payload, key=f"smrweb-stop-{run.pk}", agent="smrweb-stop/1", now=now)
