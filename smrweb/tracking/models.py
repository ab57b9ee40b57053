"""The core data model of DESIGN.md. Methods answer questions about one row; writes across rows live
in `tracking.services` (the one write path)."""

from __future__ import annotations

import hashlib
import sys
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

FLOAT_MAX = sys.float_info.max
USD = {"max_digits": 18, "decimal_places": 6}


def finite(field: str) -> Q:
    """A CHECK that a float column holds a finite number (PostgreSQL sorts NaN above +inf)."""
    return Q(**{f"{field}__gte": -FLOAT_MAX, f"{field}__lte": FLOAT_MAX})


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


class ScenarioQuerySet(models.QuerySet):
    def attachable_by(self, user) -> "ScenarioQuerySet":
        """Scenarios a user may give a project: every one for staff, the shared ones for anyone else."""
        return self if getattr(user, "is_staff", False) else self.filter(shared=True)

    def visible_to(self, principal) -> "ScenarioQuerySet":
        """Scenarios a caller may read: a project token its project's; staff every one; a user the shared
        ones and those of the projects they can see."""
        if isinstance(principal, ApiToken):
            return self.filter(projects__pk=principal.project_id)
        if not getattr(principal, "is_authenticated", False):
            return self.none()
        if principal.is_staff or principal.is_superuser:
            return self
        used = Project.objects.visible_to(principal).values("scenario_id")
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
                condition=Q(score_min__isnull=True) | Q(score_max__isnull=True) | Q(score_min__lte=models.F("score_max")),
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


class SourceKind(models.TextChoices):
    PUSH = "push", "REST push"
    SMR = "smr", "Managed Research"
    GIT = "git", "Git workspace"  # a local repository's branch (sources/git.py; was "workspace", never wired)


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
    stall_after = models.DurationField(default=timedelta(seconds=settings.DEFAULT_STALL_AFTER_SECONDS))
    knowledge = models.TextField(blank=True)
    # Team review: when set, a reviewer's approval of a submission they proposed does not count.
    require_second_reviewer = models.BooleanField(default=False)
    # Verify every new score on a worker as it arrives (the scenario's validator), so the project's
    # verified numbers fill without a click per submission; nobody becomes its proposer.
    auto_verify = models.BooleanField(default=False)
    # A scored submission worse than the best by more than this (in the scenario's direction) is a
    # regression; null turns detection off.
    regression_threshold = models.FloatField(null=True, blank=True)
    # Push projects: where a rollback is POSTed (signed); empty means rollbacks cannot be dispatched.
    rollback_webhook_url = models.URLField(blank=True)
    # Git projects: an absolute path to a local repository (a work tree or bare) and the branch whose
    # commits are the project's one run (see docs/integrations.md#git-workspace-source).
    git_repo_path = models.CharField(max_length=1000, blank=True)
    git_branch = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")
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
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_project_user_uniq")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.project}"


class RunState(models.TextChoices):
    QUEUED = "queued"
    PLANNING = "planning"
    RUNNING = "running"
    EXECUTING = "executing"
    REVIEWING = "reviewing"
    BLOCKED = "blocked"
    PAUSED = "paused"
    FINALIZING = "finalizing"
    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"
    CANCELED = "canceled"


TERMINAL_STATES = frozenset({RunState.DONE, RunState.FAILED, RunState.STOPPED, RunState.CANCELED})


