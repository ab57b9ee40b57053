"""Celery lanes (smrweb/celery.py): polls, people's actions, alerts and verifications travel in queues of
their own, so a burst of syncs cannot hold up a rollback or a stop. Checked on the real Redis broker and with
a real worker that takes only the actions lane."""

from __future__ import annotations

import sys
import uuid

import pytest

from smrweb import tasks
from smrweb.celery import LANE_OF, LANES, app, lane_queue
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Run
from tests.conftest import _start, _stop, _wait_for_line, queue_and_lanes, wait_for


def test_every_smrweb_task_has_a_lane():
    app.loader.import_default_modules()
    registered = {name for name in app.tasks if name.startswith("smrweb.")}
    assert registered == set(LANE_OF), "give a new task a lane in smrweb/celery.py LANES"
    assert set(LANES) == {"polling", "actions", "alerts", "verification", "summaries"}


@pytest.fixture
def own_queue(redis_server):
    """A default queue of this test's own (its lanes are derived from it), removed afterwards."""
    queue, before = f"smrweb-lanes-{uuid.uuid4().hex[:8]}", app.conf.task_default_queue
    app.conf.task_default_queue = queue
    yield queue
    app.conf.task_default_queue = before
    redis_server.delete(*queue_and_lanes(queue))


def test_each_task_is_sent_to_its_lane_on_the_broker(own_queue, redis_server):
    tasks.sync_project.delay(10**9)
    tasks.sync_project.delay(10**9 + 1)
    tasks.dispatch_rollback.delay(10**9)
    tasks.verify_submission.delay(10**9)
    assert redis_server.llen(lane_queue("polling")) == 2
    assert redis_server.llen(lane_queue("actions")) == 1
    assert redis_server.llen(lane_queue("verification")) == 1
    assert redis_server.llen(own_queue) == 0


@pytest.mark.integration
def test_a_stop_is_taken_while_a_burst_of_syncs_waits_in_its_own_lane(
    transactional_db, project, own_queue, redis_server, tmp_path
):
    services.ingest_events(project, "r1", parse_events('[{"type": "state", "state": "running"}]'))
    run = Run.objects.get()
    for _ in range(200):
        tasks.sync_project.delay(project.pk)  # a poller's backlog
    tasks.stop_run.delay(run.pk)
    log = tmp_path / "worker.log"
    worker = _start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "smrweb",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"{own_queue}@localhost",
            "-Q",
            lane_queue("actions"),
        ],
        log,
        {"SMRWEB_CELERY_QUEUE": own_queue},
    )
    try:
        _wait_for_line(worker, log, "ready.")
        # A push project cannot be stopped by its source: the answer is recorded all the same.
        stopped = wait_for(
            lambda: (
                AuditEvent.objects.filter(verb__startswith="run.stop", object_id=str(run.pk))
                .exclude(verb="run.stop_requested")
                .first()
            )
        )
        assert stopped.verb == "run.stop_failed"
        assert redis_server.llen(lane_queue("polling")) == 200  # not one sync ran before it
    finally:
        _stop(worker)
