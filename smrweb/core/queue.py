"""Queueing Celery tasks from code that must not fail because the broker is down: the work was
recorded in the database first, so a task that cannot be queued now is found again later."""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError

log = logging.getLogger(__name__)


def dispatch(task, *args) -> bool:
    """Queue `task` after the current transaction commits. False when the broker cannot be reached;
    the caller says what finds the work again (e.g. `redispatch_stale_actions` for verifications and
    rollbacks)."""
    try:
        task.delay_on_commit(*args)
    except OperationalError as exc:
        log.warning("could not queue %s%r: %s", task.name, args, exc)
        return False
    return True


def queue_quietly(task, *args, wait_for_broker: bool = True) -> bool:
    """Queue now (called after a commit); a broker that cannot be reached is logged, not raised: the
    caller's work is done, and what this task would do is found again later. False when not queued.
    `wait_for_broker=False` tries the connection once (4 ms when the broker is down, against ~0.65 s for
    Celery's default retries): for the ingest path, which must never wait for a broker."""
    try:
        if wait_for_broker:
            task.delay(*args)
        else:
            task.apply_async(args, retry_policy={"max_retries": 0})
    except OperationalError as exc:
        log.warning("could not queue %s%r: %s", task.name, args, exc)
        return False
    return True
