"""Deleting tracked rows: the summaries they fed are recomputed, and bytes nothing holds go.

Whole runs and projects are deleted by project admins with a typed confirmation, audited with what went
("run.deleted", "project.deleted": runs, turns, metric points, submissions, artifacts, blobs and bytes
freed); a project's audit trail survives it (AuditEvent.project is SET_NULL, the slug is in the detail).
Content-addressed blobs go once no artifact holds them (`collect_unreferenced_blobs`, race-safe)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.db.models import ProtectedError, Sum
from django.utils import timezone

from smrweb.tracking.errors import DeletionRefused, NotAllowed
from smrweb.tracking.models import (
    AgentTurn,
    ApiToken,
    Artifact,
    ArtifactBlob,
    AuditVerb,
    MetricPoint,
    MetricRollup,
    Project,
    Role,
    Rollback,
    Run,
    RunLogLine,
    Submission,
    TurnBody,
)
from smrweb.tracking.services import metric_rollups
from smrweb.tracking.services.archive import _allows
from smrweb.tracking.services.artifacts import _chunks, collect_unreferenced_blobs
from smrweb.tracking.services.audit import record_audit
from smrweb.tracking.services.figures import rebuild_day_spend, rebuild_project_figures
from smrweb.tracking.services.rollups import rebuild_turn_rollups
from smrweb.tracking.services.runs import recompute_scores, recompute_spend, recompute_state


def delete_event_rows(rows) -> int:
    """Delete event-derived rows (turns, scores, state changes, …) and recompute their runs' summaries.
    Artifacts take their bytes along when nothing else holds them (red-team finding 10)."""
    blob_ids = set(rows.values_list("blob_id", flat=True)) if rows.model is Artifact else set()
    with transaction.atomic():
        run_ids = set(rows.values_list("run_id", flat=True))
        series = (
            set(rows.values_list("run_id", "key").order_by().distinct())
            if rows.model is MetricPoint
            else set()
        )
        deleted, _ = rows.delete()
        for run in Run.objects.select_for_update().select_related("project__scenario").filter(pk__in=run_ids):
            fields = recompute_spend(run) + recompute_scores(run) + recompute_state(run)
            run.save(update_fields=[*fields, "updated"])
        if rows.model is AgentTurn:  # under the runs' locks, like the summaries
            rebuild_turn_rollups(run_ids)
            rebuild_day_spend(run_ids)
        for run_id in run_ids & {run_id for run_id, _ in series}:
            metric_rollups.rebuild(run_id, {key for r, key in series if r == run_id})
        projects = Run.objects.filter(pk__in=run_ids).values_list("project_id", flat=True)
        for project_id in sorted(set(projects)):
            rebuild_project_figures(project_id)  # the sparkline's window may have lost scores
    if blob_ids:
        collect_unreferenced_blobs(ArtifactBlob.objects.filter(pk__in=blob_ids))
    return deleted


@dataclass(frozen=True)
class DeletionSummary:
    """What deleting some runs takes with it (the confirmation page and the audit row say the same)."""

    runs: int
    turns: int
    metric_points: int
    submissions: int
    artifacts: int
    blobs_freed: int  # stored files no other run holds: removed from the artifact storage
    bytes_freed: int

    def as_detail(self) -> dict[str, int]:
        return asdict(self)


def deletion_summary(target: Run | Project) -> DeletionSummary:
    return runs_summary(list(_runs_of(target).values_list("pk", flat=True)))


def runs_summary(run_ids: list[int]) -> DeletionSummary:
    """What deleting these runs together takes (a blob they share counts as freed once)."""
    runs = Run.objects.filter(pk__in=run_ids)
    blob_ids = _blob_ids(run_ids)
    freed = _freed_blobs(blob_ids, run_ids)
    return DeletionSummary(
        runs=len(run_ids),
        turns=AgentTurn.objects.filter(run__in=runs).count(),
        metric_points=MetricPoint.objects.filter(run__in=runs).count(),
        submissions=Submission.objects.filter(run__in=runs).count(),
        artifacts=Artifact.objects.filter(run__in=runs).count(),
        blobs_freed=len(freed),
        bytes_freed=sum(
            ArtifactBlob.objects.filter(pk__in=chunk).aggregate(n=Sum("size"))["n"] or 0
            for chunk in _chunks(sorted(freed))
        ),
    )


def _runs_of(target: Run | Project):
    return (
        Run.objects.filter(project=target)
        if isinstance(target, Project)
        else Run.objects.filter(pk=target.pk)
    )


def _blob_ids(run_ids: list[int]) -> set[int]:
    blob_ids: set[int] = set()
    for chunk in _chunks(run_ids):
        blob_ids.update(Artifact.objects.filter(run_id__in=chunk).values_list("blob_id", flat=True))
    return blob_ids


def _freed_blobs(blob_ids: set[int], run_ids: list[int]) -> set[int]:
    """Of these blobs, those no artifact outside these runs holds."""
    gone = set(run_ids)
    held = set()
    for chunk in _chunks(sorted(blob_ids)):
        held.update(
            blob_id
            for blob_id, run_id in Artifact.objects.filter(blob_id__in=chunk).values_list("blob_id", "run_id")
            if run_id not in gone
        )
    return blob_ids - held


def deletion_refusal(user: Any, target: Run | Project, *, have: str | None | bool = False) -> str:
    """Why `user` may not delete `target` ("" when they may): project admins delete runs and projects
    (not tokens); a run must have finished (a live one would come back with its next event). `have`:
    the user's role when the caller already read it."""
    project = target if isinstance(target, Project) else target.project
    if isinstance(user, ApiToken) or not _allows(project, user, Role.ADMIN, have):
        return f"Deleting needs the admin role in {project.slug}."
    if isinstance(target, Run) and not target.is_terminal:
        return (
            f"Run {target.external_id} is {target.state}: close it (or let it finish) before deleting it, "
            "or its next event would bring it back."
        )
    return ""


