"""Celery tasks: thin wrappers that load by id and call one tracking service."""

import logging

from celery import shared_task

from smrweb.tracking import services

log = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90)
def flag_stalled_runs() -> int:
    """Flag live runs with no progress for their project's stall_after. Safe to repeat."""
    flagged = services.flag_stalled_runs()
    if flagged:
        log.info("flagged %d stalled run(s): %s", len(flagged), ", ".join(str(r) for r in flagged))
    return len(flagged)
