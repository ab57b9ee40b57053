"""The metric series' rollups (`MetricRollup`): per run, key and fixed width in steps, a bucket's count,
sum, min, max, first and last step and last value, so a long series' chart reads O(buckets) rows
(`queries.metric_series`), not every point.

`record` runs inside ingest's transaction, under the run's lock, with the points the database says it
inserted (never a replayed duplicate): aggregated here, then one upsert that adds them to the kept
buckets (in any step order: the merge is associative). `rebuild` computes a run's rollups again from its
points, through the same `record`, after points were deleted or rewritten (retention, deletion, restore).
"""

from __future__ import annotations

import functools
import sqlite3
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import islice
from operator import itemgetter, le

from django.db import connection

from smrweb.tracking.models import MetricPoint, MetricRollup

WIDTHS = MetricRollup.WIDTHS
_BASE = WIDTHS[0]
# A sum at or past this is not kept (NULL: a chart reads those points instead): two sums below it add
# up without overflowing a double, which PostgreSQL refuses with an error.
_SUM_LIMIT = 1e307
_COLUMNS = (
    *("run_id", "key", "width", "bucket", "n", "total"),
    *("low", "high", "first_step", "last_step", "last_value"),
)
_REBUILD_CHUNK = 50_000  # points read, aggregated and written at a time by `rebuild`

Row = list  # [bucket, n, total | None, low, high, first_step, last_step, last_value]


def _sum(values: Sequence[float]) -> float | None:
    total = sum(values)
    return total if abs(total) < _SUM_LIMIT else None  # (inf and nan compare False)


