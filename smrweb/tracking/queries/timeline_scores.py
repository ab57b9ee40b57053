"""The score side of a run's timeline (the points plotted, why each does not count, the turn before each
score, the best-so-far frontier), kept in the cache under the version of the run's scores: a live run's
page reads it again only when a score changes or a turn lands at or before its last score. With the
turns past a mark (`turns_past`), which the turn aggregates in `queries.timeline` read too."""

from __future__ import annotations

import dataclasses
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

from smrweb.core import cachekeys, localcache, softcache
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
    # What `extended` needs to add the scores that arrived since (None: read again instead): every score
    # picked before thinning as (ts, value, pk, standing, stays), `stays` when it is picked for its place
    # or as a record (not only as the last); the stride; the highest id and `updated` of the scores read.
    picked: list[tuple] | None = None
    stride: int = 1
    last_pk: int = 0
    updated: object = None
    version: str = ""  # of the run's scores it shows (`kept_score_side`)


def turns_past(run_id: int, mark: int):
    """The run's turns with an id above `mark`: one exact range of the (run, id) index. PostgreSQL gets
    it as a row-value range, since with `run_id = X AND id > mark` its planner walks the primary key
    from the mark (every later turn of every run: all of a busy server's turns since an old run's mark)
    or positions on the run alone (every turn of the run); SQLite ranges `run_id = X AND id > mark`."""
    if connection.vendor != "postgresql":
        return AgentTurn.objects.filter(run_id=run_id, id__gt=mark)
    table = connection.ops.quote_name(AgentTurn._meta.db_table)
    key = f'({table}."run_id", {table}."id")'
    past = f"{key} > (%s, %s) AND {key} <= (%s, %s)"
    return AgentTurn.objects.filter(RawSQL(past, (run_id, mark, run_id, 2**63 - 1), BooleanField()))


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
    """(scores to plot as (ts, score, pk, standing, stays), the best-so-far records, how many scores, the
    stride, the highest id and `updated` of them all) of the run,
    in one query: every score of a run with few, else every k-th, its last and every record, chosen in
    SQL over the (run, ts, score) index — the records from all of them, so the frontier is exact however
    many there are. Every score is plotted, but only those that count in the run's figures (`RUN_RULE`:
    the rule its best card reads) make a record; `standing` says why one does not ("" when it counts).

    k is a power of two, so the scores picked stay picked as scores arrive (until k doubles): a live
    page's chart then gets the new scores as a patch that appends, not a reshuffled series."""
    subs = Submission.objects.filter(run=run).order_by()
    fields = ("ts", "score", "pk", "status", "excluded_at")
    if run.score_count <= MAX_SCORE_POINTS:
        read = list(subs.order_by("ts", "id").values_list(*fields, "updated"))
        rows = [
            (ts, value, pk, standing(status, excluded is not None, **RUN_RULE))
            for ts, value, pk, status, excluded, _ in read
        ]
        frontier, best = [], None
        for ts, value, _, why in rows:
            if not why and (best is None or (value > best if maximize else value < best)):
                best = value
                frontier.append((ts, value))
        marks = (max((r[2] for r in read), default=0), max((r[5] for r in read), default=None))
        return [(*row, True) for row in rows], frontier, len(rows), 1, marks
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
        .annotate(
            phase=ExpressionWrapper((F("rn") - 1) % stride, IntegerField()),
            # The highest id and `updated` of all of them (`extended` adds what is past these).
            last_pk=Window(Max("id")),
            last_updated=Window(Max("updated")),
        )
        .filter(Q(phase=0) | Q(rn=run.score_count) | improves)
        .annotate(
            record=Case(When(improves, then=Value(True)), default=Value(False), output_field=BooleanField())
        )
        .order_by("ts", "id")
        .values_list(*fields, "record", "phase", "last_pk", "last_updated")
    )
    frontier = [(ts, value) for ts, value, _, _, _, record, *_ in rows if record]
    return (
        [
            (ts, value, pk, standing(status, excluded is not None, **RUN_RULE), record or phase == 0)
            for ts, value, pk, status, excluded, record, phase, *_ in rows
        ],
        frontier,
        run.score_count,
        stride,
        tuple(rows[0][-2:]) if rows else (0, None),
    )


THIN_ABOVE = MAX_SCORE_POINTS + MAX_SCORE_POINTS // 2  # records by the hundred: thinned too


def score_side(run: Run, maximize: bool) -> ScoreSide:
    picked, frontier, total, stride, (last_pk, updated) = _score_rows(run, maximize)
    scores = [(ts.timestamp(), v, ts, pk, why) for ts, v, pk, why, _ in picked]
    thinned = len(scores) > THIN_ABOVE
    if thinned:
        scores = lttb(scores, MAX_SCORE_POINTS)
    return ScoreSide(
        ends=[s[0] for s in picked[:1] + picked[-1:]],
        scores=scores,
        turns_before=_turns_before([pk for _, _, _, pk, _ in scores], run),
        frontier=frontier,
        total=total,
        picked=None if thinned else picked,
        stride=stride,
        last_pk=last_pk,
        updated=updated,
    )


def scores_since(marks: dict[int, tuple[int, object]]):
    """The scores of each run `marks` names (run pk → the highest id and the latest `updated` of its scores
    read before) added or changed since they were read, in (run, ts, id) order: one query for all the runs,
    by the (run, id) index. What a kept score side is extended by (`only_added` says when it can be)."""
    since = Q(pk__in=[])
    for pk, (last_pk, updated) in marks.items():
        past = Q(id__gt=last_pk) if updated is None else Q(id__gt=last_pk) | Q(updated__gt=updated)
        since |= Q(run_id=pk) & past
    return Submission.objects.filter(since).order_by("run_id", "ts", "id")


