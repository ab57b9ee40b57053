"""Reads of a run: metric series, score histories, how long it has stalled, and the spend its source\nreports
that no turn accounts for."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.db.models import Avg, Count, F, IntegerField, Max, Min, Q, Subquery, Window
from django.db.models.functions import Cast, RowNumber
from django.utils import timezone

from smrweb.core import cachekeys
from smrweb.tracking.models import (
    FLOAT_MAX,
    RUN_RULE,
    MetricPoint,
    MetricRollup,
    Run,
    RuntimeMessage,
    Submission,
    standing,
)
from smrweb.tracking.queries.kept import kept_many


@dataclass(frozen=True)
class SeriesPoint:
    step: int
    value: float  # the bucket's mean when downsampled
    min: float
    max: float
    count: int


def metric_keys(run: Run) -> list[str]:
    return list(MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct().order_by("key"))


def metric_series(run: Run, key: str, points: int) -> tuple[int, list[SeriesPoint]]:
    """A run's series for `key`, at most `points` long: every point when it has no more, else
    min/mean/max per step bucket.

    Returns (total points stored, the points). Buckets split the step range evenly, so a chart keeps
    the series' shape (its extremes survive as min/max) without shipping every point. A long series is
    read from its rollups (`MetricRollup`, kept at ingest): the widest kept width within a bucket's
    span, fewer than 4 × `points` rows whatever the number of points, each rollup bucket counted in the
    chart's bucket its first step falls in. Two queries.
    """
    whole = (
        MetricRollup.objects.filter(run=run, key=key, width=0)
        .values_list("n", "first_step", "last_step", "low", "high")
        .first()
    )
    if whole is None:  # no rollup: no point either, or points not stored by ingest (read them)
        return _series_from_points(run, key, points)
    total, lo, hi = whole[:3]
    steps_per_bucket = -(-(hi - lo + 1) // points)
    width = max((w for w in MetricRollup.WIDTHS if w <= steps_per_bucket), default=0)
    if total <= points or not width:
        # Every point (a short series), or a dense one of fewer than 16 × `points`: from its points.
        return _series_from_points(run, key, points, whole)
    rollups = (
        MetricRollup.objects.filter(run=run, key=key, width=width)
        .order_by("bucket")
        .values_list("first_step", "n", "total", "low", "high")
    )
    merged: list[list] = []  # [chart bucket, first step, count, [sums], min, max]
    for first, n, sum_, low, high in rollups:
        if sum_ is None:  # a sum too large to keep: the means come from the points
            return _series_from_points(run, key, points, whole)
        index = (first - lo) // steps_per_bucket
        if merged and merged[-1][0] == index:
            row = merged[-1]
            row[2] += n
            row[3].append(sum_)
            row[4], row[5] = min(row[4], low), max(row[5], high)
        else:
            merged.append([index, first, n, [sum_], low, high])
    if sum(row[2] for row in merged) != total:  # rollups out of step with each other: trust the points
        return _series_from_points(run, key, points, whole)
    # Each mean a sum of sum/n: no overflow where the sum of the sums would.
    return total, [
        SeriesPoint(first, sum(t / n for t in sums), low, high, n) for _, first, n, sums, low, high in merged
    ]


def _series_from_points(
    run: Run, key: str, points: int, span: tuple[int, int, int, float, float] | None = None
) -> tuple[int, list[SeriesPoint]]:
    """`metric_series` computed from the points in SQL (O(points)); `span`: (count, first and last
    step, min and max value) when known."""
    rows = MetricPoint.objects.filter(run=run, key=key)
    if span is None:
        agg = rows.aggregate(n=Count("id"), lo=Min("step"), hi=Max("step"), lv=Min("value"), hv=Max("value"))
        span = (agg["n"], agg["lo"], agg["hi"], agg["lv"], agg["hv"])
    total, lo, hi, vlo, vhi = span
    if total == 0:
        return 0, []
    if total <= points:
        return total, [
            SeriesPoint(s, v, v, v, 1) for s, v in rows.order_by("step", "id").values_list("step", "value")
        ]
    width = hi - lo + 1
    # Integer arithmetic on both backends: bucket = (step - lo) // steps_per_bucket, in [0, points).
    # No multiplication, so steps near the contract's 2**62 cannot overflow bigint.
    steps_per_bucket = -(-width // points)
    bucket = Cast((F("step") - lo) / steps_per_bucket, IntegerField())
    grouped = rows.annotate(bucket=bucket).values("bucket").order_by("bucket")
    if max(abs(vlo), abs(vhi)) * total < FLOAT_MAX:
        buckets = grouped.annotate(
            step=Min("step"), mean=Avg("value"), lo=Min("value"), hi=Max("value"), n=Count("id")
        )
        return total, [SeriesPoint(b["step"], b["mean"], b["lo"], b["hi"], b["n"]) for b in buckets]
    # Values so large that a bucket's SQL sum could overflow (red-team finding 7: two points of 1.7e308
    # made AVG infinite on SQLite, an error on PostgreSQL): each mean is a sum of value/n, made here.
    buckets = list(grouped.annotate(step=Min("step"), lo=Min("value"), hi=Max("value"), n=Count("id")))
    counts = {b["bucket"]: b["n"] for b in buckets}
    sums: dict[int, float] = defaultdict(float)
    for index, value in rows.annotate(bucket=bucket).values_list("bucket", "value").iterator():
        sums[index] += value / counts[index]
    return total, [SeriesPoint(b["step"], sums[b["bucket"]], b["lo"], b["hi"], b["n"]) for b in buckets]


class ScorePoint(NamedTuple):
    """One score of a history (sparklines, the runs table's Latest marker) and why it does not count
    under the rule of the figure that shows it (`standing`: "invalid", "excluded", "candidate"…; "" when
    it counts)."""

    score: float
    why: str = ""


def _latest_scores(
    group_by: str, ids: list[int], limit: int, *, unverified: bool = True, of_run: bool = True
) -> dict[int, list[ScorePoint]]:
    """The last `limit` scores per `group_by` value, oldest first, each with its standing under the rule
    (`unverified`, `of_run`: as `counted_q`), in one window-function query."""
    if not ids:
        return {}
    fields = (group_by, "score", "rn", "status", "excluded_at", *(() if of_run else ("run__excluded_at",)))
    if len(ids) == 1:  # one (a run page's): its latest rows off the (run, ts) index, not a window over all
        latest = Submission.objects.filter(**{group_by: ids[0]}).order_by("-ts", "-id")
        ranked = [
            (key, score, rn, *rest)
            for rn, (key, score, *rest) in enumerate(
                latest.values_list(*(f for f in fields if f != "rn"))[:limit], start=1
            )
        ]
    else:
        ranked = (
            Submission.objects.filter(**{f"{group_by}__in": ids})
            .annotate(
                rn=Window(RowNumber(), partition_by=[F(group_by)], order_by=[F("ts").desc(), F("id").desc()])
            )
            .filter(rn__lte=limit)  # filtered in SQL (Django wraps the window query)
            .values_list(*fields)
        )
    history: dict[int, list[tuple[int, ScorePoint]]] = defaultdict(list)
    for key, score, rn, status, excluded, *run_excluded in ranked:
        why = standing(
            status,
            excluded is not None,
            run_excluded=bool(run_excluded and run_excluded[0] is not None),
            unverified=unverified,
            of_run=of_run,
        )
        history[key].append((rn, ScorePoint(score, why)))
    return {key: [p for _, p in sorted(pairs, key=lambda rp: -rp[0])] for key, pairs in history.items()}


def score_histories(run_ids: Iterable[int], *, per_run: int = 40) -> dict[int, list[ScorePoint]]:
    """The last `per_run` scores of each run in time order, each marked by the run's rule (for the
    runs table's sparklines and its Latest cell's "newer, not counted" marker)."""
    return _latest_scores("run_id", list(run_ids), per_run, **RUN_RULE)


def _marker_version(mark: tuple) -> str:
    n, top, last = mark
    return f"{n}:{top}:{last.isoformat() if last else ''}"  # no spaces: a valid key for any cache


def kept_score_histories(marks: dict[int, tuple], *, per_run: int = 40) -> dict[int, list[ScorePoint]]:
    """`score_histories` of the runs in `marks` (run pk: its submissions' marker, markers.submission_markers),
    each kept under its marker: a row of the runs table redrawn for a new turn (which moves no marker) reads
    its sparkline from the cache, not the scores."""
    reads = _history_reads(marks, per_run)

    def build(missing: list[int]) -> dict[int, list[ScorePoint]]:
        read = score_histories(missing, per_run=per_run)
        return {pk: read.get(pk, []) for pk in missing}

    return kept_many(reads, build)


def kept_score_history_keys(marks: dict[int, tuple], *, per_run: int = 40) -> list[str]:
    """Where `kept_score_histories(marks)` finds them in the cache (for a caller that reads ahead)."""
    return [cachekeys.kept(name, version) for name, version in _history_reads(marks, per_run).values()]


def _history_reads(marks: dict[int, tuple], per_run: int) -> dict[int, tuple[str, str]]:
    return {pk: (cachekeys.kept_score_history(pk, per_run), _marker_version(m)) for pk, m in marks.items()}


def stalled_for(run: Run, now: datetime | None = None) -> timedelta | None:
    if not run.is_stalled:
        return None
    return (now or timezone.now()) - run.last_progress_at


# Reconciliation channels, as the run page and the API name them.
GAP_CHANNELS = (
    ("tokens_in", "input tokens", "tokens"),
    ("tokens_out", "output tokens", "tokens"),
    ("usd", "inference", "usd"),
    ("driver_usd", "driver inference", "usd"),
    ("child_usd", "child work", "usd"),
    ("driver_tokens_in", "driver input tokens", "tokens"),
    ("driver_tokens_out", "driver output tokens", "tokens"),
    ("child_tokens_in", "child input tokens", "tokens"),
    ("child_tokens_out", "child output tokens", "tokens"),
    ("unknown_usd", "role unknown", "usd"),
    ("unknown_tokens_in", "role-unknown input tokens", "tokens"),
    ("unknown_tokens_out", "role-unknown output tokens", "tokens"),
    # Turns of actors whose role no source states: neither side of the split accounts for them.
    ("role_unknown_tokens_in", "input tokens", "tokens"),
    ("role_unknown_tokens_out", "output tokens", "tokens"),
    ("role_unknown_usd", "USD", "usd"),
)


TOTAL_CHANNELS = frozenset({"tokens_in", "tokens_out", "usd"})


@dataclass(frozen=True)
class SourceGap:
    channel: str
    label: str
    unit: str  # "tokens" | "usd"
    amount: Decimal  # what the source reports beyond the turns (negative: the turns show more)


@dataclass(frozen=True)
class SourceGaps:
    """Where a polled run's data and its source's own numbers part: shown on the run page, never hidden."""

    unaccounted: list[SourceGap]
    timeline_current: bool
    timeline_as_of: datetime | None
    unreadable: int
    example: str
    messages_missed: int
    results_unreadable: int

    @property
    def any(self) -> bool:
        return bool(self.unaccounted or self.unreadable or self.messages_missed or self.results_unreadable)

    @property
    def source_reports_more(self) -> list[SourceGap]:
        return [g for g in self.unaccounted if g.amount > 0 and g.channel in TOTAL_CHANNELS]

    @property
    def turns_show_more(self) -> list[SourceGap]:
        return [g for g in self.unaccounted if g.amount < 0 and g.channel in TOTAL_CHANNELS]

    @property
    def role_unknown(self) -> list[SourceGap]:
        """What the turns of actors with no stated role hold (on neither side of the split)."""
        return [g for g in self.unaccounted if g.channel.startswith("role_unknown_")]

    @property
    def split_usd(self) -> list[SourceGap]:
        return [g for g in self.split if g.unit == "usd" and g.channel in ("driver_usd", "child_usd")]

    @property
    def split(self) -> list[SourceGap]:
        """The driver/child channels (per-actor usage against the turns' split)."""
        return [
            g
            for g in self.unaccounted
            if g.channel not in TOTAL_CHANNELS and not g.channel.startswith("role_unknown_")
        ]


def source_gaps(run: Run) -> SourceGaps:
    spend, cursor = run.source_spend or {}, run.source_cursor or {}
    unaccounted = spend.get("unaccounted") or {}
    gaps = [
        SourceGap(key, label, unit, Decimal(str(unaccounted[key])))
        for key, label, unit in GAP_CHANNELS
        if key in unaccounted
    ]
    entries = spend.get("entries") or {}
    as_of = spend.get("timeline_as_of")
    return SourceGaps(
        unaccounted=gaps,
        timeline_current=bool(spend.get("timeline_current", True)),
        timeline_as_of=datetime.fromisoformat(as_of) if as_of else None,
        unreadable=int(entries.get("unreadable") or 0),
        example=str(entries.get("example") or ""),
        messages_missed=int(cursor.get("messages_missed") or 0),
        results_unreadable=int(cursor.get("results_unreadable") or 0),
    )


# The topic SMR gives a run's kickoff (its trigger's initial runtime message); the demo harness uses it too.
KICKOFF_TOPIC = "smr.trigger.initial_runtime_message"


def message_kind(message: RuntimeMessage) -> str:
    """What a runtime message is, for its badge: "kickoff" (by its topic, not by being first: a harness's
    rollback notice can come first), "rollback", or "" for any other."""
    topic = (message.topic or "").lower()
    if topic == KICKOFF_TOPIC:
        return "kickoff"
    return "rollback" if "rollback" in topic else ""


def runtime_messages(run: Run, limit: int = 20) -> list[RuntimeMessage]:
    """The run's newest `limit` runtime messages and always its first (the kickoff), newest first, in one
    query whatever their count."""
    said = run.messages  # not "messages": that is Django's flash messages
    newest = said.order_by("-seq").values("pk")[:limit]
    first = said.order_by("seq").values("pk")[:1]
    return list(said.filter(Q(pk__in=newest) | Q(pk=Subquery(first))).order_by("-seq"))
