"""Dispatching a rollback through the run's source: SMR restores a checkpoint through the SDK; a push
project gets a signed webhook POST; a git project gets a new commit restoring the artifact path
(`sources.git.roll_back`). Starting the next run goes the same ways (`dispatch_launch`): SMR's
`trigger_run`, a signed `smrweb.start` webhook, a new git branch. One attempt per call; the task
retries with backoff when the answer says trying again may help (timeouts, refused connections, 429,
5xx)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
from django.conf import settings

from smrweb.core import outbound
from smrweb.sources.base import Malformed, RateLimited, ServerError, SourceError, TimedOut, Unreachable
from smrweb.sources.smr import connector_for
from smrweb.tracking import services
from smrweb.tracking.models import SourceKind
from smrweb.tracking.services import launches, rollbacks

RETRYABLE_SOURCE_ERRORS = (RateLimited, ServerError, TimedOut, Unreachable)


@dataclass(frozen=True)
class Attempt:
    outcome: str  # "applied" | "accepted" | "failed" | "retry" | "skipped"
    retry_in: float | None = None


def backoff(attempt: int, hint: float | None = None) -> float:
    """Seconds before the next attempt: exponential, or the answer's hint, never above the cap (a hint
    of `inf` or 1e12 would otherwise overflow the countdown and wedge the rollback: finding 6)."""
    cap = settings.SMRWEB_ROLLBACK_RETRY_MAX_SECONDS
    base = min(settings.SMRWEB_ROLLBACK_RETRY_BASE_SECONDS * 2 ** min(attempt - 1, 60), cap)
    if hint is None or not math.isfinite(hint) or hint < 0:
        return base
    return min(max(hint, base), cap)


def retry_after(value: str | None) -> float | None:
    """An HTTP Retry-After (delay-seconds or an HTTP date) as seconds from now; None when unreadable."""
    value = (value or "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value[:12])  # capped by backoff(); digits only, so never inf or negative
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(frozen=True)
class WebhookFailure:
    """A webhook POST that got no HTTP answer: why (fit to show), and whether trying again may help."""

    message: str
    retryable: bool


def post_webhook(url: str, body: bytes, headers: dict) -> outbound.Answer | WebhookFailure:
    """The one signed-webhook POST of rollbacks, steering and launches: through the outbound guard, with
    the webhook timeout; what went wrong is said without the answer's body (it could be an internal
    service's, finding 2)."""
    try:
        return outbound.post(
            url, content=body, headers=headers, timeout=settings.SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT
        )
    except outbound.Unresolvable as exc:
        return WebhookFailure(str(exc), retryable=True)
    except outbound.Refused as exc:
        return WebhookFailure(f"not sent: {exc}", retryable=False)
    except httpx.TimeoutException:
        return WebhookFailure("the webhook did not answer in time", retryable=True)
    except httpx.HTTPError as exc:
        return WebhookFailure(f"could not reach the webhook ({type(exc).__name__})", retryable=True)


def dispatch(rollback_id: int, *, last_try: bool = False) -> Attempt:
    """One attempt (`last_try`: make it the final one). Attempts are counted in the database, so the
    last one is the last whether the task was retried by Celery, redelivered after a worker died, or
    queued again by the stale-action sweep."""
    rollback = rollbacks.start_attempt(rollback_id)
    if rollback is None:
        return Attempt("skipped")  # already applied or failed: a redelivered message acts once
    last_try = last_try or rollback.attempts >= settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS
    if rollback.attempts > settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS:
        rollbacks.finish(
            rollback.pk,
            ok=False,
            detail=f"gave up after {settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS} "
            f"attempts (SMRWEB_ROLLBACK_MAX_ATTEMPTS)",
        )
        return Attempt("failed")
    project = rollback.run.project
    if project.source == SourceKind.SMR:
        return _via_smr(rollback, last_try=last_try)
    if project.source == SourceKind.PUSH:
        return _via_webhook(rollback, last_try=last_try)
    if project.source == SourceKind.GIT:
        return _via_git(rollback, last_try=last_try)
    rollbacks.finish(
        rollback.pk, ok=False, detail=f"{project.get_source_display()} projects cannot roll back yet."
    )
    return Attempt("failed")


def _retry_or_fail(
    rollback, line: str, *, retryable: bool, last_try: bool, hint: float | None = None
) -> Attempt:
    if retryable and not last_try:
        delay = backoff(rollback.attempts, hint)
        rollbacks.note_attempt(rollback.pk, f"attempt {rollback.attempts}: {line}; retrying in {delay:g} s")
        return Attempt("retry", delay)
    rollbacks.finish(rollback.pk, ok=False, detail=f"attempt {rollback.attempts}: {line}; giving up")
    return Attempt("failed")


