"""Arms: the compared runs grouped (by a tag, a param, the model profile, the kickoff, the scenario or the
project), each arm one line at equal x — the median of its runs' values at each x, with a band (the
inter-quartile range from four runs, else the range) — and a table of what each arm bought: scores,
spend, score gained per dollar and per million tokens, the share of runs that failed or were abandoned.

Whether two arms can be told apart is said plainly: at equal spend (the x both arms' median runs reached)
each run's value there is bootstrapped, and the 95 % interval of the difference in medians either
excludes zero or the arms "cannot be told apart at $X". The resampling is seeded: the same data say the
same thing on every page view and in the API."""

from __future__ import annotations

import bisect
import itertools
import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from smrweb.core import cachekeys, softcache
from smrweb.tracking.models import RunLaunch, RunParam, RunState, RunTag
from smrweb.tracking.queries.series import SCORE, SPEND_AXES, Series, Trace, counted_scores

GRID = 60  # x values each arm's line is computed at
MAX_ARMS = 12
BOOTSTRAP = 1000  # resamples: the interval's ends move by well under its width between seeds
ARMS_SECONDS = 3600
ALPHA = 0.05
EXACT_SPLITS = 5000  # up to this many ways to split two arms' runs, every one is tried; else PERMUTATIONS
PERMUTATIONS = 2000
NONE = "(none)"
GROUPS = ("project", "scenario", "profile", "kickoff")  # and tag:<key>, param:<key>
FAILED = {RunState.FAILED, RunState.ABANDONED}


class GroupError(ValueError):
    field = "group"


@dataclass
class Spread:
    median: float | None = None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        values = [v for v in values if v is not None]
        if not values:
            return cls()
        return cls(statistics.median(values), min(values), max(values))


@dataclass
class Arm:
    label: str
    traces: list[Trace]
    line: list[tuple[float, float, float, float, int]] = field(default_factory=list)  # x, median, lo, hi, n
    band: str = "range"  # "iqr" from four runs, else "range"
    best: Spread = field(default_factory=Spread)
    final: Spread = field(default_factory=Spread)
    usd: Spread = field(default_factory=Spread)
    tokens: Spread = field(default_factory=Spread)
    gain_per_usd: float | None = None
    gain_per_mtok: float | None = None
    failed_share: float = 0.0

    @property
    def n(self) -> int:
        return len(self.traces)


@dataclass
class Difference:
    """Two arms at x = `x` (where both have been): `ahead` has the better median there (in the scenario's
    direction for a score, the higher for a metric), by `margin`; `low`–`high` the 95 % bootstrap interval
    of that margin; `p` the share of random splits of their runs whose medians differ at least as much.
    `against` is the leading arm (the best where every arm has been) the other arm `arm` is set against."""

    arm: str
    against: str
    x: float
    ahead: str
    behind: str
    margin: float
    low: float
    high: float
    fewest: int = 0  # runs with a value at `x` in the smaller of the two arms
    p: float = 1.0  # the rank-sum test's: how often random splits of their runs rank this far apart

    @property
    def separable(self) -> bool:
        """A difference that random splits of the two arms' runs seldom make (a rank-sum test, p < 0.05).
        Exact for small arms (every split), where a bootstrap interval alone is far too sure of itself:
        three runs a side can never be told apart, four that do not overlap can."""
        return self.p < ALPHA


def parse_group(value: str) -> str:
    """A valid group: one of GROUPS, `tag:KEY` or `param:KEY`; "" for none."""
    value = value.strip()
    if not value or value in GROUPS:
        return value
    kind, _, key = value.partition(":")
    if kind in ("tag", "param") and key.strip():
        return f"{kind}:{key.strip()}"
    raise GroupError(
        f"Unknown grouping {value!r}: project, scenario, profile, kickoff, tag:KEY or param:KEY."
    )


def choices(runs: list) -> list[tuple[str, str]]:
    """What the runs can be grouped by, (value, label): the fixed groups, then the tag and param keys any
    of them has (two queries)."""
    out = [("", "No grouping"), ("project", "Project"), ("scenario", "Scenario")]
    out += [("profile", "Model profile"), ("kickoff", "Kickoff")]
    tags = RunTag.objects.filter(run__in=runs).values_list("key", flat=True).distinct().order_by("key")
    params = RunParam.objects.filter(run__in=runs).values_list("key", flat=True).distinct().order_by("key")
    out += [(f"tag:{key}", f"tag {key}") for key in tags[:100]]
    out += [(f"param:{key}", f"param {key}") for key in params[:100]]
    return out


