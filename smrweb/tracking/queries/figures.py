"""The overview's figures of each project as the write path keeps them (`ProjectFigures`): what
`queries.projects.project_summaries` reads. `queries.summary_reference` computes them from scratch."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from smrweb.tracking.models import (
    Project,
    ProjectFigures,
    RunDaySpend,
    Submission,
    standing,
)
from smrweb.tracking.queries.runs import ScorePoint


def pending_figures(project: Project) -> ProjectFigures:
    """The project's kept row (computed first when there is none, or it was kept in the other direction)."""
    # Its sparkline history (a JSON list) is the overview's: not decoded here (a live poll reads the row).
    row = next(iter(ProjectFigures.objects.filter(project_id=project.pk).defer("history")[:1]), None)
    if row is None or row.maximize != project.scenario.maximize:
        _rebuild([project])
        row = ProjectFigures.objects.get(project_id=project.pk)
    return row


def _rebuild(projects: list[Project]) -> None:
    from smrweb.tracking.services.figures import rebuild_project_figures

    for p in projects:
        with transaction.atomic():
            rebuild_project_figures(p.pk)


def figure_rows(projects: list[Project]) -> dict[int, ProjectFigures]:
    """Each project's `ProjectFigures` row (one query), built first where it was never written (a project with
    no runs yet) or its scenario's direction changed."""
    rows = {r.project_id: r for r in ProjectFigures.objects.filter(project_id__in=[p.pk for p in projects])}
    missing = [p for p in projects if p.pk not in rows or rows[p.pk].maximize != p.scenario.maximize]
    if missing:
        _rebuild(missing)
        rows |= {
            r.project_id: r for r in ProjectFigures.objects.filter(project_id__in=[p.pk for p in missing])
        }
    return rows


def read_figures(projects: list[Project], unverified: bool) -> dict[int, dict]:
    """Each project's figures from its `ProjectFigures` row (one query), the standing of its sparkline's
    scores (one query by id) and today's spend (one query over `RunDaySpend`'s (project, day) index)."""
    ids = [p.pk for p in projects]
    rows = figure_rows(projects)
    marks = {
        pk: (status, excluded is not None, run_excluded is not None)
        for pk, status, excluded, run_excluded in Submission.objects.filter(
            pk__in=[point[1] for r in rows.values() for point in r.history]
        ).values_list("pk", "status", "excluded_at", "run__excluded_at")
    }
    since = timezone.now().astimezone(UTC).date()
    today = dict(
        RunDaySpend.objects.filter(project_id__in=ids, day__gte=since)
        .values("project_id")
        .annotate(usd=Sum("cost_usd"))
        .values_list("project_id", "usd")
        .order_by()
    )
    out = {}
    for p in projects:
        r = rows[p.pk]
        best_id, best_score = (r.best_any_id, r.best_any_score) if unverified else (r.best_id, r.best_score)
        pending_best = r.pending_best
        better = pending_best is not None and (
            best_score is None
            or (pending_best > best_score if p.scenario.maximize else pending_best < best_score)
        )
        history = []
        for _, pk, score in r.history:
            status, excluded, run_excluded = marks.get(pk, ("", False, False))
            why = standing(status, excluded, run_excluded=run_excluded, unverified=unverified)
            history.append(ScorePoint(score, why))
        out[p.pk] = dict(
            best_score=best_score,
            best_submission_id=best_id,
            unverified_best=pending_best if better and not unverified else None,
            unverified=r.pending,
            waiting_review=r.waiting,
            active=r.active,
            stalled=r.stalled,
            failed=r.failed,
            abandoned=r.abandoned,
            over_budget=r.over_budget,
            runs=r.runs,
            spend_usd=Decimal(r.spend_usd),
            spend_turns_usd=Decimal(r.spend_turns_usd),
            billed_runs=r.billed_runs,
            spend_today_usd=today.get(p.pk) or Decimal(0),
            last_activity=r.last_activity,
            history=history,
            results_gap=(r.gap_runs, r.gap_missing, r.gap_unknown),  # a ResultsGap's fields
        )
    return out
