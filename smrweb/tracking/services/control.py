"""Steering a live run — part of the one write path (with `services`).

A reviewer or admin sends the agent a runtime message, pauses the run or resumes it; a task dispatches
the request through the run's source (SMR: `enqueue_runtime_message`, `pause_run`, `resume_run` through
the SDK; REST push: a signed webhook to the project's harness) and records each attempt:
requested → dispatched → accepted → confirmed, or failed, all audited. "Accepted" is the source's word
that it took the request; "confirmed" is the source reporting it back — the message appears among the
run's runtime messages, the run's state becomes (or leaves) paused — which `confirm_reported` notices
as ingest writes those rows.

The one rule of who may steer what lives here (`steer_refusal`, `may_steer`): the run page, the API and
the dispatcher all ask it. Double clicks get the request already in flight back (`is_new` False).
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
    SourceKind,
)
from smrweb.tracking.services.audit import record_audit

S = DispatchStatus
MESSAGE_MAX = 10_000  # characters of a runtime message (the ingest contract keeps up to 100,000)
# Asked for and not ended: the source may still take it or report it back.
PENDING = (S.REQUESTED, S.DISPATCHED, S.ACCEPTED)
# What the source may still report back: sent (or being sent), not confirmed or failed.
REPORTABLE = (S.DISPATCHED, S.ACCEPTED)


# What steering does, per source; a source not listed cannot be steered.
STEER_EFFECTS = {
    SourceKind.SMR: "Managed Research delivers it to the run's orchestrator",
    SourceKind.PUSH: "The project's webhook tells the harness",
}


def steer_refusal(project) -> str:
    """Why runs of this project cannot be steered at all ("" when they can)."""
    if project.archived_at is not None:
        return f"Project {project.slug} is archived: it is read-only until an admin restores it."
    if project.source == SourceKind.GIT:
        return (
            "Git workspace projects cannot be steered: smrweb reads the agent's branch and has no way to "
            "talk to the agent while it runs."
        )
    if project.source not in STEER_EFFECTS:
        return f"{project.get_source_display()} projects cannot be steered."
    if project.source == SourceKind.PUSH and not project.rollback_webhook_url:
        return (
            "This project has no webhook URL: an admin sets one in the project settings (the rollback "
            "webhook), so the harness can be sent messages, pauses and resumes."
        )
    return ""


def may_steer(user: Any, project) -> bool:
    """Whether `user` gets the steering forms in `project`: reviewers and admins, where the source can."""
    return not steer_refusal(project) and project.allows(user, Role.REVIEWER)


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
    if refusal := steer_refusal(project):
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


# --- what the dispatch task records --------------------------------------------------------------------


def _printable(text: str) -> str:
    """A source's own words may hold NUL, which PostgreSQL text and JSON cannot."""
    return text.replace("\x00", "\ufffd")


def _append(control: RunControl, line: str, stamp=None) -> None:
    stamp = (stamp or timezone.now()).strftime("%H:%M:%S")
    control.detail = (control.detail + f"\n[{stamp}] {_printable(line)}").strip()[-10_000:]


def _locked(control_id: int) -> RunControl:
    return (
        RunControl.objects.select_for_update(of=("self",))
        .select_related("run__project", "requested_by")
        .get(pk=control_id)
    )


def start_control_attempt(control_id: int) -> RunControl | None:
    """Mark a dispatch attempt (requested → dispatched on the first) and count it; None when it has
    already been taken, confirmed or failed, so a redelivered task does not send it twice."""
    with transaction.atomic():
        control = _locked(control_id)
        if control.status not in OPEN_DISPATCH:
            return None
        first = control.status == S.REQUESTED
        control.status = S.DISPATCHED
        control.attempts += 1
        control.dispatched_at = control.dispatched_at or timezone.now()
        control.save()
        if first:
            record_audit(
                None, AuditVerb.CONTROL_DISPATCHED, control, project=control.run.project, kind=control.kind
            )
        control.run.save(update_fields=["updated"])
    return control


