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
    F,
    FloatField,
    Max,
    Min,
    Q,
    When,
    Window,
)
from django.db.models.expressions import RowRange

from smrweb.core import cachekeys, localcache, softcache
from smrweb.core.downsample import lttb
from smrweb.tracking.models import (
    RUN_RULE,
    Project,
    Run,
    Submission,
    counted_q,
    standing,
)
from smrweb.tracking.queries.compare_turns import UP_TO_HERE, _stride, _thinned, add_turns
from smrweb.tracking.queries.compare_turns import spend_rows as spend_rows  # what it reads: tests, bench
from smrweb.tracking.queries.timeline_scores import only_added, scores_since
from smrweb.tracking.queries.turn_memo import EpochSeconds

MAX_RUNS = 200
LOCAL_ENTRIES = 2 * 3 * MAX_RUNS  # a process's copies per project (_kept_runs): two views' runs, parts, rows
POINTS_PER_CHART = 3000  # per figure, all runs together: 200 runs stay under 100 KB a figure
# Rows read from SQL per point LTTB keeps: room to choose the points that keep a noisy score series'
# shape. Cumulative spend only rises, so an even stride already keeps its shape.
SCORE_OVERSAMPLE, SPEND_OVERSAMPLE = 4, 2
RECENT_RUNS = 200
SERIES_CACHE_SECONDS = 3600

DELTA_FIELDS = ("final", "best", "turns", "tokens", "usd", "gain_per_usd", "duration")


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
    # What the cache keeps of the keys the caller asked for with the runs (`compare(also=…)`): the hits,
    # and the keys asked (a key asked and not in `kept` is not kept).
    kept: dict = field(default_factory=dict)
    asked: frozenset = frozenset()

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
    also: list[str] = (),
) -> Comparison:
    """The runs named by `external_ids` (order kept, first = baseline) with series and deltas; `found`
    is what `find_runs` answered for them, when the caller has it already; `markers`, what
    `find_markers` answered: each run is then taken whole (row and series) from the cache where it is
    kept as it is now, and only the others are read.

    Series are read only when at least two runs are found: there is nothing to compare otherwise. With
    `markers`, the cache keys `also` are fetched with the runs' (one round trip): the comparison's `kept`.
    """
    maximize = project.scenario.maximize
    kept: dict = {}
    asked: frozenset = frozenset()
    if markers is not None and found is None and len(markers) >= 2:
        per_run = resolution(len(markers), points)
        series, kept = _kept_runs(project, markers, maximize=maximize, per_run=per_run, also=also)
        asked = frozenset(also)
        named = {marker.external_id for marker in markers}
        missing = [rid for rid in external_ids if rid not in named]
    else:
        runs, missing = found or find_runs(project, external_ids)
        series = [RunSeries(run=run, start=run.started_at, duration=timedelta(0)) for run in runs]
        per_run = resolution(max(len(series), 1), points)
        if len(series) >= 2:
            _add_series(series, maximize=maximize, per_run=per_run)
    for s in series:  # first event to the finish, or to the last progress while the run is live
        end = s.run.finished_at or s.run.last_progress_at
        s.duration = max(end - s.start, timedelta(0))
    _add_deltas(series)
    return Comparison(project=project, runs=series, missing=missing, per_run=per_run, kept=kept, asked=asked)


