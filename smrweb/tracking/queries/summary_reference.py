"""What the overview and the project chart show, computed from scratch: what the pages computed on each
change before the write path kept their figures and the chart was kept per run (issue 36), now the
references the kept ones are tested against (tests/tracking/test_project_figures.py,
tests/dashboard/test_incremental_figures.py). No page reads them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, F, Max, Min, Q, Sum, Window
from django.db.models.functions import Mod, RowNumber
from django.utils import timezone

from smrweb.core.downsample import lttb
from smrweb.tracking.models import (
    STALLED,
    TERMINAL_STATES,
    UNVERIFIED_STATUSES,
    Project,
    Run,
    Submission,
    SubmissionStatus,
    standing,
)
from smrweb.tracking.queries import budget
from smrweb.tracking.queries.projects import CHART_RUNS, SPARK_SCORES, ProjectScores, _gap, _gap_figures
from smrweb.tracking.queries.runs import ScorePoint, _latest_scores


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


def project_score_histories(
    projects: Iterable[Project], *, per_project: int = SPARK_SCORES, unverified: bool = False
) -> dict[int, list[ScorePoint]]:
    """Each project's last `per_project` scores across all its runs, in time order, each marked by the
    project's rule (the headline best's: verified ones unless `unverified`, excluded runs never)."""
    return _latest_scores(
        "project_id", [p.pk for p in projects], per_project, unverified=unverified, of_run=False
    )


def best_submissions(projects: list[Project], *, unverified: bool = False) -> dict[int, Submission]:
    """Each project's best submission among those that count, in its direction (one query)."""
    order = [F("score").desc() if p_max else F("score").asc() for p_max in (True, False)]
    best: dict[int, Submission] = {}
    for maximize in (True, False):
        ids = [p.pk for p in projects if p.scenario.maximize == maximize]
        if not ids:
            continue
        ranked = (
            Submission.objects.filter(project_id__in=ids)
            .counted(unverified=unverified)
            .annotate(
                rn=Window(
                    RowNumber(),
                    partition_by=[F("project_id")],
                    order_by=[order[0 if maximize else 1], F("ts").asc(), F("id").asc()],
                )
            )
            .filter(rn=1)
            .select_related("run")
        )
        best.update({s.project_id: s for s in ranked})
    return best


def project_scores(
    project: Project,
    *,
    max_points: int = 1500,
    unverified: bool = False,
    runs=None,
    lines: int = CHART_RUNS,
) -> ProjectScores:
    """The scores over time of the project's `lines` runs with the best scores (of `runs`, a queryset of
    the project's runs, when given), for the project chart: at most about `max_points` points, in five
    queries whatever the number of runs or scores.

    Those runs are found from their summary column (`best_score`: the best that counts with unverified
    ones); rows are thinned in SQL (every k-th score of each run) when there are far more than the
    chart shows, then each run is cut to its share with LTTB. The best-so-far frontier of the drawn runs
    is computed in SQL over their scores that count (verified ones unless `unverified`), so a record is
    never lost to downsampling. A run's line joins its scores that count; the others (invalid, excluded,
    unverified where only verified ones count) are in `void` with why, drawn hollow. Excluded runs are
    left out.
    """
    candidates = (runs if runs is not None else Run.objects.filter(project=project)).filter(
        excluded_at__isnull=True, score_count__gt=0
    )
    # Runs whose scores all failed validation have no best: drawn last.
    best = F("best_score")
    best_first = best.desc(nulls_last=True) if project.scenario.maximize else best.asc(nulls_last=True)
    drawn = list(
        candidates.order_by(best_first, F("id").asc()).values_list("pk", "external_id", "display_name")[
            :lines
        ]
    )
    if not drawn:
        return ProjectScores({}, [], 0, None, None)
    matching = candidates.order_by().count()  # from the (project, exclusion, best) index
    names = {pk: (external_id, display_name or external_id) for pk, external_id, display_name in drawn}
    subs = Submission.objects.filter(run_id__in=names)
    span = subs.aggregate(n=Count("id"), lo=Min("ts"), hi=Max("ts"))
    total = span["n"]
    order = [F("ts").asc(), F("id").asc()]
    rows = subs
    if total > 4 * max_points:
        stride = total // (4 * max_points) + 1
        rows = (
            subs.annotate(rn=Window(RowNumber(), partition_by=[F("run_id")], order_by=order))
            .annotate(keep=Mod(F("rn"), stride))
            .filter(keep=0)
        )
    by_run: dict[int, list[tuple[float, float, datetime, str]]] = defaultdict(list)
    fields = ("run_id", "ts", "score", "status", "excluded_at")
    for run_id, ts, value, status, excluded in rows.order_by("ts", "id").values_list(*fields):
        why = standing(status, excluded is not None, unverified=unverified)  # drawn runs are not excluded
        by_run[run_id].append((ts.timestamp(), value, ts, why))
    share = max(10, max_points // max(len(by_run), 1))
    series: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    void: dict[int, list[tuple[datetime, float, str]]] = defaultdict(list)
    for run_id, points in by_run.items():
        for _, v, ts, why in lttb(points, share):
            if why:
                void[run_id].append((ts, v, why))
            else:
                series[run_id].append((ts, v))
    running = Max("score") if project.scenario.maximize else Min("score")
    records = subs.counted(unverified=unverified).annotate(best=Window(running, order_by=order))
    records = (
        records.filter(score__gte=F("best"))
        if project.scenario.maximize
        else records.filter(score__lte=F("best"))
    )
    frontier, best = [], None
    for run_id, ts, value in records.order_by("ts", "id").values_list("run_id", "ts", "score"):
        if best is None or value != best:  # ties with the record are not new records
            frontier.append((ts, value))
            best = value
            if (ts, value) not in series[run_id]:  # a record thinned out of its run's line comes back
                series[run_id] = sorted([*series[run_id], (ts, value)])
    return ProjectScores(
        {pk: series[pk] for pk in names if series.get(pk) or void.get(pk)},
        frontier,
        total,
        span["lo"],
        span["hi"],
        runs=names,
        matching=matching,
        void={pk: void[pk] for pk in names if void.get(pk)},
    )


def computed_condition_counts(project: Project) -> dict[str, int]:
    """The counts above the runs table (`projects.run_condition_counts`) from every run (one aggregate)."""
    return Run.objects.filter(project=project).aggregate(
        stalled=Count("id", filter=STALLED),
        failed=Count("id", filter=Q(state="failed")),
        abandoned=Count("id", filter=Q(state="abandoned")),
        over_budget=Count("id", filter=budget.over_budget()),
        archived=Count("id", filter=Q(archived_at__isnull=False)),
        **_gap_figures(via=""),
    )
