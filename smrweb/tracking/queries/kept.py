"""Reads kept in the cache under the version of what they read, so that pages asked for again before
anything changed do not read every row again.

The version is the caller's: the project page's (its runs' count and latest change, which the write
path moves with every run, score, status or exclusion change; no clock: issue 36) is the one its
own poll answers 204 with. What is kept under a version is therefore exactly as fresh as the page that
shows it. A cache that is down only costs the read."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from smrweb.core import cachekeys, softcache

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
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


def kept_many(reads: dict[K, tuple[str, str]], build: Callable[[list[K]], dict[K, T]]) -> dict[K, T]:
    """`kept` for many reads at once: `reads` maps each to its (name, version); `build(those not kept)` reads
    them (a mapping with each of them). One cache read, and one write for what was built."""
    keys = {k: cachekeys.kept(name, version) for k, (name, version) in reads.items()}
    found = softcache.get_many(list(keys.values()))
    out = {k: found[key][0] for k, key in keys.items() if isinstance(found.get(key), tuple)}
    if missing := [k for k in reads if k not in out]:
        built = build(missing)
        out.update({k: built[k] for k in missing})
        softcache.set_many({keys[k]: (built[k],) for k in missing}, KEPT_SECONDS)
    return out