def may_delete(user: Any, target: Run | Project, *, have: str | None | bool = False) -> bool:
    return not deletion_refusal(user, target, have=have)


def confirmation_word(target: Run | Project) -> str:
    """What the person types to confirm: the run's id, the project's slug."""
    return target.slug if isinstance(target, Project) else target.external_id


def _check(user: Any, target: Run | Project, confirm: str) -> None:
    if refusal := deletion_refusal(user, target):
        raise NotAllowed(refusal) if "admin role" in refusal else DeletionRefused(refusal)
    word = confirmation_word(target)
    if (confirm or "").strip() != word:
        raise DeletionRefused(f"Type {word} to confirm; nothing was deleted.")


def _delete_run_rows(run: Run) -> None:
    """One run and everything of it, in the caller's transaction. The high-volume tables go first in one
    statement each (no rows loaded); the rest through Django's collector (submissions, reviews, …)."""
    MetricPoint.objects.filter(run=run)._raw_delete(MetricPoint.objects.db)
    MetricRollup.objects.filter(run=run)._raw_delete(MetricRollup.objects.db)
    TurnBody.objects.filter(run=run)._raw_delete(TurnBody.objects.db)  # before the turns they point at
    AgentTurn.objects.filter(run=run)._raw_delete(AgentTurn.objects.db)
    RunLogLine.objects.filter(run=run)._raw_delete(RunLogLine.objects.db)
    try:
        with transaction.atomic():
            # The run's own rollbacks first: their targets (its submissions, checkpoints) are PROTECTed,
            # which Django's collector enforces even when both sides are being deleted.
            Rollback.objects.filter(run=run).delete()
            Run.objects.filter(pk=run.pk).delete()
    except ProtectedError as exc:
        raise DeletionRefused(
            f"Run {run.external_id} cannot be deleted: a rollback in another run points at one of its "
            f"submissions or checkpoints ({len(exc.protected_objects)} row(s)). Nothing was deleted."
        ) from exc


