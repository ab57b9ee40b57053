"""Metric rollups (issue 36, item 3): kept at ingest, they equal the aggregates of the raw points after
random batches, retries, out-of-order steps, retention, deletion and restore (SQLite here, PostgreSQL
with DATABASE_URL, its COPY paths included); a long series' chart reads them, not the points."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from importlib import import_module

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import Max, Min
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import backup, queries, services
from smrweb.tracking import events as ev
from smrweb.tracking.models import MetricPoint, MetricRollup, Run
from smrweb.tracking.queries.runs import _series_from_points
from tests.tracking.retention_helpers import T0, finished_run

pytestmark = pytest.mark.django_db


def raw_rollups(run: Run) -> dict[tuple[str, int, int], tuple]:
    """What the rollups should hold, from the points (in stored order: step, then id): the whole series
    (width 0) and each width it spans more than one bucket of (the wider ones would repeat width 0)."""
    out: dict[tuple[str, int, int], list] = {}
    rows = (
        MetricPoint.objects.filter(run=run).order_by("key", "step", "id").values_list("key", "step", "value")
    )
    spans = {
        key: (lo, hi)
        for key, lo, hi in MetricPoint.objects.filter(run=run)
        .values("key")
        .annotate(lo=Min("step"), hi=Max("step"))
        .values_list("key", "lo", "hi")
    }
    for key, step, value in rows:
        lo, hi = spans[key]
        for width in (0, *(w for w in MetricRollup.WIDTHS if lo // w != hi // w)):
            cell = (key, width, step // width if width else 0)
            if cell not in out:
                out[cell] = [0, 0.0, value, value, step, step, value]
            agg = out[cell]
            agg[0] += 1
            agg[1] += value
            agg[2], agg[3] = min(agg[2], value), max(agg[3], value)
            agg[5], agg[6] = step, value  # (ordered by step, then id: the last stored of a step last)
    return {cell: tuple(agg) for cell, agg in out.items()}


def kept_rollups(run: Run) -> dict[tuple[str, int, int], tuple]:
    rows = MetricRollup.objects.filter(run=run).values_list(
        "key", "width", "bucket", "n", "total", "low", "high", "first_step", "last_step", "last_value"
    )
    return {(k, w, b): tuple(rest) for k, w, b, *rest in rows}


def assert_rollups_match(run: Run) -> None:
    want, got = raw_rollups(run), kept_rollups(run)
    assert got.keys() == want.keys()
    for cell, (n, total, low, high, first, last_step, last_value) in want.items():
        g = got[cell]
        assert (g[0], g[2], g[3], g[4], g[5], g[6]) == (n, low, high, first, last_step, last_value), cell
        assert g[1] == pytest.approx(total, rel=1e-9, abs=1e-6), cell


def send(project, run_id: str, events: list[dict]) -> services.IngestResult:
    """Through the API's parser: plain metric batches take the fast path (PlainMetrics)."""
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(events)))


def point(i: int, key: str, step: int, value: float, *, with_id: bool = True) -> dict:
    event = {"type": "metric", "key": key, "step": step, "value": value}
    if with_id:
        event["id"] = f"p{i}"
    return event


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rollups_equal_the_raw_aggregates_after_random_batches_and_retries(project, seed):
    rng = random.Random(seed)
    sent: list[list[dict]] = []
    accepted = 0
    for i in range(40):
        roll = rng.random()
        if sent and roll < 0.2:  # a retry: the same batch again (ids the run has: all duplicates)
            batch = rng.choice(sent)
        elif sent and roll < 0.35:  # the tail of an earlier batch and new points (some stored, some not)
            old = rng.choice(sent)
            batch = old[len(old) // 2 :] + [
                point(10_000 * i + j, rng.choice("abc"), rng.randrange(5000), rng.uniform(-5, 5))
                for j in range(60)
            ]
        else:
            size = rng.choice([1, 7, 49, 51, 300])  # PostgreSQL: below and above metric_copy's small batch
            batch = [
                point(
                    10_000 * i + j,
                    rng.choice(["a", "b", "c"]),
                    # out of order, repeated steps, and now and then one near the contract's largest
                    2**62 - rng.randrange(3) if rng.random() < 0.01 else rng.randrange(5000),
                    rng.choice([rng.uniform(-1e3, 1e3), float(rng.randrange(-3, 3))]),
                    with_id=rng.random() > 0.1,  # no id: the content digest is the key
                )
                for j in range(size)
            ]
            if size > 1 and rng.random() < 0.3:
                batch.append(batch[0])  # an id repeated inside the batch: the first wins
        accepted += send(project, "r1", batch).accepted
        sent.append(batch)
    run = Run.objects.get(external_id="r1")
    assert MetricPoint.objects.filter(run=run).count() == accepted
    assert_rollups_match(run)


