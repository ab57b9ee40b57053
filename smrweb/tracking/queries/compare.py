"""Reads for the Compare page: up to MAX_RUNS runs of one project side by side.

Five queries whatever the number of runs or rows: the runs, their score series, their cumulative
spend series, one aggregate of turn statistics, and the picker's recent runs. Series are thinned in
SQL (a row-number stride per run, so 50 runs × 10,000 turns never come back whole) and then
downsampled with LTTB, so a chart holds at most POINTS_PER_CHART points however long the runs are.
Totals come from the run's maintained summary columns, which the write path keeps exact.

What is read per run (its series and turn statistics) is kept in the cache under the run's change marker
(`Run.updated`, which every write to the run moves) and the chart's resolution, so a comparison that is
opened again, re-ordered, or that drops or adds a run reads only the runs it has not seen as they are now:
three queries for those, none when every run is kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    Q,
    Sum,
    When,
    Window,
)
from django.db.models.expressions import ExpressionWrapper, RowRange
from django.db.models.functions import Cast, RowNumber

from smrweb.core import cachekeys, softcache
from smrweb.core.downsample import lttb
from smrweb.tracking.models import (
    RUN_RULE,
    AgentTurn,
    Project,
    Run,
    Submission,
    TurnKind,
    counted_q,
    standing,
)
from smrweb.tracking.queries.timeline import EpochSeconds

MAX_RUNS = 200
POINTS_PER_CHART = 3000  # per figure, all runs together: 200 runs stay under 100 KB a figure
# Rows read from SQL per point LTTB keeps: room to choose the points that keep a noisy score series'
# shape. Cumulative spend only rises, so an even stride already keeps its shape.
SCORE_OVERSAMPLE, SPEND_OVERSAMPLE = 4, 2
RECENT_RUNS = 200
SERIES_CACHE_SECONDS = 3600

DELTA_FIELDS = ("final", "best", "turns", "tokens", "usd", "gain_per_usd", "duration")


class JSONArrayLength(Func):
    """The length of a JSON array column; 0 for anything that is not an array (both backends)."""

    function = "JSON_ARRAY_LENGTH"
    output_field = IntegerField()

    def as_postgresql(self, compiler, connection, **extra):
        # jsonb_array_length raises on a non-array, so guard it rather than fail the whole page.
        return self.as_sql(
            compiler,
            connection,
            template=(
                "CASE WHEN JSONB_TYPEOF(%(expressions)s) = 'array' THEN JSONB_ARRAY_LENGTH(%(expressions)s) "
                "ELSE 0 END"
            ),
            **extra,
        )


@dataclass
class RunSeries:
    """One run of a comparison: its summary row, its downsampled series and its deltas to the baseline.

    Series x values are seconds since the run's start, so runs started at different times line up.
    """

    run: Run
    start: datetime
    duration: timedelta
    first_score: float | None = None  # the first that counts in the run's figures (`RUN_RULE`)
    scores: list[tuple[float, float]] = field(default_factory=list)  # (seconds, score)
    score_standing: list[str] = field(default_factory=list)  # per score: why it does not count, "" if it does
    frontier: list[tuple[float, float]] = field(default_factory=list)  # (seconds, best so far), at changes
    spend: list[tuple[float, float]] = field(default_factory=list)  # (seconds, cumulative USD)
    best_after: timedelta | None = None  # from the start to the first score equal to the best
    driver_turns: int = 0
    child_turns: int = 0
    role_unknown_turns: int = 0  # turns whose driver/child side no source states (shown, never guessed)
    tool_calls: int = 0
    mean_turn_ms: float | None = None
    deltas: dict[str, float | timedelta | None] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.run.tokens_in + self.run.tokens_out

    @property
    def gain(self) -> float | None:
        """Score gained from the run's first score that counts to its best, in the scenario's direction
        (never negative)."""
        if self.first_score is None or self.run.best_score is None:
            return None
        gain = self.run.best_score - self.first_score
        return gain if self.run.project.scenario.maximize else -gain

    @property
    def gain_per_usd(self) -> float | None:
        """`gain` per USD of agent spend; None without scores or without spend."""
        if self.gain is None or not self.run.cost_usd:
            return None
        return self.gain / float(self.run.cost_usd)

    @property
    def tokens_per_turn(self) -> float | None:
        return self.tokens / self.run.turn_count if self.run.turn_count else None

    @property
    def usd_per_turn(self) -> Decimal | None:
        return self.run.cost_usd / self.run.turn_count if self.run.turn_count else None

    def values(self) -> dict[str, float | timedelta | None]:
        """The compared figures by name (the table's columns, the deltas' keys)."""
        return {
            "final": self.run.latest_score,
            "best": self.run.best_score,
            "turns": self.run.turn_count,
            "tokens": self.tokens,
            "usd": float(self.run.cost_usd),
            "gain_per_usd": self.gain_per_usd,
            "duration": self.duration,
        }


@dataclass
class Comparison:
    project: Project
    runs: list[RunSeries]
    missing: list[str]  # requested ids the project does not have, in the order given
    per_run: int = 0  # the series' resolution: points per run (what a run's kept figure parts are of)

    @property
    def maximize(self) -> bool:
        return self.project.scenario.maximize

    @property
    def baseline(self) -> RunSeries | None:
        return self.runs[0] if self.runs else None


def compare(
    project: Project,
    external_ids: list[str],
    *,
    points: int = POINTS_PER_CHART,
    found: tuple[list[Run], list[str]] | None = None,
    markers: list[RunMarker] | None = None,
) -> Comparison:
    """The runs named by `external_ids` (order kept, first = baseline) with series and deltas; `found`
    is what `find_runs` answered for them, when the caller has it already; `markers`, what
    `find_markers` answered: each run is then taken whole (row and series) from the cache where it is
    kept as it is now, and only the others are read.

    Series are read only when at least two runs are found: there is nothing to compare otherwise.
    """
    maximize = project.scenario.maximize
    if markers is not None and found is None and len(markers) >= 2:
        per_run = max(points // len(markers), 8)
        series = _kept_runs(project, markers, maximize=maximize, per_run=per_run)
        named = {marker.external_id for marker in markers}
        missing = [rid for rid in external_ids if rid not in named]
    else:
        runs, missing = found or find_runs(project, external_ids)
        series = [RunSeries(run=run, start=run.started_at, duration=timedelta(0)) for run in runs]
        per_run = max(points // max(len(series), 1), 8)
        if len(series) >= 2:
            _add_series(series, maximize=maximize, per_run=per_run)
    for s in series:  # first event to the finish, or to the last progress while the run is live
        end = s.run.finished_at or s.run.last_progress_at
        s.duration = max(end - s.start, timedelta(0))
    _add_deltas(series)
    return Comparison(project=project, runs=series, missing=missing, per_run=per_run)


def find_runs(project: Project, external_ids: list[str]) -> tuple[list[Run], list[str]]:
    """The runs of `external_ids` the project has, in that order (with their parents, named in the table),
    and the ids it does not have. One query."""
    found = {
        r.external_id: r
        for r in Run.objects.filter(project=project, external_id__in=external_ids)
        .select_related("parent")  # lineage: each run's parent, named in the table
        .defer("source_cursor", "metrics_downsampled", "parent__source_cursor", "parent__metrics_downsampled")
        .order_by()
    }
    runs = [found[rid] for rid in external_ids if rid in found]
    for run in runs:
        run.project = project  # already loaded, with its scenario: no query per row
    return runs, [rid for rid in external_ids if rid not in found]


class RunMarker(NamedTuple):
    """What says a compared run changed: its change marker and its parent's (named in the table)."""

    external_id: str
    pk: int
    updated: datetime
    parent_updated: datetime | None


