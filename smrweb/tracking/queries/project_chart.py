"""The project chart assembled from per-run pieces kept in the cache, so one new score re-reads one run.

`summary_reference.project_scores` (the reference) computes the chart from every score of the drawn runs at
once. Here each drawn run has a `RunPiece` (its span, its downsampled points and its own records), kept under
the run's own submissions marker (`markers.submission_markers`: their count, highest id and latest `updated`,
which every new score, status change, exclusion and deletion moves and a new turn does not) and the chart's
resolution (the SQL stride and the per-run share, which depend on how many scores the drawn runs hold in all).
A read looks the drawn runs up (two index reads) and their markers (one grouped index read), takes the pieces
it has and reads the others' rows (three queries for all of them, naming only them), then assembles the
figure in Python. The result is the same `ProjectScores`, point for point (tests/dashboard/
test_incremental_figures.py compares the two after random sequences of new scores, verifications and
exclusions).

The project's best so far is the merge of the runs' own records (a score that beats every earlier score
that counts of the drawn runs beats every earlier one of its own run). The merged frontier is kept as well:
when every run's records only grew at their end, and only after the last record read before, it is
extended from the new records alone; anything else (a run excluded or no longer drawn, a score found
invalid or excluded, an earlier score arriving late) rebuilds it from the pieces.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, F, Max, Min, Window
from django.db.models.functions import Mod, RowNumber

from smrweb.core import cachekeys, softcache
from smrweb.core.downsample import lttb
from smrweb.tracking.models import Project, Run, Submission, standing
from smrweb.tracking.queries.markers import NO_SUBMISSIONS, submission_markers
from smrweb.tracking.queries.projects import CHART_RUNS, ProjectScores

PIECE_SECONDS = 3600  # a piece is looked up by its run's scores marker: an old one is never asked for again


@dataclass(frozen=True)
class RunPiece:
    """What one drawn run brings to the chart, at one resolution (`stride`, `share`)."""

    n: int  # its scores, every one
    lo: datetime | None
    hi: datetime | None
    series: tuple[tuple[datetime, float], ...]  # its downsampled scores that count (the line)
    void: tuple[tuple[datetime, float, str], ...]  # its downsampled scores that do not, with why
    records: tuple[tuple[datetime, int, float], ...]  # (ts, id, score): where its own best so far improves
    digest: str  # of all the above: what the chart's version is made of


def _digest(*parts) -> str:
    return hashlib.blake2s(repr(parts).encode(), digest_size=8).hexdigest()


def _resolution(counts: list[int], max_points: int) -> tuple[int, int]:
    """(stride, share) as `project_scores` sets them from the drawn runs' score counts: every k-th row of
    each run when they hold far more than the chart shows, then each run's share of the points."""
    total = sum(counts)
    stride = total // (4 * max_points) + 1 if total > 4 * max_points else 1
    with_rows = sum(1 for n in counts if n >= stride and n > 0)  # a run shorter than the stride has no row
    return stride, max(10, max_points // max(with_rows, 1))


def _better(maximize: bool):
    return (lambda a, b: a > b) if maximize else (lambda a, b: a < b)


def _read_pieces(
    run_ids: list[int], *, stride: int, share: int, maximize: bool, unverified: bool
) -> dict[int, RunPiece]:
    """The pieces of `run_ids`, from their rows: three queries whatever their number."""
    subs = Submission.objects.filter(run_id__in=run_ids)
    span = {
        row["run_id"]: row
        for row in subs.order_by().values("run_id").annotate(n=Count("id"), lo=Min("ts"), hi=Max("ts"))
    }
    order = [F("ts").asc(), F("id").asc()]
    rows = subs
    if stride > 1:  # as `project_scores`: every stride-th score of each run, counted from its first
        rows = (
            subs.annotate(rn=Window(RowNumber(), partition_by=[F("run_id")], order_by=order))
            .annotate(keep=Mod(F("rn"), stride))
            .filter(keep=0)
        )
    by_run: dict[int, list] = defaultdict(list)
    fields = ("run_id", "ts", "score", "status", "excluded_at")
    for run_id, ts, value, status, excluded in rows.order_by("ts", "id").values_list(*fields):
        why = standing(status, excluded is not None, unverified=unverified)
        by_run[run_id].append((ts.timestamp(), value, ts, why))
    # Each run's own records among its scores that count, in time order (ties are not records).
    running = Max("score") if maximize else Min("score")
    best_so_far = (
        subs.counted(unverified=unverified)
        .annotate(best=Window(running, partition_by=[F("run_id")], order_by=order))
        .filter(**{"score__gte" if maximize else "score__lte": F("best")})
    )
    records: dict[int, list] = defaultdict(list)
    for run_id, ts, pk, value in best_so_far.order_by("ts", "id").values_list("run_id", "ts", "id", "score"):
        mine = records[run_id]
        if not mine or value != mine[-1][2]:
            mine.append((ts, pk, value))
    pieces = {}
    for run_id in run_ids:
        series, void = [], []
        for _, v, ts, why in lttb(by_run.get(run_id, []), share):
            if why:
                void.append((ts, v, why))
            else:
                series.append((ts, v))
        row = span.get(run_id, {})
        parts = (row.get("n", 0), row.get("lo"), row.get("hi"), tuple(series), tuple(void))
        parts += (tuple(records.get(run_id, [])),)
        pieces[run_id] = RunPiece(*parts, digest=_digest(*parts))
    return pieces


def _pieces(
    drawn: list[tuple], *, stride: int, share: int, maximize: bool, unverified: bool
) -> dict[int, RunPiece]:
    """The drawn runs' pieces ((pk, submissions marker) each): kept ones as they are, the others read."""
    keys = {
        pk: cachekeys.project_chart_piece(
            pk, _digest(marker), unverified=unverified, maximize=maximize, stride=stride, share=share
        )
        for pk, marker in drawn
    }
    hits = softcache.get_many(list(keys.values()))
    pieces = {pk: hits[key] for pk, key in keys.items() if isinstance(hits.get(key), RunPiece)}
    missing = [pk for pk in keys if pk not in pieces]
    if missing:
        read = _read_pieces(missing, stride=stride, share=share, maximize=maximize, unverified=unverified)
        softcache.set_many({keys[pk]: piece for pk, piece in read.items()}, PIECE_SECONDS)
        pieces.update(read)
    return pieces


def merged_frontier(records: dict[int, tuple], maximize: bool) -> list[tuple[datetime, int, float, int]]:
    """The best so far of several runs from their own records: (ts, id, score, run) at each improvement."""
    better = _better(maximize)
    merged = sorted((ts, pk, value, run_id) for run_id, rs in records.items() for ts, pk, value in rs)
    out: list[tuple] = []
    for point in merged:
        if not out or better(point[2], out[-1][2]):
            out.append(point)
    return out


@dataclass(frozen=True)
class KeptFrontier:
    """The merged frontier and what it was merged from (each run's records), to extend it next time."""

    records: dict[int, tuple]
    frontier: tuple


def _frontier(project: Project, pieces: dict[int, RunPiece], *, unverified: bool, maximize: bool) -> list:
    """The drawn runs' best so far: extended from the kept one when every run's records only grew, after
    everything merged before; merged from every run's records otherwise."""
    records = {pk: piece.records for pk, piece in pieces.items()}
    key = cachekeys.project_chart_frontier(project.pk, unverified, maximize, _digest(sorted(records)))
    kept = softcache.get(key)
    frontier = None
    if isinstance(kept, KeptFrontier) and kept.records.keys() == records.keys():
        if kept.records == records:
            return list(kept.frontier)
        grown = all(records[pk][: len(old)] == old for pk, old in kept.records.items())
        last = max((r[-1][:2] for r in kept.records.values() if r), default=None)
        new = {pk: records[pk][len(old) :] for pk, old in kept.records.items()}
        if grown and (last is None or all(rs[0][:2] > last for rs in new.values() if rs)):
            frontier = list(kept.frontier)
            better = _better(maximize)
            for point in merged_frontier(new, maximize):
                if not frontier or better(point[2], frontier[-1][2]):
                    frontier.append(point)
    if frontier is None:
        frontier = merged_frontier(records, maximize)
    softcache.set(key, KeptFrontier(records, tuple(frontier)), PIECE_SECONDS)
    return frontier


@dataclass
class KeptScores:
    """`ProjectScores` and the version of what it draws (the drawn runs' names and pieces, how many runs
    match): the chart's poll answers 204 while it holds."""

    scores: ProjectScores
    version: str


def kept_project_scores(
    project: Project,
    *,
    max_points: int = 1500,
    unverified: bool = False,
    runs=None,
    lines: int = CHART_RUNS,
) -> KeptScores:
    """`project_scores`, assembled from the drawn runs' kept pieces (see the module's docstring)."""
    maximize = project.scenario.maximize
    candidates = (runs if runs is not None else Run.objects.filter(project=project)).filter(
        excluded_at__isnull=True, score_count__gt=0
    )
    best = F("best_score")
    best_first = best.desc(nulls_last=True) if maximize else best.asc(nulls_last=True)
    drawn = list(
        candidates.order_by(best_first, F("id").asc()).values_list(
            "pk", "external_id", "display_name", "score_count"
        )[:lines]
    )
    if not drawn:
        return KeptScores(ProjectScores({}, [], 0, None, None), _digest("empty"))
    matching = candidates.order_by().count()  # from the (project, exclusion, best) index
    names = {pk: (external_id, display_name or external_id) for pk, external_id, display_name, *_ in drawn}
    # Each run's submissions marker, not its `updated`: a new turn moves the run, not what the chart draws.
    scores_of = submission_markers([pk for pk, *_ in drawn])
    markers = [(pk, scores_of.get(pk, NO_SUBMISSIONS)) for pk, *_ in drawn]
    # The resolution from the runs' score counts (summary columns), checked against the pieces' own
    # counts: should a count be stale, the pieces are read again at the resolution they give.
    stride, share = _resolution([n for *_, n in drawn], max_points)
    pieces = _pieces(markers, stride=stride, share=share, maximize=maximize, unverified=unverified)
    actual = _resolution([pieces[pk].n for pk in names], max_points)
    if actual != (stride, share):
        stride, share = actual
        pieces = _pieces(markers, stride=stride, share=share, maximize=maximize, unverified=unverified)
    total = sum(p.n for p in pieces.values())
    version = _digest(maximize, unverified, matching, [(pk, names[pk], pieces[pk].digest) for pk in names])
    if not total:
        return KeptScores(ProjectScores({}, [], 0, None, None, runs=names, matching=matching), version)
    series = {pk: list(pieces[pk].series) for pk in names}
    void = {pk: list(pieces[pk].void) for pk in names}
    frontier = []
    for ts, _, value, run_id in _frontier(project, pieces, unverified=unverified, maximize=maximize):
        frontier.append((ts, value))
        if (ts, value) not in series[run_id]:  # a record thinned out of its run's line comes back
            series[run_id] = sorted([*series[run_id], (ts, value)])
    scores = ProjectScores(
        {pk: series[pk] for pk in names if series[pk] or void[pk]},
        frontier,
        total,
        min(p.lo for p in pieces.values() if p.n),
        max(p.hi for p in pieces.values() if p.n),
        runs=names,
        matching=matching,
        void={pk: void[pk] for pk in names if void[pk]},
    )
    return KeptScores(scores, version)
