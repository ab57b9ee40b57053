"""The stalled-run task, executed by a real Celery worker (and sent by real beat) over a real Redis."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from smrweb.celery import LANE_OF, app
from smrweb.tasks import apply_retention, flag_stalled_runs
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, MetricPoint, Run
from tests.conftest import wait_for
from tests.tracking.retention_helpers import finished_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _run_with_progress(project, external_id: str, ago: timedelta) -> Run:
    services.ingest_events(
        project, external_id, parse_events(b'[{"type": "metric", "key": "loss", "value": 1}]')
    )
    Run.objects.filter(project=project, external_id=external_id).update(last_progress_at=timezone.now() - ago)
    return Run.objects.get(project=project, external_id=external_id)


def test_worker_flags_a_silent_run_stalled_and_leaves_fresh_and_finished_runs_alone(project, celery_worker):
    project.stall_after = timedelta(minutes=5)
    project.save()
    silent = _run_with_progress(project, "silent", timedelta(minutes=6))
    fresh = _run_with_progress(project, "fresh", timedelta(minutes=1))
    finished = _run_with_progress(project, "finished", timedelta(minutes=30))
    services.ingest_events(project, "finished", parse_events(b'[{"type": "state", "state": "done"}]'))
    Run.objects.filter(pk=finished.pk).update(last_progress_at=timezone.now() - timedelta(minutes=30))

    flag_stalled_runs.delay()

    wait_for(lambda: Run.objects.get(pk=silent.pk).stalled_since is not None)
    assert Run.objects.get(pk=fresh.pk).stalled_since is None
    assert Run.objects.get(pk=finished.pk).stalled_since is None
    assert AuditEvent.objects.filter(verb="run.stalled", object_id=str(silent.pk)).count() == 1


def test_new_events_clear_the_stalled_flag(project, celery_worker):
    project.stall_after = timedelta(seconds=30)
    project.save()
    run = _run_with_progress(project, "r1", timedelta(minutes=2))
    flag_stalled_runs.delay()
    wait_for(lambda: Run.objects.get(pk=run.pk).is_stalled)

    services.ingest_events(project, "r1", parse_events(b'[{"type": "metric", "key": "loss", "value": 0.5}]'))

    assert not Run.objects.get(pk=run.pk).is_stalled


def test_beat_schedules_the_check_without_anyone_calling_it(project, celery_beat_process):
    project.stall_after = timedelta(seconds=1)
    project.save()
    run = _run_with_progress(project, "quiet", timedelta(seconds=5))

    wait_for(lambda: Run.objects.get(pk=run.pk).stalled_since is not None, timeout=40)
    _, log = celery_beat_process
    assert "Sending due task flag-stalled-runs" in log.read_text()


def test_retention_runs_under_its_name_and_under_its_old_one(project, celery_worker):
    """`apply_retention` has a real name now; a beat entry or a queued message sent by an older release
    under `smrweb.tracking.tasks.apply_retention` still runs it (an alias of the same function)."""
    project.retention_metric_days = 30  # the points below were logged on 2026-01-01: older than that
    project.retention_keep_points = 50
    project.save()

    def points(run_id: str) -> int:
        return MetricPoint.objects.filter(run__external_id=run_id).count()

    finished_run(project, "queued-before", points=200)
    app.send_task("smrweb.tracking.tasks.apply_retention")  # by name, as an old beat sends it
    wait_for(lambda: points("queued-before") < 200)

    finished_run(project, "queued-now", points=200)
    apply_retention.delay()
    wait_for(lambda: points("queued-now") < 200)
    assert apply_retention.name == "smrweb.tasks.apply_retention"
    assert settings.CELERY_BEAT_SCHEDULE["apply-retention"]["task"] == apply_retention.name
    assert LANE_OF[apply_retention.name] == LANE_OF["smrweb.tracking.tasks.apply_retention"] == "actions"
