"""PostgreSQL's metric ingest: a batch that looks new is COPYed straight into the metric table, anything
else (a replay, an overlap, ids repeated inside the batch, a conflict the COPY meets) goes through the
staging table and INSERT … ON CONFLICT DO NOTHING. Whatever the route, every point is stored once and
the counts say what was new. Runs when DATABASE_URL names PostgreSQL (CI runs the suite on both)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.db import close_old_connections, connection

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import MetricPoint, Run
from smrweb.tracking.services import ingest as ingest_service
from smrweb.tracking.services import metric_copy
from tests.api.helpers import assert_json_error

pytestmark = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="the COPY path is PostgreSQL's (SQLite's insert is covered by test_fast_ingest.py)",
)

# Keys that COPY's text format must escape, in batches that go either way.
KEYS = ["loss", "tab\tkey", "back\\slash", "new\nline", "cr\rkey", "é ünïcode"]


def metric(i: int, value: float | None = None) -> dict:
    return {
        "type": "metric",
        "id": f"m{i}",
        "key": KEYS[i % len(KEYS)],
        "value": i / 7 if value is None else value,
        "step": i,
        "ts": f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z",
    }


def ingest(project, *events: dict, run: str = "r1") -> services.IngestResult:
    return services.ingest_events(project, run, ev.parse_events(json.dumps(list(events))))


def stored(run: str = "r1") -> dict[str, tuple]:
    points = MetricPoint.objects.filter(run__external_id=run)
    return {p[0]: p[1:] for p in points.values_list("event_id", "key", "step", "value")}


@pytest.fixture
def staged(monkeypatch) -> list[int]:
    """How many lines each batch sent through the staging table (a batch COPYed straight in: none)."""
    calls: list[int] = []
    real = metric_copy._insert_metrics_pg_staged

    def spy(run, lines):
        calls.append(len(lines))
        return real(run, lines)

    monkeypatch.setattr(metric_copy, "_insert_metrics_pg_staged", spy)
    return calls


def test_a_new_batch_is_copied_in_and_its_replay_is_all_duplicates(project, staged):
    batch = [metric(i) for i in range(600)]
    first = ingest(project, *batch)
    assert (first.accepted, first.duplicates, staged) == (600, 0, [])  # COPY, no staging
    again = ingest(project, *batch)
    assert (again.accepted, again.duplicates, staged) == (0, 600, [600])  # the replay: staging
    assert MetricPoint.objects.count() == 600
    expected = {e["id"]: (e["key"], e["step"], e["value"]) for e in batch}
    assert stored() == expected  # the escaped keys read back as sent, through either route


def test_a_batch_half_new_half_stored_counts_only_the_new_half_and_keeps_the_first_values(project, staged):
    ingest(project, *[metric(i) for i in range(100)])
    overlap = ingest(project, *[metric(i, value=-1.0) for i in range(50, 150)])
    assert (overlap.accepted, overlap.duplicates) == (50, 50)
    assert staged == [100]  # its first id was stored: straight to staging
    points = stored()
    assert len(points) == 150 and MetricPoint.objects.count() == 150
    assert all(points[f"m{i}"][2] == i / 7 for i in range(100))  # what was stored first stays
    assert all(points[f"m{i}"][2] == -1.0 for i in range(100, 150))


def test_stored_ids_between_a_new_first_and_last_make_the_copy_fall_back_to_staging(project, staged):
    ingest(project, *[metric(i) for i in range(100)])
    # First and last ids new, the middle ones stored: the COPY meets the unique constraint, is undone to
    # its savepoint, and the staging route stores exactly the new ones.
    middle = ingest(project, metric(500), *[metric(i, value=-1.0) for i in range(20, 80)], metric(501))
    assert (middle.accepted, middle.duplicates) == (2, 60)
    assert staged == [62]
    points = stored()
    assert len(points) == 102 and {"m500", "m501"} <= points.keys()
    assert all(points[f"m{i}"][2] == i / 7 for i in range(20, 80))
    assert Run.objects.get(external_id="r1").last_progress_at is not None


def test_a_few_points_are_looked_up_at_once_and_only_the_new_ones_copied(project, staged):
    """A small batch (a polled run's new results, often one re-sent): every id asked for in one
    statement, the new ones COPYed without staging or a savepoint; a re-send writes nothing."""
    ingest(project, *[metric(i) for i in range(10)])
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql.lstrip().split(None, 1)[0].upper())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        mixed = ingest(project, metric(3, value=-1.0), metric(40), metric(8, value=-1.0), metric(41))
    assert (mixed.accepted, mixed.duplicates, staged) == (2, 2, [])
    # The batch's own block (a savepoint inside the test's transaction), the run's row lock, ONE lookup
    # of the four ids, the metric rollups' read of the series' whole rows and one upsert, the run's
    # progress (COPY goes past Django's wrapper), the overview's figures moved by the run's share (its
    # last activity; issue 36: one UPDATE): no staging, no savepoint.
    assert statements == ["SAVEPOINT", "SELECT", "SELECT", "SELECT", "INSERT", "UPDATE", "UPDATE", "RELEASE"]
    again = ingest(project, metric(40), metric(41))
    assert (again.accepted, again.duplicates, staged) == (0, 2, [])
    points = stored()
    assert len(points) == 12 and points["m3"][2] == 3 / 7 and points["m41"][0] == KEYS[41 % len(KEYS)]


def test_ids_repeated_inside_a_batch_are_stored_once_the_first_one_winning(project, staged):
    result = ingest(project, metric(1), metric(2), metric(1, value=9.0), metric(3), metric(2, value=9.0))
    assert (result.accepted, result.duplicates, staged) == (3, 2, [5])
    assert {k: v[2] for k, v in stored().items()} == {"m1": 1 / 7, "m2": 2 / 7, "m3": 3 / 7}


def test_a_refused_batch_writes_nothing(api):
    batch = [metric(i) for i in range(300)]
    batch[200] = {**batch[200], "value": "high"}
    response = api.generic(
        "POST", "/api/v1/projects/hill/runs/r1/events", json.dumps(batch), content_type="application/json"
    )
    body = assert_json_error(response, 400)
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(200, "value")]
    assert not Run.objects.exists() and not MetricPoint.objects.exists()


def test_a_failure_after_the_copy_rolls_the_copied_points_back(project, staged, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ingest_service, "_insert_turns", explode)
    with pytest.raises(RuntimeError):
        ingest(project, *[metric(i) for i in range(300)], {"type": "agent.turn", "id": "t1", "turn": 1})
    assert staged == []  # the metrics were COPYed, then undone with the batch
    assert not Run.objects.exists() and not MetricPoint.objects.exists()
    assert ingest(project, *[metric(i) for i in range(300)]).accepted == 300


@pytest.mark.django_db(transaction=True)
def test_concurrent_overlapping_batches_into_one_run_never_count_a_point_twice(project):
    batches = [[metric(i) for i in range(start, start + 400)] for start in range(0, 1200, 200)]
    results: list[services.IngestResult] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(order: list) -> None:
        try:
            start.wait(timeout=30)
            for batch in order:
                results.append(ingest(project, *batch, run="shared"))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=writer, args=(order,)) for order in (batches, batches[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    unique_ids = {e["id"] for b in batches for e in b}
    assert MetricPoint.objects.filter(run__external_id="shared").count() == len(unique_ids) == 1400
    assert sum(r.accepted for r in results) == len(unique_ids)
    assert sum(r.accepted + r.duplicates for r in results) == 2 * sum(len(b) for b in batches)


def test_copy_rows_are_in_event_id_order_with_the_run_first_and_specials_escaped():
    batch = ev.parse_events(
        json.dumps([metric(3), metric(1), metric(2, value=0.1), {**metric(0), "key": "tab\there"}])
    )
    rows = metric_copy._copy_rows(42, batch, datetime(2026, 1, 1, tzinfo=UTC))
    lines = rows.text.split("\n")
    assert len(rows) == 4 and lines[-1] == "" and len(lines) == 5
    assert [line.split("\t")[0] for line in lines[:-1]] == ["42"] * 4
    assert [line.split("\t")[-1] for line in lines[:-1]] == ["m0", "m1", "m2", "m3"]
    assert lines[0].split("\t")[1] == "tab\\there"  # escaped, so the line keeps its six fields
    assert lines[2].split("\t")[2:5] == ["2", "0.1", "2026-01-01T00:00:02.000002Z"]


def test_metrics_of_a_mixed_batch_without_ids_are_keyed_by_digest_and_stored_once(project, staged):
    batch = [
        {"type": "metric", "key": "loss", "value": 0.5, "step": 1, "ts": "2026-01-01T02:00:00+02:00"},
        {"type": "metric", "key": "loss", "value": 0.25, "step": 2},
        {"type": "state", "id": "s1", "state": "running"},
    ]
    first = ingest(project, *batch)
    assert (first.accepted, first.duplicates, staged) == (3, 0, [])
    again = ingest(project, *batch)
    assert (again.accepted, again.duplicates) == (0, 3)
    points = MetricPoint.objects.order_by("step")
    assert [(p.step, p.value) for p in points] == [(1, 0.5), (2, 0.25)]
    assert points[0].ts == datetime(2026, 1, 1, tzinfo=UTC)  # the offset read, stored as the instant
    assert all(p.event_id and p.event_id != "None" for p in points)
