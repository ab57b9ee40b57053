"""The overview's figures of each project computed from scratch (every submission, every turn of today):
what `queries.projects.project_summaries` computed on each change before the write path kept them
(issue 36), now the reference the kept ones are tested against (tests/tracking/test_project_figures.py)."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Count, Max, Min, Q, Sum
from django.utils import timezone

from smrweb.tracking.models import TERMINAL_STATES, UNVERIFIED_STATUSES, Project, Submission, SubmissionStatus
from smrweb.tracking.queries import budget
from smrweb.tracking.queries.projects import _gap, _gap_figures, best_submissions, project_score_histories


def computed_summary_figures(projects: list[Project], unverified: bool) -> dict[int, dict]:
    """The same figures computed from scratch (every submission, every turn of today): the reference the
    kept ones are tested against (tests/tracking/test_project_figures.py)."""
    ids = [p.pk for p in projects]
    live = ~Q(runs__state__in=TERMINAL_STATES)
    counts = {
        row["pk"]: row
        for row in Project.objects.filter(pk__in=ids)
        .values("pk")
        .annotate(
            runs_n=Count("runs"),
            active=Count("runs", filter=live & Q(runs__stalled_since__isnull=True)),
            stalled=Count("runs", filter=live & Q(runs__stalled_since__isnull=False)),
            failed=Count("runs", filter=Q(runs__state="failed")),
            abandoned=Count("runs", filter=Q(runs__state="abandoned")),
            over_budget=Count("runs", filter=budget.over_budget("runs__")),
            spend=Sum(budget.spend_usd("runs__")),
            spend_turns=Sum("runs__cost_usd"),
            billed_runs=Count("runs", filter=Q(runs__source_total_usd__isnull=False)),
            last=Max("runs__last_progress_at"),
            **_gap_figures(),
        )
    }
    waiting = Q(
        status__in=[SubmissionStatus.CANDIDATE, SubmissionStatus.VERIFYING, SubmissionStatus.VERIFIED]
    )
    pending = Q(status__in=UNVERIFIED_STATUSES)
    queue = {
        row["project_id"]: row
        for row in Submission.objects.filter(
            project_id__in=ids, excluded_at__isnull=True, run__excluded_at__isnull=True
        )
        .values("project_id")
        .annotate(
            waiting=Count("id", filter=waiting),
            pending=Count("id", filter=pending),
            pending_max=Max("score", filter=pending),
            pending_min=Min("score", filter=pending),
        )
    }
    best = best_submissions(projects, unverified=unverified)
    since = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    today = dict(
        Project.objects.filter(pk__in=ids, runs__turns__ts__gte=since)
        .values("pk")
        .annotate(usd=Sum("runs__turns__cost_usd"))
        .values_list("pk", "usd")
    )
    histories = project_score_histories(projects, unverified=unverified)
    out = {}
    for p in projects:
        c, q, top = counts.get(p.pk, {}), queue.get(p.pk, {}), best.get(p.pk)
        pending_best = q.get("pending_max") if p.scenario.maximize else q.get("pending_min")
        better = pending_best is not None and (
            top is None or (pending_best > top.score if p.scenario.maximize else pending_best < top.score)
        )
        out[p.pk] = dict(
            best_score=top.score if top else None,
            best_submission_id=top.pk if top else None,
            unverified_best=pending_best if better and not unverified else None,
            unverified=q.get("pending", 0),
            waiting_review=q.get("waiting", 0),
            active=c.get("active", 0),
            stalled=c.get("stalled", 0),
            failed=c.get("failed", 0),
            abandoned=c.get("abandoned", 0),
            over_budget=c.get("over_budget", 0),
            runs=c.get("runs_n", 0),
            spend_usd=c.get("spend") or Decimal(0),
            spend_turns_usd=c.get("spend_turns") or Decimal(0),
            billed_runs=c.get("billed_runs", 0),
            spend_today_usd=today.get(p.pk) or Decimal(0),
            last_activity=c.get("last"),
            history=histories.get(p.pk, []),
            results_gap=_gap(c),
        )
    return out
