"""Celery tasks: thin wrappers that load by id and call one service. All are safe to repeat.

Every task of smrweb lives here, above both `sources/` (ways in) and `outbound/` (ways out): the tasks
chain each other across the two (a sync queues an alert evaluation, the stale-action sweep re-queues
dispatches and deliveries), so splitting them between the packages would close a circle (review
2026-11-28 section 6). Names are pinned, not derived from this module's path: queued messages and beat
entries under `smrweb.sources.tasks.*` and `smrweb.tracking.tasks.*` keep resolving (celery.py LANES).
"""

import json
import logging
import time
import uuid
from datetime import timedelta

import redis
from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError

from smrweb.core import cachekeys, sandbox
from smrweb.core.queue import queue_quietly
from smrweb.outbound import alerts, dispatch
from smrweb.sources import preflight, summaries, sync, verification
from smrweb.sources.base import SourceError
from smrweb.sources.smr import connector_for
from smrweb.tracking import services
from smrweb.tracking.models import (
    OPEN_DISPATCH,
    DispatchStatus,
    Project,
    Rollback,
    RollbackStatus,
    Run,
    RunControl,
    RunLaunch,
    Scenario,
    SourceKind,
    Submission,
    SubmissionStatus,
)
from smrweb.tracking.services import capabilities, launches, submissions
from smrweb.tracking.services.alerts import delivery as alert_delivery
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from smrweb.tracking.services.capabilities import Action

log = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90, name="smrweb.sources.tasks.flag_stalled_runs")
def flag_stalled_runs() -> int:
    """Flag live runs with no progress for their project's stall_after, and end launches whose run never
    reported."""
    flagged = services.flag_stalled_runs()
    if flagged:
        log.info("flagged %d stalled run(s): %s", len(flagged), ", ".join(str(r) for r in flagged))
    for launch in launches.expire_unseen():
        log.warning("launch %s: no run %s reported; ended failed", launch.pk, launch.external_run_id)
    return len(flagged)


@shared_task(acks_late=True, soft_time_limit=30, time_limit=45, name="smrweb.sources.tasks.poll_due_projects")
def poll_due_projects() -> int:
    """Beat's tick: enqueue a sync for every polled project that is due."""
    due = services.claim_due_projects(hold_seconds=settings.SMRWEB_SMR_LEASE_SECONDS)
    for project_id in due:
        sync_project.delay(project_id)
    return len(due)


# The hard limit equals the lease: a sync that overruns is killed as its lease lapses, so two workers
# never sync one project at once.
@shared_task(
    acks_late=True,
    soft_time_limit=settings.SMRWEB_SMR_LEASE_SECONDS * 0.9,
    time_limit=settings.SMRWEB_SMR_LEASE_SECONDS,
    name="smrweb.sources.tasks.sync_project",
)
def sync_project(project_id: int) -> dict:
    """List one project's runs and bring its live or changed runs up to date."""
    project = Project.objects.select_related("scenario").filter(pk=project_id).first()
    if project is None:
        return {}  # deleted after enqueue
    # When another worker holds the lease (or a killed worker's lease has not expired yet) this
    # returns at once; the holder schedules the next attempt, or beat does once the lease lapses.
    fan_out = _fan_out if project.source == SourceKind.SMR else None
    return sync.sync_project(project, owner=uuid.uuid4().hex, fan_out=fan_out).__dict__


def _fan_out(project: Project, snapshots: list, owner: str) -> None:
    """The project's runs to sync this cycle, as per-run sync tasks (a few runs each) that any polling
    worker takes: N workers share one large project. A message no worker took within a few cycles is
    dropped (later cycles sent its runs again), so a backlog cannot grow without bound."""
    size = max(1, settings.SMRWEB_SMR_RUNS_PER_TASK)
    # A message that waited longer than its runs' leases syncs those the next cycles did not queue
    # again (the others' leases have new owners: skipped); after a few cycles it is dropped.
    expires = max(60.0, 6 * settings.SMRWEB_SMR_ACTIVE_INTERVAL)
    for start in range(0, len(snapshots), size):
        rows = [s.raw for s in snapshots[start : start + size]]
        sync_runs.apply_async((project.pk, rows, owner), expires=expires)