def only_added(rows: list[tuple[int, object]], total: int, count: int, last_pk: int, last_ts) -> bool:
    """Whether a run's scores since its marks (`scores_since`, as (id, time)) only add to the `total` read
    before, so that a kept score side may be extended rather than read again: none changed (an id at or
    below the highest read), none earlier than the last score read (`last_ts`: a late score renumbers the
    rows after it), and together the run's `count` (none deleted, none missed)."""
    return total + len(rows) == count and not any(pk <= last_pk or ts < last_ts for pk, ts in rows)


def extended(side: ScoreSide, run: Run, maximize: bool) -> ScoreSide | None:
    """`side` with the scores that arrived since it was read added as `score_side` would pick them (one
    query, and one for the new points' turns before), or None when only reading them all will do: a score
    changed or deleted, one earlier than the last, the stride doubled, records to thin. The turns side is
    the caller's (`kept_score_side` checks it against `side` first)."""
    if side.picked is None or not side.ends:
        return None
    rows = list(
        scores_since({run.pk: (side.last_pk, side.updated)}).values_list(
            "ts", "score", "pk", "status", "excluded_at", "updated"
        )
    )
    total = side.total + len(rows)
    few = total <= MAX_SCORE_POINTS
    stride = 1 if few else 1 << math.ceil(math.log2(total / MAX_SCORE_POINTS))
    if not only_added(
        [(pk, ts) for ts, _, pk, *_ in rows], side.total, run.score_count, side.last_pk, side.ends[-1]
    ) or (not few and (side.total <= MAX_SCORE_POINTS or stride != side.stride)):
        return None
    picked, frontier = list(side.picked), list(side.frontier)
    best = frontier[-1][1] if frontier else None
    if rows and not picked[-1][4]:  # it was picked as the last score only
        picked.pop()
    for rn, (ts, value, pk, status, excluded, _) in enumerate(rows, start=side.total + 1):
        why = standing(status, excluded is not None, **RUN_RULE)
        record = not why and (best is None or (value > best if maximize else value < best))
        if record:
            best = value
            frontier.append((ts, value))
        stays = few or record or (rn - 1) % stride == 0
        if stays or rn == total:
            picked.append((ts, value, pk, why, stays))
    if len(picked) > THIN_ABOVE:
        return None
    known = dict(zip((pk for _, _, _, pk, _ in side.scores), side.turns_before, strict=True))
    new = [pk for _, _, pk, _, _ in picked if pk not in known]
    known.update(zip(new, _turns_before(new, run), strict=True))
    return ScoreSide(
        ends=[picked[0][0], picked[-1][0]],
        scores=[(ts.timestamp(), v, ts, pk, why) for ts, v, pk, why, _ in picked],
        turns_before=[known[pk] for _, _, pk, _, _ in picked],
        frontier=frontier,
        total=total,
        hwm=side.hwm,
        turns=side.turns,
        picked=picked,
        stride=stride,
        last_pk=max([side.last_pk, *(pk for _, _, pk, *_ in rows)]),
        updated=max([side.updated, *(u for *_, u in rows)]),
    )


def kept_score_side(
    run: Run, hwm: int, count: int, maximize: bool, version: str | None, *, recent=None
) -> ScoreSide:
    """The score side kept for the run with the `version` of its scores it was read at, while no turn arrived
    at or before its last score (the turn before each score would move): a new turn costs one indexed count,
    not the scores' queries (one of them a subquery per plotted score), or none when the turn aggregates
    were just advanced from where it was kept (`recent`: turn_memo.Recent, the turns they added); a new
    score after the last is added to it (`extended`). One cache entry per run, read and written once."""
    key = cachekeys.timeline_scores(run.pk, str(int(maximize))) if version else None
    # This process's copy first (a live page's poll after a turn does not unpickle and write back a long
    # run's scores); written to the shared cache when the scores moved, not when only turns came.
    local = ("timeline-scores", run.pk, int(maximize))
    kept = (localcache.get(local) or softcache.get(key)) if key else None
    kept = kept if isinstance(kept, ScoreSide) else None
    grown = kept is not None and kept.version != version  # scores came (or changed) since it was kept
    if kept is not None and (kept.hwm, kept.turns) != (hwm, count) and kept.ends:
        if recent is not None and (recent.hwm, recent.count) == (kept.hwm, kept.turns):
            since = {
                "n": len(recent.rows),
                "early": sum(1 for _, ts, *_ in recent.rows if ts <= kept.ends[-1]),
            }
        else:
            since = turns_past(run.pk, kept.hwm).aggregate(
                n=Count("id"), early=Count("id", filter=Q(ts__lte=kept.ends[-1]))
            )
        if since["n"] != count - kept.turns or since["early"]:
            kept = None  # a turn deleted, committed out of id order, or back-dated before a score
    if kept is not None and grown:
        kept = extended(kept, run, maximize)
    if kept is None:
        kept, grown = score_side(run, maximize), True
    elif (kept.hwm, kept.turns) == (hwm, count) and not grown:
        return kept
    else:
        kept = dataclasses.replace(kept)  # the kept one may be another thread's: a copy is advanced
    kept.hwm, kept.turns, kept.version = hwm, count, version or ""
    if key:
        localcache.put(local, kept)
        if grown:
            softcache.set(key, kept, KEPT_SECONDS)  # down: read again next time
    return kept