def labels(runs: list, group: str) -> dict[int, str]:
    """Each run's arm label (run pk → label): one query for a tag, a param or the kickoff, none else."""
    if group == "project":
        return {r.pk: r.project.slug for r in runs}
    if group == "scenario":
        return {r.pk: r.project.scenario.name for r in runs}
    if group == "profile":
        return {r.pk: r.actual_profile or r.requested_profile or NONE for r in runs}
    if group == "kickoff":
        kickoffs = dict(RunLaunch.objects.filter(run__in=runs).values_list("run_id", "kickoff"))
        return {r.pk: _first_line(kickoffs.get(r.pk, "")) or NONE for r in runs}
    kind, _, key = group.partition(":")
    model = RunTag if kind == "tag" else RunParam
    values = dict(model.objects.filter(run__in=runs, key=key).values_list("run_id", "value"))
    return {r.pk: (values[r.pk] or "(set)") if r.pk in values else NONE for r in runs}


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= 80 else line[:79] + "…"


def arms(found: Series, group: str, of: dict[int, str] | None = None) -> tuple[list[Arm], list[Difference]]:
    """The arms of `found` grouped by `group`, largest first (at most MAX_ARMS: the rest are refused),
    and each arm against the leading one at equal x. Kept in the cache under the traces' versions and the
    runs' labels, so a view with nothing new computes nothing (the bootstrap is the costly part)."""
    by_label: dict[str, list[Trace]] = defaultdict(list)
    of = of if of is not None else labels([t.run for t in found.traces], group)
    for trace in found.traces:
        by_label[of[trace.run.pk]].append(trace)
    if len(by_label) > MAX_ARMS:
        raise GroupError(f"{len(by_label)} arms: at most {MAX_ARMS} are drawn; group by a coarser key.")
    version = repr((found.metric, found.x, group, [(t.name, t.version, of[t.run.pk]) for t in found.traces]))
    key = cachekeys.compare_arms(version)
    kept = softcache.get(key)
    if kept is not None:
        by_name = {t.name: t for t in found.traces}
        out = [Arm(traces=[by_name[n] for n in names], **fields) for names, fields in kept[0]]
        return out, kept[1]
    maximize = found.traces[0].run.project.scenario.maximize if found.traces else True
    scores = counted_scores([t.run for t in found.traces])
    out = [_arm(label, traces, found, scores) for label, traces in by_label.items()]
    out.sort(key=lambda a: (-a.n, a.label))
    differences = _differences(out, found, maximize)
    parts = [([t.name for t in a.traces], {k: v for k, v in vars(a).items() if k != "traces"}) for a in out]
    softcache.set(key, (parts, differences), ARMS_SECONDS)  # down: computed again next time
    return out, differences


def _end(trace: Trace) -> float:
    """Where the run has been to: its own total on a spend axis, else its last point (of any score: the
    best so far holds to there, not only to its last improvement)."""
    if trace.x_total is not None:
        return trace.x_total
    return trace.points[-1][0] if trace.points else float("-inf")


def _value_at(trace: Trace, score: bool, x: float) -> float | None:
    """The run's value at `x`: its best so far (a score) or its last value at or before `x`; None before
    its first point or past its end (a run is not drawn where it has not been)."""
    points = trace.best if score else trace.points
    if not points or x > _end(trace):
        return None
    i = bisect.bisect_right([p[0] for p in points], x)
    return points[i - 1][1] if i else None


def _arm(label: str, traces: list[Trace], found: Series, scores: dict) -> Arm:
    arm = Arm(label=label, traces=traces, band="iqr" if len(traces) >= 4 else "range")
    score = found.metric == SCORE
    ends = [_end(t) if t.points else None for t in traces]
    starts = [t.points[0][0] for t in traces if t.points]
    if starts and any(e is not None for e in ends):
        lo, hi = min(starts), max(e for e in ends if e is not None)
        if found.x in SPEND_AXES:
            lo = 0.0
        for k in range(GRID + 1):
            x = lo + (hi - lo) * k / GRID
            values = sorted(v for t in traces if (v := _value_at(t, score, x)) is not None)
            if not values:
                continue
            if arm.band == "iqr" and len(values) >= 4:
                q = statistics.quantiles(values, n=4, method="inclusive")
                band = (q[0], q[2])
            else:
                band = (values[0], values[-1])
            arm.line.append((x, statistics.median(values), band[0], band[1], len(values)))
    runs = [t.run for t in traces]
    arm.best = Spread.of([r.best_score for r in runs])
    arm.final = Spread.of([r.latest_score for r in runs])
    arm.usd = Spread.of([float(r.cost_usd) for r in runs])
    arm.tokens = Spread.of([float(r.tokens_in + r.tokens_out) for r in runs])
    maximize = runs[0].project.scenario.maximize
    gains = {}
    for r in runs:
        first = scores.get(r.pk, [None])[0]
        if first is not None and r.best_score is not None:
            gains[r.pk] = (r.best_score - first[2]) if maximize else (first[2] - r.best_score)
    per_usd = [g / float(r.cost_usd) for r in runs if (g := gains.get(r.pk)) is not None and r.cost_usd > 0]
    tokens = {r.pk: r.tokens_in + r.tokens_out for r in runs}
    per_mtok = [g * 1e6 / tokens[r.pk] for r in runs if (g := gains.get(r.pk)) is not None and tokens[r.pk]]
    arm.gain_per_usd = statistics.median(per_usd) if per_usd else None
    arm.gain_per_mtok = statistics.median(per_mtok) if per_mtok else None
    arm.failed_share = sum(r.state in FAILED for r in runs) / len(runs)
    return arm


