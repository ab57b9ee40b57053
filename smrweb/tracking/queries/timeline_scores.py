"""The score side of a run's timeline (the points plotted, why each does not count, the turn before each
score, the best-so-far frontier), kept in the cache under the version of the run's scores: a live run's
page reads it again only when a score changes or a turn lands at or before its last score. With the
turns past a mark (`turns_past`), which the turn aggregates in `queries.timeline` read too."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.expressions import RawSQL, RowRange
from django.db.models.functions import RowNumber

from smrweb.core import cachekeys, softcache
from smrweb.core.downsample import lttb
from smrweb.tracking.models import RUN_RULE, AgentTurn, Run, Submission, counted_q, standing

MAX_SCORE_POINTS = 300
KEPT_SECONDS = 3600


@dataclass
class ScoreSide:
    """What the timeline shows of the scores, and the turns it was read against (`hwm`, `turns`)."""

    ends: list[datetime]  # the first and the last score's time (none without scores)
    scores: list[tuple]  # plotted: (epoch seconds, value, ts, pk, standing)
    turns_before: list[tuple[int | None, str]]
    frontier: list[tuple[datetime, float]]
    total: int
    hwm: int = 0
    turns: int = 0


def turns_past(run: Run, mark: int):
    """The run's turns with an id above `mark`: one exact range of the (run, id) index. PostgreSQL gets
    it as a row-value range, since with `run_id = X AND id > mark` its planner walks the primary key
    from the mark (every later turn of every run: all of a busy server's turns since an old run's mark)
    or positions on the run alone (every turn of the run); SQLite ranges `run_id = X AND id > mark`."""
    if connection.vendor != "postgresql":
        return AgentTurn.objects.filter(run=run, id__gt=mark)
    table = connection.ops.quote_name(AgentTurn._meta.db_table)
    key = f'({table}."run_id", {table}."id")'
    past = f"{key} > (%s, %s) AND {key} <= (%s, %s)"
    return AgentTurn.objects.filter(RawSQL(past, (run.pk, mark, run.pk, 2**63 - 1), BooleanField()))


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


def _score_rows(run: Run, maximize: bool):
    """(scores to plot as (ts, score, pk, standing), the best-so-far records, how many scores) of the run,
    in one query: every score of a run with few, else every k-th, its last and every record, chosen in
    SQL over the (run, ts, score) index — the records from all of them, so the frontier is exact however
    many there are. Every score is plotted, but only those that count in the run's figures (`RUN_RULE`:
    the rule its best card reads) make a record; `standing` says why one does not ("" when it counts).

    k is a power of two, so the scores picked stay picked as scores arrive (until k doubles): a live
    page's chart then gets the new scores as a patch that appends, not a reshuffled series."""
    subs = Submission.objects.filter(run=run).order_by()
    fields = ("ts", "score", "pk", "status", "excluded_at")
    if run.score_count <= MAX_SCORE_POINTS:
        rows = [
            (ts, value, pk, standing(status, excluded is not None, **RUN_RULE))
            for ts, value, pk, status, excluded in subs.order_by("ts", "id").values_list(*fields)
        ]
        frontier, best = [], None
        for ts, value, _, why in rows:
            if not why and (best is None or (value > best if maximize else value < best)):
                best = value
                frontier.append((ts, value))
        return rows, frontier, len(rows)
    order = [F("ts").asc(), F("id").asc()]
    running = Max if maximize else Min
    counts = counted_q(**RUN_RULE)
    stride = 1 << math.ceil(math.log2(run.score_count / MAX_SCORE_POINTS))  # ≥ 2: count/k ≤ MAX_SCORE_POINTS
    better = Q(score__gt=F("before")) if maximize else Q(score__lt=F("before"))
    improves = counts & (Q(before__isnull=True) | better)
    rows = list(
        subs.annotate(
            rn=Window(RowNumber(), order_by=order),
            # The best so far of the scores that count (NULL until one does).
            before=Window(
                running(Case(When(counts, then=F("score")), output_field=FloatField())),
                order_by=order,
                frame=RowRange(start=None, end=-1),
            ),
        )
        .annotate(phase=ExpressionWrapper((F("rn") - 1) % stride, IntegerField()))
        .filter(Q(phase=0) | Q(rn=run.score_count) | improves)
        .annotate(
            record=Case(When(improves, then=Value(True)), default=Value(False), output_field=BooleanField())
        )
        .order_by("ts", "id")
        .values_list(*fields, "record")
    )
    frontier = [(ts, value) for ts, value, _, _, _, record in rows if record]
    return (
        [
            (ts, value, pk, standing(status, excluded is not None, **RUN_RULE))
            for ts, value, pk, status, excluded, _ in rows
        ],
        frontier,
        run.score_count,
    )


def score_side(run: Run, maximize: bool) -> ScoreSide:
    scores_all, frontier, total = _score_rows(run, maximize)
    scores = [(ts.timestamp(), v, ts, pk, why) for ts, v, pk, why in scores_all]
    if len(scores) > MAX_SCORE_POINTS + MAX_SCORE_POINTS // 2:  # records by the hundred: thin them too
        scores = lttb(scores, MAX_SCORE_POINTS)
    return ScoreSide(
        ends=[s[0] for s in scores_all[:1] + scores_all[-1:]],
        scores=scores,
        turns_before=_turns_before([pk for _, _, _, pk, _ in scores], run),
        frontier=frontier,
        total=total,
    )


def kept_score_side(run: Run, hwm: int, count: int, maximize: bool, version: str | None) -> ScoreSide:
    """The score side kept under `version` (of the run's scores) while no turn arrived at or before its last
    score (the turn before each score would move): a new turn costs one indexed count, not the scores'
    queries (one of them a subquery per plotted score)."""
    key = cachekeys.timeline_scores(run.pk, f"{version}:{int(maximize)}") if version else None
    kept = softcache.get(key) if key else None
    if isinstance(kept, ScoreSide) and (kept.hwm, kept.turns) != (hwm, count) and kept.ends:
        since = turns_past(run, kept.hwm).aggregate(
            n=Count("id"), early=Count("id", filter=Q(ts__lte=kept.ends[-1]))
        )
        if since["n"] != count - kept.turns or since["early"]:
            kept = None  # a turn deleted, committed out of id order, or back-dated before a score
    if not isinstance(kept, ScoreSide):
        kept = score_side(run, maximize)
    elif (kept.hwm, kept.turns) == (hwm, count):
        return kept
    kept.hwm, kept.turns = hwm, count
    if key:
        softcache.set(key, kept, KEPT_SECONDS)  # down: read again next time
    return kept
