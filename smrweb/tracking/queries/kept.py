"""Reads kept in the cache under the version of what they read, so that pages asked for again before
anything changed do not read every row again.

The version is the caller's: the project page's (its runs' count and latest change, which the write
path moves with every run, score, status or exclusion change; no clock: issue 36) is the one its
own poll answers 204 with. What is kept under a version is therefore exactly as fresh as the page that
shows it. A cache that is down only costs the read."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from smrweb.core import cachekeys, softcache

T = TypeVar("T")
KEPT_SECONDS = 600  # a quiet project's version stays: kept for a viewer who comes back, not for ever


def kept(name: str, version: str | None, build: Callable[[], T]) -> T:
    """`build()`, kept under `name` (a `cachekeys.kept_*` name) and `version`; without a version, built
    every time."""
    if version is None:
        return build()
    key = cachekeys.kept(name, version)
    hit = softcache.get(key)  # a Redis that is down: a miss, read the rows
    if hit is not None:
        return hit[0]
    value = build()
    softcache.set(key, (value,), KEPT_SECONDS)  # down: nothing kept, the next page reads again
    return value