@shared_task(acks_late=True, soft_time_limit=300, time_limit=360, name="smrweb.sources.tasks.sync_runs")
def sync_runs(project_id: int, rows: list[dict], owner: str = "") -> dict:
    """Sync some runs of one project (their rows as the project's task listed them), each under the
    lease that task took for them (`owner`): a run another worker is syncing is left to it."""
    project = Project.objects.select_related("scenario").filter(pk=project_id).first()
    if project is None or project.archived_at is not None:
        return {}
    report = sync.SyncReport(listed=len(rows))
    try:
        connector = connector_for(project)
        snapshots = [connector._snapshot(row) for row in rows]
    except SourceError as exc:  # no key or address any more: the project's own task reports it
        report.error = f"{exc.kind}: {exc}"
        return report.__dict__
    errors = sync.sync_runs(
        project, snapshots, connector=connector, owner=owner or uuid.uuid4().hex, report=report
    )
    if errors:
        report.error = f"{errors[0].kind}: {errors[0]}"
    return report.__dict__


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90, name="smrweb.sources.tasks.stop_run")
def stop_run(run_id: int, reason: str = "") -> None:
    """Ask the run's source to stop it, audit the answer, and re-sync the project. `reason` goes to a
    push project's harness with the signed stop (the budget guard says why; a person's stop is audited)."""
    run = Run.objects.select_related("project__scenario").filter(pk=run_id).first()
    if run is None or run.is_terminal:
        return
    if refusal := capabilities.refusal(run.project, Action.STOP, run=run):  # the one table of what can stop
        services.record_stop_result(run, ok=False, detail=f"not sent: {refusal}")
        return
    if run.project.source == SourceKind.PUSH:  # a signed webhook to the harness
        outcome = dispatch.stop_push_run(run, reason=reason or "a reviewer asked smrweb to stop the run")
        services.record_stop_result(run, ok=outcome.startswith("the webhook accepted"), detail=outcome)
        return
    try:
        connector_for(run.project).stop_run(run.external_id)
    except SourceError as exc:
        services.record_stop_result(run, ok=False, detail=f"{exc.kind}: {exc}")
        return
    services.record_stop_result(run, ok=True, detail="accepted by the source")
    sync_project.delay(run.project_id)


# --- alerts: evaluated after the write path's commits, delivered with retries -----------------------


def queue_alert_evaluation(sender, kind: str, object_id: int, **kwargs) -> None:
    """Receiver of `tracking.signals.alerts_due`. A burst of changes to one subject (a sync's batches)
    queues one evaluation: the key is cleared when the evaluation starts, so a change after that
    queues another, and none is lost. Without the cache, every change queues one."""
    key = cachekeys.alerts_due(kind, object_id)
    try:
        first = cache.add(key, 1, timeout=60)
    except Exception:  # noqa: BLE001 (a cache that is down must not cost an alert)
        first = True
    if first and not queue_quietly(evaluate_alerts, kind, object_id, wait_for_broker=False):
        try:
            cache.delete(key)  # not queued: the next change (or the sweep) queues it
        except Exception:  # noqa: BLE001
            pass


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90, name="smrweb.sources.tasks.sweep_alerts")
def sweep_alerts() -> int:
    """Beat: queue an evaluation for what changed since the last sweep in projects with rules, so a
    change whose evaluation could not be queued (the broker was down) still notifies, late."""
    now = timezone.now()
    try:
        since = cache.get(cachekeys.alerts_swept_at())
    except Exception:  # noqa: BLE001
        since = None
    since = since or now - timedelta(seconds=2 * settings.SMRWEB_ALERT_SWEEP_SECONDS)
    changed = alert_evaluation.changed_since(since)
    for kind, ids in changed.items():
        for object_id in ids:
            queue_alert_evaluation(None, kind, object_id)
    try:
        cache.set(cachekeys.alerts_swept_at(), now, timeout=None)
    except Exception:  # noqa: BLE001
        pass
    return sum(len(ids) for ids in changed.values())


