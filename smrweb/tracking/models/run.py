"""Runs and what they record: state changes, experiments, metric points, agent turns, checkpoints and
runtime messages."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from smrweb.tracking.models.common import USD, finite
from smrweb.tracking.models.project import Project
from smrweb.tracking.pricing import Origin


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
    # Closed by a reviewer: the harness went silent (crashed, killed) and will not report an end itself.
    ABANDONED = "abandoned"


TERMINAL_STATES = frozenset(
    {RunState.DONE, RunState.FAILED, RunState.STOPPED, RunState.CANCELED, RunState.ABANDONED}
)
# `Run.is_stalled` in SQL: the runs filter and the project page's counts both read it from here.
STALLED = Q(stalled_since__isnull=False) & ~Q(state__in=TERMINAL_STATES)


class Run(models.Model):
    project = models.ForeignKey(Project, models.CASCADE, related_name="runs")
    external_id = models.CharField(max_length=200)
    # What people call the run on pages (the external id stays visible); "" shows the external id.
    display_name = models.CharField(max_length=200, blank=True)
    # Pinned runs come first in the project's runs table and the runs API, whatever the sort.
    pinned = models.BooleanField(default=False)
    state = models.CharField(max_length=20, choices=RunState, default=RunState.RUNNING)
    failure_family = models.CharField(max_length=100, blank=True)
    failure_detail = models.TextField(blank=True)
    failure_source = models.CharField(max_length=200, blank=True)
    stalled_since = models.DateTimeField(null=True, blank=True)
    requested_profile = models.CharField(max_length=200, blank=True)
    actual_profile = models.CharField(max_length=200, blank=True)
    budget_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    budget_usd = models.DecimalField(null=True, blank=True, **USD)
    # Spend, recomputed from agent turns by the write path: total == sum(turns) == driver + child +
    # role unknown (turns of actors whose role no source states; the `unknown_*` properties).
    # SPEND_FIELDS names them for the places that read or list them all (run page versions, admin, sync).
    SPEND_FIELDS = (
        "tokens_in",
        "tokens_out",
        "cost_usd",
        "driver_tokens_in",
        "driver_tokens_out",
        "driver_cost_usd",
        "child_tokens_in",
        "child_tokens_out",
        "child_cost_usd",
        "unpriced_turns",
        "unpriced_models",
        "failed_turns",
    )
    UNKNOWN_SPEND = ("unknown_tokens_in", "unknown_tokens_out", "unknown_cost_usd")  # derived: properties
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
    # Turns with tokens and no cost that the price table could not price (their cost is counted as 0):
    # how many, and how many per model name, so a page says "N turns unpriced (model…)", never a silent $0.
    unpriced_turns = models.PositiveIntegerField(default=0)
    unpriced_models = models.JSONField(default=dict, blank=True)
    failed_turns = models.PositiveIntegerField(default=0)  # turns that are failed calls (`AgentTurn.failed`)
    # The run's log (`models.logs`): lines kept, lines over the per-run cap (counted, not kept), and how
    # many of them are warnings or worse, kept by the log write path so pages never count 100,000 rows.
    log_lines = models.PositiveIntegerField(default=0)
    log_lines_dropped = models.PositiveIntegerField(default=0)
    log_warnings = models.PositiveIntegerField(default=0)
    # SMR run log archives the poller could not read (no location it may fetch, not gzip/text, too big):
    # each is a RunLogBatch with its `problem`; counted here so the run page can say so without a query.
    log_archives_unreadable = models.PositiveIntegerField(default=0)
    # Score summary, recomputed from submissions by the write path: the best of the submissions that
    # count (not invalid, rejected or excluded), the latest of those not excluded, and how many in all.
    best_score = models.FloatField(null=True, blank=True)
    latest_score = models.FloatField(null=True, blank=True)
    score_count = models.PositiveIntegerField(default=0)
    # The review queue's share of the run, recomputed with the scores (not excluded ones): waiting for
    # someone (candidate, verifying, verified) and waiting to count (candidate, verifying).
    queue_waiting = models.PositiveIntegerField(default=0)
    queue_pending = models.PositiveIntegerField(default=0)
    # Lineage: the run this one was started from ("start the next run"), shown on both runs' pages.
    parent = models.ForeignKey("self", models.SET_NULL, null=True, blank=True, related_name="children")
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
    # False when some of the run's results could not be reached by any way the source offers (the
    # experiment-results window is capped at 500): its best is shown as "incomplete: N results not readable
    # from the source". N is `results_missing`, None when the source does not say how many it holds.
    results_complete = models.BooleanField(default=True)
    results_missing = models.PositiveIntegerField(null=True, blank=True)
    # Requested vs resolved profile per role / actor, as the source lists them (worker-level downgrades).
    actor_profiles = models.JSONField(default=list, blank=True)
    # An admin took the whole run out of the project's numbers (a test run, junk); reversible.
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    excluded_reason = models.TextField(blank=True)
    # Archived: out of the default lists and read-only (nothing is ingested, reviewed, rolled back or
    # steered) until restored; its scores still count (exclusion is the tool for numbers). See
    # docs/retention.md.
    archived_at = models.DateTimeField(null=True, blank=True)
    archived_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Retention replaced these metric series by a downsampled copy: key -> {"kept": n, "of": n before}.
    metrics_downsampled = models.JSONField(default=dict, blank=True)
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
            # The project page's version (its runs' count and latest change), read from the index alone.
            models.Index(fields=["project", "updated"], name="run_project_updated_idx"),
            # The project chart's and the leaderboard's best runs, and the excluded ones, in index order.
            models.Index(fields=["project", "excluded_at", "best_score"], name="run_project_best_idx"),
            # The runs table's first page in its default order (pinned first, then the latest activity).
            models.Index(
                fields=["project", "archived_at", "pinned", "last_progress_at", "id"],
                name="run_project_table_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.external_id}"

    def get_absolute_url(self) -> str:
        return reverse("dashboard:run-detail", args=[self.project.slug, self.external_id])

    @property
    def name(self) -> str:
        """What to call the run: its display name, else its external id."""
        return self.display_name or self.external_id

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None or self.project.archived_at is not None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def is_stalled(self) -> bool:
        return self.stalled_since is not None and not self.is_terminal

    @property
    def is_downgraded(self) -> bool:
        return bool(
            self.requested_profile and self.actual_profile and self.requested_profile != self.actual_profile
        ) or bool(self.downgraded_actors)

    # Turns of actors whose role no source states: what the totals hold beyond driver + child.
    @property
    def unknown_tokens_in(self) -> int:
        return self.tokens_in - self.driver_tokens_in - self.child_tokens_in

    @property
    def unknown_tokens_out(self) -> int:
        return self.tokens_out - self.driver_tokens_out - self.child_tokens_out

    @property
    def unknown_cost_usd(self) -> Decimal:
        # Kept to the micro-dollar as the columns are: SQLite's sums can leave a float residue such as
        # -1e-10, which must read as zero (and never as "-0.000000" spend of unknown role).
        rest = Decimal(self.cost_usd) - Decimal(self.driver_cost_usd) - Decimal(self.child_cost_usd)
        return rest.quantize(Decimal("0.000001")) + 0

    @property
    def actor_roles(self) -> dict[str, str]:
        """Actor id → role, as the source's per-actor usage and profiles list them (SMR ids are UUIDs)."""
        roles = {a["actor"]: a["role"] for a in self.actor_profiles or [] if a.get("actor") and a.get("role")}
        roles.update((self.source_spend or {}).get("roles") or {})
        return roles

    @property
    def downgraded_actors(self) -> list[dict]:
        """Roles or actors (beyond the orchestrator's own profile) that got another profile than asked."""
        changed = [
            a
            for a in self.actor_profiles or []
            if a.get("requested")
            and a.get("actual")
            and a["requested"] != a["actual"]
            and not (a.get("role") == "orchestrator" and not a.get("actor"))
        ]
        per_actor = [a for a in changed if a.get("actor")]
        return per_actor or changed  # the actors themselves when the source names them, else their roles

    @property
    def spend_usd(self) -> Decimal:
        """What the run cost in all: the source's billed total when it states one, else the turns'."""
        return (
            self.source_total_usd
            if self.source_total_usd is not None
            else self.cost_usd + self.other_meters_usd
        )

    @property
    def reported_tokens(self) -> tuple[int, int]:
        """(in, out) as the source totals them when it does, else as the turns add up."""
        spend = self.source_spend or {}
        tokens_in, tokens_out = spend.get("tokens_in"), spend.get("tokens_out")
        return (
            tokens_in if isinstance(tokens_in, int) else self.tokens_in,
            tokens_out if isinstance(tokens_out, int) else self.tokens_out,
        )

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
            out.append(
                {
                    "budget": "usd",
                    "spent": self.spend_usd,
                    "limit": self.budget_usd,
                    "fraction": float(self.spend_usd / self.budget_usd),
                }
            )
        tokens = sum(self.reported_tokens)
        if self.budget_tokens and tokens > self.budget_tokens:
            out.append(
                {
                    "budget": "tokens",
                    "spent": tokens,
                    "limit": self.budget_tokens,
                    "fraction": tokens / self.budget_tokens,
                }
            )
        return out

    @property
    def is_over_budget(self) -> bool:
        return bool(self.budget_overruns)


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
        constraints = [
            models.UniqueConstraint(fields=["run", "external_id"], name="experiment_run_external_id_uniq")
        ]

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
    # A polled source that states the actor's role nowhere (sources/smr_usage.py): shown as such and
    # counted in reconciliation, never booked as driver by default.
    ROLE_UNKNOWN = "role_unknown", "role unknown"


