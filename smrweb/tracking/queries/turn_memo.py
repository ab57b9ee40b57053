"""A run's turn aggregates (`TurnMemo`): per time bucket and kind, and per actor, every turn of the run,
behind the run page's timeline, actor tree, "no progress" reading and efficiency.

Kept per run in the cache and brought up to date with the turns that arrived since (`_turn_memo`): a page
of a 100,000-turn run reads the turns it has not seen, not all of them; a server process keeps its own
copy between polls (core.localcache), advanced by the new turns. The write path keeps the same aggregates
in the database too (a `TurnRollup` row per run, advanced in the batches' transactions), so a page after
the cache lost them (a restart, an eviction) reads one row and the few turns past it instead of every
turn. What is kept is checked against the run's own summary columns (turn count, tokens in and out, which
the write path recomputes from the rows): any difference — a deleted turn, one committed out of id order —
and the aggregates are computed again from every row, in SQL."""

from __future__ import annotations

import bisect
import dataclasses
import math
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import NamedTuple

from django.db.models import BigIntegerField, Count, FloatField, Func, Max, Min, Q, Sum

from smrweb.core import cachekeys, localcache, softcache
from smrweb.core.prepared import Prepared
from smrweb.tracking.models import AgentTurn, Run, TurnRollup
from smrweb.tracking.queries.timeline_scores import turns_past

# Turns are kept aggregated in buckets of a power-of-two number of seconds, aligned to the Unix epoch,
# at most about this many over the turns' span; a bar of the timeline is a whole number of buckets.
BASE_BUCKETS = 1024
MEMO_SECONDS = 24 * 3600
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICRO_USD = Decimal("0.000001")
_ZERO = (0, 0, 0, 0)
MEMO_WRITE_EVERY = 256  # turns a process's memo may run ahead of the shared cache's before it is written


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


class Recent(NamedTuple):
    """What `TurnMemo.advanced` added last, and to what: readers that kept something at the memo before
    (its `count`, `width`, `hwm`) advance it by these `rows` instead of reading again."""

    count: int
    width: int
    hwm: int
    rows: list


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
    recent: Recent | None = None  # the turns `advanced` added last, and the memo's count before
    written: int = 0  # the count when it was last written to the shared cache

    def add(self, turns) -> None:
        """Fold in turns (id, ts, kind, tokens in, tokens out, cost, actor, parent, model, …), any order. A
        changed entry is a new list, never changed in place: an `advanced` memo shares the rest."""
        for pk, ts, kind, tin, tout, usd, actor, parent, model, *_ in turns:
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
        memo.recent = Recent(self.count, self.width, self.hwm, rows)
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
# A memo is advanced by the new turns read with what a turns table's row shows besides (`newest_turns`).
ADVANCE_FIELDS = (*TURN_FIELDS, "turn", "duration_ms", "tool_calls")
# The turns a memo is advanced by (a watched run's page, after each of its turns): compiled once.
_ADVANCE = Prepared(
    lambda run_id, mark: turns_past(run_id, mark).order_by().values_list(*ADVANCE_FIELDS), int, int
)