def _base_buckets(steps: Sequence[int], values: Sequence[float]) -> list[Row]:
    """One key's points (in stored order) as buckets of the narrowest width, in bucket order."""
    if not all(map(le, steps, islice(steps, 1, None))):  # (checked in C)
        order = sorted(range(len(steps)), key=steps.__getitem__)  # stable: a step's last stored stays last
        steps, values = _gather(steps, order), _gather(values, order)
    elif steps[-1] // _BASE == steps[0] // _BASE:  # one bucket (a small batch)
        first, last = steps[0], steps[-1]
        return [[first // _BASE, len(steps), _sum(values), min(values), max(values), first, last, values[-1]]]
    rows, i, n = [], 0, len(steps)
    while i < n:
        bucket = steps[i] // _BASE
        j = bisect_left(steps, (bucket + 1) * _BASE, i + 1, n)
        part = values[i:j]
        rows.append([bucket, j - i, _sum(part), min(part), max(part), steps[i], steps[j - 1], values[j - 1]])
        i = j
    return rows


def _coarser(rows: list[Row], ratio: int) -> list[Row]:
    """Buckets `ratio` times as wide, from narrower ones in bucket order (`ratio` 0: one bucket)."""
    out: list[Row] = []
    for bucket, n, total, low, high, _first, last_step, last_value in rows:
        parent = bucket // ratio if ratio else 0
        if out and out[-1][0] == parent:
            row = out[-1]
            row[5] = min(row[5], _first)
            row[1] += n
            row[2] = row[2] + total if row[2] is not None and total is not None else None
            if row[2] is not None and not abs(row[2]) < _SUM_LIMIT:
                row[2] = None
            row[3], row[4] = min(row[3], low), max(row[4], high)
            if last_step >= row[6]:  # later buckets hold later steps (a kept bucket merged in: by its steps)
                row[6], row[7] = last_step, last_value
        else:
            out.append([parent, n, total, low, high, _first, last_step, last_value])
    return out


def _gather(items: Sequence, order: list[int]) -> Sequence:
    """`items` in `order` (itemgetter: the copy made in C, not a Python loop per point)."""
    return itemgetter(*order)(items) if len(order) > 1 else [items[i] for i in order]


def _by_key(keys: Sequence[str], steps: Sequence[int], values: Sequence[float]):
    """(key, its steps, its values) per key, each in stored order."""
    names = set(keys)
    period = len(names)
    if len(keys) % period == 0 and len(set(keys[:period])) == period and keys[period:] == keys[:-period]:
        # The common batch: one series, or each step of several series in turn (a harness logging
        # its metrics at every step): each a slice, taken in C.
        return [(keys[i], steps[i::period], values[i::period]) for i in range(period)]
    blocks = []
    for name in names:  # each series in one block (a batch in event id order, ids named by series)
        start = keys.index(name)
        end = start + keys.count(name)
        if keys[start:end].count(name) != end - start:
            break
        blocks.append((name, steps[start:end], values[start:end]))
    else:
        return blocks
    order = sorted(range(len(keys)), key=keys.__getitem__)  # stable: stored order within a key
    keys, steps, values = _gather(keys, order), _gather(steps, order), _gather(values, order)
    groups, start = [], 0
    for key in sorted(names):
        end = bisect_right(keys, key, start)
        groups.append((key, steps[start:end], values[start:end]))
        start = end
    return groups


def aggregate(
    keys: Sequence[str],
    steps: Sequence[int],
    values: Sequence[float],
    before: dict[str, Row] | None = None,
) -> list[tuple]:
    """Points (as columns, in stored order) as rollup rows (key, width, bucket, n, total, low, high,
    first step, last step, last value): width 0 (the whole series) and each width the series spans more
    than one bucket of, once these points are added to it. `before`: each key's whole-series row as kept
    (`Row` with bucket 0), for the widths these points make it span for the first time: until then such
    a width's one bucket was the whole series, not kept apart, and now is (merged into these rows)."""
    before = before or {}
    out = []
    for key, series_steps, series_values in _by_key(keys, steps, values) if keys else ():
        rows = _base_buckets(series_steps, series_values)
        kept = before.get(key)
        lo, hi = rows[0][5], rows[-1][6]
        if kept is not None:
            lo, hi = min(lo, kept[5]), max(hi, kept[6])
        width = _BASE
        while width and lo // width != hi // width:  # wider widths hold the series in one bucket
            written = rows
            if kept is not None and kept[5] // width == kept[6] // width:
                written = _merged(rows, [kept[5] // width, *kept[1:]])
            out += [(key, width, *row) for row in written]
            width = width * 4 if width < WIDTHS[-1] else 0
            if width:
                rows = _coarser(rows, 4)
        out += [(key, 0, *row) for row in _coarser(rows, 0)]
    return out


def _merged(rows: list[Row], extra: Row) -> list[Row]:
    """`rows` (in bucket order) with `extra` added to its bucket: one row per bucket, so one statement
    never updates a row twice (PostgreSQL refuses that)."""
    # The kept bucket first on a tie of steps: these points were stored after it.
    out = sorted([list(extra), *(list(r) for r in rows)], key=lambda r: (r[0], r[6]))
    return _coarser(out, 1)


def record(run_id: int, keys: Sequence[str], steps: Sequence[int], values: Sequence[float]) -> int:
    """Add points just stored for the run (as columns, in stored order) to its rollups. Call in the
    transaction that stored them, with the run's row locked. Returns how many rows were upserted."""
    before = (
        {
            key: [0, *row]
            for key, *row in MetricRollup.objects.filter(
                run_id=run_id, width=0, key__in=set(keys)
            ).values_list("key", "n", "total", "low", "high", "first_step", "last_step", "last_value")
        }
        if keys
        else {}
    )
    rows = aggregate(keys, steps, values, before)
    if not rows:
        return 0
    if connection.vendor == "postgresql":
        columns = list(zip(*rows, strict=True))
        with connection.cursor() as cursor:
            cursor.execute(_upsert_sql_pg(), [run_id, *map(list, columns)])
        return len(rows)
    connection.ensure_connection()
    db = connection.connection
    size = max(1, min(500, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(_COLUMNS)))
    with connection.wrap_database_errors:
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            db.execute(_upsert_sql_sqlite(len(chunk)), [v for row in chunk for v in (run_id, *row)])
    return len(rows)


def _on_conflict(least: str, greatest: str) -> str:
    q = connection.ops.quote_name
    t = q(MetricRollup._meta.db_table)
    limit = f"CAST({_SUM_LIMIT!r} AS double precision)"
    return (
        f"ON CONFLICT ({q('run_id')}, {q('key')}, {q('width')}, {q('bucket')}) DO UPDATE SET "
        f"n = {t}.n + excluded.n, "
        # NULL once either side is unknown or large enough that the sum could overflow.
        f"total = CASE WHEN abs({t}.total) < {limit} AND abs(excluded.total) < {limit} "
        f"THEN {t}.total + excluded.total END, "
        f"low = {least}({t}.low, excluded.low), high = {greatest}({t}.high, excluded.high), "
        f"first_step = {least}({t}.first_step, excluded.first_step), "
        # The later batch's value on a tie: its points were stored last.
        f"last_value = CASE WHEN excluded.last_step >= {t}.last_step THEN excluded.last_value "
        f"ELSE {t}.last_value END, "
        f"last_step = {greatest}({t}.last_step, excluded.last_step)"
    )


@functools.cache
def _upsert_sql_sqlite(rows: int) -> str:
    q = connection.ops.quote_name
    columns = ", ".join(q(c) for c in _COLUMNS)
    values = ", ".join(["(" + ", ".join(["?"] * len(_COLUMNS)) + ")"] * rows)
    return f"INSERT INTO {q(MetricRollup._meta.db_table)} ({columns}) VALUES {values} " + _on_conflict(
        "min", "max"
    )


@functools.cache
def _upsert_sql_pg() -> str:
    q = connection.ops.quote_name
    columns = ", ".join(q(c) for c in _COLUMNS)
    types = ("text", "bigint", "bigint", "bigint", "float8", "float8", "float8", "bigint", "bigint", "float8")
    arrays = ", ".join(f"%s::{t}[]" for t in types)
    # One statement whatever the row count: the columns as arrays, unnested.
    return (
        f"INSERT INTO {q(MetricRollup._meta.db_table)} ({columns}) SELECT %s, * FROM unnest({arrays}) "
        + _on_conflict("LEAST", "GREATEST")
    )


def columns(points: Sequence[tuple[str, int, float]]) -> tuple[Sequence, Sequence, Sequence]:
    """(key, step, value) rows as three columns."""
    return tuple(zip(*points, strict=True)) if points else ((), (), ())  # type: ignore[return-value]


def rebuild(run_id: int, keys: Iterable[str] | None = None) -> int:
    """Compute the run's rollups (of `keys`, or all) again from its points, in step order, a chunk at
    a time. Call with the run's row locked (or no writer about). Returns how many points were read."""
    rollups = MetricRollup.objects.filter(run_id=run_id)
    points = MetricPoint.objects.filter(run_id=run_id)
    if keys is not None:
        keys = list(keys)
        rollups, points = rollups.filter(key__in=keys), points.filter(key__in=keys)
    rollups._raw_delete(rollups.db)
    read = 0
    stream = points.order_by("key", "step", "id").values_list("key", "step", "value").iterator(_REBUILD_CHUNK)
    while chunk := list(islice(stream, _REBUILD_CHUNK)):
        record(run_id, *columns(chunk))
        read += len(chunk)
    return read


def rebuild_metric_rollups(run_ids: Iterable[int]) -> int:
    """`rebuild` for each of these runs; how many points were read."""
    return sum(rebuild(run_id) for run_id in sorted(set(run_ids)))