def note_control_attempt(control_id: int, line: str) -> None:
    """Append what one attempt got back (a retry's reason), for the person watching."""
    with transaction.atomic():
        control = RunControl.objects.select_for_update(of=("self",)).get(pk=control_id)
        _append(control, line)
        control.save(update_fields=["detail", "updated"])


def control_accepted(control_id: int, *, detail: str, source_ref: str = "") -> RunControl | None:
    """The source took it (an SMR answer, a webhook's 2xx); `source_ref` is what the source calls it
    (an SMR message id), by which its report is recognised. A control the source already reported
    back (confirmed before the answer arrived) keeps its status and gains the detail."""
    with transaction.atomic():
        control = _locked(control_id)
        if control.status in (S.FAILED,):
            return None
        if source_ref and not control.source_ref:
            control.source_ref = source_ref[:200]
        _append(control, detail)
        if control.status in OPEN_DISPATCH:
            control.status = S.ACCEPTED
            record_audit(
                None,
                AuditVerb.CONTROL_ACCEPTED,
                control,
                project=control.run.project,
                kind=control.kind,
                detail=_printable(detail)[:500],
            )
        control.save()
        control.run.save(update_fields=["updated"])
    return control


def control_failed(control_id: int, *, detail: str) -> RunControl | None:
    """The last attempt failed (or the source refused): the control ends failed with the reason."""
    with transaction.atomic():
        control = _locked(control_id)
        if control.status not in PENDING:
            return None
        control.status = S.FAILED
        control.finished_at = timezone.now()
        _append(control, detail, control.finished_at)
        control.save()
        record_audit(
            None,
            AuditVerb.CONTROL_FAILED,
            control,
            project=control.run.project,
            kind=control.kind,
            detail=_printable(detail)[:500],
        )
        control.run.save(update_fields=["updated"])
    return control


def _end(control: RunControl, run: Run, status: str, line: str, now) -> None:
    control.status = status
    control.finished_at = now
    _append(control, line, now)
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
                _end(control, run, S.CONFIRMED, "the run's runtime messages show it", now)
                changed += 1
    if state_changed:
        for control in pending:
            if control.kind == ControlKind.MESSAGE or control.status == S.CONFIRMED:
                continue
            if run.is_terminal:
                line = f"the run ended ({run.state}) before it reported the {control.kind}"
                _end(control, run, S.FAILED, line, now)
                changed += 1
            elif control.status in REPORTABLE and (
                (control.kind == ControlKind.PAUSE and run.state == RunState.PAUSED)
                or (control.kind == ControlKind.RESUME and run.state != RunState.PAUSED)
            ):
                _end(control, run, S.CONFIRMED, f"the run reported {run.state}", now)
                changed += 1
    return changed


# --- the webhook of push projects ----------------------------------------------------------------------


def webhook_request(control: RunControl, *, now=None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the signed POST that tells a push project's harness: the project's
    (rollback) webhook URL, the same secret and signature as a rollback or a stop, `type`
    `smrweb.message`, `smrweb.pause` or `smrweb.resume`, and the control's Idempotency-Key on every
    retry. A harness reports a message back as a `message` event whose `id` is `message_id`, a pause
    as a `state` event `paused`, a resume as a `state` event `running`."""
    from smrweb.tracking.services.rollbacks import _signed_post

    now = now or timezone.now()
    run = control.run
    payload: dict[str, Any] = {
        "type": f"smrweb.{control.kind}",
        "control_id": control.pk,
        "project": run.project.slug,
        "run": run.external_id,
        "requested_by": control.requested_by.get_username(),
        "requested_at": control.created.isoformat(),
    }
    if control.kind == ControlKind.MESSAGE:
        payload.update(body=control.body, message_id=control.idempotency_key)
    return _signed_post(run.project, payload, key=control.idempotency_key, agent="smrweb-control/1", now=now)