def find_markers(project: Project, external_ids: list[str]) -> tuple[list[RunMarker], list[str]]:
    """`find_runs`, reading only what a kept render is looked up by (no model is built: one query)."""
    found = {
        m[0]: RunMarker(*m)
        for m in Run.objects.filter(project=project, external_id__in=external_ids)
        .order_by()
        .values_list("external_id", "pk", "updated", "parent__updated")
    }
    return [found[rid] for rid in external_ids if rid in found], [
        rid for rid in external_ids if rid not in found
    ]


# What a RunSeries holds beyond its run: read from the rows, kept per run version and resolution.
READ_FIELDS = (
    "start",
    "first_score",
    "scores",
    "score_standing",
    "frontier",
    "spend",
    "best_after",
    "driver_turns",
    "child_turns",
    "role_unknown_turns",
    "tool_calls",
    "mean_turn_ms",
)


def _series_key(run: Run, *, maximize: bool, per_run: int) -> str:
    return cachekeys.compare_series(run.pk, run.updated.timestamp(), maximize=maximize, per_run=per_run)


def _add_series(series: list[RunSeries], *, maximize: bool, per_run: int) -> None:
    """Fill each run's series and turn statistics: from the cache where the run is kept as it is now,
    from the rows (three queries, whatever their number) for the others, which are then kept."""
    keys = {s.run.pk: _series_key(s.run, maximize=maximize, per_run=per_run) for s in series}
    kept = softcache.get_many(list(keys.values()))
    by_pk: dict[int, RunSeries] = {}
    for s in series:
        if (values := kept.get(keys[s.run.pk])) is not None:
            for name, value in zip(READ_FIELDS, values):
                setattr(s, name, value)
        else:
            by_pk[s.run.pk] = s
    if not by_pk:
        return
    spend = _add_turns(by_pk, per_run=per_run)
    _add_scores(by_pk, maximize=maximize, per_run=per_run)
    _add_spend(by_pk, spend, per_run=per_run)
    softcache.set_many(
        {keys[pk]: tuple(getattr(s, name) for name in READ_FIELDS) for pk, s in by_pk.items()},
        SERIES_CACHE_SECONDS,
    )


