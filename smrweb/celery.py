"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered from the apps (all of
them in smrweb/tasks.py: `smrweb` is an installed app).

Tasks run in lanes, one queue each, so that a burst of one kind cannot hold up another: the pollers'
syncs (many, long) go to `<queue>.polling`, people's actions (rollbacks, stops) to `<queue>.actions`,
validators and preflights to `<queue>.verification`, the summaries of uploaded models to
`<queue>.summaries`; anything else to `<queue>` itself (`<queue>` is SMRWEB_CELERY_QUEUE, default
"celery"). A worker started without `-Q` takes every lane; a deployment that polls many projects runs a
worker of its own for the polling lane, and validators run only where the sandbox can confine them
(docker-compose.yml's root `verifier`): summaries stay off that worker, in a lane of their own so that a
validator backlog does not hold up a page waiting for one.
"""

import os

from celery import Celery, signals
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")

# Task names, not modules: the names are pinned (smrweb/tasks.py) so queued messages keep resolving.
LANES = {
    "polling": (
        "smrweb.sources.tasks.poll_due_projects",
        "smrweb.sources.tasks.sync_project",
        "smrweb.sources.tasks.sync_runs",  # a project's runs, a few per task (issue 34: shared by N workers)
        "smrweb.sources.tasks.flag_stalled_runs",
    ),
    "actions": (
        "smrweb.tracking.tasks.dispatch_rollback",
        "smrweb.sources.tasks.dispatch_launch",
        "smrweb.sources.tasks.dispatch_control",
        "smrweb.sources.tasks.stop_run",
        "smrweb.tracking.tasks.redispatch_stale_actions",
        "smrweb.tracking.tasks.collect_unreferenced_blobs",
        "smrweb.tasks.apply_retention",
        "smrweb.tracking.tasks.apply_retention",  # its old name, an alias: messages queued before the rename
    ),
    "alerts": (
        "smrweb.sources.tasks.evaluate_alerts",
        "smrweb.sources.tasks.deliver_notification",
        "smrweb.sources.tasks.sweep_alerts",
        "smrweb.sources.tasks.send_alert_digests",
        "smrweb.sources.tasks.deliver_alert_digest",
    ),
    "verification": (
        "smrweb.tracking.tasks.verify_submission",
        "smrweb.tracking.tasks.auto_verify_run",
        "smrweb.tracking.tasks.catch_up_verifications",
        "smrweb.sources.tasks.preflight_scenario",
    ),
    # Untrusted bytes read in a resource-limited subprocess (core.bounded), not in the validator sandbox.
    "summaries": ("smrweb.sources.tasks.summarize_blob",),
}
LANE_OF = {name: lane for lane, names in LANES.items() for name in names}

app = Celery("smrweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def lane_queue(lane: str) -> str:
    """The queue of a lane, under the configured default queue (read at call time: tests give each
    session a queue of its own)."""
    return f"{app.conf.task_default_queue}.{lane}"


def route(name, args, kwargs, options, task=None, **kw):
    """CELERY_TASK_ROUTES: a task's lane by its name; unlisted tasks stay on the default queue."""
    lane = LANE_OF.get(name)
    return {"queue": lane_queue(lane)} if lane else None


def worker_queues() -> list[Queue]:
    """What a worker started without `-Q` consumes: the default queue and every lane."""
    return [Queue(app.conf.task_default_queue)] + [Queue(lane_queue(lane)) for lane in LANES]


app.conf.task_routes = (route,)
app.conf.task_queues = worker_queues()


# Every log line a task writes carries the task's id as its request id (docs/operations.md#logs).
@signals.task_prerun.connect
def _start_log_context(task_id=None, task=None, **kwargs):
    from smrweb.core import logcontext

    task.request.smrweb_log_token = logcontext.start(task_id)


@signals.task_postrun.connect
def _end_log_context(task=None, **kwargs):
    from smrweb.core import logcontext

    token = getattr(task.request, "smrweb_log_token", None)
    if token is not None:
        try:
            logcontext.end(token)
        except ValueError:  # set in another context (an eager call inside a request): leave it
            pass
