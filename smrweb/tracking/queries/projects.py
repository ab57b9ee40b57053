"""Reads of a project: summaries, what counts on its leaderboard, its scores over time, regressions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db.models import (
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Min,
    Q,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.functions import RowNumber

from smrweb.core import cachekeys, numbers
from smrweb.tracking.models import (
    VERIFIED_STATUSES,
    Artifact,
    ArtifactBlob,
    Project,
    Rollback,
    RollbackStatus,
    Run,
    Submission,
    counted_q,
)
from smrweb.tracking.queries.figures import pending_figures, read_figures
from smrweb.tracking.queries.kept import kept
from smrweb.tracking.queries.runs import ScorePoint

SPARK_SCORES = 60  # the overview's sparkline: each project's newest scores, every run together


@dataclass(frozen=True)
class ResultsGap:
    """A project's runs whose results could not all be read from the source (`Run.results_complete`):
    its best and leaderboard then rank only what was read. `results_missing` is None when some run's
    source does not say how many it holds."""

    runs: int = 0
    missing: int = 0
    unknown: int = 0  # runs whose number of unread results is not known

    @property
    def results_complete(self) -> bool:
        return not self.runs

    @property
    def results_missing(self) -> int | None:
        return None if self.unknown else self.missing

    @property
    def at_least(self) -> int | None:
        """The runs that say how many of their results are missing, when others do not: a lower bound."""
        return self.missing if self.unknown and self.missing else None


def _incomplete(via: str = "runs__") -> Q:
    return Q(**{f"{via}results_complete": False, f"{via}excluded_at__isnull": True})


def results_gap(project: Project, counts: dict | None = None) -> ResultsGap:
    """The project's `ResultsGap`: of its `run_condition_counts` (read when not given)."""
    return _gap(counts if counts is not None else run_condition_counts(project))


def _gap_figures(via: str = "runs__") -> dict:
    """The gap's figures as aggregates, over a project's runs (`via` "runs__") or over runs themselves."""
    incomplete = _incomplete(via)
    return {
        "gap_runs": Count(f"{via}id" if via else "id", filter=incomplete),
        "gap_missing": Sum(f"{via}results_missing", filter=incomplete),
        "gap_unknown": Count(
            f"{via}id" if via else "id", filter=incomplete & Q(**{f"{via}results_missing__isnull": True})
        ),
    }


def _gap(row: dict) -> ResultsGap:
    return ResultsGap(row.get("gap_runs") or 0, row.get("gap_missing") or 0, row.get("gap_unknown") or 0)


@dataclass
class ProjectSummary:
    project: Project
    best_score: float | None  # of the submissions that count (verified ones unless `unverified`)
    best_submission_id: int | None
    unverified_best: float | None  # the best not yet verified, when it beats the shown best (or none is)
    unverified: int  # candidates and verifying ones that count once verified
    waiting_review: int  # waiting for someone: to verify, to finish verifying, to approve
    active: int
    stalled: int
    failed: int
    abandoned: int  # closed by a reviewer after the harness went silent
    over_budget: int
    runs: int
    spend_usd: Decimal  # each run's `Run.spend_usd` summed: billed where the source bills, else turn cost
    spend_today_usd: Decimal  # the cost of today's turns (sources bill per run, not per day)
    last_activity: datetime | None
    history: list[ScorePoint]  # the newest SPARK_SCORES scores of every run, each marked by the same rule
    spend_turns_usd: Decimal = Decimal(0)  # the turns' own cost, summed
    billed_runs: int = 0  # runs whose source states a billed total
    results_gap: ResultsGap = ResultsGap()  # runs whose results the source could not all give

    @property
    def spend_basis(self) -> str:
        """What `spend_usd` is: "billed", "turn cost", or "billed and turn cost" when only some runs'
        sources bill (the runs table's Spend column reads the same rule, run by run)."""
        if not self.billed_runs:
            return "turn cost"
        return "billed" if self.billed_runs >= self.runs else "billed and turn cost"

    @property
    def spend_differs(self) -> bool:
        """The billed total and the turns' cost disagree (by a cent or more)."""
        return bool(self.billed_runs) and abs(self.spend_usd - self.spend_turns_usd) >= Decimal("0.01")

    @property
    def spend_explained(self) -> str:
        """The hover of the overview's spend: which figure it is, and where the two figures differ."""
        if not self.billed_runs:
            total = "Total: what the runs' turns cost (no source states a billed total)."
        elif self.billed_runs >= self.runs:
            total = "Total: what the source billed for the runs, the runs table's Spend summed."
        else:
            total = (
                f"Total: what the source billed for the {self.billed_runs} of {self.runs} runs it bills, and "
                "the turns' cost of the others, the runs table's Spend summed."
            )
        gap = self.spend_usd - self.spend_turns_usd
        differ = (
            f" The turns themselves cost {numbers.usd(self.spend_turns_usd)}: the source's totals are "
            f"{numbers.usd(abs(gap))} {'more' if gap > 0 else 'less'} (meters beyond the turns, rounding)."
            if self.spend_differs
            else ""
        )
        return f"{total}{differ} Today: the cost of today's turns (UTC); sources bill per run, not per day."


