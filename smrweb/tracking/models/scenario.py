"""Scenarios: what a benchmark scores (metric, direction, bounds), its artifact and its validator."""

from __future__ import annotations

import datetime
import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Q


class Direction(models.TextChoices):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class ArtifactKind(models.TextChoices):
    FILE = "file"
    PYTHON_SOURCE = "python_source"
    ONNX_MODEL = "onnx_model"
    ARCHIVE = "archive"
    LOG = "log"
    OTHER = "other"


def arena_zone(name: str) -> zoneinfo.ZoneInfo:
    """An arena's IANA time zone ("Europe/Paris", "UTC"); ValidationError for anything else."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValidationError(f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Paris).") from None


def _valid_zone(name: str) -> None:
    arena_zone(name)


class ScenarioQuerySet(models.QuerySet):
    def attachable_by(self, user) -> "ScenarioQuerySet":
        """Scenarios a user may give a project: every one for staff, the shared ones for anyone else."""
        return self if getattr(user, "is_staff", False) else self.filter(shared=True)

    def visible_to(self, principal) -> "ScenarioQuerySet":
        """Scenarios a caller may read: a project token its project's; staff every one; a user the shared
        ones and those of the projects they can see."""
        # Projects and tokens are defined on top of scenarios (models/project.py): reached through the
        # relation rather than imported, so the models modules import each other one way only.
        project_model = self.model._meta.get_field("projects").related_model
        if getattr(principal, "_meta", None) is not None and principal._meta.label == "tracking.ApiToken":
            return self.filter(projects__pk=principal.project_id)
        if not getattr(principal, "is_authenticated", False):
            return self.none()
        if principal.is_staff or principal.is_superuser:
            return self
        used = project_model.objects.visible_to(principal).values("scenario_id")
        return self.filter(Q(shared=True) | Q(pk__in=used))


class Scenario(models.Model):
    """A benchmark: what a run's submission is, how it is scored and where it is uploaded."""

    GENERIC_KEY = "generic"

    key = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    harness_id = models.CharField(max_length=200, blank=True)
    artifact_path = models.CharField(max_length=500, blank=True)
    artifact_kind = models.CharField(max_length=20, choices=ArtifactKind, default=ArtifactKind.FILE)
    score_metric = models.CharField(max_length=200, default="score")
    direction = models.CharField(max_length=10, choices=Direction, default=Direction.MAXIMIZE)
    score_min = models.FloatField(null=True, blank=True)
    score_max = models.FloatField(null=True, blank=True)
    # Argument lists, never shell strings: they are executed without a shell.
    validator_command = models.JSONField(default=list, blank=True)
    scoring_command = models.JSONField(default=list, blank=True)
    required_toolchains = models.JSONField(default=list, blank=True)
    arena_name = models.CharField(max_length=200, blank=True)
    arena_url = models.URLField(blank=True)
    # Which way the arena's own score is better (Elo: up; a loss: down); blank: same as score_metric.
    arena_direction = models.CharField(max_length=10, choices=Direction, blank=True)
    # How many uploads the arena takes from one team a day (empty: it does not say), and when its day
    # starts: a wall-clock time in its own zone (`services.handoff.upload_allowance` counts them).
    arena_daily_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(10_000)],
        help_text="Uploads the arena takes from one project a day; empty: no limit known.",
    )
    arena_timezone = models.CharField(
        max_length=64,
        default="UTC",
        validators=[_valid_zone],
        help_text="The IANA time zone the arena's day is counted in.",
    )
    arena_resets_at = models.TimeField(
        default=datetime.time(0, 0), help_text="When the arena's day starts, in its own zone."
    )
    # Shared scenarios (the presets) may be attached to any project; the others only by staff, so a
    # validator made for one team cannot be run by a stranger on a project of their own.
    shared = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = ScenarioQuerySet.as_manager()

    class Meta:
        ordering = ["key"]
        constraints = [
            models.CheckConstraint(
                condition=Q(score_min__isnull=True)
                | Q(score_max__isnull=True)
                | Q(score_min__lte=models.F("score_max")),
                name="scenario_bounds_ordered",
            )
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def maximize(self) -> bool:
        return self.direction == Direction.MAXIMIZE

    @property
    def arena_maximize(self) -> bool:
        return self.arena_direction == Direction.MAXIMIZE if self.arena_direction else self.maximize