@shared_task(acks_late=True, soft_time_limit=120, time_limit=150, name="smrweb.sources.tasks.evaluate_alerts")
def evaluate_alerts(kind: str, object_id: int) -> int:
    """Evaluate the project's rules against one run, submission or source; queue what is to deliver."""
    try:
        cache.delete(cachekeys.alerts_due(kind, object_id))
    except Exception:  # noqa: BLE001
        pass
    evaluate = {
        "run": alert_evaluation.evaluate_run,
        "submission": alert_evaluation.evaluate_submission,
        "source": alert_evaluation.evaluate_source,
    }[kind]
    result = evaluate(object_id)
    if result.stop_requested:
        queue_quietly(stop_run, object_id, "budget guard: the run passed its budget")
    for control_id in result.controls:  # the spend guards' pauses (the stale-action sweep finds lost ones)
        queue_quietly(dispatch_control, control_id)
    for run_id, reason in result.stops:
        queue_quietly(stop_run, run_id, reason)
    for pk in result.to_deliver:
        queue_quietly(deliver_notification, pk)
    return len(result.to_deliver)


@shared_task(
    acks_late=True, soft_time_limit=60, time_limit=90, name="smrweb.sources.tasks.deliver_notification"
)
def deliver_notification(notification_id: int) -> str:
    """One delivery attempt; a retryable failure queues the next one after its backoff."""
    attempt = alerts.deliver(notification_id)
    if attempt.outcome == "retry":
        try:
            deliver_notification.apply_async((notification_id,), countdown=attempt.retry_in)
        except OperationalError as exc:  # the stale-action sweep finds it at next_attempt_at
            log.warning("could not queue the retry of notification %s: %s", notification_id, exc)
    return attempt.outcome


@shared_task(
    acks_late=True, soft_time_limit=60, time_limit=90, name="smrweb.sources.tasks.send_alert_digests"
)
def send_alert_digests() -> int:
    """Beat: queue the digest of each email rule whose window has passed (one email per rule and window)."""
    due = alert_delivery.digests_due()
    for rule_id in due:
        queue_quietly(deliver_alert_digest, rule_id)
    return len(due)


@shared_task(
    acks_late=True, soft_time_limit=60, time_limit=90, name="smrweb.sources.tasks.deliver_alert_digest"
)
def deliver_alert_digest(rule_id: int) -> str:
    """One digest email for the rule; a failure holds its notifications for the next tick's digest."""
    return alerts.deliver_digest(rule_id).outcome


# --- scenario preflight: asked by a page or the API, answered by a worker, read back by polling ---------
# The asker never waits on the worker: it stores a pending request, enqueues the task and answers at once
# (red-team finding 9: ten synchronous preflights held ten web threads for 10 s each).

PREFLIGHT_TIMEOUT = 30.0  # a queued preflight no worker took by then is abandoned (the message expires)
PREFLIGHT_TIME_LIMIT = 45  # the task's hard limit: a taken preflight has answered or died by then
PREFLIGHT_KEEP_SECONDS = 600  # how long a request and its report stay readable


class NoWorkerAnswer(Exception):
    """The task queue cannot be reached, so no worker can be asked."""


def _store(client, request_id: str, state: dict) -> None:
    client.set(cachekeys.preflight(request_id), json.dumps(state), ex=PREFLIGHT_KEEP_SECONDS)


@shared_task(
    acks_late=False,
    soft_time_limit=PREFLIGHT_TIME_LIMIT - 15,
    time_limit=PREFLIGHT_TIME_LIMIT,
    name="smrweb.sources.tasks.preflight_scenario",
)
def preflight_scenario(key: str, request_id: str = "") -> dict | None:
    """Preflight a scenario here, on a worker (its PATH, its interpreters); with `request_id`, the report
    is stored where the asker polls for it (results are ignored app-wide)."""
    scenario = Scenario.objects.filter(key=key).first()
    if request_id:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            _store(client, request_id, {"scenario": key, "status": "running", "asked": time.time()})
    report = preflight.preflight(scenario).as_dict() if scenario is not None else None
    if request_id:
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            _store(
                client,
                request_id,
                {"scenario": key, "status": "done" if report else "gone", "report": report},
            )
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
            raw = client.get(cachekeys.preflight(request_id))
    except redis.RedisError as exc:
        raise NoWorkerAnswer(f"the task queue cannot be reached ({exc})") from exc
    state = json.loads(raw) if raw else None
    if state is None or state.get("scenario") != key:
        return None
    waited = time.time() - state.get("asked", 0)
    if (
        state["status"] == "pending"
        and waited > PREFLIGHT_TIMEOUT
        or state["status"] == "running"
        and waited > PREFLIGHT_TIME_LIMIT
    ):
        state["status"] = "no_worker"  # not taken before its message expired, or its worker died
    return state


