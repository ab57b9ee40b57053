"""PostgreSQL's metric ingest (called by `ingest._insert_metrics`, inside the batch's transaction with
the run's row locked): a few points are looked up at once and only the new ones COPYed; a batch that
looks new is COPYed straight into the metric table; anything else goes through a staging table and
INSERT … ON CONFLICT DO NOTHING. Measured in docs/benchmarks.md; tests/tracking/test_copy_ingest.py."""

from __future__ import annotations

import operator
from datetime import UTC, datetime
from itertools import repeat

import msgspec
from django.db import IntegrityError, connection, transaction

from smrweb.tracking import events as ev
from smrweb.tracking.models import MetricPoint, Run
from smrweb.tracking.services import metric_rollups

_encode_json = msgspec.json.Encoder().encode
_by_id = operator.attrgetter("id")
# COPY's text format: a backslash, tab, newline or carriage return in a value is written escaped.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_STAGE = "smrweb_metric_stage"
_COPY_COLUMNS = ("run_id", "key", "step", "value", "ts", "event_id")
_SMALL_BATCH = 50  # metric points whose ids are all asked for at once (_insert_metrics_pg)


class _CopyRows:
    """A batch as the text COPY reads: "run_id, key, step, value, ts, event_id" lines (tab-separated,
    each ending in a newline), in event id order (a stable sort: of two rows with one id the first
    still comes first), how many lines, and their keys, steps and values in that order (`points`)."""

    __slots__ = ("text", "count", "keys", "steps", "values")

    def __init__(self, text: str, count: int, keys: list[str], steps: list[int], values: list[float]):
        self.text, self.count = text, count
        self.keys, self.steps, self.values = keys, steps, values

    @property
    def points(self) -> tuple[list[str], list[int], list[float]]:
        return self.keys, self.steps, self.values

    def __len__(self) -> int:
        return self.count


def _copy_rows(run_id: int, events: list[ev.MetricEvent | ev.PlainMetric], now: datetime) -> _CopyRows:
    """The batch as COPY text (see _CopyRows). Floats in the shortest text that reads back to the same
    double, instants in RFC 3339 with their offset (the session's time zone never matters).

    Column by column, then one C-level pass (zip, "\t".join, "\n".join) makes the lines: no Python runs
    per row but the attribute reads (a line per row by f-string, then a sort of the lines and a second
    join, took ~2.5x as long)."""
    now_text = now.astimezone(UTC).isoformat()
    if type(events) is ev.PlainMetrics:  # the fast path's batch: client ids, canonical UTC texts
        events = sorted(events, key=_by_id)
        ids = [e.id for e in events]
        stamps = [e.ts_text or now_text for e in events]
    else:
        events = sorted(events, key=_event_key)
        ids = [_event_key(e) for e in events]
        stamps = [now_text if e.ts is None else e.ts.isoformat() for e in events]
    keys = point_keys = [e.key for e in events]
    point_steps, point_values = [e.step for e in events], [e.value for e in events]
    # Numbers in their shortest round-trip text, all at once by msgspec's encoder (repr() one by one was
    # most of the time); a JSON number is an int8 or float8 literal PostgreSQL reads exactly.
    steps = _encode_json(point_steps)[1:-1].decode().split(",")
    values = _encode_json(point_values)[1:-1].decode().split(",")
    n = len(ids)
    runs = repeat(str(run_id), n)
    text = "\n".join(map("\t".join, zip(runs, keys, steps, values, stamps, ids, strict=True))) + "\n"
    if "\\" in text or "\r" in text or text.count("\t") != 5 * n or text.count("\n") != n:
        # A key or id holds a character COPY reads specially: write those fields escaped.
        esc = _COPY_ESCAPES
        keys = [k.translate(esc) for k in keys]
        ids = [i.translate(esc) for i in ids]
        runs = repeat(str(run_id), n)
        text = "\n".join(map("\t".join, zip(runs, keys, steps, values, stamps, ids, strict=True))) + "\n"
    return _CopyRows(text, n, point_keys, point_steps, point_values)


def _event_key(event: ev.MetricEvent | ev.PlainMetric) -> str:
    """A metric's idempotency key: its client id, else the digest of its content."""
    return event.id if event.id is not None else event.idempotency_key()


def _known_ids(cursor, run_id: int, ids: list[str]) -> set[str]:
    """Which of `ids` the run's metric points already have."""
    cursor.execute(
        f"SELECT event_id FROM {connection.ops.quote_name(MetricPoint._meta.db_table)} "
        "WHERE run_id = %s AND event_id = ANY(%s)",
        [run_id, ids],
    )
    return {row[0] for row in cursor.fetchall()}


