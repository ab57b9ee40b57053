"""Celery tasks: thin wrappers that load by id and call one service. All are safe to repeat."""

import json
import logging
import uuid

import redis
from celery import shared_task
from django.conf import settings
from kombu.exceptions import OperationalError

from smrweb.sources import sync
from smrweb.sources.base import SourceError
from smrweb.sources.smr import connector_for
from smrweb.tracking import scenarios, services
from smrweb.tracking.models import Project, Run, Scenario

log = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90)
def flag_stalled_runs() -> int:
    """Flag live runs with no progress for their project's stall_after."""
    flagged = services.flag_stalled_runs()
    if flagged:
        log.info("flagged %d stalled run(s): %s", len(flagged), ", ".join(str(r) for r in flagged))
    return len(flagged)


@shared_task(acks_late=True, soft_time_limit=30, time_limit=45)
def poll_due_projects() -> int:
    """Beat's tick: enqueue a sync for every polled project that is due."""
    due = services.claim_due_projects(hold_seconds=settings.SMR_LEASE_SECONDS)
    for project_id in due:
        sync_project.delay(project_id)
    return len(due)


# The hard limit equals the lease: a sync that overruns is killed as its lease lapses, so two workers
# never sync one project at once.
@shared_task(acks_late=True, soft_time_limit=settings.SMR_LEASE_SECONDS * 0.9, time_limit=settings.SMR_LEASE_SECONDS)
def sync_project(project_id: int) -> dict:
    """List one project's runs and bring its live or changed runs up to date."""
    project = Project.objects.select_related("scenario").filter(pk=project_id).first()
    if project is None:
        return {}  # deleted after enqueue
    # When another worker holds the lease (or a killed worker's lease has not expired yet) this
    # returns at once; the holder schedules the next attempt, or beat does once the lease lapses.
    return sync.sync_project(project, owner=uuid.uuid4().hex).__dict__


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90)
def stop_run(run_id: int) -> None:
    """Ask the run's source to stop it, audit the answer, and re-sync the project."""
    run = Run.objects.select_related("project__scenario").filter(pk=run_id).first()
    if run is None or run.is_terminal:
        return
    try:
        connector_for(run.project).stop_run(run.external_id)
    except SourceError as exc:
        services.record_stop_result(run, ok=False, detail=f"{exc.kind}: {exc}")
        return
    services.record_stop_result(run, ok=True, detail="accepted by the source")
    sync_project.delay(run.project_id)


# --- scenario preflight: asked by a page or the API, answered by a worker ----------------------------

PREFLIGHT_TIMEOUT = 10.0


class NoWorkerAnswer(Exception):
    """No worker ran the preflight in time (none running, all busy) or the queue is unreachable."""


@shared_task(acks_late=False, soft_time_limit=30, time_limit=45)
def preflight_scenario(key: str, reply_to: str = "") -> dict | None:
    """Preflight a scenario here, on a worker (its PATH, its interpreters), and push the report onto the
    Redis list `reply_to`: results are ignored app-wide, so the asker waits on a list of its own."""
    scenario = Scenario.objects.filter(key=key).first()
    report = scenarios.preflight(scenario).as_dict() if scenario is not None else None
    if reply_to:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            client.pipeline().rpush(reply_to, json.dumps(report)).expire(reply_to, 60).execute()
    return report


def preflight_on_worker(key: str, *, timeout: float | None = None) -> dict | None:
    """The report of a preflight run by a worker (None: the scenario is gone); NoWorkerAnswer after
    `timeout` seconds (PREFLIGHT_TIMEOUT). The message expires with the wait, so a worker that starts
    later skips it."""
    timeout = timeout or PREFLIGHT_TIMEOUT
    reply_to = f"smrweb:preflight:{uuid.uuid4().hex}"
    try:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            preflight_scenario.apply_async((key, reply_to), expires=timeout)
            answer = client.blpop([reply_to], timeout=timeout)
    except (redis.RedisError, OperationalError) as exc:
        raise NoWorkerAnswer(f"the task queue cannot be reached ({exc})") from exc
    if answer is None:
        raise NoWorkerAnswer(f"no worker answered within {timeout:g} seconds")
    return json.loads(answer[1])
