"""The overview's figures of each project (`ProjectFigures`, `RunDaySpend`), kept by the write path.

Every write that changes a figure calls in here inside its own transaction:
- `refresh_project_figures` recomputes a project's row from cheap sources, never by +1/−1: its runs'
  summary columns (one aggregate over the project's runs) and top-1 reads of the submissions'
  (project, status, score, exclusion, run) index (one query, and one more per rule for a tie);
- ingest adds the batch's new turns to `RunDaySpend` (`add_turns`: they are new rows, counted once) and
  its new scores to the sparkline's window (`add_scores`: the newest of old ∪ new is the newest of all);
- a write that removes rows (deleting runs or scores, a restore) reads those two again from the rows
  (`rebuild_project_figures`).
`queries.projects.computed_summary_figures` computes the same from scratch: the reference the tests hold
this to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Max, OuterRef, Q, Subquery, Sum, Window
from django.db.models.functions import Coalesce, RowNumber, TruncDate

from smrweb.tracking.models import (
    NEVER_COUNTED,
    TERMINAL_STATES,
    UNVERIFIED_STATUSES,
    VERIFIED_STATUSES,
    AgentTurn,
    Project,
    ProjectFigures,
    Run,
    RunDaySpend,
    Submission,
    SubmissionStatus,
)
from smrweb.tracking.queries import budget

SPARK_SCORES = 60  # as queries.projects.SPARK_SCORES (the overview's sparkline)
COUNTED_ANY = tuple(s for s in SubmissionStatus if s not in NEVER_COUNTED)  # what counts with unverified
WAITING = (SubmissionStatus.CANDIDATE, SubmissionStatus.VERIFYING, SubmissionStatus.VERIFIED)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def queue_counts_q() -> dict:
    """A run's share of the review queue, as aggregates over its submissions (`recompute_scores`)."""
    mine = Q(excluded_at__isnull=True)
    return {
        "queue_waiting": Count("id", filter=mine & Q(status__in=WAITING)),
        "queue_pending": Count("id", filter=mine & Q(status__in=UNVERIFIED_STATUSES)),
    }


def _runs_part(project_id: int) -> dict:
    live = ~Q(state__in=TERMINAL_STATES)
    incomplete = Q(results_complete=False, excluded_at__isnull=True)
    counted_run = Q(excluded_at__isnull=True)
    row = Run.objects.filter(project_id=project_id).aggregate(
        runs=Count("id"),
        active=Count("id", filter=live & Q(stalled_since__isnull=True)),
        stalled=Count("id", filter=live & Q(stalled_since__isnull=False)),
        failed=Count("id", filter=Q(state="failed")),
        abandoned=Count("id", filter=Q(state="abandoned")),
        over_budget=Count("id", filter=budget.over_budget()),
        spend_usd=Sum(budget.spend_usd()),
        spend_turns_usd=Sum("cost_usd"),
        billed_runs=Count("id", filter=Q(source_total_usd__isnull=False)),
        last_activity=Max("last_progress_at"),
        gap_runs=Count("id", filter=incomplete),
        gap_missing=Sum("results_missing", filter=incomplete),
        gap_unknown=Count("id", filter=incomplete & Q(results_missing__isnull=True)),
        waiting=Sum("queue_waiting", filter=counted_run),
        pending=Sum("queue_pending", filter=counted_run),
    )
    for key in ("spend_usd", "spend_turns_usd"):
        row[key] = Decimal(row[key] or 0)
    for key in ("gap_missing", "waiting", "pending"):
        row[key] = row[key] or 0
    return row


def _best_part(project: Project) -> dict:
    """The best of each rule and of what waits to count, from the top of each status's index range."""
    maximize = project.scenario.maximize
    counted = Submission.objects.filter(
        project_id=project.pk, excluded_at__isnull=True, run__excluded_at__isnull=True
    )
    first = "-score" if maximize else "score"
    tops = (
        Project.objects.filter(pk=project.pk)
        .annotate(
            **{
                f"top_{i}": Subquery(counted.filter(status=s).order_by(first).values("score")[:1])
                for i, s in enumerate(COUNTED_ANY)
            }
        )
        .values_list(*(f"top_{i}" for i in range(len(COUNTED_ANY))))
        .first()
    ) or (None,) * len(COUNTED_ANY)
    top = dict(zip(COUNTED_ANY, tops, strict=True))
    pick = max if maximize else min

    def best(statuses) -> tuple[int | None, float | None]:
        values = [top[s] for s in statuses if top[s] is not None]
        if not values:
            return None, None
        score = pick(values)
        # The earliest of the equal best (the reference's tie-break: time, then id).
        pk = (
            counted.filter(status__in=[s for s in statuses if top[s] == score], score=score)
            .order_by("ts", "id")
            .values_list("pk", flat=True)
            .first()
        )
        return pk, score

    best_id, best_score = best(VERIFIED_STATUSES)
    best_any_id, best_any_score = best(COUNTED_ANY)
    pending = [top[s] for s in UNVERIFIED_STATUSES if top[s] is not None]
    return {
        "maximize": maximize,
        "best_id": best_id,
        "best_score": best_score,
        "best_any_id": best_any_id,
        "best_any_score": best_any_score,
        "pending_best": pick(pending) if pending else None,
    }


