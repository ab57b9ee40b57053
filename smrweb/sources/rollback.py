"""Dispatching a rollback through the run's source: SMR restores a checkpoint through the SDK; a push
project gets a signed webhook POST; a git project gets a new commit restoring the artifact path
(`sources.git.roll_back`). One attempt per call; the task retries with backoff when the
answer says trying again may help (timeouts, refused connections, 429, 5xx)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from django.conf import settings

from smrweb.sources.base import RateLimited, ServerError, SourceError, TimedOut, Unreachable
from smrweb.sources.smr import connector_for
from smrweb.tracking import rollbacks
from smrweb.tracking.models import SourceKind

RETRYABLE_SOURCE_ERRORS = (RateLimited, ServerError, TimedOut, Unreachable)


@dataclass(frozen=True)
class Attempt:
    outcome: str  # "applied" | "failed" | "retry" | "skipped"
    retry_in: float | None = None


def backoff(attempt: int, hint: float | None = None) -> float:
    base = settings.SMRWEB_ROLLBACK_RETRY_BASE_SECONDS
    return max(hint or 0.0, min(base * 2 ** (attempt - 1), settings.SMRWEB_ROLLBACK_RETRY_MAX_SECONDS))


def dispatch(rollback_id: int, *, last_try: bool) -> Attempt:
    rollback = rollbacks.start_attempt(rollback_id)
    if rollback is None:
        return Attempt("skipped")  # already applied or failed: a redelivered message acts once
    project = rollback.run.project
    if project.source == SourceKind.SMR:
        return _via_smr(rollback, last_try=last_try)
    if project.source == SourceKind.PUSH:
        return _via_webhook(rollback, last_try=last_try)
    if project.source == SourceKind.GIT:
        return _via_git(rollback, last_try=last_try)
    rollbacks.finish(rollback.pk, ok=False, detail=f"{project.get_source_display()} projects cannot roll back yet.")
    return Attempt("failed")


def _retry_or_fail(rollback, line: str, *, retryable: bool, last_try: bool, hint: float | None = None) -> Attempt:
    if retryable and not last_try:
        delay = backoff(rollback.attempts, hint)
        rollbacks.note_attempt(rollback.pk, f"attempt {rollback.attempts}: {line}; retrying in {delay:g} s")
        return Attempt("retry", delay)
    rollbacks.finish(rollback.pk, ok=False, detail=f"attempt {rollback.attempts}: {line}; giving up")
    return Attempt("failed")


def _via_smr(rollback, *, last_try: bool) -> Attempt:
    checkpoint = rollbacks.checkpoint_for(rollback)
    if checkpoint is None:
        rollbacks.finish(rollback.pk, ok=False,
                         detail="No restorable checkpoint at or before this submission to restore.")
        return Attempt("failed")
    try:
        answer = connector_for(rollback.run.project).roll_back(
            rollback.run.external_id, checkpoint_id=checkpoint.external_id, reason=rollback.reason)
    except SourceError as exc:
        return _retry_or_fail(rollback, f"{exc.kind}: {exc}", retryable=isinstance(exc, RETRYABLE_SOURCE_ERRORS),
                              last_try=last_try, hint=exc.retry_after)
    state = answer.get("state") if isinstance(answer, dict) else None
    rollbacks.finish(rollback.pk, ok=True, detail=f"SMR accepted the restore of checkpoint "
                                                  f"{checkpoint.label or checkpoint.external_id}"
                                                  f"{f' (state {state})' if state else ''}.")
    return Attempt("applied")


def _via_webhook(rollback, *, last_try: bool) -> Attempt:
    body, headers = rollbacks.webhook_request(rollback)
    url = rollback.run.project.rollback_webhook_url
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=settings.SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT,
                              follow_redirects=False)
    except httpx.TimeoutException:
        return _retry_or_fail(rollback, f"{url} did not answer in time", retryable=True, last_try=last_try)
    except httpx.HTTPError as exc:
        return _retry_or_fail(rollback, f"could not reach {url}: {type(exc).__name__}", retryable=True,
                              last_try=last_try)
    answer = f"HTTP {response.status_code} {response.text[:300]!r}"
    if 200 <= response.status_code < 300:
        rollbacks.finish(rollback.pk, ok=True, detail=f"attempt {rollback.attempts}: the webhook answered {answer}")
        return Attempt("applied")
    hint = None
    if response.status_code == 429:
        try:
            hint = float(response.headers.get("Retry-After", ""))
        except ValueError:
            hint = None
    return _retry_or_fail(rollback, f"the webhook answered {answer}",
                          retryable=response.status_code == 429 or response.status_code >= 500, last_try=last_try,
                          hint=hint)


def _via_git(rollback, *, last_try: bool) -> Attempt:
    """A new commit on the branch that restores the artifact path's bytes (sources/git.py): history is
    never rewritten, and the next sync brings the commit in as a new artifact version."""
    from smrweb.sources import git

    try:
        done = git.roll_back(rollback)
    except SourceError as exc:
        return _retry_or_fail(rollback, f"{exc.kind}: {exc}", retryable=isinstance(exc, RETRYABLE_SOURCE_ERRORS),
                              last_try=last_try, hint=exc.retry_after)
    rollbacks.finish(rollback.pk, ok=True, detail=f"attempt {rollback.attempts}: {done}")
    return Attempt("applied")
