"""Cheap polling: a polled partial carries the version of what it shows; a poll that finds the same
version answers 204 and htmx leaves the page alone, so an idle page costs one small query per poll.

Versions include a 30-second tick so relative times ("2 min ago") still move on quiet pages.
"""

from __future__ import annotations

import hashlib
import time

from django.http import HttpResponse

VERSION_HEADER = "X-Smrweb-Version"
TICK_SECONDS = 30


def version(*parts: object) -> str:
    raw = "|".join(str(p) for p in (*parts, int(time.time() // TICK_SECONDS)))
    return hashlib.blake2s(raw.encode(), digest_size=8).hexdigest()


def unchanged(request, current: str) -> bool:
    """True for an htmx poll that already shows `current` (only polls send the header)."""
    return bool(request.htmx) and request.headers.get(VERSION_HEADER) == current


def no_change() -> HttpResponse:
    return HttpResponse(status=204)