# --- blob summaries: uploaded bytes are parsed here, never in a web request (red-team N2) ---------------
# The subprocess's own limits (settings.SMRWEB_SUMMARY_*) end it first; the task's are a backstop.


def queue_summary(sender, summary_id: int, **kwargs) -> None:
    """Receiver of `tracking.signals.summary_wanted` (sent after the claim's commit, from a request: it
    never waits for a broker; a claim that was not queued is queued again by a later request)."""
    queue_quietly(summarize_blob, summary_id, wait_for_broker=False)


@shared_task(
    acks_late=True,
    ignore_result=True,
    soft_time_limit=settings.SMRWEB_SUMMARY_WALL_SECONDS + 20,
    time_limit=settings.SMRWEB_SUMMARY_WALL_SECONDS + 30,
    name="smrweb.sources.tasks.summarize_blob",
)
def summarize_blob(summary_id: int) -> str:
    return summaries.summarize(summary_id)


# --- verification, rollbacks and the clean-up of actions lost in transit ---------------------------
# Task names are pinned to the module these tasks were first defined in (smrweb.tracking.tasks), so
# messages already queued and beat entries keep resolving; rename once queues have drained.


@worker_ready.connect
def remove_stale_validator_workdirs(**kwargs) -> None:
    """Work directories of validators whose worker was killed (finding 12) go when a worker starts."""
    if removed := sandbox.remove_stale_workdirs():
        log.warning("removed %d validator work directories left by dead workers: %s", len(removed), removed)
    if (confined := verification.confinement()) and (removed := sandbox.remove_stale_cgroups(confined)):
        log.warning("removed %d validator cgroups left by dead workers: %s", len(removed), removed)


@shared_task(acks_late=True, ignore_result=True, name="smrweb.tracking.tasks.verify_submission")
def verify_submission(submission_id: int) -> str:
    """Verify one submission; a redelivered message after the result is stored does nothing, and a copy
    that arrives while another worker's validator still runs (its heartbeat holds a claim) does not start
    a second one (finding 12)."""
    sub = Submission.objects.select_related("project__scenario", "artifact__blob").get(pk=submission_id)
    if sub.status != SubmissionStatus.VERIFYING:
        return f"skipped: {sub.status}"
    claim_seconds = int(sandbox.HEARTBEAT_S * 3)
    try:
        claimed = cache.add(cachekeys.verifying(submission_id), "running", timeout=claim_seconds)
    except Exception:  # the cache (Redis) is down: verify rather than wedge; the result is stored once
        log.exception("could not claim the verification of submission %s; running it", submission_id)
        claimed = True
    if not claimed:
        return "skipped: a validator for it is running on a worker"

    def progress(line: str) -> None:
        try:
            cache.touch(cachekeys.verifying(submission_id), timeout=claim_seconds)
        except Exception:
            log.warning("could not renew the claim on submission %s", submission_id)
        submissions.record_progress(sub.pk, line)

    try:
        return verification.verify(sub, progress)
    finally:
        try:
            cache.delete(cachekeys.verifying(submission_id))
        except Exception:
            pass  # it expires on its own


@shared_task(bind=True, acks_late=True, max_retries=None, name="smrweb.tracking.tasks.dispatch_rollback")
def dispatch_rollback(self, rollback_id: int) -> str:
    """One dispatch attempt; retried with backoff while the answer says retrying may help (the attempts
    are counted on the rollback, not by Celery, so a re-queued copy cannot exceed the maximum)."""
    attempt = dispatch.dispatch_rollback(rollback_id)
    if attempt.outcome == "retry":
        raise self.retry(countdown=attempt.retry_in)
    return attempt.outcome


@shared_task(bind=True, acks_late=True, max_retries=None, name="smrweb.sources.tasks.dispatch_launch")
def dispatch_launch(self, launch_id: int) -> str:
    """One attempt to start the next run through the project's source; retried with backoff like a
    rollback (attempts counted on the launch). An SMR run the backend accepted is looked for at once."""
    attempt = dispatch.dispatch_launch(launch_id)
    if attempt.outcome == "retry":
        raise self.retry(countdown=attempt.retry_in)
    if attempt.outcome == "accepted":
        launch = RunLaunch.objects.select_related("project").filter(pk=launch_id).first()
        if launch is not None and launch.project.source == SourceKind.SMR and launch.run_id is None:
            queue_quietly(sync_project, launch.project_id)
    return attempt.outcome


