"""The figures the overview shows of each project, kept by the write path (issue 36, item 1).

`ProjectFigures` is one row per project, recomputed from cheap sources in the transaction of every write
that changes one of its figures (`services.figures`): the runs' summary columns (run counts by condition,
spend, the review queue's per-run counts), top-1 reads of the (project, status, score…) index (the best
submissions) and `RunDaySpend` (spend today). Its `history` (the sparkline's newest scores) is extended
by ingest and read again from the rows after a deletion. Derived data: not archived (a restore rebuilds
it); `queries.projects.computed_summary_figures` is the from-scratch reference a test holds it to.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from smrweb.tracking.models.common import USD
from smrweb.tracking.models.project import Project
from smrweb.tracking.models.run import Run


class ProjectFigures(models.Model):
    project = models.OneToOneField(Project, models.CASCADE, primary_key=True, related_name="figures")
    maximize = models.BooleanField(default=True)  # the direction `best_*` were read in (the scenario's)
    runs = models.PositiveIntegerField(default=0)
    active = models.PositiveIntegerField(default=0)
    stalled = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    abandoned = models.PositiveIntegerField(default=0)
    over_budget = models.PositiveIntegerField(default=0)
    spend_usd = models.DecimalField(default=Decimal(0), **USD)
    spend_turns_usd = models.DecimalField(default=Decimal(0), **USD)
    billed_runs = models.PositiveIntegerField(default=0)
    last_activity = models.DateTimeField(null=True, blank=True)
    gap_runs = models.PositiveIntegerField(default=0)
    gap_missing = models.PositiveIntegerField(default=0)
    gap_unknown = models.PositiveIntegerField(default=0)
    # The review queue, over runs not excluded: the sums of `Run.queue_waiting` / `Run.queue_pending`.
    waiting = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    pending_best = models.FloatField(null=True, blank=True)
    # The best submission that counts, under each rule (plain ids: a deletion refreshes the row).
    best_id = models.BigIntegerField(null=True, blank=True)  # verified ones
    best_score = models.FloatField(null=True, blank=True)
    best_any_id = models.BigIntegerField(null=True, blank=True)  # unverified ones too
    best_any_score = models.FloatField(null=True, blank=True)
    # The newest SPARK_SCORES scores of every run: [µs since the epoch, submission id, score], oldest first.
    history = models.JSONField(default=list, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "project figures"

    def __str__(self) -> str:
        return f"figures of project {self.project_id}"


class RunDaySpend(models.Model):
    """What a run's turns cost per UTC day (of the turns' own timestamps): "spend today" reads one row per
    run that spent today. Per run so that deleting a run takes its spend with it."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="day_spend")
    project = models.ForeignKey(Project, models.CASCADE, related_name="+")
    day = models.DateField()
    cost_usd = models.DecimalField(default=Decimal(0), **USD)
    turns = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "day"], name="rundayspend_run_day_uniq")]
        indexes = [models.Index(fields=["project", "day"], name="rundayspend_project_day_idx")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.day}: {self.cost_usd}"


class RunModelSpend(models.Model):
    """What a run's turns of one model cost per quarter hour (`slot`: seconds since the epoch // 900, of the
    turns' own timestamps), kept by the write path: the run's spend by model and the project's spend by day
    and model in any viewer's clock (a quarter hour divides every zone's day) read these rows, not the
    turns. Per run so that deleting a run takes its spend with it; rebuilt with `RunDaySpend`."""

    SLOT_SECONDS = 900

    run = models.ForeignKey(Run, models.CASCADE, related_name="model_spend")
    project = models.ForeignKey(Project, models.CASCADE, related_name="+")
    slot = models.BigIntegerField()
    model = models.CharField(max_length=200, blank=True)
    cost_usd = models.DecimalField(default=Decimal(0), **USD)
    turns = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    unpriced = models.PositiveIntegerField(default=0)  # of `turns`, those the price table could not price

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "slot", "model"], name="runmodelspend_run_slot_model_uniq")
        ]
        indexes = [models.Index(fields=["project", "slot"], name="runmodelspend_project_slot_idx")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.model or '(no model)'} @{self.slot}: {self.cost_usd}"
