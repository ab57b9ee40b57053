"""Rollbacks of a run to an earlier submission or checkpoint."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from smrweb.tracking.models.run import Checkpoint, Run
from smrweb.tracking.models.submission import Submission


class RollbackStatus(models.TextChoices):
    REQUESTED = "requested"
    DISPATCHED = "dispatched"
    ACCEPTED = (
        "accepted"  # the source took the request (HTTP 202, SMR state "accepted") but has not confirmed it
    )
    APPLIED = (
        "applied"  # the source says it is done (webhook 2xx other than 202, a git commit, SMR "applied")
    )
    FAILED = "failed"


class Rollback(models.Model):
    """A typed, audited rollback to an earlier submission or checkpoint (exactly one target):
    requested → dispatched → applied | failed, dispatched by a task through the run's source."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="rollbacks")
    target_submission = models.ForeignKey(Submission, models.PROTECT, null=True, blank=True, related_name="+")
    target_checkpoint = models.ForeignKey(Checkpoint, models.PROTECT, null=True, blank=True, related_name="+")
    reason = models.TextField()
    status = models.CharField(max_length=20, choices=RollbackStatus, default=RollbackStatus.REQUESTED)
    detail = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.PROTECT, related_name="rollbacks")
    attempts = models.PositiveIntegerField(default=0)  # dispatch attempts (webhook retries included)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    OPEN = (RollbackStatus.REQUESTED, RollbackStatus.DISPATCHED)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            # Double clicks and concurrent requests: a run has at most one rollback in flight.
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status__in=["requested", "dispatched"]),
                name="rollback_one_open_per_run",
            ),
            models.CheckConstraint(
                condition=(Q(target_submission__isnull=False) & Q(target_checkpoint__isnull=True))
                | (Q(target_submission__isnull=True) & Q(target_checkpoint__isnull=False)),
                name="rollback_exactly_one_target",
            ),
        ]