def delete_run(run: Run, *, by: Any, confirm: str, reason: str = "") -> DeletionSummary:
    """Delete a finished run with everything it recorded; its bytes go when no other run holds them."""
    _check(by, run, confirm)
    return _delete_runs_now(run.project, [run], by=by, reason=reason)


def _delete_runs_now(project: Project, runs: list[Run], *, by: Any, reason: str = "") -> DeletionSummary:
    """Delete these runs of one project, one transaction each (audited "run.deleted"), then their bytes."""
    total = runs_summary([r.pk for r in runs])
    blob_ids: set[int] = set()
    for run in runs:
        summary = deletion_summary(run)
        held = _blob_ids([run.pk])
        with transaction.atomic():
            locked = Run.objects.select_for_update(of=("self",)).filter(pk=run.pk).first()
            if locked is None:
                continue  # deleted meanwhile
            record_audit(
                by,
                AuditVerb.RUN_DELETED,
                locked,
                project=project,
                run=locked.external_id,
                **({"reason": reason} if reason else {}),
                **summary.as_detail(),
            )
            _delete_run_rows(locked)
            rebuild_project_figures(project.pk)
        blob_ids |= held
    for chunk in _chunks(sorted(blob_ids)):
        collect_unreferenced_blobs(ArtifactBlob.objects.filter(pk__in=chunk))
    return total


RUN_BATCH = 50


def delete_project(project: Project, *, by: Any, confirm: str) -> DeletionSummary:
    """Delete a project: archived first (nothing comes in meanwhile), its runs in batches (one
    transaction per RUN_BATCH runs, so memory and lock time stay flat), then the project row, its
    members, tokens and settings. The "project.deleted" audit row (with the slug and the counts) and
    the project's earlier trail outlive it."""
    _check(by, project, confirm)
    summary = deletion_summary(project)
    slug = project.slug
    blob_ids = _blob_ids(list(project.runs.values_list("pk", flat=True)))
    Project.objects.filter(pk=project.pk, archived_at__isnull=True).update(
        archived_at=timezone.now(), archived_by=by if getattr(by, "is_authenticated", False) else None
    )
    while True:
        batch = list(project.runs.order_by("pk")[:RUN_BATCH])
        if not batch:
            break
        with transaction.atomic():
            for run in batch:
                _delete_run_rows(run)
            rebuild_project_figures(project.pk)  # archived meanwhile, but shown when asked for
    with transaction.atomic():
        record_audit(
            by, AuditVerb.PROJECT_DELETED, project, project=project, project_slug=slug, **summary.as_detail()
        )
        Project.objects.filter(pk=project.pk).delete()
    for chunk in _chunks(sorted(blob_ids)):
        collect_unreferenced_blobs(ArtifactBlob.objects.filter(pk__in=chunk))
    return summary


@dataclass(frozen=True)
class StoredBodies:
    turns: int
    bytes: int  # as stored (cut bodies count what was kept)


def stored_turn_bodies(project: Project) -> StoredBodies:
    """How many of the project's turns keep a prompt or response, and their size (the settings page)."""
    rows = TurnBody.objects.filter(run__project=project)
    sizes = rows.aggregate(
        p=Sum("prompt_bytes"), r=Sum("response_bytes"), pc=Sum("prompt_cut"), rc=Sum("response_cut")
    )
    kept = sum(sizes[k] or 0 for k in ("p", "r")) - sum(sizes[k] or 0 for k in ("pc", "rc"))
    return StoredBodies(turns=rows.count(), bytes=kept)


def delete_turn_bodies(project: Project, *, by: Any) -> int:
    """Delete every stored prompt and response of the project's turns (the turns stay), audited with how
    many; returns how many turns lost theirs. Turning capture off keeps what was stored: this is the way
    to remove it."""
    if not project.allows(by, Role.ADMIN):
        raise NotAllowed("Deleting stored prompt and response bodies needs the admin role.")
    with transaction.atomic():
        deleted, _ = TurnBody.objects.filter(run__project=project).delete()
        record_audit(by, AuditVerb.PROJECT_TURN_BODIES_DELETED, project, project=project, turns=deleted)
    return deleted
