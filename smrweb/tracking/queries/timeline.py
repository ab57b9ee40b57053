"""Read-side answers for one run's page: the agent.turn timeline binned by time, the score series on
the same clock, spend against budget with a forecast, efficiency, and the actor tree.

The turn aggregates behind the timeline and the actor tree are kept per run in the cache and brought up
to date with the turns that arrived since (`_turn_memo`): a page of a 100,000-turn run reads the turns
it has not seen, not all of them. The write path keeps the same aggregates in the database too (a
`TurnRollup` row per run, advanced in the batches' transactions), so a page after the cache lost them
(a restart, an eviction) reads one row and the few turns past it instead of every turn. What is kept
is checked against the run's own summary columns (turn count, tokens in and out, which the write path
recomputes from the rows): any difference — a deleted turn, one committed out of id order — and the
aggregates are computed again from every row, in SQL.
A figure ships at most `MAX_BINS` bars per kind and `MAX_SCORE_POINTS` scores whatever the run's length.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import (
    BigIntegerField,
    Count,
    FloatField,
    Func,
    Max,
    Min,
    Q,
    Sum,
)
from django.utils import timezone

from smrweb.core import cachekeys, localcache, softcache
from smrweb.tracking.models import (
    RUN_RULE,
    AgentTurn,
    Run,
    Submission,
    TurnKind,
    TurnRollup,
    counted_q,
)
from smrweb.tracking.queries.timeline_scores import (  # noqa: F401 - MAX_SCORE_POINTS, turns_past: read from here
    MAX_SCORE_POINTS,
    kept_score_side,
    turns_past,
)

MAX_BINS = 250  # per kind: with the score points, the timeline figure stays under 100 KB
BURN_WINDOW = timedelta(minutes=30)
# Turns are kept aggregated in buckets of a power-of-two number of seconds, aligned to the Unix epoch,
# at most about this many over the turns' span; a bar of the timeline is a whole number of buckets.
BASE_BUCKETS = 1024
MEMO_SECONDS = 24 * 3600
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICRO_USD = Decimal("0.000001")
_ZERO = (0, 0, 0, 0)
MEMO_WRITE_EVERY = 256  # turns a process's memo may run ahead of the shared cache's before it is written
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


# --- the turn aggregates, kept per run ------------------------------------------------------------


class EpochBucket(Func):
    """floor(seconds since the Unix epoch / `width`) of a datetime column, exactly, on SQLite and
    PostgreSQL: the same integer Python's `_bucket_of` gives, so a bar and its turns always agree."""

    output_field = BigIntegerField()

    def __init__(self, expression, width: int):
        super().__init__(expression)
        self.width = int(width)

    def as_sqlite(self, compiler, connection, **extra):
        # strftime('%s') truncates the fraction: whole seconds, then integer division (both positive).
        return self.as_sql(
            compiler,
            connection,
            template=f"(CAST(strftime('%%%%s', %(expressions)s) AS INTEGER) / {self.width})",
        )

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template=f"FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / {self.width})::bigint",
        )


class EpochSeconds(Func):
    """Seconds since the Unix epoch of a datetime column, as a float, to the microsecond: rows read for
    a chart's x axis arrive as numbers, not as datetimes Django converts and makes aware one by one."""

    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra):
        # Whole seconds, plus the stored fraction (".123456", or nothing) read as a number.
        return self.as_sql(
            compiler,
            connection,
            template=(
                "(CAST(strftime('%%%%s', %(expressions)s) AS REAL)"
                " + CAST(substr(%(expressions)s, 20) AS REAL))"
            ),
        )

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::float8")


def _bucket_of(ts: datetime, width: int) -> int:
    return (ts - EPOCH) // timedelta(seconds=width)


def _base_width(span: timedelta) -> int:
    """The smallest power-of-two seconds that covers `span` in at most BASE_BUCKETS buckets."""
    seconds = max(span.total_seconds(), 1)
    return 1 << max(0, math.ceil(math.log2(seconds / BASE_BUCKETS)))


