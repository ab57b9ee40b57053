"""One clock for every page and chart: UTC, or the zone the user's browser reports.

The middleware activates the zone per request, so Django's `|date` filter, `timezone.localtime`
and the chart builders (zone-less strings in the active zone, see `charts.x_time`) all agree, and
every label names the zone (`zone_label`)."""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, tzinfo

from django.utils import timezone

from smrweb.core import cachekeys, softcache
from smrweb.dashboard.models import Clock, UserPreference

ZONE_COOKIE = "smrweb_tz"  # the browser's IANA zone, written by smrweb.js


def valid_zone(name: str | None) -> zoneinfo.ZoneInfo | None:
    """The IANA zone called `name`, or None for anything else (the cookie is user input)."""
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


@dataclass(frozen=True)
class UserClock:
    mode: str  # Clock value
    zone: tzinfo
    name: str  # "UTC" or the IANA name


UTC_CLOCK = UserClock(Clock.UTC, UTC, "UTC")


def clock_for(user, browser_zone: str | None = None) -> UserClock:
    """The clock `user` sees: UTC unless they chose local, then the browser's current zone (from the
    cookie) or, without one, the zone their browser reported when they chose it."""
    if not getattr(user, "is_authenticated", False):
        return UTC_CLOCK
    mode, stored_zone = _stored(user.pk)
    if mode != Clock.LOCAL:
        return UTC_CLOCK
    for name in (browser_zone, stored_zone):
        zone = valid_zone(name)
        if zone is not None:
            return UserClock(Clock.LOCAL, zone, name)
    return UTC_CLOCK


def _stored(user_id: int) -> tuple[str, str]:
    """(clock, local zone) of a user, from the cache when it can: every page asks, and an unchanged
    poll answers in a couple of queries."""
    hit = softcache.get(cachekeys.clock(user_id))  # a Redis that is down: read the row
    if hit is not None:
        return tuple(hit)
    row = UserPreference.objects.filter(user_id=user_id).values_list("clock", "local_zone").first()
    value = tuple(row) if row else (Clock.UTC, "")
    softcache.set(cachekeys.clock(user_id), list(value), 3600)
    return value


def set_clock(user, *, clock: str, local_zone: str = "") -> UserPreference:
    """Store `user`'s choice; choosing local needs a zone the browser reported."""
    if clock not in Clock.values:
        raise ValueError(f"unknown clock {clock!r}")
    if clock == Clock.LOCAL and valid_zone(local_zone) is None:
        raise ValueError("your browser did not report a time zone")
    pref, _ = UserPreference.objects.update_or_create(
        user=user, defaults={"clock": clock, "local_zone": local_zone if clock == Clock.LOCAL else ""}
    )
    softcache.delete(cachekeys.clock(user.pk))
    return pref


def zone_label() -> str:
    """The active zone's name, for labels: "UTC" or "Europe/Paris"."""
    name = timezone.get_current_timezone_name()
    return "UTC" if name in ("UTC", "Etc/UTC", "Z") else name


# Machine faces answer in UTC whoever asks: an API client's datetimes do not depend on a browser setting.
MACHINE_PREFIXES = ("/api/", "/v1/")


class ClockMiddleware:
    """Activate the user's clock for the request (after authentication); pages only."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(MACHINE_PREFIXES):
            request.clock = UTC_CLOCK
            return self.get_response(request)
        clock = clock_for(getattr(request, "user", None), request.COOKIES.get(ZONE_COOKIE))
        request.clock = clock
        timezone.activate(clock.zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def context(request) -> dict:
    """Template context: `clock` (the mode and zone) and `tz` (the label)."""
    clock = getattr(request, "clock", UTC_CLOCK)
    return {"clock": clock, "tz": zone_label()}
