"""What one server process keeps in memory between requests, beside the shared cache (core.softcache): the
few objects a live page rebuilds on every poll and that cost more to unpickle than to use (a long run's
turn aggregates, its timeline's bars and figure). Bounded (least recently used out), and only an
accelerator: each entry says what it was built from, and a reader that finds another origin (the shared
cache's stamp moved: the write path forgot the run's aggregates) builds it again.

Values are never changed once stored: a request that advances one stores a new object, so the threads of
a process can read what another is replacing."""

from __future__ import annotations

import threading
from collections import OrderedDict

from django.db.models.base import ModelState

_LOCK = threading.Lock()
_KEPT: OrderedDict[tuple, object] = OrderedDict()
MAX_ENTRIES = 256  # a few live pages' worth per kind; a 100,000-turn run's memo is ~1 MB in memory


def get(key: tuple):
    with _LOCK:
        value = _KEPT.get(key)
        if value is not None:
            _KEPT.move_to_end(key)
        return value


def put(key: tuple, value) -> None:
    with _LOCK:
        _KEPT[key] = value
        _KEPT.move_to_end(key)
        while len(_KEPT) > MAX_ENTRIES:
            _KEPT.popitem(last=False)


def forget(*keys: tuple) -> None:
    with _LOCK:
        for key in keys:
            _KEPT.pop(key, None)


def near(scope: tuple, keys: list) -> dict:
    """Of the shared cache's `keys`, the values this process kept for `scope` (`keep_near`): a reader asks
    the shared cache for the others only (a poll after a turn: one new row of 25, one run of 100)."""
    local = get(scope) or {}
    return {key: local[key] for key in keys if key in local}


def keep_near(scope: tuple, shown: dict, limit: int) -> None:
    """Keep `shown` (shared-cache key -> value, never changed once kept) for `scope`, with the most recently
    kept others up to `limit` entries in all (a page's other lists, a project's other compared runs)."""
    local = get(scope) or {}
    room = limit - len(shown)
    others = [(k, v) for k, v in local.items() if k not in shown][-room:] if room > 0 else []
    put(scope, dict(others) | shown)


def own_copy(instance):
    """A request's own copy of a kept model instance, to set attributes or related objects on (its fields
    and its cache of related objects copied; the related objects shared, never changed): `copy.copy` of a
    model goes through pickling's hooks, about as slow as unpickling it again."""
    own = type(instance).__new__(type(instance))
    own.__dict__ = instance.__dict__.copy()
    own._state = state = ModelState()
    state.__dict__ = instance._state.__dict__.copy()  # db, adding and (once read) the related objects' cache
    state.fields_cache = instance._state.fields_cache.copy()
    return own


def clear() -> None:
    """Tests: every process-local entry dropped (a test's database is not the last one's)."""
    with _LOCK:
        _KEPT.clear()
