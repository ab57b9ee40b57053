"""The retention policy (services.retention, beat's apply_retention, `manage.py retention`): a dry run
removes nothing and names exactly what a real run then removes; downsampling keeps first, last and the
extremes and marks the series; archived runs go M days after archiving."""

from __future__ import annotations

import io
import json
import random
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from smrweb import tasks
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Artifact, AuditEvent, MetricPoint, Run
from smrweb.tracking.services.retention import keep_points
from tests.tracking.retention_helpers import T0, finished_run, ingest, metrics, upload

pytestmark = pytest.mark.django_db

YEAR_LATER = T0 + timedelta(days=365)


def series(run, key="loss") -> list[tuple[int, float]]:
    return list(MetricPoint.objects.filter(run=run, key=key).order_by("step").values_list("step", "value"))


@pytest.fixture
def policy(project):
    project.retention_metric_days = 30
    project.retention_keep_points = 50
    project.retention_archived_run_days = 10
    project.save()
    return project


def test_keep_points_keeps_first_last_and_extremes_within_the_budget():
    rng = random.Random(7)
    points = [(i, rng.gauss(0, 1), i) for i in range(5000)]
    points[1234] = (1234, 99.0, 1234)
    points[4321] = (4321, -99.0, 4321)
    kept = keep_points(points, 100)
    assert len(kept) <= 100
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert points[1234] in kept and points[4321] in kept
    assert kept == sorted(kept)
    assert keep_points(points[:40], 100) == points[:40]  # short series are kept whole


def test_the_dry_run_names_exactly_what_the_real_run_removes(policy, alice):
    old = finished_run(policy, "old", points=400)
    ingest(policy, "old", metrics("acc", [i / 300 for i in range(300)]))
    finished_run(policy, "short", points=20)  # under the budget: untouched
    recent = finished_run(policy, "recent", points=400, done_at=60 * 24 * 360)  # finished 5 days before
    gone = finished_run(policy, "gone", points=10)
    upload(policy, "gone", b"archived bytes")
    services.archive_run(gone, by=alice)
    Run.objects.filter(pk=gone.pk).update(archived_at=T0)
    before = MetricPoint.objects.count()

    dry = services.apply_retention(policy, now=YEAR_LATER, dry_run=True)
    assert MetricPoint.objects.count() == before and Run.objects.filter(pk=gone.pk).exists()
    assert {(c.run, c.key) for c in dry.series} == {("old", "loss"), ("old", "acc")}
    assert dry.runs_deleted == ["gone"]
    assert dry.deleted.metric_points == 10 and dry.deleted.bytes_freed == len(b"archived bytes")

    real = services.apply_retention(policy, now=YEAR_LATER)
    assert real.as_dict() == {**dry.as_dict(), "dry_run": False}
    assert real.series == dry.series
    assert before - MetricPoint.objects.count() == dry.points_removed + dry.deleted.metric_points
    assert not Run.objects.filter(pk=gone.pk).exists() and not Artifact.objects.exists()
    assert len(series(recent)) == 400  # finished too recently
    old.refresh_from_db()
    assert set(old.metrics_downsampled) == {"loss", "acc"}
    assert old.metrics_downsampled["loss"]["of"] == 400
    assert old.metrics_downsampled["loss"]["kept"] == len(series(old)) <= 50
    applied = AuditEvent.objects.get(verb="retention.applied")
    assert applied.detail["metric_points_removed"] == dry.points_removed
    assert AuditEvent.objects.get(verb="run.deleted").detail["reason"].startswith("retention")

    # Applying again finds nothing: the cut series are within the budget now.
    again = services.apply_retention(policy, now=YEAR_LATER, dry_run=True)
    assert not again.removes_anything


def test_the_downsampled_copy_keeps_the_series_shape(policy):
    values = [abs(((i * 7919) % 1000) / 1000) for i in range(400)]
    values[200] = 50.0  # a spike
    events = [
        {"type": "metric", "id": f"m{i}", "key": "loss", "value": v, "step": i} for i, v in enumerate(values)
    ]
    events.append({"type": "state", "id": "end", "state": "done", "ts": T0.isoformat()})
    ingest(policy, "spiky", events)
    run = Run.objects.get(external_id="spiky")
    services.apply_retention(policy, now=YEAR_LATER)
    kept = series(run)
    assert kept[0] == (0, values[0]) and kept[-1] == (399, values[399])
    assert (200, 50.0) in kept and min(v for _, v in kept) == min(values)


def test_archived_runs_go_m_days_after_archiving(policy, alice, time_machine):
    time_machine.move_to(T0 + timedelta(days=1))
    run = finished_run(policy, "arch", points=3)
    services.archive_run(run, by=alice)
    time_machine.move_to(T0 + timedelta(days=10))  # 9 days after archiving
    assert services.apply_retention(policy).runs_deleted == []
    time_machine.move_to(T0 + timedelta(days=11, hours=1))
    assert services.apply_retention(policy).runs_deleted == ["arch"]
    assert not Run.objects.filter(external_id="arch").exists()


def test_empty_settings_keep_everything(project, alice):
    project.retention_metric_days = None
    project.save()
    run = finished_run(project, "old", points=2000)
    services.archive_run(run, by=alice)
    report = services.apply_retention(project, now=T0 + timedelta(days=3650))
    assert not report.removes_anything and len(series(run)) == 2000


def test_settings_that_do_not_read_are_refused():
    services.check_retention(90, 1000, None)
    with pytest.raises(InvalidInput) as err:
        services.check_retention(0, 1000, None)
    assert err.value.field == "retention_metric_days"
    with pytest.raises(InvalidInput) as err:
        services.check_retention(None, 5, None)
    assert err.value.field == "retention_keep_points"


def test_the_command_and_the_beat_task(policy, time_machine):
    time_machine.move_to(T0)
    finished_run(policy, "old", points=200)
    time_machine.move_to(YEAR_LATER)
    out = io.StringIO()
    call_command("retention", "--dry-run", "--json", stdout=out)
    dry = json.loads(out.getvalue().splitlines()[0])
    assert dry["dry_run"] and dry["series_downsampled"] == 1 and dry["metric_points_removed"] > 0
    assert MetricPoint.objects.count() == 200
    totals = tasks.apply_retention()
    assert totals["metric_points_removed"] == dry["metric_points_removed"]
    assert MetricPoint.objects.count() == 200 - dry["metric_points_removed"]
    out = io.StringIO()
    call_command("retention", "--project", "hill", stdout=out)
    assert "removed 0 metric point(s)" in out.getvalue()
    assert timezone.now() >= YEAR_LATER
