"""Dispatching a steering request (`tracking.services.control`) through the run's source: SMR gets
`enqueue_runtime_message`, `pause_run` or `resume_run` through the SDK; a push project's harness gets a
signed webhook POST (`smrweb.message`, `smrweb.pause`, `smrweb.resume`) at the project's webhook URL.
One attempt per call, like a rollback's (`sources.dispatch`, whose backoff and attempt limit it shares);
the task retries while the answer says trying again may help (timeouts, refused connections, 429, 5xx).

What the source answered makes the control `accepted`; it is `confirmed` later, when the source reports
it back (ingest calls `services.confirm_reported`)."""

from __future__ import annotations

from django.conf import settings

from smrweb.sources.base import SourceError
from smrweb.sources.dispatch import (
    RETRYABLE_SOURCE_ERRORS,
    Attempt,
    WebhookFailure,
    backoff,
    post_webhook,
    retry_after,
)
from smrweb.sources.smr import connector_for
from smrweb.tracking import services
from smrweb.tracking.models import ControlKind, RunControl, SourceKind
from smrweb.tracking.services import capabilities
from smrweb.tracking.services import control as controls
from smrweb.tracking.services.capabilities import Action


def dispatch(control_id: int, *, last_try: bool = False) -> Attempt:
    """One attempt (`last_try`: make it the final one). Attempts are counted on the control, so the
    last one is the last whether Celery retried the task, a worker died mid-call and the message came
    back, or the stale-action sweep queued it again. Outcomes: accepted, failed, retry, skipped."""
    control = services.start_control_attempt(control_id)
    if control is None:
        return Attempt("skipped")  # taken, confirmed or failed already: a redelivered message acts once
    limit = settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS
    last_try = last_try or control.attempts >= limit
    if control.attempts > limit:
        services.control_failed(
            control.pk, detail=f"gave up after {limit} attempts (SMRWEB_ROLLBACK_MAX_ATTEMPTS)"
        )
        return Attempt("failed")
    project = control.run.project
    if refusal := capabilities.refusal(project, Action.STEER):  # the project changed since the request
        services.control_failed(control.pk, detail=f"not sent: {refusal}")
        return Attempt("failed")
    if control.run.is_terminal:
        services.control_failed(control.pk, detail=f"not sent: the run is {control.run.state}")
        return Attempt("failed")
    if project.source == SourceKind.SMR:
        return _via_smr(control, last_try=last_try)
    return _via_webhook(control, last_try=last_try)


def _retry_or_fail(
    control, line: str, *, retryable: bool, last_try: bool, hint: float | None = None
) -> Attempt:
    if retryable and not last_try:
        delay = backoff(control.attempts, hint)
        services.note_control_attempt(
            control.pk, f"attempt {control.attempts}: {line}; retrying in {delay:g} s"
        )
        return Attempt("retry", delay)
    services.control_failed(control.pk, detail=f"attempt {control.attempts}: {line}; giving up")
    return Attempt("failed")


def _via_smr(control: RunControl, *, last_try: bool) -> Attempt:
    run = control.run
    try:
        connector = connector_for(run.project)
        if control.kind == ControlKind.MESSAGE:
            answer = None
            if control.attempts > 1:  # an earlier attempt may have delivered it and lost the answer
                answer = connector.find_message(run.external_id, causation_id=control.idempotency_key)
            answer = answer or connector.send_message(
                run.external_id, body=control.body, causation_id=control.idempotency_key
            )
        elif control.kind == ControlKind.PAUSE:
            answer = connector.pause_run(run.external_id)
        else:
            answer = connector.resume_run(run.external_id)
    except SourceError as exc:
        return _retry_or_fail(
            control,
            f"{exc.kind}: {exc}",
            retryable=isinstance(exc, RETRYABLE_SOURCE_ERRORS),
            last_try=last_try,
            hint=exc.retry_after,
        )
    answer = answer if isinstance(answer, dict) else {}
    if control.kind == ControlKind.MESSAGE:
        ref = str(answer.get("message_id") or "")
        seq = answer.get("seq")
        detail = f"attempt {control.attempts}: SMR queued the message" + (
            f" (message {ref}{f', #{seq}' if isinstance(seq, int) else ''})" if ref else " (no message id)"
        )
        services.control_accepted(control.pk, detail=detail, source_ref=ref)
        return Attempt("accepted")
    if answer.get("already_in_state"):
        detail = f"attempt {control.attempts}: SMR says the run is already {answer.get('state') or 'there'}"
    else:
        state = str(answer.get("state") or "")
        status = str(answer.get("enqueue_status") or "accepted")
        detail = f"attempt {control.attempts}: SMR {status} the {control.kind}" + (
            f" (run {state})" if state else ""
        )
    services.control_accepted(
        control.pk, detail=detail, source_ref=str(answer.get("control_intent_id") or "")
    )
    return Attempt("accepted")


def _via_webhook(control: RunControl, *, last_try: bool) -> Attempt:
    """A signed POST through the outbound guard; the detail names the status only (the answer's body
    is never shown back: it could be an internal service's)."""
    body, headers = controls.webhook_request(control)
    answer = post_webhook(control.run.project.rollback_webhook_url, body, headers)
    if isinstance(answer, WebhookFailure):
        return _retry_or_fail(control, answer.message, retryable=answer.retryable, last_try=last_try)
    line = f"the webhook answered HTTP {answer.status}"
    if 200 <= answer.status < 300:
        services.control_accepted(
            control.pk, detail=f"attempt {control.attempts}: {line}", source_ref=control.idempotency_key
        )
        return Attempt("accepted")
    if 300 <= answer.status < 400:
        line += " (a redirect: not followed)"
    hint = retry_after(answer.headers.get("Retry-After")) if answer.status == 429 else None
    return _retry_or_fail(
        control, line, retryable=answer.status == 429 or answer.status >= 500, last_try=last_try, hint=hint
    )
