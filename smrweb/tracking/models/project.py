"""Projects, their members and roles, their source's health, and their API tokens."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from smrweb.tracking.models.scenario import Scenario


class SpendStop(models.TextChoices):
    """What the spend-aware stop does to a live run past one of its limits (services/alerts/guards.py)."""

    OFF = "off", "off"
    PAUSE = "pause", "pause the run (a stop where the source cannot pause)"
    STOP = "stop", "stop the run"


class SourceKind(models.TextChoices):
    PUSH = "push", "REST push"
    SMR = "smr", "Managed Research"
    GIT = "git", "Git workspace"  # a local repository's branch (sources/git/; was "workspace", never wired)


# Sources a worker polls (beat's poll_due_projects → sources.sync).
POLLED_SOURCES = (SourceKind.SMR, SourceKind.GIT)


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user) -> "ProjectQuerySet":
        """Projects a user may see: all for superusers, else those they are a member of."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_superuser:
            return self
        return self.filter(memberships__user=user)


class Project(models.Model):
    objects = ProjectQuerySet.as_manager()

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    scenario = models.ForeignKey(Scenario, models.PROTECT, related_name="projects")
    source = models.CharField(max_length=20, choices=SourceKind, default=SourceKind.PUSH)
    source_settings = models.JSONField(default=dict, blank=True)
    stall_after = models.DurationField(default=timedelta(seconds=settings.SMRWEB_DEFAULT_STALL_AFTER_SECONDS))
    knowledge = models.TextField(blank=True)
    # Team review: when set, a submission is approved by two distinct people, whatever verified it, and
    # the proposer's own approval does not count (services.submissions.approval_refusal).
    require_second_reviewer = models.BooleanField(default=False)
    # Verify every new score on a worker as it arrives (the scenario's validator), so the project's
    # verified numbers fill without a click per submission; nobody becomes its proposer.
    auto_verify = models.BooleanField(default=False)
    # Store the prompt and response bodies sources send with agent turns. Off by default: bodies hold
    # what users typed, secrets pasted into prompts and proprietary code, and everyone with access to
    # the project reads them; when off they are dropped at ingest, never written (docs/security.md).
    capture_turn_bodies = models.BooleanField(default=False)
    # A scored submission worse than the best by more than this (in the scenario's direction) is a
    # regression; null turns detection off.
    regression_threshold = models.FloatField(null=True, blank=True)
    # Budget guard: a live run past 100 % of its USD or token budget is stopped through its source
    # (audited; the run.budget notification says so).
    budget_guard = models.BooleanField(default=False)
    # The spend-aware stop (issue 38 item 4; services/alerts/guards.py, docs/alerts.md): off by default. A
    # live run that spent more than `spend_stop_usd` (or `_turns` turns, `_tokens` tokens) since its best
    # score, or whose marginal USD per point of score over its last `spend_stop_window` turns passes
    # `spend_stop_usd_per_point`, is paused (or stopped), once per episode (a new best starts a new one).
    spend_stop = models.CharField(max_length=5, choices=SpendStop, default=SpendStop.OFF)
    spend_stop_usd = models.DecimalField(null=True, blank=True, max_digits=18, decimal_places=6)
    spend_stop_turns = models.PositiveIntegerField(null=True, blank=True)
    spend_stop_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    spend_stop_usd_per_point = models.DecimalField(null=True, blank=True, max_digits=18, decimal_places=6)
    spend_stop_window = models.PositiveIntegerField(default=50)
    # The day budget: when the project's turns cost this much in one day of `day_zone` (the project's
    # clock, an IANA zone), every live run of the project is paused, once that day; null: off.
    day_budget_usd = models.DecimalField(null=True, blank=True, max_digits=18, decimal_places=6)
    day_zone = models.CharField(max_length=64, default="UTC")
    # Push projects: where every signed action is POSTed (`webhook_url`); empty: none can be dispatched.
    rollback_webhook_url = models.URLField(blank=True)
    # Git projects: an absolute path to a local repository (a work tree or bare) and the branch whose
    # commits are the project's one run (see docs/integrations.md#git-workspace-source).
    git_repo_path = models.CharField(max_length=1000, blank=True)
    git_branch = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")
    # Archived: out of the overview, not polled, read-only until an admin restores it (docs/retention.md).
    archived_at = models.DateTimeField(null=True, blank=True)
    archived_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Retention (beat's apply_retention, docs/retention.md): metric series of runs finished more than
    # `retention_metric_days` ago are cut to `retention_keep_points` points per series (LTTB; null days:
    # kept whole); archived runs are deleted `retention_archived_run_days` after archiving (null: never).
    retention_metric_days = models.PositiveIntegerField(null=True, blank=True, default=90)
    retention_keep_points = models.PositiveIntegerField(default=1000)
    retention_archived_run_days = models.PositiveIntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        permissions = [
            # Creating a project is not a side effect of being signed in (red-team finding 1): staff, or
            # users given `add_project`; binding one to an SMR project, a backend or a repository needs this.
            ("bind_source", "Can bind a project to an SMR project, an SMR backend or a git repository"),
        ]

    def __str__(self) -> str:
        return self.slug

    def get_absolute_url(self) -> str:
        return reverse("dashboard:project-detail", args=[self.slug])

    @property
    def webhook_url(self) -> str:
        """Where a push project's harness is told things (rollbacks, stops, starts, steering): one URL
        for every action; the field keeps the name of the first of them (the API's name too)."""
        return self.rollback_webhook_url

    @property
    def uses_operator_smr_key(self) -> bool:
        """Whether the poller may use the operator's SMRWEB_SMR_API_KEY for this project: only when staff
        or the command line bound it, never for a project a user bound (it must bring its own key)."""
        return bool(self.source_settings.get("operator_key"))

    def role_of(self, user) -> str | None:
        """The user's role here (superusers are admins everywhere), or None for outsiders."""
        if not getattr(user, "is_authenticated", False):
            return None
        if user.is_superuser:
            return Role.ADMIN
        if getattr(user, "pk", None) is None:  # an API token's principal is no member: it has no role
            return None
        return self.memberships.filter(user=user).values_list("role", flat=True).first()

    def allows(self, user, role: str) -> bool:
        have = self.role_of(user)
        return have is not None and Role.rank(have) >= Role.rank(role)


class Role(models.TextChoices):
    VIEWER = "viewer"
    REVIEWER = "reviewer"
    ADMIN = "admin"

    @classmethod
    def rank(cls, role: str) -> int:
        return [cls.VIEWER, cls.REVIEWER, cls.ADMIN].index(role)


class Membership(models.Model):
    project = models.ForeignKey(Project, models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role, default=Role.VIEWER)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_project_user_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.project}"