def insert(run: Run, events: list[ev.MetricEvent | ev.PlainMetric], now: datetime) -> int:
    """PostgreSQL: COPY the batch straight into the metric table when it looks new, else (or when the
    unique constraint says otherwise) through a staging table and INSERT … ON CONFLICT DO NOTHING.

    "Looks new": no id repeated inside the batch, and the run has neither its first nor its last id (as
    sent) — what a replayed batch, or one that re-sends the tail of the last, always has. Two probes
    instead of one per event; COPY then skips the executor's per-row conflict handling. Should a row of
    the run have one of the ids in between, the unique constraint refuses the COPY, which is undone to its
    savepoint, and the staging path stores the batch: never a point twice, whatever the batch holds.
    (The caller holds the run's row lock, as every writer of metric points does: no other batch into
    this run commits in between.) Either way the rows go in in event id order: the unique index (run,
    event_id) takes its entries in order (~15 % less time for the COPY and its commit)."""
    if len(events) <= _SMALL_BATCH and _ids_unique(events):
        # A few points (a polled run's new results, often a re-sent one): ask for every id, and COPY
        # only the new ones, without a savepoint — under the run's row lock none can be stored between
        # the question and the COPY. One or two statements instead of the staging path's four.
        with connection.cursor() as cursor:
            known = _known_ids(cursor, run.pk, [_event_key(e) for e in events])
            fresh = [e for e in events if _event_key(e) not in known]
            if fresh:
                rows = _copy_rows(run.pk, fresh, now)
                q = connection.ops.quote_name
                columns = ", ".join(q(c) for c in _COPY_COLUMNS)
                with connection.wrap_database_errors:
                    with cursor.copy(f"COPY {q(MetricPoint._meta.db_table)} ({columns}) FROM STDIN") as copy:
                        copy.write(rows.text)
                metric_rollups.record(run.pk, *rows.points)
            return len(fresh)
    first, last = _event_key(events[0]), _event_key(events[-1])
    rows = _copy_rows(run.pk, events, now)
    q = connection.ops.quote_name
    columns = ", ".join(q(c) for c in _COPY_COLUMNS)
    with connection.cursor() as cursor:
        if _ids_unique(events) and not _known_ids(cursor, run.pk, [first, last]):
            try:
                with transaction.atomic(), connection.wrap_database_errors:
                    with cursor.copy(f"COPY {q(MetricPoint._meta.db_table)} ({columns}) FROM STDIN") as copy:
                        copy.write(rows.text)
            except IntegrityError:
                pass  # an id between the first and the last was stored already
            else:
                metric_rollups.record(run.pk, *rows.points)
                return len(rows)
    return _insert_metrics_pg_staged(run, rows)


def _ids_unique(events: list[ev.MetricEvent | ev.PlainMetric]) -> bool:
    if type(events) is ev.PlainMetrics:
        return len(set(map(_by_id, events))) == len(events)
    return len(set(map(_event_key, events))) == len(events)


def _insert_metrics_pg_staged(run: Run, rows: _CopyRows) -> int:
    """The batch's COPY rows into a temporary staging table (one per connection, emptied at every
    commit), moved into the metric table by one INSERT … SELECT … ON CONFLICT DO NOTHING in their
    order. The move deletes what it reads: a batch never sees another's rows, even in one transaction.
    The rows it inserted (RETURNING: a duplicate returns nothing) go into the run's metric rollups."""
    q = connection.ops.quote_name
    columns = ", ".join(q(c) for c in _COPY_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGE} (n bigint GENERATED ALWAYS AS IDENTITY, "
            "run_id bigint, key text, step bigint, value double precision, ts timestamptz, event_id text) "
            "ON COMMIT DELETE ROWS"
        )
        with cursor.copy(f"COPY {_STAGE} ({columns}) FROM STDIN") as copy:
            copy.write(rows.text)
        cursor.execute(
            f"WITH batch AS (DELETE FROM {_STAGE} RETURNING *) "
            f"INSERT INTO {q(MetricPoint._meta.db_table)} ({columns}) "
            f"SELECT {columns} FROM batch ORDER BY n "
            f"ON CONFLICT ({q('run_id')}, {q('event_id')}) DO NOTHING "
            f"RETURNING {q('key')}, {q('step')}, {q('value')}"
        )
        inserted = cursor.fetchall()
    if inserted:
        metric_rollups.record(run.pk, *metric_rollups.columns(inserted))
    return len(inserted)
