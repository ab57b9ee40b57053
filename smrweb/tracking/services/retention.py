"""The per-project retention policy (beat's apply_retention, `manage.py retention`, docs/retention.md).

Two rules, both off when their setting is empty:
- metric series of runs that finished more than `retention_metric_days` ago are cut to at most
  `retention_keep_points` points per series: LTTB keeps the line's shape (first and last always), and the
  series' lowest and highest points are kept too; the run records which series were cut and from how
  many points (`Run.metrics_downsampled`), so its charts say so;
- archived runs are deleted `retention_archived_run_days` after they were archived (as an admin's delete
  would: audited "run.deleted", bytes collected).

A dry run goes through the same code and the same selection and only skips the writes, so its counts are
what a real run removes (tests/tracking/test_retention.py holds the two equal)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from smrweb.core.downsample import lttb
from smrweb.tracking.errors import InvalidInput, NotAllowed, TrackingError
from smrweb.tracking.models import TERMINAL_STATES, ApiToken, AuditVerb, MetricPoint, Project, Role, Run
from smrweb.tracking.services import metric_rollups
from smrweb.tracking.services.audit import record_audit
from smrweb.tracking.services.deletion import DeletionSummary, _delete_runs_now, runs_summary

log = logging.getLogger(__name__)

KEEP_MIN, KEEP_MAX = 10, 100_000


@dataclass(frozen=True)
class SeriesCut:
    run: str  # external id
    key: str
    points: int  # before
    kept: int


@dataclass
class RetentionReport:
    project: str
    dry_run: bool
    now: datetime
    series: list[SeriesCut] = field(default_factory=list)
    runs_deleted: list[str] = field(default_factory=list)
    deleted: DeletionSummary = field(default_factory=lambda: DeletionSummary(0, 0, 0, 0, 0, 0, 0))

    @property
    def points_removed(self) -> int:
        return sum(s.points - s.kept for s in self.series)

    @property
    def removes_anything(self) -> bool:
        return bool(self.series or self.runs_deleted)

    def as_dict(self) -> dict:
        return {
            "project": self.project,
            "dry_run": self.dry_run,
            "series_downsampled": len(self.series),
            "metric_points_removed": self.points_removed,
            "runs_deleted": len(self.runs_deleted),
            **{f"deleted_{k}": v for k, v in self.deleted.as_detail().items()},
        }


def check_retention(metric_days, keep_points, archived_run_days) -> None:
    """Refuse settings that do not read (the settings form and the admin both call this)."""
    for name, days in (
        ("retention_metric_days", metric_days),
        ("retention_archived_run_days", archived_run_days),
    ):
        if days is not None and not (isinstance(days, int) and 1 <= days <= 36_500):
            raise InvalidInput(name, "Days are a whole number from 1 to 36,500, or empty to keep forever.")
    if not (isinstance(keep_points, int) and KEEP_MIN <= keep_points <= KEEP_MAX):
        raise InvalidInput(
            "retention_keep_points",
            f"Keep {KEEP_MIN:,} to {KEEP_MAX:,} points per series after downsampling.",
        )


def update_retention(
    project: Project, *, by: Any, metric_days: int | None, keep_points: int, archived_run_days: int | None
) -> Project:
    """Change the project's retention settings (admins; audited "project.retention_changed")."""
    if isinstance(by, ApiToken) or not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Retention settings need the admin role in {project.slug}.")
    check_retention(metric_days, keep_points, archived_run_days)
    changes = {
        "retention_metric_days": metric_days,
        "retention_keep_points": keep_points,
        "retention_archived_run_days": archived_run_days,
    }
    with transaction.atomic():
        for name, value in changes.items():
            setattr(project, name, value)
        project.save(update_fields=[*changes, "updated"])
        record_audit(by, AuditVerb.PROJECT_RETENTION_CHANGED, project, project=project, **changes)
    return project


def keep_points(points: list[tuple[float, float, int]], keep: int) -> list[tuple[float, float, int]]:
    """Of (step, value, pk) in step order, at most `keep`: LTTB's choice of keep - 2 (first and last
    included), plus the lowest and highest values; in step order."""
    if len(points) <= keep:
        return list(points)
    chosen = {p[2]: p for p in lttb(points, keep - 2)}
    for extreme in (min(points, key=lambda p: p[1]), max(points, key=lambda p: p[1])):
        chosen.setdefault(extreme[2], extreme)
    return sorted(chosen.values(), key=lambda p: (p[0], p[2]))