class AgentTurn(models.Model):
    # Indexed by the (run, id) index below (and every constraint and index here leads with the run).
    run = models.ForeignKey(Run, models.CASCADE, related_name="turns", db_index=False)
    event_id = models.CharField(max_length=200)
    turn = models.PositiveIntegerField()
    actor = models.CharField(max_length=200, default="driver")
    parent_actor = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=20, choices=TurnKind, default=TurnKind.DRIVER_INFERENCE)
    model = models.CharField(max_length=200, blank=True)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    # Parts of tokens_in / tokens_out that providers bill at other prices (smrweb.tracking.pricing).
    tokens_cached_in = models.PositiveBigIntegerField(default=0)
    tokens_cache_write = models.PositiveBigIntegerField(default=0)
    tokens_reasoning = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(default=Decimal(0), **USD)
    cost_origin = models.CharField(max_length=8, choices=Origin.CHOICES, default=Origin.REPORTED)
    tool_calls = models.JSONField(default=list, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # A failed call (`failed`): its error class or code, HTTP status and message (cut to ERROR_MESSAGE_MAX).
    failed = models.BooleanField(default=False)
    error = models.CharField(max_length=200, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error_message = models.TextField(blank=True)
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
            # A run's turns past an id (the turn rollup's mark): an exact range, not every turn of the run
            # filtered (a run-only index) nor every later turn of every run (the primary key).
            models.Index(fields=["run", "id"], name="turn_run_id_idx"),
            # A run's failed calls, without reading its other turns.
            models.Index(fields=["run", "id"], condition=Q(failed=True), name="turn_run_failed_idx"),
        ]


class TurnBody(models.Model):
    """A turn's prompt and response, as the source sent them (chat messages rendered as text), kept apart
    from `AgentTurn`: the timeline, the rollups and the turn table scan turns and never read these, which
    can be 2 × SMRWEB_TURN_BODY_MAX_BYTES each. Stored only when the project captures bodies; a text over
    the cap is stored cut, ending in a marker that says how many bytes were cut (`*_cut`)."""

    turn = models.OneToOneField(AgentTurn, models.CASCADE, primary_key=True, related_name="body")
    # The run again, so a run's or a project's bodies are deleted, counted and archived without a join.
    run = models.ForeignKey(Run, models.CASCADE, related_name="+")
    prompt = models.TextField(blank=True)
    response = models.TextField(blank=True)
    prompt_bytes = models.PositiveBigIntegerField(default=0)  # the size sent (UTF-8), before any cut
    response_bytes = models.PositiveBigIntegerField(default=0)
    prompt_cut = models.PositiveBigIntegerField(default=0)  # bytes cut off to fit the cap
    response_cut = models.PositiveBigIntegerField(default=0)


class TurnRollup(models.Model):
    """A run's agent turns aggregated, kept in the database by the write path (`services.ingest`, in
    the batch's transaction): what the run page's timeline and actor tree read when the cache lost its
    copy, so a cold page reads one row, not every turn. Derived data: checked against the run's summary
    columns on every read and computed again from the rows on any difference; not archived (a restore
    rebuilds it). `buckets` holds `[bucket, kind, turns, tokens in, tokens out, micro-USD]` per bucket
    of `width` seconds since the Unix epoch; `actors` `[actor, parent, kind, model, turns, tokens in,
    tokens out, micro-USD, first µs, last µs]` (µs since the epoch); `hwm` the highest turn id in it."""

    run = models.OneToOneField(Run, models.CASCADE, primary_key=True, related_name="turn_rollup")
    hwm = models.BigIntegerField(default=0)
    turn_count = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    width = models.PositiveBigIntegerField(default=1)
    first_ts = models.DateTimeField(null=True, blank=True)
    last_ts = models.DateTimeField(null=True, blank=True)
    buckets = models.JSONField(default=list, blank=True)
    actors = models.JSONField(default=list, blank=True)


class MetricRollup(models.Model):
    """One bucket of a run's metric series at one fixed width in steps, kept by the write path
    (`services.metric_rollups`, in the batch's transaction) so a long series' chart reads O(buckets)
    rows, not every point. `width` 0 is the whole series (one row: its count and step range); else the
    bucket holds steps [bucket * width, (bucket + 1) * width). `total` is the sum of the values, NULL
    once it could overflow (a chart then reads the points). Derived: rebuilt wherever points are
    deleted or rewritten; not archived (a restore rebuilds it)."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="metric_rollups", db_index=False)
    key = models.CharField(max_length=200)
    width = models.PositiveBigIntegerField()
    bucket = models.PositiveBigIntegerField()
    n = models.PositiveBigIntegerField()
    total = models.FloatField(null=True)
    low = models.FloatField()
    high = models.FloatField()
    first_step = models.PositiveBigIntegerField()
    last_step = models.PositiveBigIntegerField()
    last_value = models.FloatField()  # of the point with the highest step (of those, the last stored)

    # The bucket widths kept, in steps: 16 × 4^k up to 2^62 (the contract's largest step). A chart of P
    # buckets over a span S reads the widest width ≤ S/P: fewer than 4P rows, whatever the point count.
    WIDTHS = tuple(16 * 4**k for k in range(30))

    class Meta:
        constraints = [
            # Also the read index: one run's key at one width, in bucket order.
            models.UniqueConstraint(fields=["run", "key", "width", "bucket"], name="metric_rollup_uniq"),
        ]


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="checkpoints")
    external_id = models.CharField(max_length=200)
    label = models.CharField(max_length=500, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    restorable = models.BooleanField(default=True)
    failure_reason = models.TextField(blank=True)
    # The checkpoint this one continues, as the source names it (SMR's `parent_checkpoint_id`): the run's
    # own previous one, or — for a run branched from a checkpoint — a checkpoint of another run of the
    # project, which makes this run a branch of that one in the tree of attempts (queries/tree.py).
    parent_external_id = models.CharField(max_length=200, blank=True)
    ts = models.DateTimeField()

    class Meta:
        ordering = ["ts", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "external_id"], name="checkpoint_run_external_id_uniq")
        ]
        indexes = [
            # The tree of attempts: a branch's parent checkpoint found by the id the source gave it.
            models.Index(fields=["external_id"], name="checkpoint_external_id_idx"),
        ]

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


class RunParam(models.Model):
    """A run's parameter (MLflow's params): `key` → `value`, logged once. Like MLflow, a logged value never
    changes: logging the same value again is a no-op, another value is refused."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="params")
    key = models.CharField(max_length=250)
    value = models.CharField(max_length=6000, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["key"]
        constraints = [
            # Also the runs filter's index: `?param=` asks, per run, for a key and value.
            models.UniqueConstraint(fields=["run", "key"], name="runparam_run_key_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"