# SMR answers a restore with `accepted` and an optional free-form `state`; only these say it is done.
SMR_RESTORE_DONE = frozenset({"applied", "restored", "completed", "succeeded", "done"})


def _via_smr(rollback, *, last_try: bool) -> Attempt:
    checkpoint = rollbacks.checkpoint_for(rollback)
    if checkpoint is None:
        rollbacks.finish(
            rollback.pk, ok=False, detail="No restorable checkpoint at or before this submission to restore."
        )
        return Attempt("failed")
    try:
        answer = connector_for(rollback.run.project).roll_back(
            rollback.run.external_id, checkpoint_id=checkpoint.external_id, reason=rollback.reason
        )
    except SourceError as exc:
        return _retry_or_fail(
            rollback,
            f"{exc.kind}: {exc}",
            retryable=isinstance(exc, RETRYABLE_SOURCE_ERRORS),
            last_try=last_try,
            hint=exc.retry_after,
        )
    state = str(answer.get("state") or "") if isinstance(answer, dict) else ""
    done = state.lower() in SMR_RESTORE_DONE
    rollbacks.finish(
        rollback.pk,
        ok=True,
        accepted_only=not done,
        detail=f"SMR {'restored' if done else 'accepted the restore of'} checkpoint "
        f"{checkpoint.label or checkpoint.external_id}{f' (state {state})' if state else ''}.",
    )
    return Attempt("applied" if done else "accepted")


def _via_webhook(rollback, *, last_try: bool) -> Attempt:
    """A signed POST through the outbound guard. The detail names the status only: the answer's body is
    never shown back (it could be an internal service's, finding 2)."""
    body, headers = rollbacks.webhook_request(rollback)
    answer = post_webhook(rollback.run.project.rollback_webhook_url, body, headers)
    if isinstance(answer, WebhookFailure):
        return _retry_or_fail(rollback, answer.message, retryable=answer.retryable, last_try=last_try)
    line = f"the webhook answered HTTP {answer.status}"
    if 200 <= answer.status < 300:
        # 202 Accepted: the harness queued it; anything else 2xx: it says the restore is done.
        accepted_only = answer.status == 202
        rollbacks.finish(
            rollback.pk,
            ok=True,
            accepted_only=accepted_only,
            detail=f"attempt {rollback.attempts}: {line}"
            + (" (queued, not confirmed)" if accepted_only else ""),
        )
        return Attempt("accepted" if accepted_only else "applied")
    if 300 <= answer.status < 400:
        line += " (a redirect: not followed)"
    hint = retry_after(answer.headers.get("Retry-After")) if answer.status == 429 else None
    return _retry_or_fail(
        rollback, line, retryable=answer.status == 429 or answer.status >= 500, last_try=last_try, hint=hint
    )


def _via_git(rollback, *, last_try: bool) -> Attempt:
    """A new commit on the branch that restores the artifact path's bytes (sources/git.py): history is
    never rewritten, and the next sync brings the commit in as a new artifact version."""
    from smrweb.sources.git import branches

    try:
        done = branches.roll_back(rollback)
    except SourceError as exc:
        return _retry_or_fail(
            rollback,
            f"{exc.kind}: {exc}",
            retryable=isinstance(exc, RETRYABLE_SOURCE_ERRORS),
            last_try=last_try,
            hint=exc.retry_after,
        )
    rollbacks.finish(rollback.pk, ok=True, detail=f"attempt {rollback.attempts}: {done}")
    return Attempt("applied")


# --- starting the next run -------------------------------------------------------------------------
# The same shape as a rollback: one attempt per call, counted on the launch, retried with the same
# backoff and limits (SMRWEB_ROLLBACK_*) while retrying may help; the launch's idempotency key goes to
# the source every time, so a retried attempt starts one run.


def dispatch_launch(launch_id: int, *, last_try: bool = False) -> Attempt:
    """One attempt to start a launch's run through the project's source."""
    launch = launches.start_attempt(launch_id)
    if launch is None:
        return Attempt("skipped")  # already accepted, confirmed or failed: a redelivered message acts once
    last_try = last_try or launch.attempts >= settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS
    if launch.attempts > settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS:
        launches.fail(
            launch.pk,
            detail=f"gave up after {settings.SMRWEB_ROLLBACK_MAX_ATTEMPTS} attempts "
            "(SMRWEB_ROLLBACK_MAX_ATTEMPTS)",
        )
        return Attempt("failed")
    if refusal := launches.launch_refusal(launch.project):
        launches.fail(launch.pk, detail=refusal)
        return Attempt("failed")
    return {
        SourceKind.SMR: _launch_via_smr,
        SourceKind.PUSH: _launch_via_webhook,
        SourceKind.GIT: _launch_via_git,
    }[launch.project.source](launch, last_try=last_try)


