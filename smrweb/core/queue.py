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


def queue_quietly(task, *args) -> bool:
    """Queue now (called after a commit); a broker that cannot be reached is logged, not raised: the
    caller's work is done, and what this task would do is found again later. False when not queued."""
    try:
        task.delay(*args)
    except OperationalError as exc:
        log.warning("could not queue %s%r: %s", task.name, args, exc)
        return False
    return True
