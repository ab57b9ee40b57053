"""Compare's turn side: per compared run, the turn statistics the summary columns do not hold and the
cumulative spend rows, thinned in SQL (`spend_rows`), kept per run (`TurnBase`) and advanced by the turns
past those kept, so a new turn in a run of 100,000 reads that turn rather than a window over every turn.
Also the thinning the score side shares (`_thinned`). Beside queries/compare.py, which reads the rest."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Count, F, FloatField, Func, IntegerField, Max, Min, Q, Sum, Window
from django.db.models.expressions import ExpressionWrapper, RowRange
from django.db.models.functions import Cast, RowNumber

from smrweb.core import cachekeys, softcache
from smrweb.tracking.models import AgentTurn, Run, TurnKind
from smrweb.tracking.queries.turn_memo import EpochSeconds


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


def add_turns(
    by_pk: dict[int, Any], *, per_run: int, oversample: int, timeout: int
) -> dict[int, list[tuple]]:
    """Each run's turn statistics, set on it (`by_pk`: compare's RunSeries by run), and its spend rows,
    returned (`spend_rows`: thinned). A run whose turns were read before (its `TurnBase` kept) and that
    has only new turns since, all later than its latest, in the same stride, has those read alone and
    added (one query for all such runs, by the (run, id) index): a new turn in a run of 100,000 costs one
    row, not a window over 100,000. The others are read whole (two queries)."""
    stride_rows = per_run * oversample
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
    softcache.set_many({keys[pk]: base for pk, base in fresh.items()}, timeout)
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