def test_a_replayed_batch_counts_nothing_twice(project):
    batch = [point(i, "loss", i, float(i)) for i in range(500)]
    assert send(project, "r1", batch).accepted == 500
    assert send(project, "r1", batch).accepted == 0
    run = Run.objects.get(external_id="r1")
    assert MetricRollup.objects.get(run=run, key="loss", width=0).n == 500
    assert_rollups_match(run)


def test_out_of_order_batches_merge_into_the_same_buckets(project):
    steps = list(range(2000))
    random.Random(5).shuffle(steps)
    for start in range(0, 2000, 250):
        send(project, "r1", [point(s, "x", s, (s * 37) % 101 - 50.0) for s in steps[start : start + 250]])
    run = Run.objects.get(external_id="r1")
    assert_rollups_match(run)
    whole = MetricRollup.objects.get(run=run, key="x", width=0)
    assert (whole.n, whole.first_step, whole.last_step, whole.last_value) == (
        2000,
        0,
        1999,
        (1999 * 37) % 101 - 50.0,
    )


def test_retention_downsampling_rebuilds_the_rollups(project):
    project.retention_metric_days = 30
    project.retention_keep_points = 50
    project.save()
    run = finished_run(project, "old", points=3000)
    assert MetricRollup.objects.get(run=run, key="loss", width=0).n == 3000
    services.apply_retention(project, now=T0 + timedelta(days=365))
    assert 0 < MetricPoint.objects.filter(run=run).count() <= 50
    assert_rollups_match(run)


def test_deleting_points_rebuilds_the_rollups_of_their_series(project):
    send(project, "r1", [point(i, "a" if i % 3 else "b", i, float(i % 17)) for i in range(3000)])
    run = Run.objects.get(external_id="r1")
    services.delete_event_rows(MetricPoint.objects.filter(run=run, key="a", step__gte=1000, step__lt=2500))
    assert_rollups_match(run)
    services.delete_event_rows(MetricPoint.objects.filter(run=run, key="b"))
    assert not MetricRollup.objects.filter(run=run, key="b").exists()
    assert_rollups_match(run)


def test_deleting_a_run_takes_its_rollups(project, alice):
    run = finished_run(project, "gone", points=200)
    assert MetricRollup.objects.filter(run=run).exists()
    services.delete_run(run, by=alice, confirm="gone")
    assert not MetricRollup.objects.filter(run_id=run.pk).exists()


def test_a_restored_project_has_the_rollups_of_its_points(project, tmp_path):
    send(project, "r1", [point(i, "loss", (i * 7) % 1000, float(i)) for i in range(1500)])
    backup.export_project(project, tmp_path / "p.zip")
    copy = backup.import_project(tmp_path / "p.zip", slug="copy", trust=True).project
    run = Run.objects.get(project=copy, external_id="r1")
    assert MetricRollup.objects.filter(run=run).exists()
    assert_rollups_match(run)


