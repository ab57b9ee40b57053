"""Any series of compared runs against any axis: the score or a logged metric key, drawn against the step,
the time since the run's start, the wall clock, or what the run had spent by then — turns, tokens or USD,
driver and child work together — so arms are compared at equal spend (seed 003's "equal-k"), not at equal
time, where a run that spends more per turn looks better for having run longer.

Reads, whatever the runs' lengths: the runs, their counted scores or the metric's points thinned in SQL
(a row-number stride per run, then LTTB), and, for a spend axis, the runs' running turn sums thinned the
same way. A point's spend is read off the running sums at its time (linear between two kept rows, exact
at them); each trace ends at the run's own total on the axis (its summary columns, which the write path
keeps exact), carrying its last value there, so the last x of a trace is what the run has spent.

Runs are named `run` (of the page's project) or `project:run` (of any project the viewer may read); a run
the viewer may not read is reported exactly as one that does not exist."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Count, ExpressionWrapper, F, FloatField, IntegerField, Q, Sum, Window
from django.db.models.functions import Cast, RowNumber

from smrweb.core import cachekeys, softcache
from smrweb.core.downsample import lttb
from smrweb.tracking.models import (
    RUN_RULE,
    AgentTurn,
    MetricPoint,
    MetricRollup,
    Project,
    Run,
    Submission,
    counted_q,
)
from smrweb.tracking.queries.compare_turns import UP_TO_HERE, _thinned
from smrweb.tracking.queries.turn_memo import EpochSeconds

SCORE = "score"
# The x-axes, in the order the page offers them: (key, label).
AXES = (
    ("usd", "Spend (USD)"),
    ("tokens", "Tokens (in + out)"),
    ("turns", "Turns"),
    ("time", "Time since start"),
    ("wall", "Wall-clock time"),
    ("step", "Step"),
)
AXIS_LABELS = dict(AXES)
SPEND_AXES = {"usd": "cost_usd", "tokens": None, "turns": "turn_count"}
MAX_RUNS = 200
POINTS_PER_CHART = 3000  # all runs together, as Compare's figures
OVERSAMPLE = 4  # rows read per point kept: room for LTTB to keep a noisy series' shape
SPEND_ROWS_PER_POINT = 2  # running turn sums read per point kept: a point's spend is read between two
TRACE_SECONDS = 3600
# What a trace, an arm and the card read of a run (its kept trace is versioned by these): the rest of a run's
# row (its JSON columns above all) is not loaded for 200 runs.
RUN_FIELDS = (
    "id",
    "project_id",
    "external_id",
    "state",
    "started_at",
    "updated",
    "turn_count",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "score_count",
    "best_score",
    "latest_score",
    "actual_profile",
    "requested_profile",
)


class SeriesError(ValueError):
    """A request this module cannot answer: `field` names the parameter at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass
class Trace:
    """One run's series: `points` (x, y) in x order, downsampled, each x on the chosen axis (epoch seconds
    for the wall clock); `best` the best-so-far frontier at its changes (scores only); `x_total` the run's
    own total on a spend axis (the trace's last x), None on the others."""

    run: Run
    name: str  # as the request named it: "run" or "project:run"
    points: list[tuple[float, float]] = field(default_factory=list)
    best: list[tuple[float, float]] = field(default_factory=list)
    x_total: float | None = None
    carried: bool = False  # the last point is the last value carried to `x_total`, not a point of its own
    read: int = 0  # the points the run has for this metric (before downsampling)
    version: str = ""  # what the trace is kept under: it changes whenever the trace may


@dataclass
class Series:
    metric: str
    x: str
    traces: list[Trace]
    missing: list[str]  # names that are not runs the viewer may read
    without_metric: list[str]  # runs with no point of the metric


