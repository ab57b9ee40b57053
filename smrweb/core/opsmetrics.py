"""Operational counters shared by every process (web, workers, beat), kept in Redis.

Prometheus' in-process counters would see one gunicorn worker or one Celery worker at a time (and
docker-compose runs them in separate containers), so the counters that events increment live in Redis
hashes: one hash per metric, one field per label set, `HINCRBY` / `HINCRBYFLOAT` being atomic. /metrics
reads them back at scrape time (`sources/opsmetrics.py`). Counting never fails or slows the work it
counts: a Redis that is down loses the increments of the next 30 s without trying, and is logged once.
Off when SMRWEB_OPS_COUNTERS is false (the test suite turns it on where it checks the counters).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from bisect import bisect_left
from contextlib import contextmanager
from functools import cache

import redis
from django.conf import settings

log = logging.getLogger(__name__)

# Latency buckets (seconds) for ingest requests: a 1-event push takes milliseconds, a 5,000-event batch
# on a busy SQLite a second or more.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RETRY_AFTER_SECONDS = 30
_warned = False
_down_until = 0.0


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def _key(name: str) -> str:
    return f"{settings.SMRWEB_OPS_COUNTERS_PREFIX}:{name}"


def _field(labels: dict[str, str]) -> str:
    return json.dumps({k: str(v) for k, v in sorted(labels.items())}, separators=(",", ":"))


_batch = threading.local()


@contextmanager
def batched():
    """Counts made inside go to Redis together, in one pipeline when the block ends (an ingest request
    counts three times: one round trip instead of three). Nested blocks write with the outermost."""
    if getattr(_batch, "pending", None) is not None:
        yield
        return
    _batch.pending = pending = []
    try:
        yield
    finally:
        _batch.pending = None
        if pending:
            _send(lambda pipe: [commands(pipe) for commands in pending])


def _write(commands) -> None:
    pending = getattr(_batch, "pending", None)
    if pending is not None:
        pending.append(commands)
    else:
        _send(commands)


def _send(commands) -> None:
    global _warned, _down_until
    if not settings.SMRWEB_OPS_COUNTERS or time.monotonic() < _down_until:
        return
    try:
        pipe = _client(settings.REDIS_URL).pipeline(transaction=False)
        commands(pipe)
        pipe.execute()
    except redis.RedisError as exc:
        _down_until = time.monotonic() + RETRY_AFTER_SECONDS
        if not _warned:
            _warned = True
            log.warning("operational counters are not being kept (Redis: %s)", exc)


def count(name: str, amount: float = 1, **labels: str) -> None:
    """Add `amount` to the counter `name` for these labels."""
    if amount:
        _write(lambda pipe: pipe.hincrbyfloat(_key(name), _field(labels), amount))


def observe(name: str, seconds: float, **labels: str) -> None:
    """Record one observation in the histogram `name`: its bucket, the sum and the count."""
    bucket = bisect_left(LATENCY_BUCKETS, seconds)
    le = str(LATENCY_BUCKETS[bucket]) if bucket < len(LATENCY_BUCKETS) else "+Inf"
    field = _field(labels)

    def commands(pipe):
        pipe.hincrby(_key(f"{name}:bucket"), json.dumps([field, le]), 1)
        pipe.hincrbyfloat(_key(f"{name}:sum"), field, seconds)
        pipe.hincrby(_key(f"{name}:count"), field, 1)

    _write(commands)


def read_counter(name: str) -> list[tuple[dict[str, str], float]]:
    """Every label set of the counter and its value (empty when Redis cannot be read)."""
    raw = _client(settings.REDIS_URL).hgetall(_key(name))
    return [(json.loads(field), float(value)) for field, value in sorted(raw.items())]


def read_histogram(name: str) -> list[tuple[dict[str, str], list[tuple[str, int]], float, int]]:
    """Every label set of the histogram: cumulative (le, count) pairs ending with +Inf, sum and count."""
    client = _client(settings.REDIS_URL)
    buckets, sums, counts = (
        client.hgetall(_key(f"{name}:bucket")),
        client.hgetall(_key(f"{name}:sum")),
        client.hgetall(_key(f"{name}:count")),
    )
    per_field: dict[str, dict[str, int]] = {}
    for raw, value in buckets.items():
        field, le = json.loads(raw)
        per_field.setdefault(field, {})[le] = int(value)
    result = []
    for field, raw_count in sorted(counts.items()):
        field = field.decode()
        own = per_field.get(field, {})
        cumulative, running = [], 0
        for le in [*map(str, LATENCY_BUCKETS), "+Inf"]:
            running += own.get(le, 0)
            cumulative.append((le, running))
        result.append((json.loads(field), cumulative, float(sums.get(field.encode(), 0)), int(raw_count)))
    return result