PENDING_COUNTED = 1000  # beyond this many, the page says "1,000+" rather than count every one


@dataclass(frozen=True)
class Pending:
    count: int  # submissions that would count once verified (candidates, being verified), up to the cap
    best: float | None  # the best of them
    more: bool = False  # there are more than `count`

    @property
    def label(self) -> str:
        return f"{self.count:,}+" if self.more else f"{self.count:,}"


def pending_scores(project: Project, excluded: list[int] | None = None, row=None) -> Pending:
    """What is waiting to count in the project's numbers, from its kept figures (`ProjectFigures`, one
    row, read unless given): how many (shown up to PENDING_COUNTED, then "1,000+"), and the best.
    `excluded`: unused, the row leaves excluded runs out already (kept for the callers that read them)."""
    row = row or pending_figures(project)
    if not row.pending:
        return Pending(0, None)
    return Pending(min(row.pending, PENDING_COUNTED), row.pending_best, row.pending > PENDING_COUNTED)


def project_summaries(
    projects: Iterable[Project], *, unverified: bool = False, version: str | None = None
) -> list[ProjectSummary]:
    """Per project: best score that counts (and what is waiting to count), run counts by condition (over
    budget included), spend — in a fixed number of queries, whose figures are kept under `version` (the
    overview's) when given; the projects themselves are the caller's, as fresh as its read."""
    projects = list(projects)
    which = ",".join(f"{p.pk}{'+' if p.scenario.maximize else '-'}" for p in projects)  # and their direction
    key = cachekeys.kept_project_summaries(unverified, which)
    figures = kept(key, version, lambda: _summary_figures(projects, unverified))
    return [ProjectSummary(project=p, **figures[p.pk]) for p in projects]


def _summary_figures(projects: list[Project], unverified: bool) -> dict[int, dict]:
    """As the write path keeps them (`ProjectFigures`): O(projects) whatever the number of submissions or
    turns; `queries.summary_reference` computes them from scratch (the tests' reference)."""
    figures = read_figures(projects, unverified)
    for row in figures.values():
        row["results_gap"] = ResultsGap(*row["results_gap"])
    return figures


def run_condition_counts(project: Project) -> dict[str, int]:
    """How many of the project's runs are stalled, failed, abandoned and over budget, and the results gap,
    for the quick filters above its runs table: from its kept figures (`ProjectFigures`, one row, which the
    write path keeps), with the archived runs counted from the (project, archived…) index."""
    row = pending_figures(project)
    counts = {name: getattr(row, name) for name in CONDITIONS}
    # Hidden from the table unless asked for; archiving is rare and the index answers without the rows.
    counts["archived"] = Run.objects.filter(project=project, archived_at__isnull=False).count()
    return counts


CONDITIONS = ("stalled", "failed", "abandoned", "over_budget", "gap_runs", "gap_missing", "gap_unknown")


def leaderboard(project: Project):
    """Every submission of a project, best first in the scenario's direction (the API's list; each row
    says its status and whether it is excluded)."""
    order = "-score" if project.scenario.maximize else "score"
    return (
        Submission.objects.filter(project=project)
        .select_related("run__project", "artifact__blob", "experiment")
        .order_by(order, "ts", "id")
    )


def counted_leaderboard(project: Project, *, unverified: bool = False, per_run: bool = True):
    """The project page's leaderboard: the submissions that count, best first in the scenario's
    direction; by default one row per run (its best), so one prolific run cannot fill the board."""
    score = F("score").desc() if project.scenario.maximize else F("score").asc()
    rows = Submission.objects.filter(project=project).counted(unverified=unverified)
    if per_run:
        best_of_run = rows.annotate(
            rn=Window(RowNumber(), partition_by=[F("run_id")], order_by=[score, F("ts").asc(), F("id").asc()])
        ).filter(rn=1)
        rows = Submission.objects.filter(pk__in=best_of_run.values("pk"))
    return rows.select_related("run__project", "artifact__blob", "experiment").order_by(score, "ts", "id")


