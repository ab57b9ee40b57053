"""The cache where it only saves work: a Redis that is down makes a read a miss and a write a no-op, never
a 500. Keys come from `core.cachekeys`. (Rate limits, leases and task claims use the cache for correctness
and handle an outage themselves.)"""

from __future__ import annotations

import logging
import time

from django.core.cache import cache

log = logging.getLogger(__name__)
_WARN_EVERY = 60.0
_last_warned = 0.0


def _down(action: str, key: str, exc: Exception) -> None:
    global _last_warned
    now = time.monotonic()
    if now - _last_warned >= _WARN_EVERY:  # one line a minute, not one per request
        _last_warned = now
        log.warning("cache unavailable (%s %s): %s; working without it", action, key, exc)


def get(key: str, default=None):
    try:
        return cache.get(key, default)
    except Exception as exc:  # any backend error: redis.ConnectionError, TimeoutError, …
        _down("get", key, exc)
        return default


def set(key: str, value, timeout: float | None) -> None:  # noqa: A001 - mirrors cache.set
    try:
        cache.set(key, value, timeout=timeout)
    except Exception as exc:
        _down("set", key, exc)


def delete(key: str) -> None:
    try:
        cache.delete(key)
    except Exception as exc:
        _down("delete", key, exc)


def add(key: str, value, timeout: float | None, *, down: bool) -> bool:
    """`cache.add`: whether `key` was free and is now set; `down` when the cache cannot be reached (the
    live cards' render claims: down, every request renders its own)."""
    try:
        return bool(cache.add(key, value, timeout=timeout))
    except Exception as exc:
        _down("add", key, exc)
        return down


def delete_many(keys: list[str]) -> None:
    if not keys:
        return
    try:
        cache.delete_many(keys)
    except Exception as exc:
        _down("delete_many", keys[0], exc)


def get_many(keys: list[str]) -> dict:
    if not keys:
        return {}
    try:
        return cache.get_many(keys)
    except Exception as exc:
        _down("get_many", keys[0], exc)
        return {}


def set_many(values: dict, timeout: float | None) -> None:
    if not values:
        return
    try:
        cache.set_many(values, timeout=timeout)
    except Exception as exc:
        _down("set_many", next(iter(values)), exc)
