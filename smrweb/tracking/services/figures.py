"""The overview's figures of each project (`ProjectFigures`, `RunDaySpend`), kept by the write path.

Every write that changes a figure calls in here inside its own transaction:
- `refresh_project_figures` recomputes a project's row from cheap sources, never by +1/−1: its runs'
  summary columns (one aggregate over the project's runs) and top-1 reads of the submissions'
  (project, status, score, exclusion, run) index (one query, and one more per rule for a tie);
- ingest adds the batch's new turns to `RunDaySpend` (`add_turns`: they are new rows, counted once) and
  its new scores to the sparkline's window (the newest of old ∪ new is the newest of all);
- a write that removes rows (deleting runs or scores, a restore) reads those two again from the rows
  (`rebuild_project_figures`).
`queries.projects.computed_summary_figures` computes the same from scratch: the reference the tests hold
this to.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max, OuterRef, Q, Subquery, Sum, Window
from django.db.models.functions import Coalesce, RowNumber, TruncDate

from smrweb.tracking import pricing
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
    RunModelSpend,
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


class _Compiled:
    """A query compiled once per database (the ORM's compiling of these aggregates was most of their
    cost: ~25 ms a batch for the runs' one), run again with its placeholder parameters replaced."""

    def __init__(self, build, **placeholders) -> None:
        self.build, self.placeholders, self.kept = build, placeholders, {}

    def rows(self, **values) -> list[dict]:
        if connection.vendor not in self.kept:
            compiler = self.build(**self.placeholders).query.get_compiler(connection=connection)
            sql, params = compiler.as_sql()
            converters = compiler.get_converters([col[0] for col in compiler.select])
            self.kept[connection.vendor] = (sql, params, compiler, converters)
        sql, params, compiler, converters = self.kept[connection.vendor]
        swap = {v: values[k] for k, v in self.placeholders.items()}
        with connection.cursor() as cursor:
            cursor.execute(sql, [swap.get(p, p) if type(p) in (int, float) else p for p in params])
            names = [c[0] for c in cursor.description]
            rows = cursor.fetchall()
        if converters:
            rows = compiler.apply_converters(rows, converters)
        return [dict(zip(names, row, strict=True)) for row in rows]


_PROJECT = -7_360_001  # placeholders no real id or score takes
_SCORE = -7.36e300


def _runs_query(project_id: int):
    live = ~Q(state__in=TERMINAL_STATES)
    incomplete = Q(results_complete=False, excluded_at__isnull=True)
    counted_run = Q(excluded_at__isnull=True)
    return (
        Run.objects.filter(project_id=project_id)
        .order_by()
        .values("project_id")
        .annotate(
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
    )


_RUNS = _Compiled(_runs_query, project_id=_PROJECT)
_ZERO_RUNS = {"runs": 0, "active": 0, "stalled": 0, "failed": 0, "abandoned": 0, "over_budget": 0}
_ZERO_RUNS |= {"billed_runs": 0, "last_activity": None, "gap_runs": 0, "gap_unknown": 0}


def _runs_part(project_id: int) -> dict:
    rows = _RUNS.rows(project_id=project_id)
    row = {**_ZERO_RUNS, **(rows[0] if rows else {})}
    row.pop("project_id", None)
    for key in ("spend_usd", "spend_turns_usd"):
        row[key] = Decimal(row.get(key) or 0)
    for key in ("gap_missing", "waiting", "pending"):
        row[key] = row.get(key) or 0
    return row


def _counted(project_id: int):
    return Submission.objects.filter(
        project_id=project_id, excluded_at__isnull=True, run__excluded_at__isnull=True
    )


def _tops_query(project_id: int, maximize: bool):
    first = "-score" if maximize else "score"
    return (
        Project.objects.filter(pk=project_id)
        .annotate(
            **{
                f"top_{i}": Subquery(
                    _counted(project_id).filter(status=s).order_by(first).values("score")[:1]
                )
                for i, s in enumerate(COUNTED_ANY)
            }
        )
        .values(*(f"top_{i}" for i in range(len(COUNTED_ANY))))
    )


def _tie_query(project_id: int, score: float, verified: bool):
    statuses = VERIFIED_STATUSES if verified else COUNTED_ANY
    # The earliest of the equal best (the reference's tie-break: time, then id).
    return _counted(project_id).filter(status__in=statuses, score=score).order_by("ts", "id").values("pk")[:1]


_TOPS = {
    m: _Compiled(lambda project_id, m=m: _tops_query(project_id, m), project_id=_PROJECT)
    for m in (True, False)
}
_TIE = {
    v: _Compiled(
        lambda project_id, score, v=v: _tie_query(project_id, score, v), project_id=_PROJECT, score=_SCORE
    )
    for v in (True, False)
}


def _best_part(project: Project) -> dict:
    """The best of each rule and of what waits to count, from the top of each status's index range."""
    maximize = project.scenario.maximize
    rows = _TOPS[maximize].rows(project_id=project.pk)
    tops = [rows[0][f"top_{i}"] for i in range(len(COUNTED_ANY))] if rows else [None] * len(COUNTED_ANY)
    top = dict(zip(COUNTED_ANY, tops, strict=True))
    pick = max if maximize else min

    def best(statuses, verified: bool) -> tuple[int | None, float | None]:
        values = [top[s] for s in statuses if top[s] is not None]
        if not values:
            return None, None
        score = pick(values)
        [row] = _TIE[verified].rows(project_id=project.pk, score=score)
        return next(iter(row.values())), score

    best_id, best_score = best(VERIFIED_STATUSES, True)
    best_any_id, best_any_score = best(COUNTED_ANY, False)
    pending = [top[s] for s in UNVERIFIED_STATUSES if top[s] is not None]
    return {
        "maximize": maximize,
        "best_id": best_id,
        "best_score": best_score,
        "best_any_id": best_any_id,
        "best_any_score": best_any_score,
        "pending_best": pick(pending) if pending else None,
    }


def refresh_project_figures(
    project: Project | int, *, best: bool = True, scores: Sequence[Submission] = ()
) -> None:
    """Recompute the project's row (created on first use) from its runs' columns and, with `best`, the
    index tops; `scores` (a batch's new ones) join the sparkline's window, else it is left as it is
    (`rebuild_project_figures` reads it again). Call in the writer's transaction, after its own rows: the
    row is locked first, so a concurrent writer of another run waits, then reads this one's committed
    runs (the figures lock last)."""
    if not isinstance(project, Project):
        project = Project.objects.select_related("scenario").filter(pk=project).first()
        if project is None:
            return  # deleted meanwhile: its row went with it
    history = _locked_history(project.pk)
    if history is None:
        try:
            with transaction.atomic():
                ProjectFigures.objects.create(project_id=project.pk, history=_history(project.pk))
        except IntegrityError:
            pass  # a concurrent writer created it
        _locked_history(project.pk)
        best, scores = True, ()  # its window was read from the rows, these scores included
    fields = _runs_part(project.pk)
    if best:
        fields |= _best_part(project)
    if scores:
        new = {(micros(s.ts), s.pk, s.score) for s in scores}
        fields["history"] = [list(p) for p in sorted({tuple(p) for p in history} | new)[-SPARK_SCORES:]]
    _write(project.pk, {**fields, "updated": datetime.now(UTC)})


_SQL: dict[tuple, str] = {}


def _locked_history(project_id: int) -> list | None:
    """The row's sparkline window, the row locked for this transaction (None: no row). One statement
    written once (the ORM compiled it for longer than it runs)."""
    key = ("lock", connection.vendor)
    if key not in _SQL:
        table = connection.ops.quote_name(ProjectFigures._meta.db_table)
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        _SQL[key] = f"SELECT history FROM {table} WHERE project_id = %s{lock}"
    with connection.cursor() as cursor:
        cursor.execute(_SQL[key], [project_id])
        row = cursor.fetchone()
    if row is None:
        return None
    return json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]


def _write(project_id: int, fields: dict) -> None:
    """UPDATE the row's `fields`, through a statement written once per set of columns."""
    names = sorted(fields)
    key = ("write", connection.vendor, *names)
    meta = ProjectFigures._meta
    if key not in _SQL:
        q = connection.ops.quote_name
        columns = ", ".join(f"{q(meta.get_field(n).column)} = %s" for n in names)
        _SQL[key] = f"UPDATE {q(meta.db_table)} SET {columns} WHERE project_id = %s"
    params = [meta.get_field(n).get_db_prep_save(fields[n], connection) for n in names]
    with connection.cursor() as cursor:
        cursor.execute(_SQL[key], [*params, project_id])


_ADDED = ("runs", "active", "stalled", "failed", "abandoned", "over_budget", "spend_usd", "spend_turns_usd")
_ADDED += ("billed_runs", "gap_runs", "gap_missing", "gap_unknown", "waiting", "pending")


def share(run: Run) -> dict:
    """What one run adds to its project's row: `_runs_part`'s rule for one run, in Python (ingest's
    batches move the row by the difference of their run's share, under the run's lock)."""
    live, counted = run.state not in TERMINAL_STATES, run.excluded_at is None
    gap = counted and not run.results_complete
    return {
        "runs": 1,
        "active": int(live and run.stalled_since is None),
        "stalled": int(live and run.stalled_since is not None),
        "failed": int(run.state == "failed"),
        "abandoned": int(run.state == "abandoned"),
        "over_budget": int(bool(run.budget_overruns)),
        "spend_usd": Decimal(run.spend_usd),
        "spend_turns_usd": Decimal(run.cost_usd),
        "billed_runs": int(run.source_total_usd is not None),
        "gap_runs": int(gap),
        "gap_missing": (run.results_missing or 0) if gap else 0,
        "gap_unknown": int(gap and run.results_missing is None),
        "waiting": run.queue_waiting if counted else 0,
        "pending": run.queue_pending if counted else 0,
        "last": run.last_progress_at,  # not added: the row keeps the latest
    }


_COUNTS = {k for k in _ADDED if not k.startswith("spend")}
NO_SHARE = {**dict.fromkeys(_ADDED, 0), "last": None}  # a run not yet counted (`move` on its creation)


def after_ingest(
    project: Project, run: Run, before: dict, turns: Sequence[AgentTurn], submissions: Sequence[Submission]
) -> None:
    """A batch's share, in its transaction under the run's lock: its turns into the run's days; the
    project's row moved by the difference of the run's share (`move`); with scores, its best read again
    and the scores put into the sparkline's window."""
    if turns:
        add_turns(run, turns)
    if not move(project, run, before, scores=submissions) and submissions:
        history = _locked_history(project.pk) or []
        new = {(micros(s.ts), s.pk, s.score) for s in submissions}
        window = [list(p) for p in sorted({tuple(p) for p in history} | new)[-SPARK_SCORES:]]
        _write(project.pk, {**_best_part(project), "history": window, "updated": datetime.now(UTC)})


def move(project: Project, run: Run, before: dict, *, scores: Sequence[Submission] = ()) -> bool:
    """Move the project's row by the difference of one run's share (`before`: `share(run)` as the writer
    found the run, under its lock) in one statement, O(1) whatever the number of runs: what every write
    to one run's columns calls (ingest, a sync's fields, stall flagging, closing, an artifact). True when
    the row had to be computed whole instead (none yet; a last activity that moved back)."""
    after = share(run)
    moved = {k: after[k] - before[k] for k in _ADDED}
    key = ("move", connection.vendor)
    if key not in _SQL:
        q = connection.ops.quote_name
        # A count never goes below 0 (a run written around the write path, e.g. by hand, was never
        # counted): the row's CHECK would refuse the writer's whole transaction over a figure.
        sets = ", ".join(
            f"{q(k)} = CASE WHEN {q(k)} + %s < 0 THEN 0 ELSE {q(k)} + %s END"
            if k in _COUNTS
            else f"{q(k)} = {q(k)} + %s"
            for k in _ADDED
        )
        last = q("last_activity")
        _SQL[key] = (
            f"UPDATE {q(ProjectFigures._meta.db_table)} SET {sets}, {last} = CASE WHEN {last} IS NULL OR "
            f"{last} < %s THEN %s ELSE {last} END WHERE project_id = %s"
        )
    field = ProjectFigures._meta.get_field("last_activity")
    at = field.get_db_prep_save(run.last_progress_at, connection)
    params = []
    for k in _ADDED:
        value = ProjectFigures._meta.get_field(k).get_db_prep_save(moved[k], connection)
        params += [value, value] if k in _COUNTS else [value]
    with connection.cursor() as cursor:
        cursor.execute(_SQL[key], [*params, at, at, project.pk])
        found = cursor.rowcount
    if not found or _earlier(after["last"], before["last"]):  # none yet; a first batch stamped earlier
        refresh_project_figures(project, scores=scores)
        return True
    return False


def _earlier(a: datetime | None, b: datetime | None) -> bool:
    return b is not None and (a is None or a < b)


def add_turns(run: Run, turns: Sequence[AgentTurn]) -> None:
    """Add a batch's new turns (inserted just now, in this transaction) to their run's days and to its
    spend by model and quarter hour."""
    days: dict = defaultdict(lambda: [Decimal(0), 0])
    for t in turns:
        day = days[t.ts.astimezone(UTC).date()]
        day[0] += Decimal(t.cost_usd)
        day[1] += 1
    table = connection.ops.quote_name(RunDaySpend._meta.db_table)
    for day, (cost, n) in days.items():
        with connection.cursor() as cursor:  # one statement written once: the ORM's UPDATE compiles slowly
            cursor.execute(
                f"UPDATE {table} SET cost_usd = cost_usd + %s, turns = turns + %s"
                " WHERE run_id = %s AND day = %s",
                [
                    connection.ops.adapt_decimalfield_value(cost, 18, 6),
                    n,
                    run.pk,
                    connection.ops.adapt_datefield_value(day),
                ],
            )
            added = cursor.rowcount
        if not added:
            RunDaySpend.objects.create(run=run, project_id=run.project_id, day=day, cost_usd=cost, turns=n)
    slots = _model_slots(
        (run.pk, run.project_id, t.ts, t.model, t.cost_usd, t.tokens_in, t.tokens_out, t.cost_origin)
        for t in turns
    )
    table = connection.ops.quote_name(RunModelSpend._meta.db_table)
    for key, (cost, n, tokens_in, tokens_out, unpriced) in slots.items():
        slot, model = key[2], key[3]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET cost_usd = cost_usd + %s, turns = turns + %s,"
                " tokens_in = tokens_in + %s, tokens_out = tokens_out + %s, unpriced = unpriced + %s"
                " WHERE run_id = %s AND slot = %s AND model = %s",
                [
                    connection.ops.adapt_decimalfield_value(cost, 18, 6),
                    *(n, tokens_in, tokens_out, unpriced, run.pk, slot, model),
                ],
            )
            added = cursor.rowcount
        if not added:
            _model_spend_row(key, slots[key]).save(force_insert=True)