def _kept_runs(
    project: Project, markers: list[RunMarker], *, maximize: bool, per_run: int
) -> list[RunSeries]:
    """The compared runs, each with its series: kept whole (its row, its parent's and its series) under
    its markers, so one new score in one of 200 runs reads that run's row and rows alone."""
    keys = {
        m.pk: cachekeys.compare_run(
            m.pk,
            m.updated.timestamp(),
            m.parent_updated.timestamp() if m.parent_updated else None,
            maximize=maximize,
            per_run=per_run,
        )
        for m in markers
    }
    hits = softcache.get_many(list(keys.values()))
    by_pk: dict[int, RunSeries] = {}
    for pk, key in keys.items():
        if (hit := hits.get(key)) is not None:
            run, values = hit
            run.project = project
            by_pk[pk] = s = RunSeries(run=run, start=run.started_at, duration=timedelta(0))
            for name, value in zip(READ_FIELDS, values):
                setattr(s, name, value)
    read = [
        RunSeries(run=run, start=run.started_at, duration=timedelta(0))
        for run in _runs_by_pk(project, [m.pk for m in markers if m.pk not in by_pk])
    ]
    if read:
        _add_series(read, maximize=maximize, per_run=per_run)
        kept = {}
        for s in read:
            by_pk[s.run.pk] = s
            s.run._state.fields_cache.pop("project", None)  # the project is the caller's: not kept 200 times
            kept[keys[s.run.pk]] = (s.run, tuple(getattr(s, name) for name in READ_FIELDS))
        softcache.set_many(kept, SERIES_CACHE_SECONDS)  # pickled here, before the project is set back
        for s in read:
            s.run.project = project
    return [by_pk[m.pk] for m in markers if m.pk in by_pk]


def _runs_by_pk(project: Project, pks: list[int]) -> list[Run]:
    """The runs `pks` of the project as `find_runs` reads them (one query; none for no run)."""
    if not pks:
        return []
    return list(
        Run.objects.filter(project=project, pk__in=pks)
        .select_related("parent")
        .defer("source_cursor", "metrics_downsampled", "parent__source_cursor", "parent__metrics_downsampled")
        .order_by()
    )


PICKER_FIELDS = ("external_id", "state", "best_score", "last_progress_at", "stalled_since", "turn_count")


