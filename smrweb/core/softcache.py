"""The cache where it only saves work: a Redis that is down makes a read a miss and a write a no-op, never
a 500. Keys come from `core.cachekeys`. (Rate limits, leases and task claims use the cache for correctness
and handle an outage themselves.)

Inside `batched()` (or between `open_batch()` and `close_batch()`: a dashboard page or poll,
`BatchedCacheWritesMiddleware`, until its response is sent) the writes and deletes wait for the end of the
block and go in one round trip; the block's own reads see them. A live poll after a
turn wrote ~10 times (each card's and part's render, the rows, the answer): ~3 ms of a ~25 ms answer."""

from __future__ import annotations

import builtins
import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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


class _Batch(threading.local):
    # key -> (timeout, pickled value) to set, and keys to delete, at the end of the block; None outside one.
    # Pickled when set, as the cache would: a value changed after it was written is not written changed.
    # Ints are kept bare, as Django's Redis serializer stores them (incr works on them). A value set with
    # an `encode` (an immutable one: a render) is held as it is and encoded when the block is written.
    writes: dict[str, tuple[float | None, bytes | int | _Encoded]] | None = None
    deletes: set[str] | None = None
    # key -> value (or _MISSING) read ahead by an earlier `get_many(…, also=…)` of the block, for its next
    # read of that key: two reads one after the other that one step knows of go in one round trip.
    ahead: dict[str, object] | None = None


_batch = _Batch()
_DELETED = object()
_MISSING = object()


@contextmanager
def batched() -> Iterator[None]:
    """Hold this thread's writes and deletes until the block ends, then make them in one call (the
    backend's `write_many` when it has one: one pipeline). Nested blocks write with the outermost."""
    if not open_batch():
        yield
        return
    try:
        yield
    finally:
        close_batch()


def open_batch() -> bool:
    """Start holding this thread's writes and deletes (a block `close_batch` ends); False when a block is
    open already (its end writes them). For a block that outlives a call: a request's, written once its
    answer is sent (core.middleware.BatchedCacheWritesMiddleware)."""
    if _batch.writes is not None:
        return False
    _batch.writes, _batch.deletes, _batch.ahead = {}, builtins.set(), {}  # `set` here is this module's
    return True


def close_batch() -> None:
    """End this thread's open block: its writes and deletes made in one call (nothing when none is open)."""
    if _batch.writes is None:
        return
    writes, deletes = _batch.writes, _batch.deletes
    _batch.writes = _batch.deletes = _batch.ahead = None
    _write(writes, deletes)


def flush() -> None:
    """Make the open block's writes and deletes now, and go on holding later ones: what another request
    waits for (a card render this one claimed) is written before this one waits for theirs."""
    if _batch.writes is None:
        return
    writes, deletes = _batch.writes, _batch.deletes
    _batch.writes, _batch.deletes = {}, builtins.set()
    _write(writes, deletes)


class _Encoded:
    """A held value and the encoding it is written with (`set_many(…, encode=…)`): a block written after
    its response is sent encodes then (a poll's renders are compressed after its answer, not before)."""

    __slots__ = ("encode", "value")

    def __init__(self, value, encode: Callable) -> None:
        self.value, self.encode = value, encode


def _held(value) -> bytes | int:
    """What a block holds for `value`, as written (pickled; a deferred encoding made)."""
    return _dumps(value.encode(value.value)) if type(value) is _Encoded else value


def _dumps(value) -> bytes | int:
    return value if type(value) is int else pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def _loads(held: bytes | int):
    return held if type(held) is int else pickle.loads(held)  # noqa: S301 - pickled by `_dumps`


def _write(writes: dict[str, tuple[float | None, bytes | int | _Encoded]], deletes: set[str]) -> None:
    if not writes and not deletes:
        return
    try:
        writes = {key: (timeout, _held(value)) for key, (timeout, value) in writes.items()}
        if hasattr(cache, "write_many"):  # core.rediscache: pickled values are what it stores
            cache.write_many(writes, deletes)
            return
        by_timeout: dict[float | None, dict] = {}
        for key, (timeout, value) in writes.items():
            by_timeout.setdefault(timeout, {})[key] = _loads(value)
        for timeout, values in by_timeout.items():
            cache.set_many(values, timeout=timeout)
        if deletes:
            cache.delete_many(list(deletes))
    except Exception as exc:
        _down("write_many", next(iter(writes), next(iter(deletes), "")), exc)


def _pending(key: str):
    """What the open block will write at `key`: its value, _DELETED, or None (nothing)."""
    if _batch.writes is None:
        return None
    if key in _batch.deletes:
        return _DELETED
    held = _batch.writes.get(key)
    return None if held is None else _loads(_held(held[1]))


