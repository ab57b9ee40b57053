"""The metric fast path of `services.ingest_events`: one INSERT … ON CONFLICT DO NOTHING per batch.
Exactly-once and the accepted/duplicate counts must be what the ORM path gave, on SQLite and
PostgreSQL alike (the suite runs on whichever DATABASE_URL names)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, MetricPoint, Run

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def ingest(project, run_id: str, *events: dict) -> services.IngestResult:
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events))))


def metric(i: int, **extra) -> dict:
    return {"type": "metric", "id": f"m{i}", "key": f"k{i % 3}", "value": i / 7, "step": i, **extra}


def points(run_id: str = "r1") -> list[tuple]:
    return list(
        MetricPoint.objects.filter(run__external_id=run_id)
        .order_by("event_id")
        .values_list("event_id", "key", "step", "value")
    )


def test_duplicate_ids_inside_one_metric_batch_are_stored_once_and_counted(project):
    result = ingest(project, "r1", metric(1), metric(2), metric(1), metric(1, value=99.0), metric(2))
    assert (result.accepted, result.duplicates) == (2, 3)
    # The first occurrence wins, as on the ORM path.
    assert points() == [("m1", "k1", 1, 1 / 7), ("m2", "k2", 2, 2 / 7)]


def test_a_batch_mixing_new_and_stored_ids_counts_only_the_new_ones(project):
    ingest(project, "r1", *[metric(i) for i in range(10)])
    result = ingest(project, "r1", *[metric(i) for i in range(5, 15)], metric(12))
    assert (result.accepted, result.duplicates) == (5, 6)
    assert [p[0] for p in points()] == sorted(f"m{i}" for i in range(15))


def test_a_large_batch_and_its_replay(project):
    batch = [metric(i) for i in range(ev.MAX_EVENTS)]
    assert (ingest(project, "r1", *batch).accepted, MetricPoint.objects.count()) == (
        ev.MAX_EVENTS,
        ev.MAX_EVENTS,
    )
    again = ingest(project, "r1", *batch)
    assert (again.accepted, again.duplicates) == (0, ev.MAX_EVENTS)
    assert MetricPoint.objects.count() == ev.MAX_EVENTS


def test_metrics_without_id_are_keyed_by_the_same_content_digest_as_before(project):
    bare = {"type": "metric", "key": "loss", "value": 0.5, "step": 3}
    result = ingest(project, "r1", bare, bare, {**bare, "step": 4})
    assert (result.accepted, result.duplicates) == (2, 1)
    expected = ev.parse_events(json.dumps([bare]))[0].idempotency_key()
    assert MetricPoint.objects.filter(event_id=expected).count() == 1
    assert (ingest(project, "r1", bare).duplicates, MetricPoint.objects.count()) == (1, 2)


def test_ids_are_per_run_and_per_event_type(project):
    ingest(project, "r1", metric(1))
    other_run = ingest(project, "r2", metric(1))
    turn_with_same_id = ingest(project, "r1", {"type": "agent.turn", "id": "m1", "turn": 1}, metric(1))
    assert (other_run.accepted, other_run.duplicates) == (1, 0)
    assert (turn_with_same_id.accepted, turn_with_same_id.duplicates) == (1, 1)
    assert AgentTurn.objects.count() == 1 and MetricPoint.objects.count() == 2


def test_timestamps_are_stored_as_given_or_as_the_time_of_arrival(project, time_machine):
    time_machine.move_to(T0 + timedelta(days=1))
    given = T0 + timedelta(minutes=5, microseconds=123456)
    ingest(
        project,
        "r1",
        metric(1, ts=given.isoformat()),
        metric(2, ts=given.isoformat()),
        metric(3),
        metric(4, ts="2024-06-01T14:00:00+02:00"),
    )
    stored = dict(MetricPoint.objects.values_list("event_id", "ts"))
    assert stored["m1"] == stored["m2"] == given
    assert abs(stored["m3"] - (T0 + timedelta(days=1))) < timedelta(seconds=5)
    assert stored["m4"] == T0  # converted to UTC
    run = Run.objects.get(external_id="r1")
    assert run.started_at == T0  # the earliest timestamp of the batch


def test_new_metrics_are_progress_and_replays_are_not(project, time_machine):
    time_machine.move_to(T0)
    ingest(project, "r1", metric(1))
    services.flag_stalled_runs(now=T0 + timedelta(hours=1))
    time_machine.move_to(T0 + timedelta(hours=2))
    ingest(project, "r1", metric(1))  # a replay: still stalled, progress unchanged
    run = Run.objects.get(external_id="r1")
    assert run.stalled_since is not None and run.last_progress_at == T0
    time_machine.move_to(T0 + timedelta(hours=3))
    ingest(project, "r1", metric(1), metric(2))
    run.refresh_from_db()
    assert run.stalled_since is None and run.last_progress_at == T0 + timedelta(hours=3)


def test_a_failure_after_the_metric_insert_rolls_the_metrics_back(project, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(services.ingest, "_insert_turns", explode)
    with pytest.raises(RuntimeError):
        ingest(project, "r1", metric(1), {"type": "agent.turn", "id": "t1", "turn": 1})
    assert not Run.objects.exists() and not MetricPoint.objects.exists()
    assert ingest(project, "r1", metric(1)).accepted == 1  # and the id is free again


@pytest.mark.parametrize(
    "ts, ok",
    [
        ("1970-01-01T00:00:00Z", True),
        ("1970-01-01T00:30:00+01:00", False),  # 1969-12-31 23:30 UTC
        ("1971-01-01T00:30:00+23:59", True),
        ("9997-12-31T23:00:00-23:59", True),
        ("9998-12-31T23:00:00-05:00", False),  # 9999-01-01 04:00 UTC
        ("9999-01-01T00:00:00Z", True),
        ("9999-01-01T00:00:01", False),
    ],
)
def test_timestamp_bounds_are_exact_at_both_ends(ts, ok):
    body = json.dumps([{"type": "metric", "key": "k", "value": 1.0, "ts": ts}])
    if ok:
        [event] = ev.parse_events(body)
        assert event.ts.tzinfo is UTC and ev.TS_MIN <= event.ts <= ev.TS_MAX
    else:
        with pytest.raises(ev.InvalidEvents):
            ev.parse_events(body)


def test_values_and_instants_are_stored_exactly_on_either_backend(project):
    """Extreme doubles, the largest step, keys with quotes and backslashes, and microsecond instants
    in several offsets come back bit for bit (PostgreSQL receives the batch as JSON text)."""
    values = [5e-324, 1.7976931348623157e308, -2.2250738585072014e-308, 0.1 + 0.2, 1 / 3, 123456789.123456789]
    stamps = [
        "2026-01-01T00:00:00.000001Z",
        "2026-06-30T23:59:59.999999+05:45",
        "1971-01-01T00:00:00-11:00",
        "2026-01-01 12:00:00",
        "2026-03-04T05:06:07.5Z",
        "9997-12-31T23:59:59Z",
    ]
    keys = ['quote"d', "back\\slash", "é ünïcode", "tab\tkey", "{brace}", "[1,2]"]
    batch = [
        {"type": "metric", "id": f"x{i}", "key": keys[i], "value": v, "step": 2**62 - i, "ts": stamps[i]}
        for i, v in enumerate(values)
    ]
    assert ingest(project, "r1", *batch).accepted == len(batch)
    expected = ev._parse_contract(json.dumps(batch))  # the contract's own reading of the batch
    stored = {p.event_id: p for p in MetricPoint.objects.filter(run__external_id="r1")}
    for event in expected:
        point = stored[event.id]
        assert (point.key, point.step, point.value, point.ts) == (
            event.key,
            event.step,
            event.value,
            event.ts,
        )
