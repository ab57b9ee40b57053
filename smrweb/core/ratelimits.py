"""Rate limits (sign-in, token creation, uploads, preflights, alert test sends), counted with
django-ratelimit in the shared cache (Redis).

`hit(request, group, rate, key)` counts one attempt and says whether it is over the limit; a view that
is over answers 429 with a form error and `Retry-After` rather than raising (django-ratelimit's
`Ratelimited` is a PermissionDenied, which would read "not allowed", not "wait"). When the cache
cannot be reached the attempt is let through and the failure logged: a Redis outage must not lock
everyone out of signing in, and the limits are a brake on guessing, not the only defence (passwords
are hashed with PBKDF2, API tokens are 256 random bits).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django_ratelimit.core import get_usage
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limited:
    retry_after: int  # seconds until the window ends

    @property
    def message(self) -> str:
        return f"Too many attempts. Try again in {_duration(self.retry_after)}."


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} minutes"
    return f"{round(minutes / 60)} hours"


def client_ip(request) -> str:
    """The client's address: REMOTE_ADDR, or with N trusted proxies in front (SMRWEB_TRUSTED_PROXY_COUNT)
    the Nth address from the right of X-Forwarded-For — the one the outermost trusted proxy saw, which
    the client cannot choose (it can only prepend entries)."""
    proxies = settings.SMRWEB_TRUSTED_PROXY_COUNT
    if proxies > 0:
        chain = [
            part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()
        ]
        if len(chain) >= proxies:
            return chain[-proxies]
    return request.META.get("REMOTE_ADDR") or "unknown"


def client_ip_meta(request) -> str:
    """RATELIMIT_IP_META_KEY: django-ratelimit's own `key="ip"` uses the same address."""
    return client_ip(request)


def by_ip(group: str, request) -> str:
    return client_ip(request)


def by_username(group: str, request) -> str:
    """The username a sign-in names (case and surrounding space ignored, as people type them)."""
    return request.POST.get("username", "").strip().casefold()


def by_user(group: str, request) -> str:
    return str(request.user.pk)


def by_principal(group: str, request) -> str:
    """The API caller: its project token, else its user (one caller's burst does not block another's)."""
    token = getattr(request, "auth", None)
    return f"token:{token.pk}" if getattr(token, "token_hash", None) else f"user:{request.user.pk}"


def by_alert_rule(group: str, request) -> str:
    """The alert rule a URL names (`<rule_id>` in the API's and the dashboard's routes)."""
    return str(request.resolver_match.kwargs["rule_id"])


def alert_test(request) -> Limited | None:
    """Count one test send of an alert rule, per person and per rule (finding N5)."""
    return hit(
        request, group="alert-test", rate=settings.SMRWEB_ALERT_TEST_RATE, keys=(by_user, by_alert_rule)
    )


def count(request, *, group: str, rate: str, key) -> int:
    """How many attempts `key` has in the current window of `rate`, without counting one (0 when the
    cache cannot be reached)."""
    try:
        usage = get_usage(request, group=f"{group}:{key.__name__}", key=key, rate=rate, increment=False)
    except (RedisError, OSError):
        log.exception("rate limit %s could not be read", group)
        return 0
    return usage["count"] if usage else 0


def peek(request, *, group: str, rate: str, key) -> Limited | None:
    """A Limited when `key` is already over `rate`, without counting this attempt."""
    try:
        usage = get_usage(request, group=f"{group}:{key.__name__}", key=key, rate=rate, increment=False)
    except (RedisError, OSError):
        log.exception("rate limit %s could not be read; letting the request through", group)
        return None
    if usage and usage["count"] >= usage["limit"]:
        return Limited(retry_after=max(1, usage["time_left"]))
    return None


def hit(request, *, group: str, rate: str, keys) -> Limited | None:
    """Count one attempt under each key function in `keys`; a Limited when any count is over `rate`.

    Every key is counted even when an earlier one is already over, so that per-address and per-username
    limits both see every attempt."""
    over: list[int] = []
    for key in keys:
        try:
            usage = get_usage(request, group=f"{group}:{key.__name__}", key=key, rate=rate, increment=True)
        except (RedisError, OSError):  # the cache (Redis) is unreachable: fail open, loudly
            log.exception("rate limit %s could not be counted; letting the request through", group)
            return None
        if usage and usage["should_limit"]:
            over.append(max(1, usage["time_left"]))
    return Limited(retry_after=max(over)) if over else None
