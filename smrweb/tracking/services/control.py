"""Steering a live run — part of the one write path (with `services`).

A reviewer or admin sends the agent a runtime message, pauses the run or resumes it; a task dispatches
the request through the run's source (SMR: `enqueue_runtime_message`, `pause_run`, `resume_run` through
the SDK; REST push: a signed webhook to the project's harness) and records each attempt:
requested → dispatched → accepted → confirmed, or failed, all audited. "Accepted" is the source's word
that it took the request; "confirmed" is the source reporting it back — the message appears among the
run's runtime messages, the run's state becomes (or leaves) paused — which `confirm_reported` notices
as ingest writes those rows.

Who may steer what is `capabilities.refusal(project, Action.STEER)`: the run page, the API and the
dispatcher all ask it. Double clicks get the request already in flight back (`is_new` False).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from smrweb.tracking.errors import ControlRefused, InvalidInput, NotAllowed
from smrweb.tracking.models import (
    OPEN_DISPATCH,
    ApiToken,
    AuditVerb,
    ControlKind,
    DispatchStatus,
    Role,
    Run,
    RunControl,
    RunState,
)
from smrweb.tracking.services import capabilities, dispatched
from smrweb.tracking.services.audit import record_audit
from smrweb.tracking.services.capabilities import Action

MESSAGE_MAX = 10_000  # characters of a runtime message (the ingest contract keeps up to 100,000)
# Asked for and not ended: the source may still take it or report it back.
PENDING = (DispatchStatus.REQUESTED, DispatchStatus.DISPATCHED, DispatchStatus.ACCEPTED)
# What the source may still report back: sent (or being sent), not confirmed or failed.
REPORTABLE = (DispatchStatus.DISPATCHED, DispatchStatus.ACCEPTED)


def lifecycle_refusal(run: Run, kind: str) -> str:
    """Why a pause or resume of this run makes no sense right now ("" when it does)."""
    if run.is_terminal:
        return f"The run is {run.state}: only a live run can be paused or resumed."
    if kind == ControlKind.PAUSE and run.state == RunState.PAUSED:
        return "The run is already paused; resume it instead."
    if kind == ControlKind.RESUME and run.state != RunState.PAUSED:
        return f"The run is {run.state}, not paused: there is nothing to resume."
    return ""


def request_control(run: Run, *, by: Any, kind: str, body: str = "") -> RunControl:
    """Record a steering request; the caller dispatches it on commit when `control.is_new` is True.

    Refusals: a project token or a viewer (NotAllowed, 403); a source that cannot steer, a finished
    run, a pause of a paused run, a resume of a run that is not paused, a pause while a resume is on
    its way and the other way round (ControlRefused, 409); an empty or too long message (InvalidInput,
    400). The same request again while the first is still being sent (a double click) returns that
    one with `is_new` False."""
    project = run.project
    if kind not in ControlKind.values:
        raise InvalidInput("kind", f"Unknown control {kind!r}: message, pause or resume.")
    if isinstance(by, ApiToken):
        raise NotAllowed(
            f"Project tokens cannot steer runs: sign in as a reviewer or admin of {project.slug}."
        )
    if not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"Steering a run needs the reviewer role in {project.slug}.")
    body = (body or "").strip() if kind == ControlKind.MESSAGE else ""
    if kind == ControlKind.MESSAGE:
        if not body:
            raise InvalidInput("body", f"Write the message to send (1 to {MESSAGE_MAX:,} characters).")
        if len(body) > MESSAGE_MAX:
            raise InvalidInput(
                "body", f"The message is {len(body):,} characters long; at most {MESSAGE_MAX:,} are sent."
            )
    if refusal := capabilities.refusal(project, Action.STEER):
        raise ControlRefused(refusal)
    with transaction.atomic():
        run = Run.objects.select_related("project").select_for_update(of=("self",)).get(pk=run.pk)
        if run.is_terminal:
            raise ControlRefused(f"The run is {run.state}: only a live run can be steered.")
        same = RunControl.objects.filter(run=run, kind=kind, status__in=OPEN_DISPATCH)
        if kind == ControlKind.MESSAGE:
            same = same.filter(body=body, requested_by=by)
        if (open_one := same.first()) is not None:
            open_one.is_new = False
            return open_one
        if kind != ControlKind.MESSAGE:
            other = ControlKind.RESUME if kind == ControlKind.PAUSE else ControlKind.PAUSE
            if pending := RunControl.objects.filter(run=run, kind=other, status__in=PENDING).first():
                raise ControlRefused(
                    f"A {other} of this run is on its way ({pending.status}); {kind} once the run reports "
                    f"{'paused' if other == ControlKind.PAUSE else 'running'}."
                )
            if refusal := lifecycle_refusal(run, kind):
                raise ControlRefused(refusal)
        control = RunControl.objects.create(run=run, kind=kind, body=body, requested_by=by)
        record_audit(
            by,
            AuditVerb.CONTROL_REQUESTED,
            control,
            project=project,
            run=run.external_id,
            kind=kind,
            **({"body": body[:500]} if body else {}),
        )
        run.save(update_fields=["updated"])  # the run page shows the request at its next poll
    control.is_new = True
    return control


def guard_pause(run: Run, *, guard: str) -> tuple[RunControl | None, str]:
    """A project guard's pause of a live run (services/alerts/guards.py), inside the caller's transaction
    with the run locked: no person (`requested_by` None, `guard` says which), the same refusals as a
    person's pause (the source, the run's state, a resume on its way). Returns (the control, "") with
    `is_new` telling the caller to dispatch it, or (None, why not)."""
    if refusal := capabilities.refusal(run.project, Action.STEER):
        return None, refusal
    if open_one := RunControl.objects.filter(
        run=run, kind=ControlKind.PAUSE, status__in=OPEN_DISPATCH
    ).first():
        open_one.is_new = False
        return open_one, ""
    if RunControl.objects.filter(run=run, kind=ControlKind.RESUME, status__in=PENDING).exists():
        return None, "A person's resume of this run is on its way: the guard leaves the run to them."
    if refusal := lifecycle_refusal(run, ControlKind.PAUSE):
        return None, refusal
    pause = RunControl.objects.create(run=run, kind=ControlKind.PAUSE, requested_by=None, guard=guard)
    record_audit(
        None,
        AuditVerb.CONTROL_REQUESTED,
        pause,
        project=run.project,
        run=run.external_id,
        kind="pause",
        guard=guard,
    )
    pause.is_new = True
    return pause, ""


# --- what the source's answer records (the attempts: services/dispatched.py) ------------------------------


def control_accepted(control_id: int, *, detail: str, source_ref: str = "") -> RunControl | None:
    """The source took it (an SMR answer, a webhook's 2xx); `source_ref` is what the source calls it
    (an SMR message id), by which its report is recognised. A control the source already reported
    back (confirmed before the answer arrived) keeps its status and gains the detail."""
    with transaction.atomic():
        control = dispatched.locked(RunControl, control_id)
        if control.status in (DispatchStatus.FAILED,):
            return None
        if source_ref and not control.source_ref:
            control.source_ref = source_ref[:200]
        dispatched.append(control, detail)
        if control.status in OPEN_DISPATCH:
            control.status = DispatchStatus.ACCEPTED
            record_audit(
                None,
                AuditVerb.CONTROL_ACCEPTED,
                control,
                project=control.run.project,
                kind=control.kind,
                detail=dispatched.printable(detail)[:500],
            )
        control.save()
        control.run.save(update_fields=["updated"])
    return control


def _end(control: RunControl, run: Run, status: str, line: str, now) -> None:
    control.status = status
    control.finished_at = now
    dispatched.append(control, line, now)
    control.save(update_fields=["status", "finished_at", "detail", "updated"])
    record_audit(
        None, AuditVerb(f"control.{status}"), control, project=run.project, kind=control.kind, detail=line
    )


def confirm_reported(
    run: Run, *, messages: Iterable[tuple[str, str]] = (), state_changed: bool = False
) -> int:
    """Called by ingest inside its transaction (the run row locked) with the new runtime messages
    (event id, body) and whether the run's state changed: confirm what the source reported back.

    A message control matches the message whose event id is its source reference (SMR's message id,
    as the poller writes it: `message:<id>`) or its idempotency key (what a push harness is told to
    use as the event's id); a control the source gave no reference for matches a message with its
    exact body. A pause is confirmed when the run is paused, a resume when it is live and not paused;
    a pause or resume still pending when the run ends fails, saying so. Returns how many changed."""
    messages = list(messages)
    pending = list(RunControl.objects.filter(run=run, status__in=PENDING).order_by("created", "id"))
    if not pending:
        return 0
    now = timezone.now()
    changed = 0
    if messages:
        by_id = {key: body for key, body in messages}
        taken: set[str] = set()
        for control in pending:
            if control.kind != ControlKind.MESSAGE or control.status not in REPORTABLE:
                continue
            refs = [control.idempotency_key, *([control.source_ref] if control.source_ref else [])]
            key = next((k for r in refs for k in (r, f"message:{r}") if k in by_id and k not in taken), None)
            if key is None and not control.source_ref:
                key = next((k for k, b in messages if b.strip() == control.body and k not in taken), None)
            if key is not None:
                taken.add(key)
                _end(control, run, DispatchStatus.CONFIRMED, "the run's runtime messages show it", now)
                changed += 1
    if state_changed:
        for control in pending:
            if control.kind == ControlKind.MESSAGE or control.status == DispatchStatus.CONFIRMED:
                continue
            if run.is_terminal:
                line = f"the run ended ({run.state}) before it reported the {control.kind}"
                _end(control, run, DispatchStatus.FAILED, line, now)
                changed += 1
            elif control.status in REPORTABLE and (
                (control.kind == ControlKind.PAUSE and run.state == RunState.PAUSED)
                or (control.kind == ControlKind.RESUME and run.state != RunState.PAUSED)
            ):
                _end(control, run, DispatchStatus.CONFIRMED, f"the run reported {run.state}", now)
                changed += 1
    return changed