class TurnRow(NamedTuple):
    """A turn as the run page's turns table shows it (its tool calls for their count and names)."""

    pk: int
    turn: int
    actor: str
    parent_actor: str
    kind: str
    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: Decimal
    duration_ms: int | None
    ts: datetime
    tool_calls: list | None


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
    memo.add(turns_past(run.pk, memo.hwm).order_by().values_list(*TURN_FIELDS))
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
        memo = memo.advanced(_ADVANCE.rows(run.pk, memo.hwm))
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
    """(turns, tokens in + out, USD) of the run's turns after `moment`, exactly. `of` names what `moment` is
    (the best score's, the first score's): each is kept apart, with the turns it was read up to.

    In this process, kept with the stamp and count of the run's turn aggregates it agrees with: the turns
    that memo was `advanced` by are added to it (no query). Else kept in the shared cache: the next read
    after the same `moment` adds the turns past its mark (one indexed range), unless they do not add up to
    the run's turn count (a turn deleted, or committed out of id order); else read from the kept
    aggregates (`_turns_after`)."""
    memo = _turn_memo(run)
    local = ("turns-after", run.pk, of)
    mine = localcache.get(local)
    if mine is not None and mine[:2] == (moment, memo.stamp) and memo.stamp:
        _, _, count, n, tokens, micro = mine
        if count == memo.count:
            return n, tokens, micro * MICRO_USD
        if memo.recent is not None and memo.recent.count == count:
            for _, ts, _, tin, tout, usd, *_ in memo.recent.rows:
                if ts > moment:
                    n, tokens, micro = n + 1, tokens + tin + tout, micro + _micro(usd)
            localcache.put(local, (moment, memo.stamp, memo.count, n, tokens, micro))
            return n, tokens, micro * MICRO_USD
    key = cachekeys.turns_after(run.pk, of)
    kept = softcache.get(key)
    found = None
    if isinstance(kept, tuple) and len(kept) == 6 and kept[0] == moment:
        _, hwm, count, n, tokens, micro = kept
        since = turns_past(run.pk, hwm).aggregate(
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
            found = n, tokens, micro
    if found is None:
        found = _turns_after(run, memo, moment)
        softcache.set(key, (moment, memo.hwm, memo.count, *found), MEMO_SECONDS)
    if memo.stamp:  # the memo matched the run's turn count, as what was read did
        localcache.put(local, (moment, memo.stamp, memo.count, *found))
    n, tokens, micro = found
    return n, tokens, micro * MICRO_USD


def recent_turns(run: Run, span: timedelta) -> list[tuple[datetime, int, int, int]]:
    """The run's turns in the `span` up to its newest, as (ts, micro-USD, tokens in, tokens out) in time
    order: what the burn rate sums. In this process, kept with the stamp and count of the run's turn
    aggregates: the turns that memo was `advanced` by are merged in and those that left the span dropped (no
    query); else read (one indexed range)."""
    memo = _turn_memo(run)
    if not memo.count:
        return []
    cutoff = memo.hi - span
    local = ("recent-turns", run.pk, span)
    mine = localcache.get(local)
    rows = None
    if mine is not None and memo.stamp and mine[0] == memo.stamp:
        _, count, kept = mine
        if count == memo.count:
            return kept
        if memo.recent is not None and memo.recent.count == count:
            rows = sorted(
                [*kept, *((ts, _micro(usd), tin, tout) for _, ts, _, tin, tout, usd, *_ in memo.recent.rows)]
            )
    if rows is None:
        read = run.turns.filter(id__lte=memo.hwm, ts__gt=cutoff).values_list(
            "ts", "cost_usd", "tokens_in", "tokens_out"
        )
        rows = sorted((ts, _micro(usd), tin, tout) for ts, usd, tin, tout in read)
    rows = rows[bisect.bisect_right(rows, cutoff, key=itemgetter(0)) :]
    if memo.stamp:
        localcache.put(local, (memo.stamp, memo.count, rows))
    return rows


def newest_turns(run: Run, n: int) -> list[TurnRow] | None:
    """The run's newest `n` turns by (ts, id), newest first: the turns table's first page, without a query
    when this process kept it (`keep_newest_turns`) at the stamp of the run's turn aggregates and at their
    count, or at the count their memo was `advanced` from (its new turns merged in: the newest `n` of the
    kept page and every turn since are the newest `n` of all). None when it did not, or when this request has
    not read the aggregates (a pager's request: they would cost it more than the page): the caller reads them.
    A turn changed in place (moved to another side, priced) or deleted moves the stamp or the count."""
    memo = getattr(run, "_turn_memo", None)  # a live poll read them for its other cards
    mine = localcache.get(("newest-turns", run.pk, n))
    if memo is None or mine is None or not memo.stamp or mine[0] != memo.stamp:
        return None
    _, count, rows = mine
    if count == memo.count:
        return rows
    recent = memo.recent
    if recent is None or recent.count != count or any(len(t) != len(ADVANCE_FIELDS) for t in recent.rows):
        return None
    merged = {row.pk: row for row in rows}  # a page read after its memo may hold some of the new turns
    for pk, ts, kind, tin, tout, usd, actor, parent, model, number, duration, calls in recent.rows:
        merged[pk] = TurnRow(pk, number, actor, parent, kind, model, tin, tout, usd, duration, ts, calls)
    rows = sorted(merged.values(), key=lambda row: (row.ts, row.pk), reverse=True)[:n]
    localcache.put(("newest-turns", run.pk, n), (memo.stamp, memo.count, rows))
    return rows


def keep_newest_turns(run: Run, n: int, rows: list[TurnRow]) -> None:
    """Keep the run's newest `n` turns as just read (after its turn aggregates, when this request read them:
    at their stamp and count) for `newest_turns`."""
    memo = getattr(run, "_turn_memo", None)
    if memo is not None and memo.stamp:
        localcache.put(("newest-turns", run.pk, n), (memo.stamp, memo.count, list(rows)))


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