@shared_task(bind=True, acks_late=True, max_retries=None, name="smrweb.sources.tasks.dispatch_control")
def dispatch_control(self, control_id: int) -> str:
    """One attempt to send a steering request (message, pause, resume) to the run's source; retried with
    backoff like a rollback (attempts counted on the control). An SMR answer queues a sync, so the
    message or the new state comes back soon and confirms it."""
    attempt = dispatch.dispatch_control(control_id)
    if attempt.outcome == "retry":
        raise self.retry(countdown=attempt.retry_in)
    if attempt.outcome == "accepted":
        control = RunControl.objects.select_related("run__project").filter(pk=control_id).first()
        if control is not None and control.run.project.source == SourceKind.SMR:
            queue_quietly(sync_project, control.run.project_id)
    return attempt.outcome


def _stale_controls(now) -> list[int]:
    """Steering requests never picked up, or whose worker died mid-attempt (as for rollbacks)."""
    return _claim(
        RunControl.objects.filter(
            Q(status=DispatchStatus.REQUESTED, updated__lt=now - _stale_after())
            | Q(status=DispatchStatus.DISPATCHED, updated__lt=now - _lost_dispatch_after())
        ).filter(status__in=OPEN_DISPATCH),
        now,
    )


def verify_new_scores(sender, run_id: int, **kwargs) -> None:
    """Receiver of `tracking.signals.new_scores_to_verify` (sent after the commit)."""
    queue_quietly(auto_verify_run, run_id)


@shared_task(ignore_result=True, name="smrweb.tracking.tasks.auto_verify_run")
def auto_verify_run(run_id: int) -> int:
    """The project verifies every new score: put the run's new candidates up for verification, one
    verification task each. Candidates missed while the broker was down are taken with the next score."""
    started = submissions.automatic_verifications(run_id)
    for sub in started:
        queue_quietly(verify_submission, sub.pk)
    return len(started)


def catch_up_on_switch(sender, project_id: int, **kwargs) -> None:
    """Receiver of `tracking.signals.auto_verify_switched_on` (sent after the commit)."""
    queue_quietly(catch_up_verifications, project_id)


@shared_task(ignore_result=True, name="smrweb.tracking.tasks.catch_up_verifications")
def catch_up_verifications(project_id: int, chunk: int | None = None) -> int:
    """Auto-verify was switched on: put the candidates already waiting up for verification, one chunk
    per call, and queue the next chunk after a pause, so that at most SMRWEB_AUTO_VERIFY_CATCH_UP_RATE
    are queued per minute (422 waiting candidates do not swamp the validators). Stops by itself when
    none is left or auto-verify is switched off again; a lost chain is picked up by the next switch."""
    chunk = max(1, chunk or settings.SMRWEB_AUTO_VERIFY_CATCH_UP_CHUNK)
    started, left = submissions.catch_up_verifications(project_id, limit=chunk)
    for sub in started:
        queue_quietly(verify_submission, sub.pk)
    if started and left:
        pause = 60.0 * chunk / settings.SMRWEB_AUTO_VERIFY_CATCH_UP_RATE
        catch_up_verifications.apply_async((project_id, chunk), countdown=pause)
    return len(started)


def _stale_after() -> timedelta:
    """A verification or rollback still waiting this long after it was asked for (or last re-queued)
    is assumed lost in transit: the broker was down, or its message died with a worker."""
    return timedelta(seconds=settings.SMRWEB_STALE_ACTION_SECONDS)


def _lost_dispatch_after() -> timedelta:
    """A dispatched rollback is touched by every attempt (start, retry note, finish); between two
    touches come at most one call to the source and one backoff. Silent for longer, its task died with
    a worker (SIGKILL, OOM): the broker would hand the unacknowledged message out again only after its
    visibility timeout, an hour."""
    call = max(
        settings.SMRWEB_DISPATCH_WEBHOOK_TIMEOUT,
        settings.SMRWEB_SMR_TIMEOUT,
        settings.SMRWEB_SMR_FIRST_CALL_TIMEOUT,
    )
    return _stale_after() + timedelta(seconds=settings.SMRWEB_DISPATCH_RETRY_MAX_SECONDS + call)