def recent_runs(project: Project, *, limit: int = RECENT_RUNS) -> list[Run]:
    """The project's most recently active runs, for the picker."""
    return list(
        Run.objects.filter(project=project).order_by("-last_progress_at", "-id").only(*PICKER_FIELDS)[:limit]
    )


def picked_runs(project: Project, external_ids: list[str]) -> list[Run]:
    """The runs of `external_ids` that exist, in that order, for the picker (what it shows of them only)."""
    found = {
        run.external_id: run
        for run in Run.objects.filter(project=project, external_id__in=external_ids).only(*PICKER_FIELDS)
    }
    return [found[i] for i in external_ids if i in found]


# Time order is `ts` alone: the (run, ts) index yields it without sorting the rows (a tie-breaker on
# id would force a sort of every row). Rows with equal timestamps are then in no particular order,
# which moves nothing on the chart: running values are exact at every timestamp.
IN_TIME = [F("ts").asc()]
UP_TO_HERE = RowRange(start=None, end=0)


def _thinned(rows, count_field: str, per_run: int, **running):
    """`rows` (one model's rows of several runs) annotated for thinning in SQL: `rn` (position in the
    run by time), `last` (the run's row count, from its summary column `count_field`), `phase` (0 on
    every k-th row, k about count / per_run) and the `running` aggregates, each `(function, frame)`
    over the run's rows in time order. Callers keep rn = 1, rn = last and phase = 0: about
    `per_run` rows per run, whatever its length.

    The count is read from the run's row (a join) rather than counted over the partition,
    which would be a second pass over every row; all windows share one definition where they can,
    so the database computes them in one pass over the (run, ts) index.
    """
    by_run = [F("run_id")]
    return rows.order_by().annotate(
        rn=Window(RowNumber(), partition_by=by_run, order_by=IN_TIME, frame=UP_TO_HERE),
        last=F(f"run__{count_field}"),
        # k = (count + per_run) // per_run: at least 1 even if the count were stale, so never a
        # division by zero. `%`, not Mod(): Django's SQLite MOD is a Python function called per row.
        phase=ExpressionWrapper((F("rn") - 1) % ((F("last") + per_run) / per_run), IntegerField()),
        **{
            name: Window(fn, partition_by=by_run, order_by=IN_TIME, frame=frame)
            for name, (fn, frame) in running.items()
        },
    )


class TurnBase(NamedTuple):
    """What a run's turn side was read from, kept (`cachekeys.compare_turns`) so that the next read after
    new turns reads only those: the turn count and highest turn id it holds, the latest turn's time, the
    statistics (`TurnStats`) and the spend rows as `spend_rows` thins them, `(rn, epoch seconds, running
    USD)`. Turns are only ever added (a run's are deleted whole), so the new turns are those past `hwm`."""

    count: int
    hwm: int
    last_t: float
    stats: TurnStats
    spend: list[tuple[int, float, float]]


class TurnStats(NamedTuple):
    driver: int = 0
    child: int = 0
    unknown: int = 0
    tools: int = 0
    ms_sum: int = 0  # of the turns with a duration, `ms_n` of them: their mean is the mean turn
    ms_n: int = 0
    first: datetime | None = None


def _stride(count: int, per_run: int) -> int:
    """Every how many rows `_thinned` keeps one of a run of `count` rows (as its SQL computes it)."""
    return (count + per_run) // per_run