class SourceHealth(models.Model):
    """How polling a project's source goes: shown on the project page, drives the next attempt."""

    project = models.OneToOneField(Project, models.CASCADE, related_name="source_health")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_kind = models.CharField(max_length=50, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # A lease, so one worker at a time lists a project's runs (a killed worker's lease just expires).
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=64, blank=True)
    active_runs = models.PositiveIntegerField(default=0)
    # Syncs that work but read data they cannot fully trust (unreadable usage entries, totals the turns
    # do not account for): health is amber, never green, while this is set.
    warning = models.TextField(blank=True)
    full_list_at = models.DateTimeField(null=True, blank=True)  # the last walk over every page of runs
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["next_attempt_at"], name="health_next_attempt_idx")]

    @property
    def ok(self) -> bool:
        return self.consecutive_failures == 0 and self.last_success_at is not None and not self.warning


def hash_token(raw: str) -> str:
    # Tokens are 256-bit random strings, so a fast unsalted digest is enough to make the stored
    # value useless to a reader of the database while keeping lookup a single indexed query.
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A project-scoped bearer token. Only its sha256 is stored; the token is shown once."""

    PREFIX = "smr_"

    project = models.ForeignKey(Project, models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=200)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=16)  # the first characters, to tell tokens apart in lists
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
