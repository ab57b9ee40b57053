"""Read-side answers for one run's page: the agent.turn timeline binned by time, the score series on
the same clock, spend against budget with a forecast, efficiency, and the actor tree.

The turn aggregates behind the timeline and the actor tree are `queries.turn_memo`'s (kept per run,
advanced by the turns since). A figure ships at most `MAX_BINS` bars per kind and `MAX_SCORE_POINTS`
scores whatever the run's length.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from operator import itemgetter

from django.utils import timezone

from smrweb.core import localcache
from smrweb.tracking.models import (
    RUN_RULE,
    AgentTurn,
    Run,
    Submission,
    TurnKind,
    counted_q,
)
from smrweb.tracking.queries.timeline_scores import (  # noqa: F401 - MAX_SCORE_POINTS, turns_past: read from here
    MAX_SCORE_POINTS,
    kept_score_side,
    turns_past,
)
from smrweb.tracking.queries.turn_memo import (  # noqa: F401 - the memo's names, read from here too
    _ZERO,
    BASE_BUCKETS,
    EPOCH,
    MEMO_SECONDS,
    MEMO_WRITE_EVERY,
    MICRO_USD,
    TURN_FIELDS,
    EpochBucket,
    EpochSeconds,
    TurnMemo,
    _base_width,
    _bucket_of,
    _micro,
    _turn_memo,
    _turns_after,
    computed_turn_memo,
    forget_turn_aggregates,
    kept_turn_memo,
    recent_turns,
    turns_after,
)

MAX_BINS = 250  # per kind: with the score points, the timeline figure stays under 100 KB
BURN_WINDOW = timedelta(minutes=30)
_KINDS = (TurnKind.DRIVER_INFERENCE, TurnKind.CHILD_WORK, TurnKind.ROLE_UNKNOWN)


@dataclass
class TurnBin:
    """The turns of one kind that fall in one time bin."""

    start: datetime
    end: datetime
    kind: str
    count: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal = Decimal(0)


@dataclass
class Timeline:
    start: datetime
    end: datetime
    bin_width: timedelta
    bins: list[TurnBin]
    cumulative: list[tuple[datetime, Decimal, Decimal]]  # (bin end, total USD, driver USD)
    scores: list[tuple[datetime, float]]  # downsampled; the frontier is computed from all scores
    frontier: list[tuple[datetime, float]]  # best-so-far of the scores that count, one point per record
    score_total: int
    turn_total: int
    # Per plotted score: (turn number, actor) of the run's latest turn at or before it, or (None, "").
    score_turns: list[tuple[int | None, str]] = field(default_factory=list)
    # Per plotted score: why it does not count in the run's figures ("invalid", "excluded"…), "" if it does.
    score_standing: list[str] = field(default_factory=list)

    @property
    def bin_width_us(self) -> int:
        return self.bin_width // timedelta(microseconds=1)


def _bars(run: Run, memo: TurnMemo, origin: int, per_bar: int) -> dict[tuple[int, str], list[int]]:
    """The memo's buckets merged into bars of `per_bar` buckets from `origin`: (bar, kind) -> [turns, tokens
    in, out, micro-USD]. Kept in this process by the memo's stamp and the bars' edges: the turns a memo was
    `advanced` by are added to their bars (thousands of buckets are merged once per edges, not per poll)."""
    edges = (memo.stamp, memo.width, origin, per_bar)
    kept = localcache.get(("timeline-bars", run.pk)) if memo.stamp else None
    if kept is not None and kept[0] == edges:
        _, count, merged = kept
        if count == memo.count:
            return merged
        if memo.recent is not None and (memo.recent.count, memo.recent.width) == (count, memo.width):
            merged = dict(merged)
            for _, ts, kind, tin, tout, usd, *_ in memo.recent.rows:
                key = ((_bucket_of(ts, memo.width) - origin) // per_bar, kind)
                n, bar_in, bar_out, micro = merged.get(key, _ZERO)
                merged[key] = [n + 1, bar_in + tin, bar_out + tout, micro + _micro(usd)]
            localcache.put(("timeline-bars", run.pk), (edges, memo.count, merged))
            return merged
    merged = {}
    for (bucket, kind), values in memo.buckets.items():
        m = merged.setdefault(((bucket - origin) // per_bar, kind), [0, 0, 0, 0])
        for i in range(4):
            m[i] += values[i]
    if memo.stamp:
        localcache.put(("timeline-bars", run.pk), (edges, memo.count, merged))
    return merged


def _binned(
    run_id: int, merged: dict[tuple[int, str], list[int]], start: datetime, width: timedelta, end: datetime
) -> tuple[list[TurnBin], list[tuple[datetime, Decimal, Decimal]]]:
    """The bars as `TurnBin`s in order, with the spend up to each bar's end (clipped at the timeline's `end`).
    Kept in this process per run: a poll after a turn makes the bars from the first one that changed (or
    whose end the timeline's end clips, then or now) onwards, not all of them (the bars before are the same
    objects: nothing changes a `TurnBin` once made)."""
    # Keys are unique: the values (lists `_bars` never changes once kept) are not compared.
    items = sorted(merged.items())
    bins: list[TurnBin] = []
    cumulative: list[tuple[datetime, Decimal, Decimal]] = []
    after: list[tuple[int, tuple]] = []  # per bar: the spend line's length and last point once it is drawn
    at = 0
    kept = localcache.get(("timeline-binned", run_id))
    if kept is not None and kept[0] == (start, width):
        _, old_end, old_items, old_bins, old_cumulative, old_after = kept
        limit = min(len(items), len(old_items))
        while at < limit and items[at] == old_items[at]:
            at += 1
        clip = min(old_end, end)
        while at and old_bins[at - 1].end > clip:
            at -= 1
        if at:
            length, last = old_after[at - 1]
            bins, cumulative, after = old_bins[:at], [*old_cumulative[: length - 1], last], old_after[:at]
    total, driver = (cumulative[-1][1], cumulative[-1][2]) if cumulative else (Decimal(0), Decimal(0))
    for (index, kind), (n, tin, tout, micro) in items[at:]:
        b = TurnBin(start + width * index, start + width * (index + 1), kind, n, tin, tout, micro * MICRO_USD)
        bins.append(b)
        total += b.cost_usd
        if kind == TurnKind.DRIVER_INFERENCE:
            driver += b.cost_usd
        point = (min(b.end, end), total, driver)
        if cumulative and cumulative[-1][0] == point[0]:
            cumulative[-1] = point  # the second kind of the same bin
        else:
            cumulative.append(point)
        after.append((len(cumulative), point))
    localcache.put(("timeline-binned", run_id), ((start, width), end, items, bins, cumulative, after))
    return bins, cumulative


def run_timeline(run: Run, *, now: datetime | None = None, scores_version: str | None = None) -> Timeline:
    """Turns binned by time and scores on the same time axis: at most MAX_BINS bars per kind, each a
    whole number of the kept buckets; two queries when the turn aggregates are kept (plus the turns
    since), whatever the number of turns. With `scores_version` (of the run's scores) the score side is
    kept in the cache under it (`timeline_scores.kept_score_side`)."""
    now = now or timezone.now()
    memo = _turn_memo(run)
    maximize = run.project.scenario.maximize
    side = kept_score_side(run, memo.hwm, memo.count, maximize, scores_version, recent=memo.recent)
    times = [t for t in (memo.lo, memo.hi) if t] + side.ends
    first = min(times + [run.started_at])
    end = max(times + ([now] if not run.is_terminal else []) + [first + timedelta(minutes=1)])
    base = timedelta(seconds=memo.width)
    origin_bucket = _bucket_of(first, memo.width)
    start = EPOCH + base * origin_bucket
    # One bar per turn for short runs (most bars are then one turn), never more than MAX_BINS.
    buckets = max(1, math.ceil((end - start) / base))
    per_bar = max(1, math.ceil(buckets / max(1, min(MAX_BINS, memo.count))))
    width = base * per_bar

    bins, cumulative = _binned(run.pk, _bars(run, memo, origin_bucket, per_bar), start, width, end)
    scores, standing, turns_before, frontier = _score_lists(run.pk, side)
    return Timeline(
        start=start,
        end=end,
        bin_width=width,
        bins=bins,
        cumulative=cumulative,
        scores=scores,
        score_standing=standing,
        score_turns=turns_before,
        frontier=frontier,
        score_total=side.total,
        turn_total=memo.count,
    )


def _score_lists(run_id: int, side) -> tuple[list, list, list, list]:
    """The score side's lists as the timeline holds them: the same list objects while the side's are the
    same (a poll after a turn with no new score), so the figure keeps what it drew of them
    (`charts.run._kept_score_traces`). Kept in this process; never changed once made."""
    key = ("timeline-score-lists", run_id)
    kept = localcache.get(key)
    made_from = (side.scores, side.turns_before, side.frontier)
    if kept is not None and all(a is b for a, b in zip(kept[:3], made_from, strict=True)):
        return kept[3]
    lists = (
        [(ts, v) for _, v, ts, _, _ in side.scores],
        [why for *_, why in side.scores],
        list(side.turns_before),
        list(side.frontier),
    )
    localcache.put(key, (*made_from, lists))
    return lists


@dataclass
class Burn:
    """Spend rate over the window up to the run's newest turn and, against a budget, when it runs out."""

    window: timedelta
    usd_per_hour: Decimal
    tokens_per_hour: int
    as_of: datetime | None = None  # the newest turn: the window ends, and a forecast starts, there
    usd_left: Decimal | None = None
    tokens_left: int | None = None
    runs_out_at: datetime | None = None  # the earlier of the USD and token forecasts
    runs_out_on: str = ""  # "USD" or "tokens"
    exceeded: bool = False


def burning_since(now: datetime) -> datetime:
    """A run burns while it has a turn at or after this: its newest turn is inside the burn window."""
    return now - BURN_WINDOW


def burn_forecast(run: Run, *, now: datetime | None = None) -> Burn | None:
    """The burn rate over the window up to the run's newest turn and the budget's forecast end from there
    (None for finished runs: nothing burns). Read at the newest turn rather than at the server's now, the
    reading moves when a turn arrives, and once more when the newest turn leaves the window (nothing spent
    since: no forecast), never with the clock alone (issue 36: the budget card's version holds no clock)."""
    if run.is_terminal:
        return None
    now = now or timezone.now()
    memo = _turn_memo(run)  # kept up to date for the page's timeline: no query for the newest turn
    newest = memo.hi if memo.count else None
    if newest is None or newest < burning_since(now):
        burn = Burn(window=BURN_WINDOW, usd_per_hour=Decimal(0), tokens_per_hour=0)
        usd_rate, token_rate = Decimal(0), 0
    else:
        # A young run is measured over its own age, not diluted over a window it has not lived.
        window = min(BURN_WINDOW, max(newest - run.started_at, timedelta(minutes=1)))
        rows = recent_turns(run, BURN_WINDOW)  # up to the newest turn; kept and advanced in this process
        rows = rows[bisect.bisect_right(rows, newest - window, key=itemgetter(0)) :]
        hours = Decimal(window.total_seconds()) / 3600
        usd_rate = sum(micro for _, micro, _, _ in rows) * MICRO_USD / hours
        token_rate = int(sum(tin + tout for _, _, tin, tout in rows) / float(hours))
        burn = Burn(window=window, usd_per_hour=usd_rate, tokens_per_hour=token_rate, as_of=newest)
    forecasts = []
    if run.budget_usd:
        burn.usd_left = run.budget_usd - run.cost_usd
        if burn.usd_left <= 0:
            burn.exceeded = True
        elif usd_rate > 0:
            forecasts.append((newest + timedelta(hours=float(burn.usd_left / usd_rate)), "USD"))
    if run.budget_tokens:
        burn.tokens_left = run.budget_tokens - run.tokens_in - run.tokens_out
        if burn.tokens_left <= 0:
            burn.exceeded = True
        elif token_rate > 0:
            forecasts.append((newest + timedelta(hours=burn.tokens_left / token_rate), "tokens"))
    if forecasts:
        burn.runs_out_at, burn.runs_out_on = min(forecasts)
    return burn


@dataclass
class Efficiency:
    """Score gained (in the scenario's direction) from the run's first score that counts to its best (the
    same rule: an invalid first score is no starting point), per USD and per 1k tokens since it."""

    first_score: float
    best_score: float
    gained: float
    usd_since: Decimal
    tokens_since: int
    per_usd: float | None
    per_1k_tokens: float | None

    @property
    def per_1m_tokens(self) -> float | None:
        """The same rate per million tokens: agent runs spend millions, and per 1k the numbers get tiny."""
        return None if self.per_1k_tokens is None else self.per_1k_tokens * 1000


def first_counted(run: Run) -> tuple | None:
    """(ts, score) of the run's first counted submission, or None: one query."""
    first = Submission.objects.filter(run=run).filter(counted_q(**RUN_RULE)).order_by("ts", "id")
    return first.values_list("ts", "score").first()


def efficiency(run: Run, *, first: tuple | None | bool = False) -> Efficiency | None:
    """The score gained since the first counted score per USD and per 1k tokens spent since (`first`: that
    score, when the caller read it)."""
    if run.score_count == 0 or run.best_score is None:
        return None
    if first is False:
        first = first_counted(run)
    if first is None:
        return None
    first_ts, first_score = first
    # From the kept turn aggregates, advanced by the turns since: not a sum over every turn before it.
    _, tokens_since, usd_since = turns_after(run, first_ts, of="first-score")
    sign = 1 if run.project.scenario.maximize else -1
    gained = (run.best_score - first_score) * sign
    return Efficiency(
        first_score=first_score,
        best_score=run.best_score,
        gained=gained,
        usd_since=usd_since,
        tokens_since=tokens_since,
        per_usd=gained / float(usd_since) if usd_since > 0 else None,
        per_1k_tokens=gained / (tokens_since / 1000) if tokens_since > 0 else None,
    )


@dataclass
class ActorNode:
    actor: str
    parent: str
    kinds: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal = Decimal(0)
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    depth: int = 0
    children: list[ActorNode] = field(default_factory=list)

    @property
    def kind(self) -> str:
        for kind in _KINDS:  # an actor's turns share a side; a stated one wins over "role unknown"
            if kind in self.kinds:
                return kind
        return TurnKind.CHILD_WORK


def actor_tree(run: Run) -> list[ActorNode]:
    """Actors in depth-first order (each with its depth), from the run's kept turn aggregates.

    An actor whose parent never took a turn itself hangs under that parent as a placeholder node,
    so the tree stays whole when only children report.
    """
    rows = [
        {
            "actor": actor,
            "parent_actor": parent,
            "kind": kind,
            "model": model,
            "n": n,
            "tin": tin,
            "tout": tout,
            "usd": micro * MICRO_USD,
            "first": first,
            "last": last,
        }
        for (actor, parent, kind, model), (n, tin, tout, micro, first, last) in _turn_memo(run).actors.items()
    ]
    nodes: dict[str, ActorNode] = {}
    for r in rows:
        node = nodes.setdefault(r["actor"], ActorNode(r["actor"], r["parent_actor"]))
        node.parent = node.parent or r["parent_actor"]
        node.kinds.add(r["kind"])
        if r["model"]:
            node.models.add(r["model"])
        node.turns += r["n"]
        node.tokens_in += r["tin"] or 0
        node.tokens_out += r["tout"] or 0
        node.cost_usd += r["usd"] or Decimal(0)
        node.first_ts = min(filter(None, [node.first_ts, r["first"]]))
        node.last_ts = max(filter(None, [node.last_ts, r["last"]]))
    for name in [n.parent for n in nodes.values() if n.parent and n.parent not in nodes]:
        nodes.setdefault(name, ActorNode(name, ""))
    roots = []
    for node in sorted(nodes.values(), key=lambda n: (n.first_ts or timezone.now(), n.actor)):
        parent = nodes.get(node.parent) if node.parent != node.actor else None
        (parent.children if parent else roots).append(node)
    ordered: list[ActorNode] = []
    seen: set[str] = set()

    def walk(node: ActorNode, depth: int) -> None:
        if node.actor in seen:  # a parent cycle in the data: show each actor once
            return
        seen.add(node.actor)
        node.depth = depth
        ordered.append(node)
        for child in node.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    for node in nodes.values():  # actors only reachable through a cycle
        if node.actor not in seen:
            walk(node, 0)
    return ordered


def turns_in_bin(
    run: Run, origin: datetime, width: timedelta, index: int, kind: str | None = None, *, limit: int = 50
):
    """The turns of one timeline bar (a time bin, optionally one kind), oldest first, and their count.

    A bar is `[origin + width × index, origin + width × (index + 1))`: the range the timeline's buckets
    are aggregated over, so a bar and its turns always agree (an indexed range read).
    """
    start = origin + width * index
    turns = AgentTurn.objects.filter(run=run, ts__gte=start, ts__lt=start + width)
    if kind in TurnKind.values:
        turns = turns.filter(kind=kind)
    # Each turn's body sizes come along (one join), never its text: a bar lists up to `limit` turns.
    listed = turns.select_related("body").defer("body__prompt", "body__response")
    return list(listed.order_by("ts", "id")[:limit]), turns.count()