def _due_series(project: Project, now: datetime):
    """(run pk, external id, key, count) of series of runs finished before the cutoff with more points
    than the project keeps: one grouped query."""
    if project.retention_metric_days is None:
        return []
    cutoff = now - timedelta(days=project.retention_metric_days)
    runs = (
        Run.objects.filter(project=project, state__in=TERMINAL_STATES)
        .annotate(ended=Coalesce(F("finished_at"), F("last_progress_at")))
        .filter(ended__lt=cutoff)
    )
    return list(
        MetricPoint.objects.filter(run__in=runs.values("pk"))
        .values("run_id", "run__external_id", "key")
        .annotate(n=Count("id"))
        .filter(n__gt=project.retention_keep_points)
        .order_by("run_id", "key")
        .values_list("run_id", "run__external_id", "key", "n")
    )


def _cut_series(run_id: int, key: str, keep: int, *, dry_run: bool) -> tuple[int, int]:
    """Downsample one series (under its run's lock when real); returns (points before, kept)."""
    with transaction.atomic():
        run = None if dry_run else Run.objects.select_for_update(of=("self",)).get(pk=run_id)
        rows = MetricPoint.objects.filter(run_id=run_id, key=key)
        points = list(rows.order_by("step", "id").values_list("step", "value", "id"))
        kept = keep_points(points, keep)
        if dry_run or len(kept) == len(points):
            return len(points), len(kept)
        kept_ids = [p[2] for p in kept]
        rows.exclude(pk__in=kept_ids)._raw_delete(rows.db)
        metric_rollups.rebuild(run_id, [key])
        previous = (run.metrics_downsampled or {}).get(key, {})
        run.metrics_downsampled = {
            **(run.metrics_downsampled or {}),
            key: {
                "kept": len(kept),
                "of": max(previous.get("of", 0), len(points)),
                "at": timezone.now().isoformat(),
            },
        }
        run.save(update_fields=["metrics_downsampled", "updated"])
    return len(points), len(kept)


def _expired_archived_runs(project: Project, now: datetime) -> list[Run]:
    if project.retention_archived_run_days is None:
        return []
    cutoff = now - timedelta(days=project.retention_archived_run_days)
    return list(
        Run.objects.filter(project=project, archived_at__lt=cutoff)
        .filter(Q(state__in=TERMINAL_STATES))
        .select_related("project__scenario")
        .order_by("archived_at", "pk")
    )


def apply_retention(
    project: Project, *, now: datetime | None = None, dry_run: bool = False
) -> RetentionReport:
    """Apply (or, with `dry_run`, only work out) the project's retention policy at `now`."""
    now = now or timezone.now()
    report = RetentionReport(project=project.slug, dry_run=dry_run, now=now)
    expired = _expired_archived_runs(project, now)
    expired_ids = {r.pk for r in expired}
    for run_id, external_id, key, _count in _due_series(project, now):
        if run_id in expired_ids:
            continue  # deleted whole below
        before, kept = _cut_series(run_id, key, project.retention_keep_points, dry_run=dry_run)
        if kept < before:
            report.series.append(SeriesCut(run=external_id, key=key, points=before, kept=kept))
    report.runs_deleted = [r.external_id for r in expired]
    if expired:
        if dry_run:
            report.deleted = runs_summary(sorted(expired_ids))
        else:
            report.deleted = _delete_runs_now(
                project,
                expired,
                by=None,
                reason=f"retention: archived more than {project.retention_archived_run_days} days ago",
            )
    if not dry_run and report.removes_anything:
        detail = {k: v for k, v in report.as_dict().items() if k not in ("project", "dry_run")}
        record_audit(None, AuditVerb.RETENTION_APPLIED, project, project=project, **detail)
    return report


def apply_all_retention(*, now: datetime | None = None, dry_run: bool = False) -> list[RetentionReport]:
    """Every project with a rule on (beat runs this daily)."""
    projects = Project.objects.filter(
        Q(retention_metric_days__isnull=False) | Q(retention_archived_run_days__isnull=False)
    ).order_by("slug")
    reports = []
    for project in projects:
        try:
            reports.append(apply_retention(project, now=now, dry_run=dry_run))
        except TrackingError as exc:  # one project's refusal (a protected row) does not stop the others
            log.warning("retention of %s stopped: %s", project.slug, exc.message)
    return reports