def _launch_retry_or_fail(
    launch, line: str, *, retryable: bool, last_try: bool, hint: float | None = None
) -> Attempt:
    if retryable and not last_try:
        delay = backoff(launch.attempts, hint)
        launches.note_attempt(launch.pk, f"attempt {launch.attempts}: {line}; retrying in {delay:g} s")
        return Attempt("retry", delay)
    launches.fail(launch.pk, detail=f"attempt {launch.attempts}: {line}; giving up")
    return Attempt("failed")


def _launch_via_smr(launch, *, last_try: bool) -> Attempt:
    try:
        answer = connector_for(launch.project).trigger_run(
            kickoff=launch.kickoff,
            idempotency_key=launch.idempotency_key,
            agent_profile=launch.model_profile,
            budget_usd=launch.budget_usd,
            budget_tokens=launch.budget_tokens,
        )
    except SourceError as exc:
        # A 4xx other than 429 is the backend refusing this request (an unknown profile, a limit it
        # will not take): asking again changes nothing.
        # A garbled answer may hide a run that was started: asking again with the same key finds it.
        status = getattr(exc.__cause__, "status_code", None)
        refused = isinstance(status, int) and 400 <= status < 500 and status != 429
        return _launch_retry_or_fail(
            launch,
            f"{exc.kind}: {exc}",
            retryable=isinstance(exc, (*RETRYABLE_SOURCE_ERRORS, Malformed)) and not refused,
            last_try=last_try,
            hint=exc.retry_after,
        )
    rid, state = str(answer["run_id"]), str(answer.get("state") or "")
    launches.record_accepted(
        launch.pk,
        external_run_id=rid,
        detail=f"attempt {launch.attempts}: SMR started run {rid}" + (f" (state {state})" if state else ""),
    )
    return Attempt("accepted")


def _launch_via_webhook(launch, *, last_try: bool) -> Attempt:
    """The signed `smrweb.start` POST; a 2xx means the harness took it (the run is confirmed when its
    events arrive). The detail names the status only, never the answer's body."""
    body, headers = launches.start_webhook_request(launch)
    answer = post_webhook(launch.project.rollback_webhook_url, body, headers)
    if isinstance(answer, WebhookFailure):
        return _launch_retry_or_fail(launch, answer.message, retryable=answer.retryable, last_try=last_try)
    line = f"the webhook answered HTTP {answer.status}"
    if 200 <= answer.status < 300:
        launches.record_accepted(
            launch.pk,
            external_run_id=launch.external_run_id,
            detail=f"attempt {launch.attempts}: {line}; waiting for run {launch.external_run_id}'s events",
        )
        return Attempt("accepted")
    if 300 <= answer.status < 400:
        line += " (a redirect: not followed)"
    hint = retry_after(answer.headers.get("Retry-After")) if answer.status == 429 else None
    return _launch_retry_or_fail(
        launch, line, retryable=answer.status == 429 or answer.status >= 500, last_try=last_try, hint=hint
    )


def _launch_via_git(launch, *, last_try: bool) -> Attempt:
    """A new branch at the chosen commit; the project follows it, and the run (`git:<branch>`) starts
    with the kickoff as its first message and its cursor at that commit, so it counts only what is
    committed on it from now on."""
    from smrweb.sources.apply import apply_events
    from smrweb.sources.git import branches

    try:
        branch, commit, done = branches.start_branch(launch)
    except SourceError as exc:
        return _launch_retry_or_fail(
            launch,
            f"{exc.kind}: {exc}",
            retryable=isinstance(exc, RETRYABLE_SOURCE_ERRORS),
            last_try=last_try,
            hint=exc.retry_after,
        )
    # The run first (its cursor at the start commit, its kickoff: both the same on a retried attempt),
    # then the answer, which links it and makes the project follow the branch: until then no sync reads
    # the branch, so a crash in between leaves nothing a retry would not redo.
    rid, project = branches.run_id_for(branch), launch.project
    services.record_poll(
        project, rid, source_cursor={"commit": commit, "base": commit}, git_branch=branch, git_commit=commit
    )
    kickoff = {
        "id": f"smrweb-kickoff-{launch.pk}",
        "type": "message",
        "topic": "smrweb.kickoff",
        "mode": "queue",
        "body": launch.kickoff,
    }
    apply_events(project, rid, [(None, kickoff)])
    launches.record_accepted(
        launch.pk, external_run_id=rid, detail=f"attempt {launch.attempts}: {done}", follow_branch=branch
    )
    return Attempt("accepted")