class Run(models.Model):
    project = models.ForeignKey(Project, models.CASCADE, related_name="runs")
    external_id = models.CharField(max_length=200)
    state = models.CharField(max_length=20, choices=RunState, default=RunState.RUNNING)
    failure_family = models.CharField(max_length=100, blank=True)
    failure_detail = models.TextField(blank=True)
    failure_source = models.CharField(max_length=200, blank=True)
    stalled_since = models.DateTimeField(null=True, blank=True)
    requested_profile = models.CharField(max_length=200, blank=True)
    actual_profile = models.CharField(max_length=200, blank=True)
    budget_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    budget_usd = models.DecimalField(null=True, blank=True, **USD)
    # Spend, recomputed from agent turns by the write path: total == driver + child == sum(turns).
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(default=Decimal(0), **USD)
    driver_tokens_in = models.PositiveBigIntegerField(default=0)
    driver_tokens_out = models.PositiveBigIntegerField(default=0)
    driver_cost_usd = models.DecimalField(default=Decimal(0), **USD)
    child_tokens_in = models.PositiveBigIntegerField(default=0)
    child_tokens_out = models.PositiveBigIntegerField(default=0)
    child_cost_usd = models.DecimalField(default=Decimal(0), **USD)
    turn_count = models.PositiveIntegerField(default=0)
    # Score summary, recomputed from submissions by the write path: the best of the submissions that
    # count (not invalid, rejected or excluded), the latest of those not excluded, and how many in all.
    best_score = models.FloatField(null=True, blank=True)
    latest_score = models.FloatField(null=True, blank=True)
    score_count = models.PositiveIntegerField(default=0)
    git_branch = models.CharField(max_length=200, blank=True)
    git_commit = models.CharField(max_length=64, blank=True)
    # Filled by polled sources (SMR): the backend's own view of the run.
    live_phase = models.CharField(max_length=100, blank=True)
    terminal_outcome = models.CharField(max_length=50, blank=True)
    other_meters_usd = models.DecimalField(default=Decimal(0), **USD)  # sandbox time etc., not agent turns
    source_total_usd = models.DecimalField(null=True, blank=True, **USD)  # what the backend bills in all
    source_updated_at = models.DateTimeField(null=True, blank=True)
    source_cursor = models.JSONField(default=dict, blank=True)  # per kind of data: what a sync has seen
    # The source's own spend (typed aggregates: tokens, USD, driver/child) and, per channel, what it
    # reports that no turn accounts for (sources/smr_usage.py); `spend_unaccounted` flags any difference.
    source_spend = models.JSONField(default=dict, blank=True)
    spend_unaccounted = models.BooleanField(default=False)
    entries_unreadable = models.PositiveIntegerField(default=0)  # usage entries the poller could not read
    # Requested vs resolved profile per role / actor, as the source lists them (worker-level downgrades).
    actor_profiles = models.JSONField(default=list, blank=True)
    # An admin took the whole run out of the project's numbers (a test run, junk); reversible.
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    excluded_reason = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_progress_at = models.DateTimeField(default=timezone.now)
    last_polled_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-last_progress_at"]
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="run_project_external_id_uniq"),
            models.CheckConstraint(condition=Q(cost_usd__gte=0), name="run_cost_nonnegative"),
        ]
        indexes = [
            # The runs table and the overview counts: a project's runs by state and recency.
            models.Index(fields=["project", "state"], name="run_project_state_idx"),
            models.Index(fields=["project", "-last_progress_at"], name="run_project_progress_idx"),
            # flag_stalled_runs: non-terminal runs whose progress is old.
            models.Index(fields=["state", "last_progress_at"], name="run_state_progress_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.external_id}"

    def get_absolute_url(self) -> str:
        return reverse("dashboard:run-detail", args=[self.project.slug, self.external_id])

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def is_stalled(self) -> bool:
        return self.stalled_since is not None and not self.is_terminal

    @property
    def is_downgraded(self) -> bool:
        return bool(self.requested_profile and self.actual_profile and self.requested_profile != self.actual_profile) \
            or bool(self.downgraded_actors)

    @property
    def actor_roles(self) -> dict[str, str]:
        """Actor id → role, as the source's per-actor usage and profiles list them (SMR ids are UUIDs)."""
        roles = {a["actor"]: a["role"] for a in self.actor_profiles or [] if a.get("actor") and a.get("role")}
        roles.update((self.source_spend or {}).get("roles") or {})
        return roles

    @property
    def downgraded_actors(self) -> list[dict]:
        """Roles or actors (beyond the orchestrator's own profile) that got another profile than asked."""
        changed = [a for a in self.actor_profiles or [] if a.get("requested") and a.get("actual")
                   and a["requested"] != a["actual"] and not (a.get("role") == "orchestrator" and not a.get("actor"))]
        per_actor = [a for a in changed if a.get("actor")]
        return per_actor or changed  # the actors themselves when the source names them, else their roles

    @property
    def spend_usd(self) -> Decimal:
        """What the run cost in all: the source's billed total when it states one, else the turns'."""
        return self.source_total_usd if self.source_total_usd is not None else self.cost_usd + self.other_meters_usd

    @property
    def reported_tokens(self) -> tuple[int, int]:
        """(in, out) as the source totals them when it does, else as the turns add up."""
        spend = self.source_spend or {}
        tokens_in, tokens_out = spend.get("tokens_in"), spend.get("tokens_out")
        return (tokens_in if isinstance(tokens_in, int) else self.tokens_in,
                tokens_out if isinstance(tokens_out, int) else self.tokens_out)

    @property
    def unaccounted(self) -> dict:
        """Per channel, what the source reports that the turns do not account for (empty: they agree)."""
        return dict((self.source_spend or {}).get("unaccounted") or {})

    @property
    def budget_used_fraction(self) -> float | None:
        """The larger of USD and token budget use, as a fraction (None when no budget is set). Against
        the source's own totals where it states them: a budget is spent whether or not a turn shows it."""
        parts = []
        if self.budget_usd:
            parts.append(float(self.spend_usd / self.budget_usd))
        if self.budget_tokens:
            parts.append(sum(self.reported_tokens) / self.budget_tokens)
        return max(parts) if parts else None

    @property
    def budget_overruns(self) -> list[dict]:
        """The budgets this run has exceeded, USD first: budget ("usd" | "tokens"), spent, limit, fraction.
        The same rule as `tracking.budget.over_budget` in SQL (the runs filter and the counts)."""
        out = []
        if self.budget_usd and self.spend_usd > self.budget_usd:
            out.append({"budget": "usd", "spent": self.spend_usd, "limit": self.budget_usd,
                        "fraction": float(self.spend_usd / self.budget_usd)})
        tokens = sum(self.reported_tokens)
        if self.budget_tokens and tokens > self.budget_tokens:
            out.append({"budget": "tokens", "spent": tokens, "limit": self.budget_tokens,
                        "fraction": tokens / self.budget_tokens})
        return out

    @property
    def is_over_budget(self) -> bool:
        return bool(self.budget_overruns)


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


class StateChange(models.Model):
    """One `state` event. The run's state is the latest of these by timestamp, whatever the arrival order."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="state_changes")
    event_id = models.CharField(max_length=200)
    state = models.CharField(max_length=20, choices=RunState)
    failure_family = models.CharField(max_length=100, blank=True)
    failure_detail = models.TextField(blank=True)
    failure_source = models.CharField(max_length=200, blank=True)
    ts = models.DateTimeField()

    class Meta:
        ordering = ["ts", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "event_id"], name="statechange_run_event_uniq")]


class Experiment(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="experiments")
    external_id = models.CharField(max_length=200)
    parent = models.ForeignKey("self", models.SET_NULL, null=True, blank=True, related_name="children")
    title = models.CharField(max_length=500, blank=True)
    hypothesis = models.TextField(blank=True)
    status = models.CharField(max_length=50, blank=True)
    verdict = models.CharField(max_length=50, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    metrics_before = models.JSONField(default=dict, blank=True)
    metrics_after = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created"]
        constraints = [models.UniqueConstraint(fields=["run", "external_id"], name="experiment_run_external_id_uniq")]

    def __str__(self) -> str:
        return self.title or self.external_id


class MetricPoint(models.Model):
    """The high-volume table; read through downsampling."""

    # No index of its own: (run, event_id) and (run, key, step) both lead with run, and a third
    # index on the hottest insert path cost ~15 % of ingest for nothing.
    run = models.ForeignKey(Run, models.CASCADE, related_name="metric_points", db_index=False)
    key = models.CharField(max_length=200)
    step = models.PositiveBigIntegerField()
    value = models.FloatField()
    ts = models.DateTimeField()
    event_id = models.CharField(max_length=200)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "event_id"], name="metric_run_event_uniq"),
            models.CheckConstraint(condition=finite("value"), name="metric_value_finite"),
        ]
        indexes = [
            # Series reads: one run's key in step order (downsampled charts, the metrics API).
            models.Index(fields=["run", "key", "step"], name="metric_run_key_step_idx"),
        ]


class TurnKind(models.TextChoices):
    DRIVER_INFERENCE = "driver_inference"
    CHILD_WORK = "child_work"


class AgentTurn(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="turns")
    event_id = models.CharField(max_length=200)
    turn = models.PositiveIntegerField()
    actor = models.CharField(max_length=200, default="driver")
    parent_actor = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=20, choices=TurnKind, default=TurnKind.DRIVER_INFERENCE)
    model = models.CharField(max_length=200, blank=True)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(default=Decimal(0), **USD)
    tool_calls = models.JSONField(default=list, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    ts = models.DateTimeField()

    class Meta:
        ordering = ["ts", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "event_id"], name="turn_run_event_uniq"),
            # An actor's turn happens once: a re-sent turn under a new id is still a duplicate.
            models.UniqueConstraint(fields=["run", "actor", "turn"], name="turn_run_actor_turn_uniq"),
            models.CheckConstraint(condition=Q(cost_usd__gte=0), name="turn_cost_nonnegative"),
        ]
        indexes = [
            # The turn timeline: one run's turns in time order.
            models.Index(fields=["run", "ts"], name="turn_run_ts_idx"),
        ]


def blob_storage_name(sha256: str, *, unique: str) -> str:
    """Where a blob's bytes live: fanned out by digest, with a per-write suffix (see services._save_blob)."""
    return f"blobs/{sha256[:2]}/{sha256[2:4]}/{sha256}-{unique}"


class ArtifactBlob(models.Model):
    """Stored bytes, addressed by content: the same bytes are stored once whatever the run or path."""

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    storage_name = models.CharField(max_length=300)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.sha256


class Artifact(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="artifacts")
    path = models.CharField(max_length=500)
    kind = models.CharField(max_length=20, choices=ArtifactKind, default=ArtifactKind.FILE)
    blob = models.ForeignKey(ArtifactBlob, models.PROTECT, related_name="artifacts")
    content_type = models.CharField(max_length=200, default="application/octet-stream")
    commit = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        # A version is (path, bytes, commit): the bytes are stored once (the blob), but the same bytes at
        # two commits — a revert, a rollback commit — are two versions with their own lineage.
        constraints = [models.UniqueConstraint(fields=["run", "path", "blob", "commit"],
                                               name="artifact_run_path_blob_commit_uniq")]

    def __str__(self) -> str:
        return f"{self.path}@{self.blob.sha256[:12]}"

    @property
    def sha256(self) -> str:
        return self.blob.sha256

    @property
    def size(self) -> int:
        return self.blob.size


class SubmissionStatus(models.TextChoices):
    CANDIDATE = "candidate"
    VERIFYING = "verifying"
    VERIFIED = "verified"
    INVALID = "invalid"
    APPROVED = "approved"
    REJECTED = "rejected"
    UPLOADED = "uploaded"
    RANKED = "ranked"


# What a project's numbers (best, leaderboard, best-so-far, regressions, carry-forward) are made of:
# never a submission the validator or a reviewer turned down, never an excluded one, and — unless the
# person looking asks for them — only submissions that passed verification.
NEVER_COUNTED = (SubmissionStatus.INVALID, SubmissionStatus.REJECTED)
VERIFIED_STATUSES = (SubmissionStatus.VERIFIED, SubmissionStatus.APPROVED, SubmissionStatus.UPLOADED,
                     SubmissionStatus.RANKED)
UNVERIFIED_STATUSES = (SubmissionStatus.CANDIDATE, SubmissionStatus.VERIFYING)


class SubmissionQuerySet(models.QuerySet):
    def counted(self, *, unverified: bool = False) -> SubmissionQuerySet:
        """Submissions that count in the project's numbers (see NEVER_COUNTED)."""
        rows = self.filter(excluded_at__isnull=True, run__excluded_at__isnull=True)
        if unverified:
            return rows.exclude(status__in=NEVER_COUNTED)
        return rows.filter(status__in=VERIFIED_STATUSES)


class VerificationOutcome(models.TextChoices):
    PASSED = "passed"
    FAILED = "failed"  # the validator ran and said no (non-zero exit)
    TIMED_OUT = "timed_out"
    CANNOT_VERIFY = "cannot_verify"  # no validator, missing toolchain or no artifact bytes


class Submission(models.Model):
    """A scored artifact: `{harness_id, score, artifact, timestamp}` — the point of a run."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="submissions")
    run = models.ForeignKey(Run, models.CASCADE, related_name="submissions")
    event_id = models.CharField(max_length=200)
    experiment = models.ForeignKey(Experiment, models.SET_NULL, null=True, blank=True, related_name="submissions")
    artifact = models.ForeignKey(Artifact, models.SET_NULL, null=True, blank=True, related_name="submissions")
    # What the score event named (a sha256 or a path); linked to `artifact` once that is uploaded.
    artifact_ref = models.CharField(max_length=500, blank=True)
    harness_id = models.CharField(max_length=200, blank=True)
    score = models.FloatField()
    details = models.JSONField(default=dict, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=20, choices=SubmissionStatus, default=SubmissionStatus.CANDIDATE)
    # Who put it up for review (asked for verification): with `require_second_reviewer`, their own
    # approval does not count.
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True,
                                    related_name="+")
    verification_outcome = models.CharField(max_length=20, choices=VerificationOutcome, blank=True)
    verification_output = models.TextField(blank=True)  # the tail, size-capped
    verification_exit_code = models.IntegerField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    uploaded_at = models.DateTimeField(null=True, blank=True)
    # The arena's own id or URL for the upload (Mark uploaded), so a result can be traced back.
    arena_ref = models.CharField(max_length=500, blank=True)
    # An admin took it out of the project's numbers (junk, a test, a misconfigured harness); reversible.
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    excluded_reason = models.TextField(blank=True)
    ts = models.DateTimeField()
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-ts", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "event_id"], name="submission_run_event_uniq"),
            models.CheckConstraint(condition=finite("score"), name="submission_score_finite"),
        ]
        indexes = [
            # The leaderboard: a project's submissions by score.
            models.Index(fields=["project", "score"], name="submission_project_score_idx"),
            # Sparklines and the score-over-time chart: a run's scores in time order.
            models.Index(fields=["run", "ts"], name="submission_run_ts_idx"),
            # The review queue: a project's submissions waiting in one status.
            models.Index(fields=["project", "status"], name="submission_project_status_idx"),
        ]

    objects = SubmissionQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.score:g} ({self.run.external_id})"

    @property
    def is_verified(self) -> bool:
        return self.status in VERIFIED_STATUSES

    @property
    def counts(self) -> bool:
        """In the project's numbers when unverified ones are included (the run page's view)."""
        return self.status not in NEVER_COUNTED and self.excluded_at is None


class SubmissionTransition(models.Model):
    """One step of a submission's lifecycle: who moved it from what to what, when and why."""

    submission = models.ForeignKey(Submission, models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=20, choices=SubmissionStatus)
    to_status = models.CharField(max_length=20, choices=SubmissionStatus)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    by_label = models.CharField(max_length=200)  # kept when the user is deleted; "system" for tasks
    reason = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created", "id"]


class Verdict(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"


class Review(models.Model):
    submission = models.ForeignKey(Submission, models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, models.PROTECT, related_name="reviews")
    verdict = models.CharField(max_length=10, choices=Verdict)
    comment = models.TextField(blank=True)
    # False: the proposer's own approval where a second person must approve (recorded, not counted).
    counted = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)


class ArenaResult(models.Model):
    submission = models.ForeignKey(Submission, models.CASCADE, related_name="arena_results")
    arena = models.CharField(max_length=200)
    rank = models.PositiveIntegerField(null=True, blank=True)
    arena_score = models.FloatField(null=True, blank=True)
    delta = models.FloatField(null=True, blank=True)  # against the previous recorded result
    delta_best = models.FloatField(null=True, blank=True)  # against the best recorded result before it
    rank_delta = models.IntegerField(null=True, blank=True)  # rank minus the previous rank (negative: moved up)
    note = models.TextField(blank=True)
    recorded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.PROTECT, related_name="arena_results")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(arena_score__isnull=True) | finite("arena_score"), name="arena_score_finite"
            )
        ]


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="checkpoints")
    external_id = models.CharField(max_length=200)
    label = models.CharField(max_length=500, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    restorable = models.BooleanField(default=True)
    failure_reason = models.TextField(blank=True)
    ts = models.DateTimeField()

    class Meta:
        ordering = ["ts", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "external_id"], name="checkpoint_run_external_id_uniq")]

    def __str__(self) -> str:
        return self.label or self.external_id


