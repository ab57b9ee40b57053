"""What is in an archive: its format, the tables it holds and how their rows point at each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from functools import cached_property

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone

from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import (
    AgentTurn,
    AlertRule,
    ApiToken,
    ArenaResult,
    Artifact,
    ArtifactBlob,
    AuditEvent,
    BlobSummary,
    Checkpoint,
    Comment,
    Experiment,
    GuardEpisode,
    KnowledgeEntry,
    LoopFinding,
    Membership,
    MetricPoint,
    MetricRollup,
    ModelPrice,
    Notification,
    Project,
    ProjectFigures,
    ProjectInvitation,
    Review,
    Rollback,
    Run,
    RunControl,
    RunDaySpend,
    RunLaunch,
    RunLogBatch,
    RunLogLine,
    RunModelSpend,
    RunNote,
    RunParam,
    RunSnooze,
    RunTag,
    RuntimeMessage,
    SavedView,
    Scenario,
    ShareLink,
    SourceHealth,
    StateChange,
    Submission,
    SubmissionTransition,
    TurnBody,
    TurnRollup,
)

FORMAT = "smrweb.project-archive"


VERSION = 1


MANIFEST = "manifest.json"


MANIFEST_MAX_BYTES = 64 * 1024 * 1024  # a manifest lists every blob: large, but never this large


CHUNK_SIZE = 2000  # rows fetched per query chunk on export and inserted per bulk_create on import


COPY_BYTES = 1024 * 1024


USER_FILE = "data/user.jsonl"


USER_COLUMNS = ("email", "first_name", "last_name")  # carried besides the username (never passwords or flags)


class BackupError(TrackingError):
    """An archive that cannot be written or is refused; on import, nothing was written."""

    code = "backup_refused"


def _of_project(model: type[models.Model]) -> Callable[[Project], QuerySet]:
    return lambda project: model._default_manager.filter(project=project).order_by("pk")


def _of_runs(model: type[models.Model]) -> Callable[[Project], QuerySet]:
    return lambda project: model._default_manager.filter(run__project=project).order_by("pk")


def _of_submissions(model: type[models.Model]) -> Callable[[Project], QuerySet]:
    return lambda project: model._default_manager.filter(submission__project=project).order_by("pk")


@dataclass(frozen=True)
class Table:
    """One model's rows of a project, as one `data/<name>.jsonl` file."""

    name: str
    model: type[models.Model]
    rows: Callable[[Project], QuerySet]  # the project's rows, in an order an import preserves (pk)
    ref: bool = False  # rows carry a `ref` that other rows (or audit events) point at
    key: str = ""  # rows are pointed at by this column instead of a ref (scenario key, blob digest)
    omit: tuple[str, ...] = ()  # columns not carried; docs/backup.md says why
    extra: tuple[str, ...] = ()  # columns of the archive that are not model fields
    # (archive column, lookup) read with each row: how a row names a row without a ref (a turn body's turn)
    joined: tuple[tuple[str, str], ...] = ()
    chunk: int = 0  # at most this many rows per query chunk and per insert (tables of large rows)

    @cached_property
    def fields(self) -> list[models.Field]:
        """The carried columns. The link to the project is implicit (the archive holds one project)."""
        return [
            f
            for f in self.model._meta.concrete_fields
            if not f.primary_key and f.name not in self.omit and f.related_model is not Project
        ]

    @cached_property
    def project_fields(self) -> list[models.Field]:
        return [f for f in self.model._meta.concrete_fields if f.related_model is Project]

    @property
    def rows_per_chunk(self) -> int:
        return min(self.chunk, CHUNK_SIZE) if self.chunk else CHUNK_SIZE

    @property
    def file(self) -> str:
        return f"data/{self.name}.jsonl"