def find_runs(home: Project, readable, names: list[str]) -> tuple[list[tuple[str, Run]], list[str]]:
    """The runs `names` name, in order, and the names that are not runs the viewer may read (`readable`:
    the projects the request may read). `run` is of `home`; `project:run` of that project (a run of `home`
    whose own id holds a colon wins). Two queries."""
    candidates: dict[str, list[tuple[str, str]]] = {}
    for name in names:
        slug, sep, run_id = name.rpartition(":")
        candidates[name] = [(home.slug, name)] + ([(slug, run_id)] if sep and slug and run_id else [])
    slugs = {slug for keys in candidates.values() for slug, _ in keys} - {home.slug}
    projects = {p.slug: p for p in readable.filter(slug__in=slugs).select_related("scenario")}
    projects[home.slug] = home
    ids: dict[str, set[str]] = defaultdict(set)
    for keys in candidates.values():
        for slug, run_id in keys:
            if slug in projects:
                ids[slug].add(run_id)
    q = Q(pk__in=[])
    for slug, run_ids in ids.items():  # one term per project: 200 terms cost more to compile than to run
        q |= Q(project=projects[slug], external_id__in=sorted(run_ids))
    by_id = {p.pk: p for p in projects.values()}
    found = {}
    for run in Run.objects.filter(q).only(*RUN_FIELDS):
        run.project = by_id[run.project_id]  # one instance per project, not one per run
        found[(run.project.slug, run.external_id)] = run
    named, missing = [], []
    for name, keys in candidates.items():
        run = next((found[key] for key in keys if key in found), None)
        (named.append((name, run)) if run is not None else missing.append(name))
    return named, missing


def other_projects(home: Project, readable, names: list[str]) -> list[str]:
    """The names of the form `project:run` whose project is another the viewer may read (one query, none
    without such names): Compare's "any metric" card draws them; its tables are of `home` alone."""
    prefixed = {name: name.rpartition(":")[0] for name in names if ":" in name.strip(":")}
    slugs = set(prefixed.values()) - {home.slug}
    if not slugs:
        return []
    found = set(readable.filter(slug__in=slugs).values_list("slug", flat=True))
    return [name for name, slug in prefixed.items() if slug in found]


def metric_keys(runs: list[Run]) -> list[str]:
    """The metric keys any of the runs logged, sorted (the rollups' whole-series rows: one per key)."""
    rows = MetricRollup.objects.filter(run__in=runs, width=0).values_list("key", flat=True).distinct()
    return sorted(set(rows))