def refresh_project_figures(project: Project | int, *, best: bool = True) -> None:
    """Recompute the project's row (created on first use) from its runs' columns and, with `best`, the
    index tops; the sparkline window is left as it is (`add_scores`, `rebuild_project_figures`). Call in
    the writer's transaction, after its own rows: the row is locked first, so a concurrent writer of
    another run of the project waits, then reads this one's committed runs (figures lock last)."""
    if not isinstance(project, Project):
        project = Project.objects.select_related("scenario").filter(pk=project).first()
        if project is None:
            return  # deleted meanwhile: its row went with it
    if not _lock(project.pk):
        try:
            with transaction.atomic():
                ProjectFigures.objects.create(project_id=project.pk, history=_history(project.pk))
        except IntegrityError:
            pass  # a concurrent writer created it
        _lock(project.pk)
        best = True
    fields = _runs_part(project.pk)
    if best:
        fields |= _best_part(project)
    ProjectFigures.objects.filter(project_id=project.pk).update(**fields, updated=datetime.now(UTC))


def _lock(project_id: int) -> bool:
    return bool(
        list(ProjectFigures.objects.select_for_update().filter(project_id=project_id).values_list("pk"))
    )


def after_ingest(run: Run, turns: Sequence[AgentTurn], submissions: Sequence[Submission]) -> None:
    """A batch's share, in its transaction under the run's lock: its turns into the run's days, the
    project's row recomputed (its best only when scores came in), its scores into the sparkline."""
    if turns:
        add_turns(run, turns)
    refresh_project_figures(run.project, best=bool(submissions))
    if submissions:
        add_scores(run, submissions)


def add_turns(run: Run, turns: Sequence[AgentTurn]) -> None:
    """Add a batch's new turns (inserted just now, in this transaction) to their run's days."""
    days: dict = defaultdict(lambda: [Decimal(0), 0])
    for t in turns:
        day = days[t.ts.astimezone(UTC).date()]
        day[0] += Decimal(t.cost_usd)
        day[1] += 1
    for day, (cost, n) in days.items():
        if not RunDaySpend.objects.filter(run=run, day=day).update(
            cost_usd=F("cost_usd") + cost, turns=F("turns") + n
        ):
            RunDaySpend.objects.create(run=run, project_id=run.project_id, day=day, cost_usd=cost, turns=n)


def add_scores(run: Run, submissions: Iterable[Submission]) -> None:
    """Fold a batch's new scores into the project's sparkline window (its newest SPARK_SCORES)."""
    new = [[micros(s.ts), s.pk, s.score] for s in submissions]
    if not new:
        return
    row = ProjectFigures.objects.filter(project_id=run.project_id).values_list("history", flat=True).first()
    if row is None:
        return  # created just now by `refresh_project_figures`, its window read from the rows
    kept = sorted({tuple(p) for p in row} | {tuple(p) for p in new})[-SPARK_SCORES:]
    ProjectFigures.objects.filter(project_id=run.project_id).update(history=[list(p) for p in kept])


def _history(project_id: int) -> list[list]:
    ranked = (
        Submission.objects.filter(project_id=project_id)
        .annotate(rn=Window(RowNumber(), order_by=[F("ts").desc(), F("id").desc()]))
        .filter(rn__lte=SPARK_SCORES)
        .values_list("ts", "id", "score")
    )
    return sorted([micros(ts), pk, score] for ts, pk, score in ranked)


def rebuild_day_spend(run_ids: Iterable[int]) -> None:
    """Read these runs' days of spend again from their turns (after turns were deleted or restored)."""
    run_ids = list(run_ids)
    RunDaySpend.objects.filter(run_id__in=run_ids).delete()
    rows = (
        AgentTurn.objects.filter(run_id__in=run_ids)
        .annotate(day=TruncDate("ts", tzinfo=UTC))
        .values("run_id", "run__project_id", "day")
        .annotate(cost=Sum("cost_usd"), n=Count("id"))
        .order_by()
    )
    RunDaySpend.objects.bulk_create(
        [
            RunDaySpend(
                run_id=r["run_id"],
                project_id=r["run__project_id"],
                day=r["day"],
                cost_usd=r["cost"],
                turns=r["n"],
            )
            for r in rows
        ],
        batch_size=1000,
    )


def rebuild_project_figures(project_id: int, *, runs: bool = False) -> None:
    """The row, its sparkline window and (`runs`) the runs' queue counts and days read again from the
    rows: after rows were deleted or restored, and to backfill."""
    if runs:
        run_ids = list(Run.objects.filter(project_id=project_id).values_list("pk", flat=True))
        of_run = Submission.objects.filter(run=OuterRef("pk")).order_by().values("run")
        Run.objects.filter(project_id=project_id).update(
            **{
                name: Coalesce(Subquery(of_run.annotate(n=count).values("n")), 0)
                for name, count in queue_counts_q().items()
            }
        )
        rebuild_day_spend(run_ids)
    refresh_project_figures(project_id)
    ProjectFigures.objects.filter(project_id=project_id).update(history=_history(project_id))