def _differences(out: list[Arm], found: Series, maximize: bool) -> list[Difference]:
    """Each arm against the leading arm, at the x both reached (the lower of their median run ends)."""
    if len(out) < 2:
        return []
    score = found.metric == SCORE

    def reach(arm: Arm) -> float:
        ends = [_end(t) for t in arm.traces if t.points]
        return statistics.median(ends) if ends else 0.0

    def at(arm: Arm, x: float) -> list[float]:
        values = []
        for t in arm.traces:
            if not (t.best if score else t.points):
                continue
            v = _value_at(t, score, min(x, _end(t)))
            if v is not None:
                values.append(v)
        return values

    # The leader: the best median where every arm has been (the lowest of the arms' median run ends);
    # each other arm is then set against it where both have been.
    common = min(reach(a) for a in out)
    ranked = [(a, at(a, common)) for a in out]
    ranked = [(a, v) for a, v in ranked if v]
    if len(ranked) < 2:
        return []
    sign = 1 if maximize or not score else -1
    leader = max(ranked, key=lambda av: sign * statistics.median(av[1]))[0]
    diffs = []
    for arm, _ in ranked:
        if arm is leader:
            continue
        x = min(reach(arm), reach(leader))
        values, lead_values = at(arm, x), at(leader, x)
        lead_ahead = sign * (statistics.median(lead_values) - statistics.median(values)) >= 0
        first, second = (lead_values, values) if lead_ahead else (values, lead_values)
        low, high, p = _interval(first, second)  # of first − second
        if sign < 0:
            low, high = -high, -low
        diffs.append(
            Difference(
                arm=arm.label,
                against=leader.label,
                x=x,
                ahead=leader.label if lead_ahead else arm.label,
                behind=arm.label if lead_ahead else leader.label,
                margin=abs(statistics.median(first) - statistics.median(second)),
                low=low,
                high=high,
                fewest=min(len(values), len(lead_values)),
                p=p,
            )
        )
    return diffs


def _interval(values: list[float], lead_values: list[float]) -> tuple[float, float, float]:
    """The 95 % bootstrap interval of median(values) − median(lead_values) and the rank-sum test's p of
    the two: seeded, so the same values say the same thing, and kept under them (a new
    turn seldom moves the values at equal spend)."""
    key = cachekeys.compare_interval(repr((sorted(values), sorted(lead_values), BOOTSTRAP, PERMUTATIONS)))
    if (kept := softcache.get(key)) is not None:
        return kept
    rng = random.Random(0)
    boot = sorted(
        _resampled_median(rng, values) - _resampled_median(rng, lead_values) for _ in range(BOOTSTRAP)
    )
    found = (
        boot[int(0.025 * BOOTSTRAP)],
        boot[int(0.975 * BOOTSTRAP) - 1],
        _permutation_p(values, lead_values),
    )
    softcache.set(key, found, ARMS_SECONDS)
    return found


def _permutation_p(a: list[float], b: list[float]) -> float:
    """The rank-sum (Mann-Whitney) test's two-sided p of `a` against `b`: the share of the splits of
    a + b into groups of their sizes whose rank sums are at least as far from the middle as a's is. Every
    split when there are at most EXACT_SPLITS (exact: four runs a side can be told apart, three cannot),
    else PERMUTATIONS seeded random ones (the observed split counted among them). Ranks, not medians: the
    medians of mixed splits are often as far apart as those of two arms that do not overlap at all."""
    pooled = a + b
    order = sorted(range(len(pooled)), key=lambda i: pooled[i])
    ranks = [0.0] * len(pooled)
    i = 0
    while i < len(order):  # tied values share their mean rank
        j = i
        while j + 1 < len(order) and pooled[order[j + 1]] == pooled[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    n = len(a)
    middle = n * (len(pooled) + 1) / 2
    observed = abs(sum(ranks[:n]) - middle) - 1e-9

    def apart(chosen) -> bool:
        return abs(sum(ranks[i] for i in chosen) - middle) >= observed

    indices = range(len(pooled))
    if math.comb(len(pooled), n) <= EXACT_SPLITS:
        splits = list(itertools.combinations(indices, n))
        return sum(map(apart, splits)) / len(splits)
    rng = random.Random(1)
    hits = sum(apart(rng.sample(indices, n)) for _ in range(PERMUTATIONS))
    return (hits + 1) / (PERMUTATIONS + 1)


def _resampled_median(rng: random.Random, values: list[float]) -> float:
    """The median of a resample (with replacement) of `values`."""
    n = len(values)
    drawn = sorted(rng.choices(values, k=n))
    mid = n // 2
    return drawn[mid] if n % 2 else (drawn[mid - 1] + drawn[mid]) / 2
