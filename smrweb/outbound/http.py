"""The one POST smrweb makes to an address a user gave it (a push project's webhook, an alert receiver),
through `core.outbound`'s guard, and the one rule of which answers are worth another attempt.

Retried: no answer (a timeout, a refused connection, a host that does not resolve right now), HTTP 408
(Request Timeout: the receiver gave up waiting, RFC 9110 15.5.9, so a repeat may succeed), 429 and 5xx,
after the Retry-After such an answer carries (a 429's, a 503's: RFC 9110 10.2.3). Not retried: an
address the guard refuses, a redirect (never followed), any other answer. Every outbound action
(rollbacks, launches, steering, stops, alerts) classifies through `classify`, so they cannot drift
apart again."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from smrweb.core import outbound

RETRYABLE_STATUSES = frozenset({408, 429})  # and every 5xx


def retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


@dataclass(frozen=True)
class Sent:
    """What one POST got: `status` (None when no HTTP answer came), a line fit to show (never the answer's
    body: it could be an internal service's), whether trying again may help, and the receiver's hint of
    when (a 429's or 503's Retry-After, in seconds)."""

    status: int | None
    line: str
    retryable: bool = False
    hint: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def taken(self) -> Sent:
        """This answer when the receiver took it (2xx); else `Failed`, retryable by the one rule."""
        if not self.ok:
            raise Failed(self.line, retryable=self.retryable, hint=self.hint)
        return self


@dataclass(frozen=True)
class Attempt:
    """What one attempt of an outbound action came to, for its task: applied | accepted | sent (taken),
    failed, skipped (ended already: a redelivered message acts once), or retry in `retry_in` seconds."""

    outcome: str
    retry_in: float | None = None


class Failed(Exception):
    """An outbound action not taken this time (a POST, a source's SDK call, a mail server): why, fit to
    show, whether trying again may help, and the receiver's hint of when."""

    def __init__(self, line: str, *, retryable: bool, hint: float | None = None):
        super().__init__(line)
        self.line, self.retryable, self.hint = line, retryable, hint


def classify(answer: outbound.Answer, *, who: str) -> Sent:
    """The one answer classifier: 2xx taken; 3xx a redirect, not followed; 408, 429 and 5xx retryable
    (with the Retry-After a retryable answer carries: a 429's, a 503's); anything else refused."""
    status = answer.status
    line = f"{who} answered HTTP {status}"
    if 300 <= status < 400:
        line += " (a redirect: not followed)"
    retryable = retryable_status(status)
    hint = retry_after(answer.headers.get("Retry-After")) if retryable else None
    return Sent(status, line, retryable=retryable, hint=hint)


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float, who: str) -> Sent:
    """POST through the outbound guard and classify the answer, or why none came. `who` names the
    receiver in the line ("the webhook", "the receiver")."""
    try:
        answer = outbound.post(url, content=body, headers=headers, timeout=timeout)
    except outbound.Unresolvable as exc:
        return Sent(None, str(exc), retryable=True)
    except outbound.Refused as exc:
        return Sent(None, f"not sent: {exc}", retryable=False)
    except httpx.TimeoutException:
        return Sent(None, f"{who} did not answer in time", retryable=True)
    except httpx.HTTPError as exc:
        return Sent(None, f"could not reach {who} ({type(exc).__name__})", retryable=True)
    return classify(answer, who=who)


def backoff(attempt: int, hint: float | None = None, *, base: float, cap: float) -> float:
    """Seconds before the next attempt: exponential from `base`, or the answer's hint, never above `cap`
    (a hint of `inf` or 1e12 would otherwise overflow the countdown and wedge the action: finding 6)."""
    delay = min(base * 2 ** min(attempt - 1, 60), cap)
    if hint is None or not math.isfinite(hint) or hint < 0:
        return delay
    return min(max(hint, delay), cap)


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