def _add_turns(by_pk: dict[int, RunSeries], *, per_run: int) -> dict[int, list[tuple[int, float, float]]]:
    """Each run's turn statistics, set on it, and its spend rows, returned (`spend_rows`: thinned). A run
    whose turns were read before (its `TurnBase` kept) and that has only new turns since, all later than
    its latest, in the same stride, has those read alone and added (one query for all such runs, by the
    (run, id) index): a new turn in a run of 100,000 costs one row, not a window over 100,000. The others
    are read whole (two queries)."""
    stride_rows = per_run * SPEND_OVERSAMPLE
    keys = {pk: cachekeys.compare_turns(pk, per_run=per_run) for pk in by_pk}
    kept = softcache.get_many(list(keys.values()))
    bases: dict[int, TurnBase] = {}
    for pk, s in by_pk.items():
        base = kept.get(keys[pk])
        if (
            isinstance(base, TurnBase)
            and base.count <= s.run.turn_count
            and _stride(base.count, stride_rows) == _stride(s.run.turn_count, stride_rows)
        ):
            bases[pk] = base
    fresh: dict[int, TurnBase] = {}
    if bases:
        new = defaultdict(list)
        for row in _turns_past(bases):
            new[row[0]].append(row[1:])
        for pk, base in bases.items():
            if (added := _added(base, new[pk], by_pk[pk].run.turn_count, stride_rows)) is not None:
                fresh[pk] = added
    whole = [pk for pk in by_pk if pk not in fresh]
    if whole:
        fresh.update(_read_turns(whole, {pk: by_pk[pk].run.turn_count for pk in whole}, stride_rows))
    for pk, base in fresh.items():
        s, stats = by_pk[pk], base.stats
        s.driver_turns, s.child_turns, s.role_unknown_turns = stats.driver, stats.child, stats.unknown
        s.tool_calls, s.mean_turn_ms = stats.tools, stats.ms_sum / stats.ms_n if stats.ms_n else None
        if stats.first is not None:
            s.start = min(s.start, stats.first)  # a late batch may carry earlier turns than the first one
    softcache.set_many({keys[pk]: base for pk, base in fresh.items()}, SERIES_CACHE_SECONDS)
    return {pk: base.spend for pk, base in fresh.items()}


def _turns_past(bases: dict[int, TurnBase]):
    """(run, id, ts, epoch seconds, kind, tool calls, duration ms, USD) of the runs' turns past each one's
    kept `hwm`, in time order (as `_thinned` numbers them: ties in id order, as the (run, ts) index)."""
    past = Q()
    for pk, base in bases.items():
        past |= Q(run_id=pk, id__gt=base.hwm)
    return (
        AgentTurn.objects.filter(past)
        .annotate(
            t=EpochSeconds("ts"), tools=JSONArrayLength("tool_calls"), usd=Cast("cost_usd", FloatField())
        )
        .order_by("run_id", "ts", "id")
        .values_list("run_id", "id", "ts", "t", "kind", "tools", "duration_ms", "usd")
    )


def _added(base: TurnBase, new: list[tuple], count: int, stride_rows: int) -> TurnBase | None:
    """`base` with the `new` turns added, as a whole read would have it; None when they are not what was
    added since (another count: turns deleted or missed) or not all later than its latest turn (a late
    batch renumbers the rows): the run is then read whole."""
    if base.count + len(new) != count or (new and new[0][2] <= base.last_t):
        return None
    if not new:
        return base
    k = _stride(count, stride_rows)
    # The old last row stays only if the stride keeps it; the running total goes on from it.
    spend = [r for r in base.spend if r[0] == 1 or (r[0] - 1) % k == 0]
    total = base.spend[-1][2] if base.spend else 0.0
    st = base.stats
    driver, child, unknown, tools, ms_sum, ms_n = (
        st.driver,
        st.child,
        st.unknown,
        st.tools,
        st.ms_sum,
        st.ms_n,
    )
    for rn, (_, _, t, kind, n_tools, ms_, usd_) in enumerate(new, base.count + 1):
        total += usd_
        if rn == 1 or rn == count or (rn - 1) % k == 0:
            spend.append((rn, t, total))
        driver += kind == TurnKind.DRIVER_INFERENCE
        child += kind == TurnKind.CHILD_WORK
        unknown += kind == TurnKind.ROLE_UNKNOWN
        tools += n_tools or 0
        if ms_ is not None:
            ms_sum, ms_n = ms_sum + ms_, ms_n + 1
    first = st.first if st.first is not None else new[0][1]
    stats = TurnStats(driver, child, unknown, tools, ms_sum, ms_n, first)
    return TurnBase(count, max(base.hwm, max(row[0] for row in new)), new[-1][2], stats, spend)