def _per_run(runs: int) -> int:
    return max(2, POINTS_PER_CHART // max(1, runs))


def trace_keys(runs: list[Run], metric: str, x: str) -> dict[int, str]:
    """What each run's trace is kept under (one query for a metric's rollups, none for the score)."""
    per_run = _per_run(len(runs))
    marks = _metric_marks(runs, metric) if metric != SCORE else {}
    return {run.pk: _trace_key(run, metric, x, per_run, marks.get(run.pk)) for run in runs}


def series(
    named: list[tuple[str, Run]],
    metric: str,
    x: str,
    *,
    missing: list[str] = (),
    keys: dict[int, str] | None = None,
) -> Series:
    """`metric` ("score" or a metric key) of each run against axis `x` (a key of AXES); a run's best so
    far is in its own scenario's direction."""
    if x not in AXIS_LABELS:
        raise SeriesError("x", f"Unknown axis {x!r}: one of {', '.join(AXIS_LABELS)}.")
    if not metric.strip():
        raise SeriesError("metric", "Name a metric: score or a logged metric key.")
    if len(named) > MAX_RUNS:
        raise SeriesError("runs", f"{len(named)} runs named; at most {MAX_RUNS} are compared at once.")
    runs = [run for _, run in named]
    per_run = _per_run(len(runs))
    keys = keys or trace_keys(runs, metric, x)
    kept = softcache.get_many(list(keys.values()))
    todo = [run for run in runs if keys[run.pk] not in kept]
    made = {}
    if todo:
        raw = counted_scores(todo) if metric == SCORE else _metric_points(todo, metric, per_run * OVERSAMPLE)
        spend = _running_turns(todo, per_run * SPEND_ROWS_PER_POINT) if x in SPEND_AXES else {}
        for run in todo:
            rows, running = raw.get(run.pk, []), spend.get(run.pk, [])
            made[keys[run.pk]] = _trace_of(run, rows, metric, x, running, per_run)
        softcache.set_many(made, TRACE_SECONDS)  # down: nothing kept, the next view reads again
    traces, without = [], []
    for name, run in named:
        points, best, x_total, carried, read = kept.get(keys[run.pk]) or made[keys[run.pk]]
        traces.append(Trace(run, name, list(points), list(best), x_total, carried, read, keys[run.pk]))
        if not read:
            without.append(name)
    return Series(metric=metric, x=x, traces=traces, missing=list(missing), without_metric=without)


def _metric_marks(runs: list[Run], key: str) -> dict[int, tuple]:
    """Each run's whole-series rollup row of `key` (its count, last step and value): what the write path
    moves with every point of it, so a kept trace is checked against it. One query."""
    rows = MetricRollup.objects.filter(run__in=runs, key=key, width=0)
    fields = ("run_id", "n", "last_step", "last_value")
    return {r: (n, last, value) for r, n, last, value in rows.values_list(*fields)}


def _trace_key(run: Run, metric: str, x: str, per_run: int, mark) -> str:
    """A run's trace is kept under what it is drawn from: the run's row (its `updated` moves with every
    write to it; its turn, spend and score columns with every turn and score) and the metric's rollup."""
    version = (
        run.updated,
        run.state,
        run.started_at,
        run.turn_count,
        run.tokens_in,
        run.tokens_out,
        str(run.cost_usd),
        run.score_count,
        run.best_score,
        run.latest_score,
        mark,
        metric,
        x,
        per_run,
    )
    return cachekeys.compare_trace(run.pk, repr(version))


def _trace_of(run: Run, rows: list, metric: str, x: str, running: list, per_run: int) -> tuple:
    """(points, best, x_total, carried, points read) of one run: `rows` (step, epoch seconds, value) in
    step (or time) order."""
    xs = _x_values(run, rows, x, running)
    points = sorted(zip(xs, (v for _, _, v in rows), strict=True), key=lambda p: p[0])
    best = _frontier(points, run.project.scenario.maximize) if metric == SCORE else []
    x_total, carried = None, False
    if x in SPEND_AXES:
        x_total = _total(run, x)
        if points and points[-1][0] < x_total:  # carried to what the run has spent since
            points.append((x_total, points[-1][1]))
            carried = True
        if best and best[-1][0] < x_total:
            best.append((x_total, best[-1][1]))
    return lttb(points, per_run), best, x_total, carried, len(rows)


def counted_scores(runs: list[Run]) -> dict[int, list[tuple[int, float, float]]]:
    """Each run's scores that count in its own figures, in time order: (ordinal, epoch seconds, score).
    A run's scores are few (one per attempt): read whole."""
    out: dict[int, list] = defaultdict(list)
    rows = (
        Submission.objects.filter(counted_q(**RUN_RULE), run__in=runs)
        .annotate(t=EpochSeconds("ts"))
        .order_by("run_id", "ts", "id")
        .values_list("run_id", "t", "score")
    )
    for run_id, t, score in rows:
        out[run_id].append((len(out[run_id]) + 1, t, score))
    return out


def _metric_points(runs: list[Run], key: str, per_run: int) -> dict[int, list[tuple[int, float, float]]]:
    """Each run's points of metric `key` in step order, about `per_run` per run: thinned in SQL by a
    row-number stride over the (run, key, step) index, the first and last always kept."""
    by_run = [F("run_id")]
    in_steps = [F("step").asc(), F("id").asc()]
    rows = (
        MetricPoint.objects.filter(run__in=runs, key=key)
        .order_by()
        .annotate(
            rn=Window(RowNumber(), partition_by=by_run, order_by=in_steps),
            last=Window(Count("id"), partition_by=by_run),
        )
        .annotate(phase=ExpressionWrapper((F("rn") - 1) % ((F("last") + per_run) / per_run), IntegerField()))
        .filter(Q(rn=1) | Q(rn=F("last")) | Q(phase=0))
        .annotate(t=EpochSeconds("ts"))
        .values_list("run_id", "rn", "step", "t", "value")
    )
    out: dict[int, list] = defaultdict(list)
    for run_id, rn, step, t, value in rows:
        out[run_id].append((rn, step, t, value))
    return {pk: [(step, t, v) for _, step, t, v in sorted(rows)] for pk, rows in out.items()}


def _running_turns(runs: list[Run], per_run: int) -> dict[int, list[tuple[float, int, int, float]]]:
    """Each run's running turn sums at about `per_run` of its turns (first and last kept): (epoch seconds,
    turns, tokens in + out, USD) up to and including that turn, in time order, computed in SQL."""
    rows = (
        _thinned(
            AgentTurn.objects.filter(run__in=runs),
            "turn_count",
            per_run,
            n=(Count("id"), UP_TO_HERE),
            tokens=(Sum(F("tokens_in") + F("tokens_out")), UP_TO_HERE),
            usd=(Sum(Cast("cost_usd", FloatField())), UP_TO_HERE),
        )
        .filter(Q(rn=1) | Q(rn=F("last")) | Q(phase=0))
        .annotate(t=EpochSeconds("ts"))
        .values_list("run_id", "rn", "t", "n", "tokens", "usd")
    )
    out: dict[int, list] = defaultdict(list)
    for run_id, rn, t, n, tokens, usd in rows:
        out[run_id].append((rn, t, n, tokens or 0, usd or 0.0))
    return {pk: [row[1:] for row in sorted(rows)] for pk, rows in out.items()}


SPEND_COLUMN = {"turns": 1, "tokens": 2, "usd": 3}


def _x_values(run: Run, rows: list, x: str, running: list) -> list[float]:
    """The x of each (step, epoch seconds, value) row on axis `x`."""
    if x == "step":
        return [float(step) for step, _, _ in rows]
    if x == "wall":
        return [t for _, t, _ in rows]
    if x == "time":
        start = run.started_at.timestamp()
        return [t - start for _, t, _ in rows]
    column = SPEND_COLUMN[x]
    times = [row[0] for row in running]
    return [_spent_at(times, running, column, t) for _, t, _ in rows]


def _spent_at(times: list[float], running: list, column: int, t: float) -> float:
    """What the run had spent (column `column` of the running sums) by time `t`: exact at a kept row,
    linear in time between two, nothing before the first turn, everything after the last."""
    i = bisect.bisect_right(times, t)
    if i == 0:
        return 0.0
    at = running[i - 1]
    if i == len(running) or at[0] == t:
        return float(at[column])
    after = running[i]
    span = after[0] - at[0]
    share = (t - at[0]) / span if span > 0 else 0.0
    # The row after counts its own turn, which is not yet spent at `t` (< its time): up to the one before.
    return float(at[column]) + share * max(0.0, float(after[column]) - float(at[column]))


def _total(run: Run, x: str) -> float:
    if x == "turns":
        return float(run.turn_count)
    if x == "tokens":
        return float(run.tokens_in + run.tokens_out)
    return float(run.cost_usd)


def _frontier(points: list[tuple[float, float]], maximize: bool) -> list[tuple[float, float]]:
    """The best so far, at each point that improves it."""
    out: list[tuple[float, float]] = []
    for x, y in points:
        if not out or (y > out[-1][1] if maximize else y < out[-1][1]):
            out.append((x, y))
    return out


def as_datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