@dataclass
class BoardPage:
    """One page of the project page's leaderboard (a Paginator page's interface); `count`: the board's
    rows in all."""

    object_list: list
    number: int
    per_page: int
    count: int
    has_more: bool

    def __iter__(self):
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)

    def has_next(self) -> bool:
        return self.has_more

    def has_previous(self) -> bool:
        return self.number > 1

    def has_other_pages(self) -> bool:
        return self.has_next() or self.has_previous()

    def next_page_number(self) -> int:
        return self.number + 1

    def previous_page_number(self) -> int:
        return self.number - 1

    def start_index(self) -> int:
        return (self.number - 1) * self.per_page + 1 if self.object_list else 0

    def end_index(self) -> int:
        return (self.number - 1) * self.per_page + len(self.object_list)


def _page_number(value, last: int | None = None) -> int:
    try:
        number = max(1, int(value))
    except (TypeError, ValueError):
        number = 1
    return min(number, last) if last else number


def excluded_run_ids(project: Project) -> list[int]:
    """The project's runs taken out of its numbers (usually none): one indexed query, so the reads
    below filter submissions by a short list instead of joining every submission to its run."""
    return list(
        Run.objects.filter(project=project, excluded_at__isnull=False).order_by().values_list("pk", flat=True)
    )


def leaderboard_page(
    project: Project,
    *,
    unverified: bool = False,
    per_run: bool = True,
    page=1,
    per_page: int = 20,
    excluded: list[int] | None = None,
    version: str | None = None,
) -> BoardPage:
    """A page of `counted_leaderboard`, in the same order, reading what the page needs: per run, each
    run's best score (the runs' own summary column when unverified ones count; one grouped read of the
    verified submissions otherwise; kept under `version`, the page's, when given), then the best
    submission of the page's runs; every submission, a count and the page's rows, both in the order of
    one index."""
    maximize = project.scenario.maximize
    score = F("score").desc() if maximize else F("score").asc()
    order = [score, F("ts").asc(), F("id").asc()]
    if excluded is None:
        excluded = excluded_run_ids(project)
    # The rule, with the run's exclusion read as a short list of ids rather than a join to every run.
    counted = (
        Submission.objects.filter(project=project)
        .filter(counted_q(unverified=unverified, of_run=True))
        .exclude(run_id__in=excluded)
    )
    if not per_run:
        count = counted.order_by().count()  # from the (project, status, score, exclusion, run) index alone
        number = _page_number(page, max(1, -(-count // per_page)))
        start = (number - 1) * per_page
        rows = _board_rows(counted.order_by(*order)[start : start + per_page], project)
        return BoardPage(rows, number, per_page, count, start + per_page < count)

    def read_bests() -> list[tuple[int, float]]:
        if unverified:
            # A run's best_score is the best of its submissions that count with unverified ones.
            rows = Run.objects.filter(project=project, excluded_at__isnull=True, best_score__isnull=False)
            bests = list(rows.values_list("pk", "best_score"))
        else:
            best = Max("score") if maximize else Min("score")
            bests = list(
                counted.order_by().values("run_id").annotate(best=best).values_list("run_id", "best")
            )
        return sorted(bests, key=lambda rb: -rb[1] if maximize else rb[1])

    # Every run's best is what the page reads in proportion to the project: kept under its version.
    bests = kept(cachekeys.kept_board_bests(project.pk, unverified), version, read_bests)
    count = len(bests)
    number = _page_number(page, max(1, -(-count // per_page)))
    lo, hi = (number - 1) * per_page, min(number * per_page, count)
    if lo >= hi:
        return BoardPage([], number, per_page, count, False)
    # Runs tied on a score are ordered by their best submission's time (then id): for the page's runs
    # and every run tied with its first or last score, read the submissions that reached their best
    # (one query, as many rows as those runs), then order them and take the page.
    edge = {bests[lo][1], bests[hi - 1][1]}
    candidates = {pk: b for i, (pk, b) in enumerate(bests) if lo <= i < hi or b in edge}
    before = sum(1 for i, (_, b) in enumerate(bests) if i < lo and b not in edge)
    first: dict[int, tuple] = {}
    for pk, run_id, value, ts in counted.filter(
        run_id__in=candidates, score__in=set(candidates.values())
    ).values_list("pk", "run_id", "score", "ts"):
        if value == candidates[run_id]:
            first[run_id] = min(first.get(run_id, (ts, pk)), (ts, pk))
    ranked = sorted(first, key=lambda r: (-candidates[r] if maximize else candidates[r], *first[r]))
    page_pks = [first[r][1] for r in ranked[lo - before : hi - before]]
    rows = {s.pk: s for s in _board_rows(Submission.objects.filter(pk__in=page_pks), project)}
    return BoardPage([rows[pk] for pk in page_pks if pk in rows], number, per_page, count, hi < count)


BOARD_FIELDS = ("id", "project_id", "run_id", "score", "status", "artifact_id", "artifact_ref", "ts")
BOARD_RUN_FIELDS = ("run__id", "run__project_id", "run__external_id", "run__display_name")


def _board_rows(rows, project: Project) -> list[Submission]:
    """The leaderboard's rows with what the board shows: the submission's own columns, its run's names
    and its artifact (and blob), the project set from the one already read, not joined in again."""
    artifact = [f"artifact__{f.name}" for f in Artifact._meta.concrete_fields]
    blob = [f"artifact__blob__{f.name}" for f in ArtifactBlob._meta.concrete_fields]
    out = list(
        rows.select_related("run", "artifact__blob").only(
            *BOARD_FIELDS, *BOARD_RUN_FIELDS, "artifact", *artifact, *blob
        )
    )
    for s in out:
        s.project = s.run.project = project
    return out


CHART_RUNS = 12  # lines on the project chart: beyond a dozen they cannot be told apart anyway


@dataclass
class ProjectScores:
    series: dict[int, list[tuple[datetime, float]]]  # run pk -> (ts, score), downsampled, records kept
    frontier: list[tuple[datetime, float]]  # best so far of the drawn runs, one point per improvement
    total: int  # scores of the drawn runs
    start: datetime | None
    end: datetime | None
    runs: dict[int, tuple[str, str]] = field(default_factory=dict)  # drawn run pk -> (external id, name)
    matching: int = 0  # runs with scores (of those asked for), drawn or not
    # run pk -> (ts, score, why) of its drawn scores that do not count under the chart's rule (hollow)
    void: dict[int, list[tuple[datetime, float, str]]] = field(default_factory=dict)

    @property
    def every_run(self) -> bool:
        return len(self.runs) >= self.matching


@dataclass
class Regression:
    run: Run
    latest: float
    best: float  # the run's best score that counts (not invalid, rejected or excluded)
    target: Submission | None  # what "Roll back to the best" goes back to: the best verified one, else the
    #                            best not yet verified (the confirmation names its status); never invalid
    gap: float  # how much worse the latest is, in the scenario's direction (positive)
    rolled_back: Rollback | None  # a rollback asked for since the run's latest score (not failed): done

    @property
    def target_is_best(self) -> bool:
        return self.target is not None and self.target.score == self.best


def regressions(project: Project, runs: Iterable[Run] | None = None) -> list[Regression]:
    """Runs whose latest score is worse than their best by more than the project's threshold (four
    queries; only the runs that regressed are read). Off when the project sets no threshold."""
    threshold = project.regression_threshold
    if threshold is None:
        return []
    maximize = project.scenario.maximize
    if runs is None:
        # Only the runs that regressed leave the database: the gap is compared in SQL, as below.
        gap = F("best_score") - F("latest_score") if maximize else F("latest_score") - F("best_score")
        runs = (
            Run.objects.filter(project=project, score_count__gt=1)
            .alias(gap=ExpressionWrapper(gap, output_field=FloatField()))
            .filter(gap__gt=threshold)
            .select_related("project__scenario")
        )
    candidates = list(runs)
    worse = {}
    for run in candidates:
        if run.latest_score is None or run.best_score is None:
            continue
        gap = (run.best_score - run.latest_score) if maximize else (run.latest_score - run.best_score)
        if gap > threshold:
            worse[run.pk] = (run, gap)
    if not worse:
        return []
    verified_first = Case(When(status__in=VERIFIED_STATUSES, then=Value(0)), default=Value(1))
    order = [
        verified_first.asc(),
        F("score").desc() if maximize else F("score").asc(),
        F("ts").asc(),
        F("id").asc(),
    ]
    targets = {
        s.run_id: s
        for s in (
            Submission.objects.filter(run_id__in=worse)
            .counted(unverified=True)
            .annotate(rn=Window(RowNumber(), partition_by=[F("run_id")], order_by=order))
            .filter(rn=1)
            .select_related("artifact__blob")
        )
    }
    latest_at = dict(
        Submission.objects.filter(run_id__in=worse)
        .values("run_id")
        .annotate(at=Max("created"))
        .values_list("run_id", "at")
    )
    done: dict[int, Rollback] = {}
    for rollback in (
        Rollback.objects.filter(run_id__in=worse)
        .exclude(status=RollbackStatus.FAILED)
        .select_related("target_submission", "target_checkpoint")
        .order_by("created", "id")
    ):
        if latest_at.get(rollback.run_id) is None or rollback.created >= latest_at[rollback.run_id]:
            done[rollback.run_id] = rollback
    out = [
        Regression(run, run.latest_score, run.best_score, targets.get(pk), gap, done.get(pk))
        for pk, (run, gap) in worse.items()
    ]
    return sorted(out, key=lambda r: -r.gap)