def _read_turns(pks: list[int], counts: dict[int, int], stride_rows: int) -> dict[int, TurnBase]:
    """The runs' turn sides read whole: what the summary columns do not hold, per run, in one aggregate
    (turns by kind, tool calls, turn durations, first turn time; distinct actors would need a sort per
    run: left to the run page), and the spend rows (`spend_rows`)."""
    stats = (
        AgentTurn.objects.filter(run_id__in=pks)
        .values("run_id")
        .annotate(
            driver=Count("id", filter=Q(kind=TurnKind.DRIVER_INFERENCE)),
            child=Count("id", filter=Q(kind=TurnKind.CHILD_WORK)),
            unknown=Count("id", filter=Q(kind=TurnKind.ROLE_UNKNOWN)),
            tools=Sum(JSONArrayLength("tool_calls")),
            ms_sum=Sum("duration_ms"),
            ms_n=Count("duration_ms"),
            first=Min("ts"),
            hwm=Max("id"),
            n=Count("id"),
        )
        .order_by()  # no Meta ordering: it would join the GROUP BY
    )
    read = {row["run_id"]: row for row in stats}
    spend: dict[int, list[tuple]] = defaultdict(list)
    for run_id, ts, total, rn in spend_rows(pks, per_run=stride_rows):
        spend[run_id].append((rn, ts, total))
    out = {}
    for pk in pks:
        row = read.get(pk)
        rows = sorted(spend[pk])
        if row is None:
            out[pk] = TurnBase(0, 0, float("-inf"), TurnStats(), [])
            continue
        stats_ = TurnStats(
            row["driver"],
            row["child"],
            row["unknown"],
            row["tools"] or 0,
            row["ms_sum"] or 0,
            row["ms_n"],
            row["first"],
        )
        # The count the rows were thinned by is the run's summary column: kept as that, so a base whose
        # rows disagree with it is never added to (its count will not match the turns found past it).
        count = counts[pk] if row["n"] == counts[pk] else -1
        out[pk] = TurnBase(count, row["hwm"], rows[-1][1] if rows else float("-inf"), stats_, rows)
    return out


def score_rows(runs: list[Run], *, maximize: bool, per_run: int):
    """(run, epoch seconds, score, best so far, rn, status, excluded_at) rows of the runs' scores, about
    `per_run` per run: each run's first and last score, the first score equal to its best, and every k-th
    between. The best so far is of the scores that count in the run's figures (`RUN_RULE`: what its best
    reads), computed over all rows before thinning, so it is exact at every row kept."""
    best = Max if maximize else Min
    counts = counted_q(**RUN_RULE)
    counted_score = Case(When(counts, then=F("score")), output_field=FloatField())
    better = Q(score__gt=F("before")) if maximize else Q(score__lt=F("before"))
    improves = counts & (Q(before__isnull=True) | better)
    return (
        _thinned(
            Submission.objects.filter(run__in=runs),
            "score_count",
            per_run,
            so_far=(best(counted_score), UP_TO_HERE),
            before=(best(counted_score), RowRange(start=None, end=-1)),
        )
        .filter(
            Q(rn=1)
            | Q(rn=F("last"))
            | Q(phase=0)
            | (counts & Q(before__isnull=True))  # the first that counts: where the gain starts
            | (Q(score=F("run__best_score")) & improves)
        )
        .annotate(t=EpochSeconds("ts"))
        .values_list("run_id", "t", "score", "so_far", "rn", "status", "excluded_at")
    )