class RuntimeMessage(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    event_id = models.CharField(max_length=200)
    topic = models.CharField(max_length=200, blank=True)
    target = models.CharField(max_length=200, blank=True)
    mode = models.CharField(max_length=50, blank=True)
    body = models.TextField()
    ts = models.DateTimeField()

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "event_id"], name="message_run_event_uniq"),
            models.UniqueConstraint(fields=["run", "seq"], name="message_run_seq_uniq"),
        ]


class RollbackStatus(models.TextChoices):
    REQUESTED = "requested"
    DISPATCHED = "dispatched"
    ACCEPTED = "accepted"  # the source took the request (HTTP 202, SMR state "accepted") but has not confirmed it
    APPLIED = "applied"  # the source says it is done (webhook 2xx other than 202, a git commit, SMR "applied")
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
            models.UniqueConstraint(fields=["run"], condition=Q(status__in=["requested", "dispatched"]),
                                    name="rollback_one_open_per_run"),
            models.CheckConstraint(
                condition=(Q(target_submission__isnull=False) & Q(target_checkpoint__isnull=True))
                | (Q(target_submission__isnull=True) & Q(target_checkpoint__isnull=False)),
                name="rollback_exactly_one_target",
            )
        ]


class KnowledgeKind(models.TextChoices):
    NOTE = "note"
    FAILED_APPROACH = "failed_approach"
    ARENA_DELTA = "arena_delta"


class KnowledgeEntry(models.Model):
    project = models.ForeignKey(Project, models.CASCADE, related_name="knowledge_entries")
    kind = models.CharField(max_length=20, choices=KnowledgeKind, default=KnowledgeKind.NOTE)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    submission = models.ForeignKey(Submission, models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        verbose_name_plural = "knowledge entries"


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


class AuditEvent(models.Model):
    """Who did what to which object, and when. Written by services, never edited."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    actor_label = models.CharField(max_length=200)  # "alice", "token:ci-harness", "system"
    verb = models.CharField(max_length=100)
    project = models.ForeignKey(Project, models.CASCADE, null=True, blank=True, related_name="audit_events")
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=200)
    detail = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["project", "-created"], name="audit_project_created_idx")]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.verb} {self.object_type}:{self.object_id}"