def _read_ahead(key: str):
    """What an earlier read of the block read ahead at `key` (once: a later read asks the cache again), or
    None when it did not."""
    return _batch.ahead.pop(key, None) if _batch.ahead else None


def get(key: str, default=None):
    if (held := _pending(key)) is not None:
        return default if held is _DELETED else held
    if (ahead := _read_ahead(key)) is not None:
        return default if ahead is _MISSING else ahead
    try:
        return cache.get(key, default)
    except Exception as exc:  # any backend error: redis.ConnectionError, TimeoutError, …
        _down("get", key, exc)
        return default


def set(key: str, value, timeout: float | None) -> None:  # noqa: A001 - mirrors cache.set
    if _batch.writes is not None:
        _batch.deletes.discard(key)
        _batch.writes[key] = (timeout, _dumps(value))
        return
    try:
        cache.set(key, value, timeout=timeout)
    except Exception as exc:
        _down("set", key, exc)


def delete(key: str) -> None:
    if _batch.writes is not None:
        _batch.writes.pop(key, None)
        _batch.deletes.add(key)
        return
    try:
        cache.delete(key)
    except Exception as exc:
        _down("delete", key, exc)


def add(key: str, value, timeout: float | None, *, down: bool) -> bool:
    """`cache.add`: whether `key` was free and is now set; `down` when the cache cannot be reached (the
    live cards' render claims: down, every request renders its own)."""
    if _batch.deletes is not None and key in _batch.deletes:  # this block's own claim, released by it
        _batch.deletes.discard(key)
        return True
    try:
        return bool(cache.add(key, value, timeout=timeout))
    except Exception as exc:
        _down("add", key, exc)
        return down


def add_many(keys: list[str], value, timeout: float, *, down: bool) -> list[str]:
    """`add` of each of `keys`: the keys that were free and are now set (one round trip with
    core.rediscache); all of them when the cache cannot be reached and `down`, else none."""
    if not keys:
        return []
    own = [key for key in keys if _batch.deletes is not None and key in _batch.deletes]
    for key in own:  # this block's own claims, released by it
        _batch.deletes.discard(key)
    asked = [key for key in keys if key not in own]
    try:
        if hasattr(cache, "add_many"):
            free = builtins.set(cache.add_many(asked, value, timeout)) if asked else builtins.set()
        else:
            free = {key for key in asked if cache.add(key, value, timeout=timeout)}
    except Exception as exc:
        _down("add_many", keys[0], exc)
        free = builtins.set(asked) if down else builtins.set()
    return [key for key in keys if key in free or key in own]


def delete_many(keys: list[str]) -> None:
    if not keys:
        return
    if _batch.writes is not None:
        for key in keys:
            delete(key)
        return
    try:
        cache.delete_many(keys)
    except Exception as exc:
        _down("delete_many", keys[0], exc)


def get_many(keys: list[str], also: list[str] = ()) -> dict:
    """The values found at `keys`; inside a `batched` block the keys `also` are read in the same round trip
    and held for the block's next read of each (a step that knows what the next one reads)."""
    if not keys:
        return {}
    held = {}  # this block's own writes, then what it read ahead
    for key in keys:
        if (value := _pending(key)) is not None or (value := _read_ahead(key)) is not None:
            held[key] = value
    asked = [key for key in keys if key not in held]
    ahead = [key for key in also if key not in held and key not in asked] if _batch.writes is not None else []
    try:
        found = cache.get_many([*asked, *ahead]) if asked or ahead else {}
    except Exception as exc:
        _down("get_many", keys[0], exc)
        found = {}
    for key in ahead:
        _batch.ahead[key] = found.pop(key, _MISSING)
    return found | {
        key: value for key, value in held.items() if value is not _DELETED and value is not _MISSING
    }


def set_many(values: dict, timeout: float | None, *, encode: Callable | None = None) -> None:
    """`cache.set_many`; each value written as `encode(value)` when given — in a block, encoded when the
    block is written (the values must not change: strings)."""
    if not values:
        return
    if _batch.writes is not None:
        if encode is None:
            for key, value in values.items():
                set(key, value, timeout)
            return
        for key, value in values.items():
            _batch.deletes.discard(key)
            _batch.writes[key] = (timeout, _Encoded(value, encode))
        return
    if encode is not None:
        values = {key: encode(value) for key, value in values.items()}
    try:
        cache.set_many(values, timeout=timeout)
    except Exception as exc:
        _down("set_many", next(iter(values)), exc)
