"""Celery tasks: thin wrappers that load by id and call one service. All are safe to repeat."""

import json
import logging
import time
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


# --- scenario preflight: asked by a page or the API, answered by a worker, read back by polling ---------
# The asker never waits on the worker: it stores a pending request, enqueues the task and answers at once
# (red-team finding 9: ten synchronous preflights held ten web threads for 10 s each).

PREFLIGHT_TIMEOUT = 30.0  # a queued preflight no worker took by then is abandoned (the message expires)
PREFLIGHT_TIME_LIMIT = 45  # the task's hard limit: a taken preflight has answered or died by then
PREFLIGHT_KEEP_SECONDS = 600  # how long a request and its report stay readable


class NoWorkerAnswer(Exception):
    """The task queue cannot be reached, so no worker can be asked."""


def _preflight_key(request_id: str) -> str:
    return f"smrweb:preflight:{request_id}"


def _store(client, request_id: str, state: dict) -> None:
    client.set(_preflight_key(request_id), json.dumps(state), ex=PREFLIGHT_KEEP_SECONDS)


@shared_task(acks_late=False, soft_time_limit=PREFLIGHT_TIME_LIMIT - 15, time_limit=PREFLIGHT_TIME_LIMIT)
def preflight_scenario(key: str, request_id: str = "") -> dict | None:
    """Preflight a scenario here, on a worker (its PATH, its interpreters); with `request_id`, the report
    is stored where the asker polls for it (results are ignored app-wide)."""
    scenario = Scenario.objects.filter(key=key).first()
    if request_id:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            _store(client, request_id, {"scenario": key, "status": "running", "asked": time.time()})
    report = scenarios.preflight(scenario).as_dict() if scenario is not None else None
    if request_id:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            _store(client, request_id, {"scenario": key, "status": "done" if report else "gone", "report": report})
    return report


def request_preflight(key: str) -> str:
    """Queue a preflight of scenario `key`; the id to poll with `preflight_state`."""
    request_id = uuid.uuid4().hex
    try:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            _store(client, request_id, {"scenario": key, "status": "pending", "asked": time.time()})
            preflight_scenario.apply_async((key, request_id), expires=PREFLIGHT_TIMEOUT)
    except (redis.RedisError, OperationalError) as exc:
        raise NoWorkerAnswer(f"the task queue cannot be reached ({exc})") from exc
    return request_id


def preflight_state(key: str, request_id: str) -> dict | None:
    """{"status": pending|running|done|gone|no_worker, "report": …} of a preflight of `key`; None when
    there is no such request (never asked, expired, or asked for another scenario)."""
    if not request_id.isalnum() or len(request_id) != 32:
        return None
    try:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            raw = client.get(_preflight_key(request_id))
    except redis.RedisError as exc:
        raise NoWorkerAnswer(f"the task queue cannot be reached ({exc})") from exc
    state = json.loads(raw) if raw else None
    if state is None or state.get("scenario") != key:
        return None
    waited = time.time() - state.get("asked", 0)
    if (state["status"] == "pending" and waited > PREFLIGHT_TIMEOUT
            or state["status"] == "running" and waited > PREFLIGHT_TIME_LIMIT):
        state["status"] = "no_worker"  # not taken before its message expired, or its worker died
    return state
