"""The stalled-run task, executed by a real Celery worker (and sent by real beat) over a real Redis."""

from datetime import timedelta

import pytest
from django.utils import timezone

from smrweb.tasks import flag_stalled_runs
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Run
from tests.conftest import wait_for

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