def _model_slots(turns: Iterable[tuple]) -> dict[tuple, list]:
    """(run id, project id, ts, model, cost, tokens in, tokens out, cost origin) of turns, summed per (run
    id, project id, quarter hour, model): [cost, turns, tokens in, tokens out, unpriced turns]."""
    slots: dict[tuple, list] = defaultdict(lambda: [Decimal(0), 0, 0, 0, 0])
    for run_id, project_id, ts, model, cost, tokens_in, tokens_out, origin in turns:
        part = slots[run_id, project_id, int(ts.timestamp()) // RunModelSpend.SLOT_SECONDS, model]
        part[0] += Decimal(cost)
        part[1] += 1
        part[2] += tokens_in
        part[3] += tokens_out
        part[4] += origin == pricing.Origin.UNPRICED
    return slots


def _model_spend_row(key: tuple, part: list) -> RunModelSpend:
    (run_id, project_id, slot, model), (cost, n, tokens_in, tokens_out, unpriced) = key, part
    return RunModelSpend(
        run_id=run_id,
        project_id=project_id,
        slot=slot,
        model=model,
        cost_usd=cost,
        turns=n,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        unpriced=unpriced,
    )


def _history(project_id: int) -> list[list]:
    ranked = (
        Submission.objects.filter(project_id=project_id)
        .annotate(rn=Window(RowNumber(), order_by=[F("ts").desc(), F("id").desc()]))
        .filter(rn__lte=SPARK_SCORES)
        .values_list("ts", "id", "score")
    )
    return sorted([micros(ts), pk, score] for ts, pk, score in ranked)


def rebuild_day_spend(run_ids: Iterable[int]) -> None:
    """Read these runs' days of spend and their spend by model and quarter hour again from their turns
    (after turns were deleted, restored or priced again)."""
    run_ids = list(run_ids)
    RunDaySpend.objects.filter(run_id__in=run_ids).delete()
    RunModelSpend.objects.filter(run_id__in=run_ids).delete()
    turns = AgentTurn.objects.filter(run_id__in=run_ids)
    rows = (
        turns.annotate(day=TruncDate("ts", tzinfo=UTC))
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
    # Quarter hours in Python (the timestamp's epoch seconds are computed differently by each database).
    fields = (
        "run_id",
        "run__project_id",
        "ts",
        "model",
        "cost_usd",
        "tokens_in",
        "tokens_out",
        "cost_origin",
    )
    slots = _model_slots(turns.values_list(*fields).iterator(chunk_size=5000))
    RunModelSpend.objects.bulk_create(
        [_model_spend_row(key, part) for key, part in slots.items()], batch_size=1000
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


def backfill_missing(using: str = "default") -> int:
    """Rebuild the figures (and the runs' queue counts, days and model spend) of every project that has
    runs and no figures row yet: what an upgrade from before the figures existed leaves. Returns how many
    projects were rebuilt."""
    missing = list(
        Project.objects.using(using)
        .filter(figures__isnull=True, runs__isnull=False)
        .distinct()
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for project_id in missing:
        with transaction.atomic(using=using):
            rebuild_project_figures(project_id, runs=True)
    return len(missing)