def _claim(stale, now) -> list[int]:
    """Ids of stale rows, each claimed by bumping `updated` with a conditional UPDATE, so that the next
    tick (or a second beat) does not queue it again while this copy waits for a worker."""
    return [pk for pk in stale.values_list("pk", flat=True)[:100] if stale.filter(pk=pk).update(updated=now)]


@shared_task(ignore_result=True, name="smrweb.tracking.tasks.redispatch_stale_actions")
def redispatch_stale_actions() -> dict:
    """Re-queue verifications, rollbacks and launches that were recorded but never picked up, or whose
    worker died mid-task (each task is safe to run again: a finished one is skipped, and a webhook or
    an SMR trigger carries the same idempotency key every time)."""
    now = timezone.now()
    cutoff = now - _stale_after()
    subs = _claim(Submission.objects.filter(status=SubmissionStatus.VERIFYING, updated__lt=cutoff), now)
    rolls = _claim(
        Rollback.objects.filter(
            Q(status=RollbackStatus.REQUESTED, updated__lt=cutoff)
            | Q(status=RollbackStatus.DISPATCHED, updated__lt=now - _lost_dispatch_after())
        ),
        now,
    )
    for pk in subs:
        verify_submission.delay(pk)
    for pk in rolls:
        dispatch_rollback.delay(pk)
    starts = _claim(
        RunLaunch.objects.filter(
            Q(status=DispatchStatus.REQUESTED, updated__lt=cutoff)
            | Q(status=DispatchStatus.DISPATCHED, updated__lt=now - _lost_dispatch_after())
        ),
        now,
    )
    for pk in starts:
        dispatch_launch.delay(pk)
    controls = _stale_controls(now)
    for pk in controls:
        dispatch_control.delay(pk)
    notifications = alert_delivery.due_deliveries(now)
    for pk in notifications:
        deliver_notification.delay(pk)
    return {
        "verifications": subs,
        "rollbacks": rolls,
        "launches": starts,
        "notifications": notifications,
        "controls": controls,
    }


@shared_task(ignore_result=True, name="smrweb.tracking.tasks.collect_unreferenced_blobs")
def collect_unreferenced_blobs() -> int:
    """Hourly: delete blobs no artifact holds, an hour after they were stored (finding 10)."""
    removed = services.collect_unreferenced_blobs(older_than=timedelta(hours=1))
    if removed:
        log.info("removed %d unreferenced artifact blob(s)", removed)
    return removed


def _apply_retention() -> dict:
    """Daily: every project's retention policy (downsample old metric series, delete expired archived
    runs; docs/retention.md)."""
    reports = services.apply_all_retention()
    totals = {
        "projects": len(reports),
        "metric_points_removed": sum(r.points_removed for r in reports),
        "runs_deleted": sum(len(r.runs_deleted) for r in reports),
    }
    if totals["metric_points_removed"] or totals["runs_deleted"]:
        log.info("retention: %s", totals)
    return totals


# The real name, and the old one kept as an alias of the same function: a beat entry or a queued message
# sent by an older release under `smrweb.tracking.tasks.apply_retention` still runs (one lane, "actions").
apply_retention = shared_task(acks_late=True, ignore_result=True, name="smrweb.tasks.apply_retention")(
    _apply_retention
)
apply_retention_old_name = shared_task(
    acks_late=True, ignore_result=True, name="smrweb.tracking.tasks.apply_retention"
)(_apply_retention)


def connect_receivers() -> None:
    """Connect the tracking signals to the tasks that answer them (called once, from SmrwebConfig.ready:
    the domain sends the signals and knows no task)."""
    from smrweb.tracking import signals

    signals.new_scores_to_verify.connect(verify_new_scores, dispatch_uid="smrweb-auto-verify")
    signals.auto_verify_switched_on.connect(catch_up_on_switch, dispatch_uid="smrweb-auto-verify-catch-up")
    signals.alerts_due.connect(queue_alert_evaluation, dispatch_uid="smrweb-alerts-due")
    signals.summary_wanted.connect(queue_summary, dispatch_uid="smrweb-summary-wanted")
