"""The one attempt loop of every dispatched action — a rollback, the start of the next run, a steering
request: claim an attempt (counted on the row, `tracking.services.dispatched`), check the action may
still go, send it through the project's target (`outbound.targets`: SMR connector, signed webhook, git),
and end applied | accepted | failed, or say when to retry. One attempt per call; the task retries with
backoff while the answer says trying again may help (`outbound.http`'s rule for HTTP answers, the
source's error kind for the SDK and git), up to SMRWEB_DISPATCH_MAX_ATTEMPTS."""

from __future__ import annotations

from django.conf import settings

from smrweb.outbound import http, webhooks
from smrweb.outbound.http import Attempt, Failed
from smrweb.outbound.targets import TARGETS, post_webhook
from smrweb.tracking.models import Rollback, RunControl, RunLaunch
from smrweb.tracking.services import capabilities, dispatched
from smrweb.tracking.services.capabilities import Action

__all__ = ["Attempt", "backoff", "dispatch_control", "dispatch_launch", "dispatch_rollback", "stop_push_run"]


def backoff(attempt: int, hint: float | None = None) -> float:
    """Seconds before the next attempt of an action (`outbound.http.backoff` with the dispatch settings)."""
    return http.backoff(
        attempt,
        hint,
        base=settings.SMRWEB_DISPATCH_RETRY_BASE_SECONDS,
        cap=settings.SMRWEB_DISPATCH_RETRY_MAX_SECONDS,
    )


def _not_to_send(model, row) -> str:
    """Why an action asked for earlier must not go now (the project or run changed since); "" to send.
    A source without a target for the action is said the way each action always said it."""
    if model is Rollback:
        project = row.run.project
        if project.source not in TARGETS[Rollback]:
            return f"{project.get_source_display()} projects cannot roll back yet."
        return ""
    if model is RunLaunch:
        return capabilities.refusal(row.project, Action.LAUNCH)
    if refusal := capabilities.refusal(row.run.project, Action.STEER):  # the project changed since
        return f"not sent: {refusal}"
    if row.run.is_terminal:
        return f"not sent: the run is {row.run.state}"
    return ""


def attempt(model, pk: int, *, last_try: bool = False) -> Attempt:
    """One attempt (`last_try`: make it the final one). Attempts are counted on the row, so the last one
    is the last whether Celery retried the task, a worker died mid-call and the message came back, or
    the stale-action sweep queued it again."""
    row = dispatched.start_attempt(model, pk)
    if row is None:
        return Attempt("skipped")  # taken, ended or failed already: a redelivered message acts once
    limit = settings.SMRWEB_DISPATCH_MAX_ATTEMPTS
    last_try = last_try or row.attempts >= limit
    if row.attempts > limit:
        dispatched.failed(
            model, row.pk, detail=f"gave up after {limit} attempts (SMRWEB_DISPATCH_MAX_ATTEMPTS)"
        )
        return Attempt("failed")
    if refusal := _not_to_send(model, row):
        dispatched.failed(model, row.pk, detail=refusal)
        return Attempt("failed")
    project = row.project if model is RunLaunch else row.run.project
    try:
        return TARGETS[model][project.source](row)
    except Failed as failed:
        line = f"attempt {row.attempts}: {failed.line}"
        if failed.retryable and not last_try:
            delay = backoff(row.attempts, failed.hint)
            dispatched.note_attempt(model, row.pk, f"{line}; retrying in {delay:g} s")
            return Attempt("retry", delay)
        dispatched.failed(model, row.pk, detail=f"{line}; giving up")
        return Attempt("failed")


def dispatch_rollback(rollback_id: int, *, last_try: bool = False) -> Attempt:
    return attempt(Rollback, rollback_id, last_try=last_try)


def dispatch_launch(launch_id: int, *, last_try: bool = False) -> Attempt:
    return attempt(RunLaunch, launch_id, last_try=last_try)


def dispatch_control(control_id: int, *, last_try: bool = False) -> Attempt:
    return attempt(RunControl, control_id, last_try=last_try)


def stop_push_run(run, *, reason: str) -> str:
    """The stop of a push run (the budget guard's, or a person's): one signed `smrweb.stop`, not retried
    (the guard asks again while the run is over its budget); what happened, for the audit trail."""
    if not run.project.webhook_url:
        return "not sent: the project has no webhook URL to send a stop to"
    sent = post_webhook(run.project, webhooks.stop_request(run, reason=reason))
    return "the webhook accepted the stop" if sent.ok else f"not delivered: {sent.line}"
