"""The suite's own guard against tasks outliving their test: after `drain_worker`, the session's worker
runs nothing a test queued, including what it holds outside the queue (a task waiting for its countdown,
or prefetched behind a running one). On PostgreSQL such a task, run during the flush after the test,
deadlocked the flush and failed the next test's setup (CI, 2026-12-04)."""

from __future__ import annotations

import time

import pytest

from smrweb import tasks
from tests.conftest import WORKER_NAME, drain_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_tasks_the_worker_holds_for_a_countdown_are_not_run_after_a_drain(
    celery_worker, redis_server, celery_queue
):
    from smrweb.celery import app

    _, log = celery_worker
    # Project 0 does not exist: each call reads the database and does nothing, and the log says it ran.
    held = [tasks.catch_up_verifications.apply_async((0, 1), countdown=3).id for _ in range(3)]
    inspect = app.control.inspect(destination=[WORKER_NAME], timeout=1.0)

    def scheduled() -> set[str]:
        return {t["request"]["id"] for t in ((inspect.scheduled() or {}).get(WORKER_NAME) or [])}

    wait_for(lambda: set(held) <= scheduled(), timeout=20)  # fetched: no longer in the queue
    assert redis_server.llen(f"{celery_queue}.verification") == 0

    drain_worker(redis_server, celery_queue)
    time.sleep(4)  # past the countdown

    lines = log.read_text().splitlines()
    for task_id in held:
        about = [line for line in lines if task_id in line]
        assert any("revoked" in line for line in about), about
        assert not any("succeeded" in line or "raised" in line for line in about), about