def _micro(usd) -> int:
    """USD (Decimal, or the float SQLite sums to) as whole micro-dollars: the column's precision."""
    return round(Decimal(str(usd)) / MICRO_USD) if usd is not None else 0


@dataclass
class TurnMemo:
    """Every turn of a run up to `hwm` (its highest id), aggregated: per (bucket, kind) of `width`
    seconds `[turns, tokens in, tokens out, micro-USD]`, per (actor, parent, kind, model) the same plus
    the first and last time, and the totals the run's summary columns are checked against."""

    width: int = 1
    hwm: int = 0
    count: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    lo: datetime | None = None
    hi: datetime | None = None
    buckets: dict = field(default_factory=dict)  # (bucket, kind) -> [n, tin, tout, micro-USD]
    actors: dict = field(
        default_factory=dict
    )  # (actor, parent, kind, model) -> [n, tin, tout, µUSD, first, last]
    version: int = 2
    stamp: str = ""  # which computation this memo descends from (see `_turn_memo`)
    recent: tuple | None = None  # (count before, width before, the turns) `advanced` added last
    written: int = 0  # the count when it was last written to the shared cache

    def add(self, turns) -> None:
        """Fold in turns (id, ts, kind, tokens in, tokens out, cost, actor, parent, model), any order. A
        changed entry is a new list, never changed in place: an `advanced` memo shares the rest."""
        for pk, ts, kind, tin, tout, usd, actor, parent, model in turns:
            micro = _micro(usd)
            self.hwm = max(self.hwm, pk)
            self.count += 1
            self.tokens_in += tin
            self.tokens_out += tout
            self.lo = ts if self.lo is None else min(self.lo, ts)
            self.hi = ts if self.hi is None else max(self.hi, ts)
            key = (_bucket_of(ts, self.width), kind)
            n, bin_in, bin_out, bin_micro = self.buckets.get(key, _ZERO)
            self.buckets[key] = [n + 1, bin_in + tin, bin_out + tout, bin_micro + micro]
            key = (actor, parent, kind, model)
            n, a_in, a_out, a_us, first, last = self.actors.get(key) or (0, 0, 0, 0, ts, ts)
            self.actors[key] = [n + 1, a_in + tin, a_out + tout, a_us + micro, min(first, ts), max(last, ts)]
        # A live run outgrows its buckets: merge them into coarser ones (a power of two holds whole ones).
        if self.lo is not None and (self.hi - self.lo) / timedelta(seconds=self.width) > 2 * BASE_BUCKETS:
            self.rebase(_base_width(self.hi - self.lo))

    def advanced(self, turns) -> TurnMemo:
        """This memo with `turns` folded in, as a new memo (other threads may be reading this one); it says
        which turns it added to which count (`recent`): the timeline's bars are advanced by them too."""
        rows = list(turns)
        if not rows:
            return self
        memo = dataclasses.replace(self, buckets=dict(self.buckets), actors=dict(self.actors))
        memo.add(rows)
        memo.recent = (self.count, self.width, rows)
        return memo

    def __getstate__(self) -> dict:
        return {**self.__dict__, "recent": None}  # what was added last is this process's business

    def rebase(self, width: int) -> None:
        factor = width // self.width
        merged: dict = {}
        for (index, kind), values in self.buckets.items():
            m = merged.setdefault((index // factor, kind), [0, 0, 0, 0])
            for i in range(4):
                m[i] += values[i]
        self.width, self.buckets = width, merged

    def matches(self, run: Run) -> bool:
        return self.totals() == (run.turn_count, run.tokens_in, run.tokens_out)

    def totals(self) -> tuple[int, int, int]:
        return self.count, self.tokens_in, self.tokens_out

    def rollup(self, run: Run) -> TurnRollup:
        """The memo as the run's `TurnRollup` row (unsaved)."""
        return TurnRollup(
            run=run,
            hwm=self.hwm,
            turn_count=self.count,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            width=self.width,
            first_ts=self.lo,
            last_ts=self.hi,
            buckets=[[index, kind, *values] for (index, kind), values in self.buckets.items()],
            actors=[
                [*key, n, tin, tout, micro, _epoch_us(first), _epoch_us(last)]
                for key, (n, tin, tout, micro, first, last) in self.actors.items()
            ],
        )

    @classmethod
    def from_rollup(cls, row: TurnRollup) -> TurnMemo:
        return cls(
            width=row.width,
            hwm=row.hwm,
            count=row.turn_count,
            tokens_in=row.tokens_in,
            tokens_out=row.tokens_out,
            lo=row.first_ts,
            hi=row.last_ts,
            buckets={
                (index, kind): [n, tin, tout, micro] for index, kind, n, tin, tout, micro in row.buckets
            },
            actors={
                (actor, parent, kind, model): [
                    n,
                    tin,
                    tout,
                    micro,
                    _from_epoch_us(first),
                    _from_epoch_us(last),
                ]
                for actor, parent, kind, model, n, tin, tout, micro, first, last in row.actors
            },
        )


def _epoch_us(ts: datetime) -> int:
    return (ts - EPOCH) // timedelta(microseconds=1)


def _from_epoch_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


TURN_FIELDS = ("id", "ts", "kind", "tokens_in", "tokens_out", "cost_usd", "actor", "parent_actor", "model")


def computed_turn_memo(run: Run) -> TurnMemo:
    """Every turn of the run aggregated in SQL (three queries, however many turns): the totals, then
    the buckets and the actors of the turns up to the highest id the totals saw."""
    turns = AgentTurn.objects.filter(run=run)
    totals = turns.aggregate(
        hwm=Max("id"), n=Count("id"), tin=Sum("tokens_in"), tout=Sum("tokens_out"), lo=Min("ts"), hi=Max("ts")
    )
    if not totals["n"]:
        return TurnMemo()
    memo = TurnMemo(
        width=_base_width(totals["hi"] - totals["lo"]),
        hwm=totals["hwm"],
        count=totals["n"],
        tokens_in=totals["tin"] or 0,
        tokens_out=totals["tout"] or 0,
        lo=totals["lo"],
        hi=totals["hi"],
    )
    upto = turns.filter(id__lte=memo.hwm).order_by()
    sums = {"n": Count("id"), "tin": Sum("tokens_in"), "tout": Sum("tokens_out"), "usd": Sum("cost_usd")}
    for r in upto.annotate(bucket=EpochBucket("ts", memo.width)).values("bucket", "kind").annotate(**sums):
        memo.buckets[(r["bucket"], r["kind"])] = [r["n"], r["tin"] or 0, r["tout"] or 0, _micro(r["usd"])]
    for r in upto.values("actor", "parent_actor", "kind", "model").annotate(
        **sums, first=Min("ts"), last=Max("ts")
    ):
        memo.actors[(r["actor"], r["parent_actor"], r["kind"], r["model"])] = [
            r["n"],
            r["tin"] or 0,
            r["tout"] or 0,
            _micro(r["usd"]),
            r["first"],
            r["last"],
        ]
    return memo


def kept_turn_memo(run: Run) -> TurnMemo | None:
    """The run's `TurnRollup` (one query) with the turns past its high-water mark folded in (one more:
    an indexed range of fewer than `services.rollups.ROLLUP_LAG` turns, as the write path keeps it), or
    None when there is none or it disagrees with the run's summary columns."""
    row = TurnRollup.objects.filter(run=run).first()
    if row is None:
        return None
    memo = TurnMemo.from_rollup(row)
    memo.add(turns_past(run, memo.hwm).order_by().values_list(*TURN_FIELDS))
    return memo if memo.matches(run) else None


def _turn_memo(run: Run) -> TurnMemo:
    """The run's turn aggregates, brought up to date with the turns that arrived since (one query): this
    process's own copy (`core.localcache`: a live page's poll does not unpickle a long run's memo), else the
    shared cache's, else the run's `TurnRollup` likewise (two queries), else computed from every row (three).
    Kept on `run` for the rest of the request.

    A memo's stamp (kept beside it in the shared cache) names the computation it descends from: forgetting
    the aggregates forgets the stamp, so every process's copy is built again. What a process advanced is
    written back every `MEMO_WRITE_EVERY` turns, not on each poll: another process catches up from it."""
    memo = getattr(run, "_turn_memo", None)
    if memo is not None:
        return memo
    key, stamp_key = cachekeys.turn_aggregates(run.pk), cachekeys.turn_aggregates_stamp(run.pk)
    stamp = softcache.get(stamp_key)  # a Redis that is down: no stamp, computed from the rows
    memo = localcache.get(("turn-memo", run.pk, stamp)) if stamp else None
    if memo is None and stamp:
        shared = softcache.get(key)
        if isinstance(shared, TurnMemo) and shared.version == TurnMemo.version and shared.stamp == stamp:
            memo = shared
    if memo is not None:
        read = memo
        memo = memo.advanced(turns_past(run, memo.hwm).order_by().values_list(*TURN_FIELDS))
        if not memo.matches(run):
            memo = None
        elif memo is not read and memo.count - memo.written >= MEMO_WRITE_EVERY:
            memo.written = memo.count  # not published yet: `advanced` made it
            softcache.set(key, memo, MEMO_SECONDS)  # down: nothing kept, the next page computes again
    if memo is None:
        memo = kept_turn_memo(run) or computed_turn_memo(run)
        memo.stamp, memo.written = secrets.token_hex(8), memo.count
        stamp = memo.stamp
        softcache.set_many({key: memo, stamp_key: stamp}, MEMO_SECONDS)
    localcache.put(("turn-memo", run.pk, stamp), memo)
    run._turn_memo = memo
    return memo


def turns_after(run: Run, moment: datetime, *, of: str = "best") -> tuple[int, int, Decimal]:
    """(turns, tokens in + out, USD) of the run's turns after `moment`, exactly. Kept per run with the
    mark it was read up to: the next read after the same `moment` adds the turns past the mark (one
    indexed range), unless they do not add up to the run's turn count (a turn deleted, or committed out
    of id order); else read from the kept aggregates (`_turns_after`). `of` names what `moment` is (the best
    score's, the first score's): each is kept apart."""
    key = cachekeys.turns_after(run.pk, of)
    kept = softcache.get(key)
    if isinstance(kept, tuple) and len(kept) == 6 and kept[0] == moment:
        _, hwm, count, n, tokens, micro = kept
        since = turns_past(run, hwm).aggregate(
            all=Count("id"),
            hwm=Max("id"),
            n=Count("id", filter=Q(ts__gt=moment)),
            tin=Sum("tokens_in", filter=Q(ts__gt=moment)),
            tout=Sum("tokens_out", filter=Q(ts__gt=moment)),
            usd=Sum("cost_usd", filter=Q(ts__gt=moment)),
        )
        if since["all"] == run.turn_count - count:
            if since["all"]:
                hwm, count = since["hwm"], run.turn_count
                n, tokens = n + since["n"], tokens + (since["tin"] or 0) + (since["tout"] or 0)
                micro += _micro(since["usd"])
                softcache.set(key, (moment, hwm, count, n, tokens, micro), MEMO_SECONDS)
            return n, tokens, micro * MICRO_USD
    memo = _turn_memo(run)
    n, tokens, micro = _turns_after(run, memo, moment)
    softcache.set(key, (moment, memo.hwm, memo.count, n, tokens, micro), MEMO_SECONDS)
    return n, tokens, micro * MICRO_USD


def _turns_after(run: Run, memo: TurnMemo, moment: datetime) -> tuple[int, int, int]:
    """(turns, tokens, micro-USD) after `moment` of the turns in `memo`: the kept buckets after the one
    `moment` falls in, plus that bucket's turns after it (an indexed range of one bucket)."""
    if not memo.count:
        return 0, 0, 0
    at = _bucket_of(moment, memo.width)
    n = tokens = micro = 0
    for (bucket, _), (bn, tin, tout, m) in memo.buckets.items():
        if bucket > at:
            n, tokens, micro = n + bn, tokens + tin + tout, micro + m
    edge = AgentTurn.objects.filter(
        run=run,
        id__lte=memo.hwm,  # what the memo holds, no turn committed since
        ts__gt=moment,
        ts__lt=EPOCH + timedelta(seconds=memo.width) * (at + 1),
    ).aggregate(n=Count("id"), tin=Sum("tokens_in"), tout=Sum("tokens_out"), usd=Sum("cost_usd"))
    n += edge["n"]
    tokens += (edge["tin"] or 0) + (edge["tout"] or 0)
    return n, tokens, micro + _micro(edge["usd"])


def forget_turn_aggregates(run: Run) -> None:
    """Drop what is kept for `run` (tests and benchmarks measure the cold path with it)."""
    run.__dict__.pop("_turn_memo", None)
    # Without its stamp, no process's copy is taken up again. Down: nothing was kept to forget.
    softcache.delete_many([cachekeys.turn_aggregates(run.pk), cachekeys.turn_aggregates_stamp(run.pk)])


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
        if memo.recent is not None and memo.recent[:2] == (count, memo.width):
            merged = dict(merged)
            for _, ts, kind, tin, tout, usd, *_ in memo.recent[2]:
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


def run_timeline(run: Run, *, now: datetime | None = None, scores_version: str | None = None) -> Timeline:
    """Turns binned by time and scores on the same time axis: at most MAX_BINS bars per kind, each a
    whole number of the kept buckets; two queries when the turn aggregates are kept (plus the turns
    since), whatever the number of turns. With `scores_version` (of the run's scores) the score side is
    kept in the cache under it (`timeline_scores.kept_score_side`)."""
    now = now or timezone.now()
    memo = _turn_memo(run)
    maximize = run.project.scenario.maximize
    side = kept_score_side(run, memo.hwm, memo.count, maximize, scores_version)
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

    merged = _bars(run, memo, origin_bucket, per_bar)
    bins: list[TurnBin] = []
    cumulative: list[tuple[datetime, Decimal, Decimal]] = []
    total = driver = Decimal(0)
    for (index, kind), (n, tin, tout, micro) in sorted(merged.items()):
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

    return Timeline(
        start=start,
        end=end,
        bin_width=width,
        bins=bins,
        cumulative=cumulative,
        scores=[(ts, v) for _, v, ts, _, _ in side.scores],
        score_standing=[why for *_, why in side.scores],
        score_turns=list(side.turns_before),
        frontier=list(side.frontier),
        score_total=side.total,
        turn_total=memo.count,
    )


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
    newest = run.turns.order_by("-ts", "-id").values_list("ts", flat=True).first()
    if newest is None or newest < burning_since(now):
        burn = Burn(window=BURN_WINDOW, usd_per_hour=Decimal(0), tokens_per_hour=0)
        usd_rate, token_rate = Decimal(0), 0
    else:
        # A young run is measured over its own age, not diluted over a window it has not lived.
        window = min(BURN_WINDOW, max(newest - run.started_at, timedelta(minutes=1)))
        recent = AgentTurn.objects.filter(run=run, ts__gt=newest - window, ts__lte=newest).aggregate(
            usd=Sum("cost_usd"), tin=Sum("tokens_in"), tout=Sum("tokens_out")
        )
        hours = Decimal(window.total_seconds()) / 3600
        usd_rate = (recent["usd"] or Decimal(0)) / hours
        token_rate = int(((recent["tin"] or 0) + (recent["tout"] or 0)) / float(hours))
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


def efficiency(run: Run) -> Efficiency | None:
    if run.score_count == 0 or run.best_score is None:
        return None
    first = (
        Submission.objects.filter(run=run)
        .filter(counted_q(**RUN_RULE))
        .order_by("ts", "id")
        .values_list("ts", "score")
        .first()
    )
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
