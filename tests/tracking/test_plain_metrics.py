"""The plain-metric fast path of `events.parse_events` (msgspec) must be invisible: it may decline a
batch (pydantic then decides), but whatever it accepts the contract accepts too, read to the same
values, and stored as the same rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidEvents
from smrweb.tracking.models import MetricPoint

# Timestamps near every edge of both parsers: forms pydantic reads and fromisoformat does not (and the
# reverse), offsets, fraction lengths, impossible dates, the contract's year bounds.
TRICKY_TS = [
    "2026-01-01T00:00:00Z",
    "2026-01-01 00:00:00",
    "2026-01-01T00:00:00",
    "2026-01-01T00:00:00.5Z",
    "2026-01-01T00:00:00.000000Z",
    "2026-01-01T00:00:00.123456+00:00",
    "2026-01-01T00:00:00.000000+00:00",  # canonical in shape, but a zero fraction is not stored
    "2026-01-01T10:00:00.123456+05:30",  # canonical in shape, not UTC
    "2026-01-01T10:00:00+02:00",
    "2026-01-01T00:00:00.1234567Z",
    "2026-01-01T00:00:00-00:00",
    "2026-01-01T05:30:00+05:30",
    "2026-06-30T23:59:59.999999-11:45",
    "2026-01-01T00:00:00+23:59",
    "2026-01-01T00:00:00+24:00",
    "2026-02-29T00:00:00Z",
    "2024-02-29T12:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-01-01T24:00:00Z",
    "2026-01-01T23:59:60Z",
    "2026-01-01t00:00:00z",
    "2026-01-01T00:00Z",
    "2026-01-01",
    "20260101T000000Z",
    "2026-W01-1",
    "2026-01-01T00:00:00,5Z",
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "1971-01-01T00:00:00+01:00",
    "9998-06-01T00:00:00Z",
    "9999-01-01T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "2026-01-01T00:00:00+0000",
    "2026-01-01T00:00:00+05",
    "２０２６-01-01T00:00:00Z",
    " 2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00Z ",
    "",
    "now",
    "1700000000",
]

texts = st.one_of(
    st.sampled_from(["loss", "k", "é", "a" * 200, "a" * 201, "", "\x00", "tab\tkey"]), st.text(max_size=5)
)
values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(10**30), 10**30),
    st.sampled_from([10**400, -(10**309), 2**1024]),
    st.sampled_from([True, None, "1.5", [1], 1e308]),
)
steps = st.one_of(st.integers(0, 2**62), st.sampled_from([-1, 2**62 + 1, 2**63, 1.0, "3", None, True]))
generated_ts = st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(9999, 12, 31)).flatmap(
    lambda d: st.sampled_from(
        [
            d.isoformat(),
            d.isoformat() + "Z",
            d.isoformat() + "+02:00",
            d.isoformat(" ", "milliseconds") + "-07:30",
            d.isoformat(timespec="seconds"),
        ]
    )
)
timestamps = st.one_of(st.sampled_from(TRICKY_TS), generated_ts, st.none())


@st.composite
def metric_events(draw) -> dict:
    event: dict = {"type": draw(st.sampled_from(["metric"] * 8 + ["score", "Metric"]))}
    for field, strategy in (
        ("id", texts),
        ("key", texts),
        ("value", values),
        ("step", steps),
        ("ts", timestamps),
    ):
        if draw(st.integers(0, 9)):  # each field present most of the time
            event[field] = draw(strategy)
    if draw(st.integers(0, 30)) == 0:
        event[draw(st.sampled_from(["naive_utc", "extra", "score"]))] = draw(st.sampled_from([None, "x", 1]))
    return event


def contract(body: bytes) -> list | None:
    try:
        return ev._parse_contract(body)
    except InvalidEvents:
        return None


def same_event(plain: ev.PlainMetric, model: ev.MetricEvent) -> None:
    assert type(model) is ev.MetricEvent
    assert (plain.id, plain.key, plain.step) == (model.id, model.key, model.step)
    assert plain.value == model.value and type(plain.value) is float
    if model.ts is None:
        assert plain.ts is None and plain.naive_utc is None
    else:
        assert plain.ts == model.ts and plain.ts.utcoffset().total_seconds() == 0
        if plain.naive_utc is not None:  # Django's own storage form of the same instant
            assert plain.naive_utc == str(model.ts.astimezone(UTC).replace(tzinfo=None))


@settings(
    max_examples=1500,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(metric_events(), max_size=6))
def test_the_fast_path_accepts_only_what_the_contract_accepts_and_reads_the_same_values(batch):
    body = json.dumps(batch).encode()
    plain = ev._parse_plain_metrics(body)
    if plain is None:
        return  # declined: the contract decides alone
    expected = contract(body)
    assert expected is not None, f"fast path accepted what the contract refuses: {body!r}"
    assert len(plain) == len(expected)
    for fast, model in zip(plain, expected, strict=True):
        same_event(fast, model)


@pytest.mark.parametrize("ts", TRICKY_TS)
def test_every_tricky_timestamp_is_read_alike_or_declined(ts):
    body = json.dumps([{"type": "metric", "id": "a", "key": "k", "value": 1, "ts": ts}]).encode()
    plain, expected = ev._parse_plain_metrics(body), contract(body)
    if plain is not None:
        assert expected is not None, ts
        same_event(plain[0], expected[0])


def test_a_common_batch_takes_the_fast_path():
    body = json.dumps(
        [
            {
                "type": "metric",
                "id": f"m{i}",
                "key": "loss",
                "value": i / 3,
                "step": i,
                "ts": f"2026-01-01T00:00:{i % 60:02d}.{i:03d}Z",
            }
            for i in range(1000)
        ]
    ).encode()
    events = ev.parse_events(body)
    assert len(events) == 1000 and all(type(e) is ev.PlainMetric for e in events)
    assert events[7].naive_utc == "2026-01-01 00:00:07.007000"


@pytest.mark.parametrize(
    "odd",
    [
        {"id": None},
        {"id": ""},
        {"extra": 1},
        {"naive_utc": "2020-01-01 00:00:00"},
        {"value": 1e400},
        {"ts": "2026-01-01T00:00:00.1234567Z"},
        {"key": "nul\u0000"},
    ],
)
def test_anything_off_the_common_shape_goes_through_the_contract(odd):
    event = {"type": "metric", "id": "a", "key": "k", "value": 1.0, **odd}
    body = json.dumps([event]).encode()
    assert ev._parse_plain_metrics(body) is None
    assert contract(body) is None or type(contract(body)[0]) is ev.MetricEvent


def test_both_paths_store_identical_rows(project):
    """The same points through the fast path (run a) and through the contract (run b): equal rows."""
    batch = [
        {"type": "metric", "id": f"m{i}", "key": f"k{i % 3}", "value": i * 0.25, "step": i, "ts": ts}
        for i, ts in enumerate(
            [
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:00.5Z",
                "2026-01-01 10:00:00.000001",
                "2026-01-01T10:00:00+02:00",
                "2026-03-01T00:00:00.120-00:00",
                None,
            ]
        )
    ]
    body = json.dumps(batch).encode()
    fast = ev.parse_events(body)
    assert all(type(e) is ev.PlainMetric for e in fast)
    services.ingest_events(project, "a", fast)
    services.ingest_events(project, "b", ev._parse_contract(body))

    def rows(run: str) -> list[tuple]:
        return list(
            MetricPoint.objects.filter(run__external_id=run)
            .exclude(event_id="m5")
            .order_by("event_id")
            .values_list("event_id", "key", "step", "value", "ts")
        )

    assert rows("a") == rows("b") and len(rows("a")) == 5
    # Stored instants: range queries on the stored text find exactly the points inside, edges included.
    in_a = MetricPoint.objects.filter(run__external_id="a")
    assert in_a.filter(ts__lt=datetime(2026, 1, 1, 8, tzinfo=UTC)).count() == 2
    assert in_a.filter(ts__lte=datetime(2026, 1, 1, 8, tzinfo=UTC)).count() == 3
    assert in_a.filter(ts=datetime(2026, 1, 1, tzinfo=UTC)).count() == 1  # "…00:00:00", no fraction


def test_a_fast_batch_knows_its_earliest_instant_and_creates_its_run_with_it(project):
    body = json.dumps(
        [
            {"type": "metric", "id": f"m{i}", "key": "k", "value": 1.0, "ts": ts}
            for i, ts in enumerate(
                ["2026-05-01T10:00:00Z", "2026-05-01T12:00:00+05:00", None, "2026-05-01T09:00:00Z"]
            )
        ]
    )
    events = ev.parse_events(body.encode())
    assert type(events) is ev.PlainMetrics
    assert events.earliest == datetime(2026, 5, 1, 7, tzinfo=UTC)  # 12:00+05:00
    run = services.ingest_events(project, "early", events).run
    assert run.started_at == datetime(2026, 5, 1, 7, tzinfo=UTC)