# In dependency order: every table comes after the tables its rows point at (Experiment.parent, the
# one self-reference, is set once all experiments are in). Users are written apart (USER_FILE).
TABLES: tuple[Table, ...] = (
    Table("scenario", Scenario, lambda p: Scenario.objects.filter(pk=p.scenario_id), key="key"),
    Table("project", Project, lambda p: Project.objects.filter(pk=p.pk), ref=True),
    # A lease belongs to a worker of the exporting deployment: never carried, so the importing side
    # polls at once instead of waiting for a stranger's lease to lapse.
    Table("source_health", SourceHealth, _of_project(SourceHealth), omit=("lease_until", "lease_owner")),
    Table("membership", Membership, _of_project(Membership), ref=True),
    Table("api_token", ApiToken, _of_project(ApiToken), ref=True),
    # Invitations grant access, like memberships: only with --trust. Their links are signed with this
    # deployment's SECRET_KEY, so they work on the importing side only if it shares the key.
    Table("invitation", ProjectInvitation, _of_project(ProjectInvitation), ref=True),
    Table("run", Run, _of_project(Run), ref=True),
    Table("state_change", StateChange, _of_runs(StateChange)),
    Table("experiment", Experiment, _of_runs(Experiment), ref=True),
    Table("metric_point", MetricPoint, _of_runs(MetricPoint)),
    Table("agent_turn", AgentTurn, _of_runs(AgentTurn)),
    # Prompts and responses the project captured: its data, carried like runtime messages (an archive is
    # kept as safe as a database backup). A body names its turn by the turn's event id in its run (unique
    # there), so turns need no ref. Up to 2 × SMRWEB_TURN_BODY_MAX_BYTES a row: 100 rows a chunk.
    Table(
        "turn_body",
        TurnBody,
        _of_runs(TurnBody),
        extra=("event_id",),
        joined=(("event_id", "turn__event_id"),),
        chunk=100,
    ),
    Table("checkpoint", Checkpoint, _of_runs(Checkpoint), ref=True),
    Table("runtime_message", RuntimeMessage, _of_runs(RuntimeMessage)),
    # Where the bytes live is the storage's business: the importing side stores them anew.
    Table(
        "artifact_blob",
        ArtifactBlob,
        lambda p: ArtifactBlob.objects.filter(artifacts__run__project=p).distinct().order_by("sha256"),
        key="sha256",
        omit=("storage_name",),
    ),
    Table("artifact", Artifact, _of_runs(Artifact), ref=True),
    Table("submission", Submission, _of_project(Submission), ref=True),
    Table("submission_transition", SubmissionTransition, _of_submissions(SubmissionTransition)),
    Table("review", Review, _of_submissions(Review)),
    Table("arena_result", ArenaResult, _of_submissions(ArenaResult), ref=True),
    Table("rollback", Rollback, _of_runs(Rollback), ref=True),
    # Steering and launches: who asked a run for what, and what the source answered (like rollbacks).
    Table("run_control", RunControl, _of_runs(RunControl), ref=True),  # guard episodes name their pause
    Table("guard_episode", GuardEpisode, _of_runs(GuardEpisode)),  # when a spend guard acted, once each
    Table("run_launch", RunLaunch, _of_project(RunLaunch), ref=True),  # audit events name launches
    Table("knowledge_entry", KnowledgeEntry, _of_project(KnowledgeEntry), ref=True),
    # What people wrote: project data like the knowledge entries, always carried.
    Table("run_tag", RunTag, _of_runs(RunTag)),
    Table("run_param", RunParam, _of_runs(RunParam)),  # what the harness logged (MLflow params)
    # A run's log and the batches it came in (their ids keep a retried push a no-op after a restore too).
    Table("run_log_line", RunLogLine, _of_runs(RunLogLine)),
    Table("run_log_batch", RunLogBatch, _of_runs(RunLogBatch)),
    Table("run_note", RunNote, _of_runs(RunNote)),
    Table("comment", Comment, _of_project(Comment), ref=True),
    Table("saved_view", SavedView, _of_project(SavedView), ref=True),  # audit events name shared views
    # A project's read-only share links (a leaderboard's names no project: in no archive). Their tokens are
    # random (only the hash is kept), so they open on the importing side too: only with --trust, like tokens.
    Table("share_link", ShareLink, _of_project(ShareLink), ref=True),
    Table("run_snooze", RunSnooze, _of_runs(RunSnooze)),
    Table("loop_finding", LoopFinding, _of_runs(LoopFinding)),
    # Alert rules send to addresses (and sign with a secret), and their notifications (and the mentions in
    # comments, which land in the same inboxes) are what was sent to whom: only with --trust, like
    # memberships and tokens.
    Table("alert_rule", AlertRule, _of_project(AlertRule), ref=True),
    Table(
        "notification",
        Notification,
        lambda p: Notification.objects.filter(
            Q(rule__project=p) | Q(comment__project=p) | Q(project=p)
        ).order_by("pk"),
    ),
    # Project-scoped events only (scenario edits have no project). `object_ref` replaces object_id
    # when the event names a row of the archive.
    Table("audit_event", AuditEvent, _of_project(AuditEvent), extra=("object_ref",)),
)


# Derived from the archived rows, never archived: a restore computes them again (`TurnRollup`, the run
# page's turn aggregates, holds turn ids that are new on the importing side).
# Blob summaries are read from the bytes again on the importing side when a page first shows them.
# Metric rollups are computed from the restored points; the overview's figures from everything.
DERIVED: tuple[type[models.Model], ...] = (
    *(TurnRollup, BlobSummary, MetricRollup),
    *(ProjectFigures, RunDaySpend, RunModelSpend),
)


# The instance's own settings, not a project's data: never in a project archive (the importing instance
# prices new turns with its own table; archived turns keep the cost and origin they were stored with).
INSTANCE: tuple[type[models.Model], ...] = (ModelPrice,)


TABLE_BY_NAME = {table.name: table for table in TABLES}


MAX_EXPANSION = (
    200  # the most a blob member may unpack to, per packed byte (export_project stores, not packs,
)


# bytes that do not shrink; text compresses well under this)
# What only an operator who trusts the archive restores (`--trust`): they grant access or send requests.
TRUSTED_ONLY = ("membership", "api_token", "invitation", "alert_rule", "notification", "share_link")
# The scenario fields only such an import restores (finding N7): commands a worker runs on submissions, and
# sharing the scenario with everyone who may create a project.
SCENARIO_TRUSTED_ONLY = ("validator_command", "scoring_command", "shared")


# AuditEvent.object_type is the lower-cased model name of the object (services.record_audit).
AUDITED = {table.model.__name__.lower(): table.model for table in TABLES if table.ref}


COUNT_KEY = {USER_FILE: "user", **{table.file: table.name for table in TABLES}}  # data file → manifest count


DATA_FILES = frozenset(COUNT_KEY)


SCENARIO, PROJECT, BLOBS = TABLE_BY_NAME["scenario"], TABLE_BY_NAME["project"], TABLE_BY_NAME["artifact_blob"]


def default_archive_name(slug: str) -> str:
    return f"{slug}-{timezone.now().astimezone(UTC):%Y%m%dT%H%M%SZ}.smrweb.zip"


def _has_field(model: type[models.Model], name: str) -> bool:
    try:
        model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return True