def _add_scores(by_pk: dict[int, RunSeries], *, maximize: bool, per_run: int) -> None:
    """Score series: thinned in SQL, then LTTB (the best score always kept), each score with why it does
    not count ("" when it does); the best-so-far frontier of the scores that count as its change points.
    Per run at most `per_run` points with the frontier and its end point."""
    kept: dict[int, list[tuple]] = defaultdict(list)
    runs = [s.run for s in by_pk.values()]
    for run_id, ts, score, so_far, rn, status, excluded in score_rows(
        runs, maximize=maximize, per_run=per_run * SCORE_OVERSAMPLE
    ):
        kept[run_id].append((rn, ts, score, so_far, standing(status, excluded is not None, **RUN_RULE)))
    for run_id, items in kept.items():
        items.sort()
        s = by_pk[run_id]
        if items[0][1] < s.start.timestamp():  # a late batch may carry earlier scores than the first one
            s.start = datetime.fromtimestamp(items[0][1], UTC)
        start = s.start.timestamp()
        # The first that counts among those kept (the SQL keeps each run's first row and every record).
        s.first_score = next((score for _, _, score, _, why in items if not why), None)
        best_rn = next((rn for rn, _, score, _, why in items if not why and score == s.run.best_score), None)
        pts = [(t - start, score, rn == best_rn, why) for rn, t, score, _, why in items]
        steps = [(x, so_far) for (x, *_), (_, _, _, so_far, _) in zip(pts, items) if so_far is not None]
        frontier = _changes(steps)
        if len(frontier) > per_run // 4:
            frontier = lttb(frontier, max(per_run // 4, 3))
        s.frontier = frontier
        budget = max(per_run - len(frontier) - 1, 3)  # the chart adds one point: the frontier held to the end
        sampled = lttb(pts, budget - 1)
        best_pt = next((p for p in pts if p[2]), None)
        if best_pt is not None:
            s.best_after = timedelta(seconds=best_pt[0])
            if best_pt not in sampled:  # the best score is the point of the chart: never sample it away
                sampled = sorted([*sampled, best_pt], key=lambda p: p[0])
        s.scores = [(x, y) for x, y, _, _ in sampled]
        s.score_standing = [why for *_, why in sampled]


def _changes(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A step series reduced to the points where its value changes, plus its last point."""
    out = [p for i, p in enumerate(points) if i == 0 or p[1] != points[i - 1][1]]
    if points and out[-1] != points[-1]:
        out.append(points[-1])
    return out


def spend_rows(runs: list[Run], *, per_run: int):
    """(run, epoch seconds, cumulative USD, rn) rows of the runs' agent turns, about `per_run` per run:
    running sums over every turn, computed in SQL, kept at each run's first and last turn and every k-th
    between."""
    return (
        _thinned(
            AgentTurn.objects.filter(run__in=runs),
            "turn_count",
            per_run,
            # Summed as floats: far cheaper than exact decimals per row, and exact enough for a chart.
            total=(Sum(Cast("cost_usd", FloatField())), UP_TO_HERE),
        )
        .filter(Q(rn=1) | Q(rn=F("last")) | Q(phase=0))
        .annotate(t=EpochSeconds("ts"))
        .values_list("run_id", "t", "total", "rn")
    )


def _add_spend(by_pk: dict[int, RunSeries], spend: dict[int, list[tuple]], *, per_run: int) -> None:
    """Cumulative USD over time since each run's start, from its spend rows (`_add_turns`): LTTB."""
    for run_id, items in spend.items():
        if not items:
            continue
        start = by_pk[run_id].start.timestamp()
        pts = [(t - start, float(total)) for _, t, total in items]
        by_pk[run_id].spend = lttb(pts, max(per_run - 2, 3))  # the chart adds the origin and the end


def _add_deltas(series: list[RunSeries]) -> None:
    """Each run's figures minus the baseline's (the first run); None where either side has none."""
    if not series:
        return
    base = series[0].values()
    for s in series:
        mine = s.values()
        s.deltas = {
            k: None if mine[k] is None or base[k] is None else mine[k] - base[k] for k in DELTA_FIELDS
        }


def reorder(run_ids: list[str], *, baseline: str = "", drop: str = "") -> list[str]:
    """The compared runs with `baseline` moved first and `drop` left out (the table's row buttons)."""
    ids = [rid for rid in run_ids if rid != drop]
    if baseline in ids:
        ids.remove(baseline)
        ids.insert(0, baseline)
    return ids


def parse_run_ids(values: Iterable[str]) -> list[str]:
    """Run ids from `runs=` parameters (repeated, or comma-separated): stripped, deduplicated, in order."""
    seen: dict[str, None] = {}
    for value in values:
        for rid in value.split(","):
            if rid := rid.strip():
                seen.setdefault(rid, None)
    return list(seen)