def resolution(runs: int, points: int = POINTS_PER_CHART) -> int:
    """Points per run of a comparison of `runs` runs (what its runs' kept series and parts are of)."""
    return max(points // runs, 8)


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
    spend = add_turns(by_pk, per_run=per_run, oversample=SPEND_OVERSAMPLE, timeout=SERIES_CACHE_SECONDS)
    _add_scores(by_pk, maximize=maximize, per_run=per_run)
    _add_spend(by_pk, spend, per_run=per_run)
    softcache.set_many(
        {keys[pk]: tuple(getattr(s, name) for name in READ_FIELDS) for pk, s in by_pk.items()},
        SERIES_CACHE_SECONDS,
    )


def _kept_runs(
    project: Project, markers: list[RunMarker], *, maximize: bool, per_run: int, also: list[str] = ()
) -> tuple[list[RunSeries], dict]:
    """The compared runs, each with its series: kept whole (its row, its parent's and its series) under
    its markers, so one new score in one of 200 runs reads that run's row and rows alone; and what the
    cache keeps of the keys `also`, fetched in the same round trip."""
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
    # This process's copies first, of the runs and of what the page keeps per run (`also`: figure parts and
    # rows, immutable texts): a view after one run's change asks the shared cache for that run's alone, not
    # for 100 runs' unpickled. A kept run is copied (`own_copy`): a view sets its project on it.
    wanted = [*keys.values(), *also]
    local = localcache.near(("compare-runs", project.pk), wanted)
    hits = {key: local[key] for key in also if key in local}
    own = localcache.own_copy
    hits |= {key: (own(local[key][0]), local[key][1]) for key in keys.values() if key in local}
    hits.update(softcache.get_many([key for key in wanted if key not in local]))
    by_pk: dict[int, RunSeries] = {}
    fetched = {}
    for pk, key in keys.items():
        if (hit := hits.get(key)) is not None:
            run, values = hit
            if key not in local:
                fetched[key] = (localcache.own_copy(run), values)
            _attach(run, project)
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
        fetched |= {key: (localcache.own_copy(run), values) for key, (run, values) in kept.items()}
        for s in read:
            _attach(s.run, project)
    if len(local) < len(wanted):
        shown = {key: local.get(key) or fetched.get(key) or hits.get(key) for key in wanted}
        keep_here(project, {key: value for key, value in shown.items() if value is not None})
    return [by_pk[m.pk] for m in markers if m.pk in by_pk], {k: hits[k] for k in also if k in hits}


def keep_here(project: Project, values: dict) -> None:
    """This process's copies of what a comparison keeps in the shared cache (`_kept_runs` reads them first;
    the page writes its parts here too when it writes them again under a key: another time unit)."""
    localcache.keep_near(("compare-runs", project.pk), values, LOCAL_ENTRIES)


def _attach(run: Run, project: Project) -> None:
    """`run.project = project` for the run's own project, without the descriptor's checks (a tenth of the
    time: 200 runs a view)."""
    run._state.fields_cache["project"] = project


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
        .annotate(
            t=EpochSeconds("ts"),
            # The highest id and `updated` of each run's scores (`ScoreBase`: extended by what is past them).
            last_pk=Window(Max("id"), partition_by=[F("run_id")]),
            last_updated=Window(Max("updated"), partition_by=[F("run_id")]),
        )
        .values_list(
            "run_id", "t", "score", "so_far", "rn", "status", "excluded_at", "last_pk", "last_updated"
        )
    )


class ScoreBase(NamedTuple):
    """A compared run's score rows as `score_rows` keeps them, `(rn, epoch seconds, score, best so far, why
    it does not count)`, kept (`cachekeys.compare_scores`) with what they were read from: the score count
    (-1 when the rows disagree with the run's: never extended), the highest id and `updated` of its
    scores and the latest score's time. A read after new scores, all later than that, reads those alone
    (`timeline_scores.only_added`: the rule the run page's score side is extended by)."""

    count: int
    last_pk: int
    updated: object
    last_t: float
    rows: list[tuple]


def _score_bases(by_pk: dict[int, RunSeries], *, maximize: bool, per_run: int) -> dict[int, ScoreBase]:
    """Each run's score rows (`ScoreBase`): the kept ones extended by the scores since (one query for all
    of them, none for a run with no score past its marks), the others read whole (one query)."""
    keys = {pk: cachekeys.compare_scores(pk, maximize=maximize, per_run=per_run) for pk in by_pk}
    kept = softcache.get_many(list(keys.values()))
    bases = {
        pk: base for pk in by_pk if isinstance(base := kept.get(keys[pk]), ScoreBase) and base.count >= 0
    }
    out: dict[int, ScoreBase] = {}
    if bases:
        since = defaultdict(list)
        marks = {pk: (base.last_pk, base.updated) for pk, base in bases.items()}
        for run_id, *row in (
            scores_since(marks)
            .annotate(t=EpochSeconds("ts"))
            .values_list("run_id", "pk", "t", "score", "status", "excluded_at", "updated")
        ):
            since[run_id].append(row)
        for pk, base in bases.items():
            run = by_pk[pk].run
            if (grown := _scores_added(base, since[pk], run, maximize, per_run)) is not None:
                out[pk] = grown
    if whole := [pk for pk in by_pk if pk not in out]:
        out.update(_read_scores({pk: by_pk[pk].run for pk in whole}, maximize=maximize, per_run=per_run))
    softcache.set_many({keys[pk]: base for pk, base in out.items()}, SERIES_CACHE_SECONDS)
    return out


