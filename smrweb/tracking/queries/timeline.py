"""Read-side answers for one run's page: the agent.turn timeline binned by time, the score series on
the same clock, spend against budget with a forecast, efficiency, and the actor tree.

Each function reads a fixed number of rows' worth of queries whatever the run's length; the timeline
reads slim columns of every turn once and ships at most `MAX_BINS` bars.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import (
    BigIntegerField,
    Count,
    DateTimeField,
    Func,
    Max,
    Min,
    OuterRef,
    Subquery,
    Sum,
    Value,
)
from django.utils import timezone

from smrweb.core.downsample import lttb
from smrweb.tracking.models import AgentTurn, Run, Submission, TurnKind

MAX_BINS = 300  # per kind: with the score points, the timeline figure stays under 100 KB
MAX_SCORE_POINTS = 800
BURN_WINDOW = timedelta(minutes=30)


@dataclass
class TurnBin:
    """The turns of one kind that fall in one time bin (often exactly one turn)."""

    start: datetime
    end: datetime
    kind: str
    count: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal = Decimal(0)
    first_turn: int | None = None
    last_turn: int | None = None
    actor: str = ""  # of the single turn, when count == 1
    model: str = ""
    pk: int | None = None  # the single turn's id, when count == 1


@dataclass
class Timeline:
    start: datetime
    end: datetime
    bin_width: timedelta
    bins: list[TurnBin]
    cumulative: list[tuple[datetime, Decimal, Decimal]]  # (bin end, total USD, driver USD)
    scores: list[tuple[datetime, float]]  # downsampled; the frontier is computed from all scores
    frontier: list[tuple[datetime, float]]  # best-so-far, one point per improvement
    score_total: int
    turn_total: int
    # Per plotted score: (turn number, actor) of the run's latest turn at or before it, or (None, "").
    score_turns: list[tuple[int | None, str]] = field(default_factory=list)

    @property
    def bin_width_us(self) -> int:
        return self.bin_width // timedelta(microseconds=1)


def _turns_before(score_pks: list[int], run: Run) -> list[tuple[int | None, str]]:
    """For each plotted score, the run's latest turn at or before it: scores carry no turn of their own,
    and "after turn #12 (driver)" is what a reader of the timeline wants next to the value. One query
    (an indexed subquery per plotted score, at most MAX_SCORE_POINTS)."""
    if not score_pks:
        return []
    latest = AgentTurn.objects.filter(run=run, ts__lte=OuterRef("ts")).order_by("-ts", "-id")
    rows = dict(
        (pk, (turn, actor))
        for pk, turn, actor in Submission.objects.filter(pk__in=score_pks)
        .annotate(t=Subquery(latest.values("turn")[:1]), a=Subquery(latest.values("actor")[:1]))
        .values_list("pk", "t", "a")
    )
    return [rows.get(pk, (None, "")) for pk in score_pks]


def _bin_width(span: timedelta, turns: int) -> timedelta:
    """One bin per turn for short runs (most bars are then one turn), never more than MAX_BINS."""
    bins = max(1, min(MAX_BINS, turns))
    width = span / bins
    return max(width, timedelta(seconds=1))


class MicrosecondsSince(Func):
    """Whole microseconds from `origin` to a datetime column, computed in SQL (SQLite and PostgreSQL),
    so turns are binned by the database instead of being read one by one."""

    output_field = BigIntegerField()

    def __init__(self, expression, origin: datetime):
        super().__init__(expression, Value(origin, output_field=DateTimeField()))

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template="CAST(ROUND((julianday(%(expressions)s)) * 86400000000) AS INTEGER)",
            arg_joiner=") - julianday(",
            **extra,
        )

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template="(EXTRACT(EPOCH FROM (%(expressions)s)) * 1000000)::bigint",
            arg_joiner=" - ",
            **extra,
        )


def turn_bin(origin: datetime, width: timedelta):
    """The SQL expression of a turn's bin index; the timeline and the bar click-through share it."""
    return MicrosecondsSince("ts", origin) / Value(width // timedelta(microseconds=1))


def run_timeline(run: Run, *, now: datetime | None = None) -> Timeline:
    """Turns binned by time in SQL and scores on the same time axis (four queries, at most
    2 × MAX_BINS bin rows read whatever the number of turns)."""
    now = now or timezone.now()
    turns = AgentTurn.objects.filter(run=run)
    span = turns.aggregate(n=Count("id"), lo=Min("ts"), hi=Max("ts"))
    scores_all = list(
        Submission.objects.filter(run=run).order_by("ts", "id").values_list("ts", "score", "pk")
    )
    times = [t for t in (span["lo"], span["hi"]) if t] + [s[0] for s in scores_all[:1] + scores_all[-1:]]
    start = min(times + [run.started_at])
    end = max(times + ([now] if not run.is_terminal else []) + [start + timedelta(minutes=1)])
    width = _bin_width(end - start, span["n"])

    rows = (
        turns.annotate(bin=turn_bin(start, width))
        .values("bin", "kind")
        .annotate(
            n=Count("id"),
            tin=Sum("tokens_in"),
            tout=Sum("tokens_out"),
            usd=Sum("cost_usd"),
            first_turn=Min("turn"),
            last_turn=Max("turn"),
            actor=Min("actor"),
            model=Min("model"),
            pk=Min("id"),
        )
        .order_by("bin", "kind")
    )
    bins: list[TurnBin] = []
    cumulative: list[tuple[datetime, Decimal, Decimal]] = []
    total = driver = Decimal(0)
    for r in rows:
        index = r["bin"]
        b = TurnBin(
            start + width * index,
            start + width * (index + 1),
            r["kind"],
            count=r["n"],
            tokens_in=r["tin"] or 0,
            tokens_out=r["tout"] or 0,
            cost_usd=r["usd"] or Decimal(0),
            first_turn=r["first_turn"],
            last_turn=r["last_turn"],
            actor=r["actor"],
            model=r["model"],
            pk=r["pk"],
        )
        bins.append(b)
        total += b.cost_usd
        if b.kind == TurnKind.DRIVER_INFERENCE:
            driver += b.cost_usd
        point = (min(b.end, end), total, driver)
        if cumulative and cumulative[-1][0] == point[0]:
            cumulative[-1] = point  # the second kind of the same bin
        else:
            cumulative.append(point)

    frontier, best = [], None
    for ts, value, _ in scores_all:
        if best is None or (value > best if run.project.scenario.maximize else value < best):
            best = value
            frontier.append((ts, value))
    scores = lttb([(ts.timestamp(), v, ts, pk) for ts, v, pk in scores_all], MAX_SCORE_POINTS)
    score_turns = _turns_before([pk for *_, pk in scores], run)
    return Timeline(
        start=start,
        end=end,
        bin_width=width,
        bins=bins,
        cumulative=cumulative,
        scores=[(ts, v) for _, v, ts, _ in scores],
        score_turns=score_turns,
        frontier=frontier,
        score_total=len(scores_all),
        turn_total=span["n"],
    )


@dataclass
class Burn:
    """Spend rate over the recent window and, against a budget, when it runs out."""

    window: timedelta
    usd_per_hour: Decimal
    tokens_per_hour: int
    usd_left: Decimal | None = None
    tokens_left: int | None = None
    runs_out_at: datetime | None = None  # the earlier of the USD and token forecasts
    runs_out_on: str = ""  # "USD" or "tokens"
    exceeded: bool = False


def burn_forecast(run: Run, *, now: datetime | None = None) -> Burn | None:
    """The recent burn rate and the budget's forecast end (None for finished runs: nothing burns)."""
    if run.is_terminal:
        return None
    now = now or timezone.now()
    # A young run is measured over its own age, not diluted over a window it has not lived.
    window = min(BURN_WINDOW, max(now - run.started_at, timedelta(minutes=1)))
    recent = AgentTurn.objects.filter(run=run, ts__gte=now - window).aggregate(
        usd=Sum("cost_usd"), tin=Sum("tokens_in"), tout=Sum("tokens_out")
    )
    hours = Decimal(window.total_seconds()) / 3600
    usd_rate = (recent["usd"] or Decimal(0)) / hours
    token_rate = int(((recent["tin"] or 0) + (recent["tout"] or 0)) / float(hours))
    burn = Burn(window=window, usd_per_hour=usd_rate, tokens_per_hour=token_rate)
    forecasts = []
    if run.budget_usd:
        burn.usd_left = run.budget_usd - run.cost_usd
        if burn.usd_left <= 0:
            burn.exceeded = True
        elif usd_rate > 0:
            forecasts.append((now + timedelta(hours=float(burn.usd_left / usd_rate)), "USD"))
    if run.budget_tokens:
        burn.tokens_left = run.budget_tokens - run.tokens_in - run.tokens_out
        if burn.tokens_left <= 0:
            burn.exceeded = True
        elif token_rate > 0:
            forecasts.append((now + timedelta(hours=burn.tokens_left / token_rate), "tokens"))
    if forecasts:
        burn.runs_out_at, burn.runs_out_on = min(forecasts)
    return burn


@dataclass
class Efficiency:
    """Score gained (in the scenario's direction) since the run's first score, per USD and per 1k tokens."""

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


def efficiency(run: Run) -> Efficiency | None:
    if run.score_count == 0 or run.best_score is None:
        return None
    first = Submission.objects.filter(run=run).order_by("ts", "id").values_list("ts", "score").first()
    if first is None:
        return None
    first_ts, first_score = first
    before = AgentTurn.objects.filter(run=run, ts__lte=first_ts).aggregate(
        usd=Sum("cost_usd"), tin=Sum("tokens_in"), tout=Sum("tokens_out")
    )
    usd_since = run.cost_usd - (before["usd"] or Decimal(0))
    tokens_since = run.tokens_in + run.tokens_out - (before["tin"] or 0) - (before["tout"] or 0)
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
        return TurnKind.DRIVER_INFERENCE if TurnKind.DRIVER_INFERENCE in self.kinds else TurnKind.CHILD_WORK


def actor_tree(run: Run) -> list[ActorNode]:
    """Actors in depth-first order (each with its depth), from one GROUP BY over the run's turns.

    An actor whose parent never took a turn itself hangs under that parent as a placeholder node,
    so the tree stays whole when only children report.
    """
    rows = (
        AgentTurn.objects.filter(run=run)
        .values("actor", "parent_actor", "kind", "model")
        .annotate(
            n=Count("id"),
            tin=Sum("tokens_in"),
            tout=Sum("tokens_out"),
            usd=Sum("cost_usd"),
            first=Min("ts"),
            last=Max("ts"),
        )
    )
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

    Chosen by the same SQL bin expression the timeline groups by, so a bar and its turns always agree.
    """
    start = origin + width * index
    turns = (
        AgentTurn.objects.filter(
            run=run, ts__gte=start - timedelta(seconds=1), ts__lt=start + width + timedelta(seconds=1)
        )
        .alias(bin=turn_bin(origin, width))
        .filter(bin=index)
    )
    if kind in TurnKind.values:
        turns = turns.filter(kind=kind)
    return list(turns.order_by("ts", "id")[:limit]), turns.count()