def test_the_backfill_migration_builds_the_rollups_of_existing_points(project):
    send(project, "r1", [point(i, k, i, float(i)) for i in range(700) for k in ("a", "b")])
    run = Run.objects.get(external_id="r1")
    MetricRollup.objects.all().delete()  # as before the migration
    import_module("smrweb.tracking.migrations.0028_metric_rollups_backfill").build_rollups(apps, None)
    assert_rollups_match(run)


def test_a_huge_sum_is_not_kept_and_the_chart_reads_the_points(project):
    values = [1.7e308 if i % 2 else -1.0e308 for i in range(3000)]
    send(project, "r1", [point(i, "big", i, v) for i, v in enumerate(values)])
    run = Run.objects.get(external_id="r1")
    assert MetricRollup.objects.filter(run=run, key="big", width=16 * 4**3, total__isnull=True).exists()
    total, series = queries.metric_series(run, "big", 50)
    assert (total, series) == _series_from_points(run, "big", 50)
    assert all(abs(p.value) < 1.8e308 for p in series)


# --- the chart reads the rollups ---------------------------------------------------------------------


def long_series(project, n: int) -> Run:
    rng = random.Random(9)
    for start in range(0, n, ev.MAX_EVENTS):
        send(
            project,
            "r1",
            [point(i, "loss", i, rng.gauss(0, 1)) for i in range(start, min(n, start + ev.MAX_EVENTS))],
        )
    return Run.objects.get(external_id="r1")


def test_a_long_series_is_read_from_the_rollups_not_the_points(project):
    run = long_series(project, 20_000)
    with CaptureQueriesContext(connection) as ctx:
        total, series = queries.metric_series(run, "loss", 1000)
    sql = " ".join(q["sql"] for q in ctx.captured_queries)
    assert len(ctx.captured_queries) == 2
    assert MetricRollup._meta.db_table in sql and MetricPoint._meta.db_table not in sql
    assert total == 20_000 and 250 <= len(series) <= 1000 and sum(p.count for p in series) == total


def test_the_rollup_chart_is_equivalent_to_the_one_from_the_points(project):
    run = long_series(project, 20_000)
    send(project, "r1", [point(99_999, "loss", 7_777, 1e6), point(99_998, "loss", 15_000, -1e6)])  # spikes
    total, series = queries.metric_series(run, "loss", 1000)
    exact_total, exact = _series_from_points(run, "loss", 1000)
    assert total == exact_total == 20_002
    assert len(series) <= 1000 and sum(p.count for p in series) == total
    assert max(p.max for p in series) == 1e6 and min(p.min for p in series) == -1e6  # a spike stays
    assert series[0].step == exact[0].step == 0
    # Each bucket is the points from its step to the next bucket's: its count, extremes and mean.
    ends = [p.step for p in series[1:]] + [20_000]
    for p, end in zip(series, ends, strict=True):
        inside = MetricPoint.objects.filter(run=run, step__gte=p.step, step__lt=end).values_list(
            "value", flat=True
        )
        inside = list(inside)
        assert p.count == len(inside)
        assert (p.min, p.max) == (min(inside), max(inside))
        assert p.value == pytest.approx(sum(inside) / len(inside), rel=1e-9, abs=1e-9)


def test_a_short_series_is_every_point_as_before(project):
    send(project, "r1", [point(i, "loss", 100 - i, float(i)) for i in range(30)])
    run = Run.objects.get(external_id="r1")
    assert queries.metric_series(run, "loss", 30) == _series_from_points(run, "loss", 30)


def test_chart_buckets_per_width_stay_within_four_times_the_budget():
    # The chosen width is the widest within a chart bucket's span: fewer than 4 buckets of it per chart
    # bucket, whatever the span.
    widths = MetricRollup.WIDTHS
    for span in (16, 1000, 10**6, 10**9, 2**62):
        for budget in (2, 1000, 10_000):
            per_bucket = -(-span // budget)
            if per_bucket < widths[0]:
                continue
            width = max(w for w in widths if w <= per_bucket)
            assert span // width + 1 <= 4 * budget + 1