def _read_scores(runs: dict[int, Run], *, maximize: bool, per_run: int) -> dict[int, ScoreBase]:
    """The runs' score rows read whole (`score_rows`, one query)."""
    rows: dict[int, list[tuple]] = defaultdict(list)
    marks = {}
    for run_id, ts, score, so_far, rn, status, excluded, last_pk, updated in score_rows(
        list(runs.values()), maximize=maximize, per_run=per_run
    ):
        rows[run_id].append((rn, ts, score, so_far, standing(status, excluded is not None, **RUN_RULE)))
        marks[run_id] = (last_pk, updated)
    out = {}
    for pk, run in runs.items():
        items = sorted(rows[pk])
        last_pk, updated = marks.get(pk, (0, None))
        count = items[-1][0] if items else 0
        out[pk] = ScoreBase(
            count if count == run.score_count else -1,
            last_pk,
            updated,
            items[-1][1] if items else float("-inf"),
            items,
        )
    return out


def _scores_added(base: ScoreBase, new: list[tuple], run: Run, maximize: bool, per_run: int):
    """`base` with the `new` scores (since its marks: (id, epoch seconds, score, status, excluded_at,
    updated)) added as `score_rows` would keep them, or None when they are not only later scores
    (`only_added`) or the stride moved: the run is then read whole."""
    count = run.score_count
    if not only_added([(pk, t) for pk, t, *_ in new], base.count, count, base.last_pk, base.last_t):
        return None
    if not new:
        return base
    if _stride(base.count, per_run) != (k := _stride(count, per_run)):
        return None
    better = (lambda a, b: a > b) if maximize else (lambda a, b: a < b)
    best = run.best_score
    first_counted = next((rn for rn, *_, why in base.rows if not why), None)
    # Of the rows kept, the first that counts with the best score (`score_rows`' record of the best): it
    # stays while the best does; a new best is among the new scores.
    best_rn = next((rn for rn, _, score, _, why in base.rows if not why and score == best), None)
    rows = [
        r
        for r in base.rows
        if r[0] == 1 or (r[0] - 1) % k == 0 or r[0] in (first_counted, best_rn)  # the old last goes
    ]
    so_far = base.rows[-1][3] if base.rows else None  # the last row's: the best of all before the new
    for rn, (_, t, score, status, excluded, _) in enumerate(new, base.count + 1):
        why = standing(status, excluded is not None, **RUN_RULE)
        before = so_far
        if not why and (so_far is None or better(score, so_far)):
            so_far = score
        improves = not why and (before is None or better(score, before))
        first = not why and first_counted is None
        if first:
            first_counted = rn
        if rn == 1 or rn == count or (rn - 1) % k == 0 or first or (improves and score == best):
            rows.append((rn, t, score, so_far, why))
    return ScoreBase(
        count,
        max(pk for pk, *_ in new),
        max([base.updated, *(u for *_, u in new)], key=lambda u: (u is not None, u)),
        max(base.last_t, new[-1][1]),
        rows,
    )


def _add_scores(by_pk: dict[int, RunSeries], *, maximize: bool, per_run: int) -> None:
    """Score series: thinned in SQL (kept per run and extended by new scores: `_score_bases`), then LTTB
    (the best score always kept), each score with why it does not count ("" when it does); the best-so-far
    frontier of the scores that count as its change points. Per run at most `per_run` points with the
    frontier and its end point."""
    bases = _score_bases(by_pk, maximize=maximize, per_run=per_run * SCORE_OVERSAMPLE)
    for run_id, base in bases.items():
        if not (items := base.rows):
            continue
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


def _add_spend(by_pk: dict[int, RunSeries], spend: dict[int, list[tuple]], *, per_run: int) -> None:
    """Cumulative USD over time since each run's start, from its spend rows (`add_turns`): LTTB."""
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
