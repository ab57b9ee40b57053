"""The bookkeeping of every dispatched action — a rollback, the start of the next run, a steering
request — in one place: each attempt is counted on the row (so the last attempt is the last however the
task was retried, redelivered or re-queued by the stale-action sweep), what it got back is appended to
the row's log, and the action ends failed with its reason. requested → dispatched on the first attempt;
a row that has ended is not attempted again (a redelivered task acts once). All audited.

What "the source took it" means differs per action and stays with it: `rollbacks.finish`,
`launches.record_accepted` (which links the run), `control.control_accepted` (which keeps the source's
reference)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from smrweb.tracking.models import OPEN_DISPATCH, AuditVerb, DispatchStatus, Rollback, RunControl, RunLaunch
from smrweb.tracking.services.audit import record_audit

LOG_MAX = 10_000  # characters of an action's log kept (the newest)


@dataclass(frozen=True)
class Action:
    verbs: tuple[AuditVerb, AuditVerb]  # what the audit says when the first attempt starts, and on failure
    related: tuple[str, ...]  # what the dispatcher reads, fetched with the locked row
    may_attempt: tuple[str, ...]  # the statuses an attempt starts from
    may_fail: tuple[str, ...]  # the statuses that can still end failed
    project: Callable[[Any], Any]
    run: Callable[[Any], Any]  # the run whose page shows the action (touched so it re-renders), or None
    audit: Callable[[Any], dict]  # what else the audit row names


S = DispatchStatus
ACTIONS: dict[type[models.Model], Action] = {
    Rollback: Action(
        (AuditVerb.ROLLBACK_DISPATCHED, AuditVerb.ROLLBACK_FAILED),
        ("run__project", "target_submission", "target_checkpoint", "requested_by"),
        Rollback.OPEN,
        Rollback.OPEN,
        project=lambda r: r.run.project,
        run=lambda r: r.run,
        audit=lambda r: {},
    ),
    RunLaunch: Action(
        (AuditVerb.LAUNCH_DISPATCHED, AuditVerb.LAUNCH_FAILED),
        ("project__scenario", "from_run", "requested_by", "run"),
        OPEN_DISPATCH,
        OPEN_DISPATCH,
        project=lambda launch: launch.project,
        run=lambda launch: None,  # its run does not exist yet
        audit=lambda launch: {},
    ),
    RunControl: Action(
        (AuditVerb.CONTROL_DISPATCHED, AuditVerb.CONTROL_FAILED),
        ("run__project", "requested_by"),
        OPEN_DISPATCH,
        (S.REQUESTED, S.DISPATCHED, S.ACCEPTED),  # taken but not yet reported back may still fail
        project=lambda c: c.run.project,
        run=lambda c: c.run,
        audit=lambda c: {"kind": c.kind},
    ),
}


def printable(text: str) -> str:
    """A source's own words (git's stderr) may hold NUL, which PostgreSQL text and JSON cannot."""
    return text.replace("\x00", "\ufffd")


def append(row, line: str, when=None) -> None:
    """Add a stamped line to the row's log (not saved)."""
    stamp = (when or timezone.now()).strftime("%H:%M:%S")
    row.detail = (row.detail + f"\n[{stamp}] {printable(line)}").strip()[-LOG_MAX:]


def locked(model: type[models.Model], pk: int):
    """The row, locked for this transaction, with what the dispatcher reads."""
    return model.objects.select_for_update(of=("self",)).select_related(*ACTIONS[model].related).get(pk=pk)


def touch_run(model: type[models.Model], row) -> None:
    if (run := ACTIONS[model].run(row)) is not None:
        run.save(update_fields=["updated"])  # the run page shows the change at its next poll


def start_attempt(model: type[models.Model], pk: int):
    """Count a dispatch attempt (requested → dispatched on the first); None when the action has already
    ended or been taken, so a redelivered task does not act twice."""
    action = ACTIONS[model]
    with transaction.atomic():
        row = locked(model, pk)
        if row.status not in action.may_attempt:
            return None
        first = row.status == S.REQUESTED
        row.status = S.DISPATCHED
        row.attempts += 1
        row.dispatched_at = row.dispatched_at or timezone.now()
        row.save()
        if first:
            record_audit(
                None, AuditVerb(action.verbs[0]), row, project=action.project(row), **action.audit(row)
            )
        touch_run(model, row)
    return row


def note_attempt(model: type[models.Model], pk: int, line: str) -> None:
    """Append what one attempt got back (a retry's reason), for the person watching and the audit."""
    with transaction.atomic():
        row = model.objects.select_for_update(of=("self",)).get(pk=pk)
        append(row, line)
        row.save(update_fields=["detail", "updated"])


def failed(model: type[models.Model], pk: int, *, detail: str):
    """The source refused, or the last attempt failed: the action ends failed with the reason. None when
    it had already ended."""
    action = ACTIONS[model]
    with transaction.atomic():
        row = locked(model, pk)
        if row.status not in action.may_fail:
            return None
        row.status = S.FAILED
        row.finished_at = timezone.now()
        append(row, detail, row.finished_at)
        row.save()
        record_audit(
            None,
            AuditVerb(action.verbs[1]),
            row,
            project=action.project(row),
            **action.audit(row),
            detail=printable(detail)[:500],
        )
        touch_run(model, row)
    return row
