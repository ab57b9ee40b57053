"""Closing the hill-climbing loop from the dashboard: steering a live run (a runtime message, a pause, a
resume) and starting the next run. Both are requests a person makes and a task dispatches through the
project's source (the SMR SDK, a signed webhook to the harness, a git branch), like a rollback."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from smrweb.tracking.models.common import USD
from smrweb.tracking.models.project import Project
from smrweb.tracking.models.run import Run


class ControlKind(models.TextChoices):
    MESSAGE = "message"  # a runtime message to the agent
    PAUSE = "pause"
    RESUME = "resume"


class DispatchStatus(models.TextChoices):
    REQUESTED = "requested"
    DISPATCHED = "dispatched"  # a dispatch attempt is under way or will be retried
    ACCEPTED = "accepted"  # the source took it (an SMR answer, a webhook's 2xx)
    CONFIRMED = "confirmed"  # the source reported it back (the message in the run's messages, the new run)
    FAILED = "failed"


OPEN_DISPATCH = (DispatchStatus.REQUESTED, DispatchStatus.DISPATCHED)


class GuardKind(models.TextChoices):
    SPEND = "spend", "spend guard"  # the spend-aware stop: spend since the best score, marginal $ per point
    DAY = "day", "day budget"  # the project's budget per day


class GuardAction(models.TextChoices):
    PAUSE = "pause"
    STOP = "stop"
    NONE = "none"  # the source can neither pause nor stop the run: the alert says so


class Dispatched(models.Model):
    """What a request dispatched to a source keeps: where it is, every answer, how many attempts."""

    status = models.CharField(max_length=12, choices=DispatchStatus, default=DispatchStatus.REQUESTED)
    detail = models.TextField(blank=True)  # every answer of the source, appended
    attempts = models.PositiveIntegerField(default=0)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["-created", "-id"]


class RunControl(Dispatched):
    """A steering action on a live run, requested by a reviewer or admin and audited; dispatched by a
    task (retried with backoff); `source_ref` is what the source calls it (an SMR message id), so the
    message is matched when the source reports it back."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="controls")
    kind = models.CharField(max_length=10, choices=ControlKind)
    body = models.TextField(blank=True)  # the message; empty for pause and resume
    source_ref = models.CharField(max_length=200, blank=True)
    # None: a project guard asked (`guard` says which: the spend-aware stop or the day budget).
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.PROTECT, null=True, blank=True, related_name="run_controls"
    )
    guard = models.CharField(max_length=10, blank=True)

    class Meta(Dispatched.Meta):
        indexes = [models.Index(fields=["run", "-created"], name="runcontrol_run_created_idx")]

    def __str__(self) -> str:
        return f"{self.kind} → {self.run} ({self.status})"

    @property
    def idempotency_key(self) -> str:
        return f"smrweb-control-{self.pk}"

    @property
    def by_label(self) -> str:
        """Who asked: the person's name, or the guard's ("smrweb (spend guard)")."""
        if self.requested_by_id is not None:
            return self.requested_by.get_username()
        return f"smrweb ({GuardKind(self.guard).label if self.guard in GuardKind.values else 'system'})"


class RunLaunch(Dispatched):
    """A request to start the next run of a project: the scenario's model profile and budget (prefilled
    from the run it comes from), and a kickoff made of the carry-forward block and the person's text.
    `idempotency_key` comes from the form, so a double click is one launch (and one run at the source);
    `run` is the run it became once the source reports it, with `Run.parent` = `from_run`."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="launches")
    from_run = models.ForeignKey(Run, models.SET_NULL, null=True, blank=True, related_name="launches")
    run = models.OneToOneField(Run, models.SET_NULL, null=True, blank=True, related_name="launch")
    kickoff = models.TextField()
    model_profile = models.CharField(max_length=200, blank=True)
    budget_usd = models.DecimalField(null=True, blank=True, **USD)
    budget_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    git_commit = models.CharField(max_length=64, blank=True)  # git projects: the commit the branch starts at
    external_run_id = models.CharField(max_length=200, blank=True)  # the new run's id at the source
    idempotency_key = models.CharField(max_length=100, unique=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.PROTECT, related_name="run_launches")

    class Meta(Dispatched.Meta):
        pass

    def __str__(self) -> str:
        return f"launch {self.idempotency_key} in {self.project} ({self.status})"


class GuardEpisode(models.Model):
    """One time a project guard acted on a run, once per episode (services/alerts/guards.py): the spend
    guard's episode is "since this best score" (`best:<submission id>`, `start` before any score), the day
    budget's the day in the project's clock (`day:2026-12-03`). The unique key is the bookkeeping: a
    redelivered evaluation, a second worker or a run a person resumed in the same episode is not acted on
    again. `reading` holds the numbers the guard saw; `control` the pause it asked for (a stop has none)."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="guard_episodes")
    run = models.ForeignKey(Run, models.CASCADE, related_name="guard_episodes")
    guard = models.CharField(max_length=10, choices=GuardKind)
    episode = models.CharField(max_length=100)
    action = models.CharField(max_length=10, choices=GuardAction)
    reason = models.TextField()
    reading = models.JSONField(default=dict, blank=True)
    control = models.ForeignKey(RunControl, models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "guard", "episode"], name="guardepisode_once_uniq")
        ]
        indexes = [models.Index(fields=["project", "-created"], name="guardepisode_project_idx")]

    def __str__(self) -> str:
        return f"{self.guard} {self.action} {self.run} ({self.episode})"
