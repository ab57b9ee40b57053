"""Project knowledge, read side: the carry-forward block.

The papercut this answers: "carry the last 3 failed approaches forward" had no home (project knowledge
vs notes vs org knowledge), and arena feedback was pasted back into free text by hand. Here a project
has typed `KnowledgeEntry` rows (note / failed_approach / arena_delta; written by
`services.knowledge` and `services.handoff.record_arena_result`) and `carry_forward` computes, from
those entries *and* the submission history, the block a person pastes into the next run's kickoff
message."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Max, Min, OuterRef, Q, Subquery, Window
from django.db.models.expressions import RowRange
from django.db.models.functions import Coalesce

from smrweb.core import markdown, numbers
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    NEVER_COUNTED,
    VERIFIED_STATUSES,
    ArenaResult,
    Comment,
    KnowledgeEntry,
    KnowledgeKind,
    Project,
    Run,
    RunNote,
    RunState,
    RuntimeMessage,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
)
from smrweb.tracking.services.artifacts import SHA256_RE

N_DEFAULT, N_MIN, N_MAX = 3, 1, 20

# How close after an ArenaResult its own arena_delta entry (written in the same transaction) lands.
OWN_ENTRY_WINDOW = timedelta(seconds=5)


BAD = NEVER_COUNTED  # invalid, rejected or refused by the arena: failed approaches


def parse_n(raw: Any, default: int = N_DEFAULT) -> int:
    """`?n=` as an int in [1, 20]; raises InvalidInput("n", …) otherwise (None/"" means the default)."""
    if raw is None or raw == "":
        return default
    try:
        n = int(str(raw).strip())
    except ValueError:
        raise InvalidInput("n", f"Expected an integer between {N_MIN} and {N_MAX}.") from None
    if not N_MIN <= n <= N_MAX:
        raise InvalidInput("n", f"Must be between {N_MIN} and {N_MAX}.")
    return n


@dataclass(frozen=True)
class ArenaFeedback:
    source: str  # "result" (an ArenaResult) or "entry" (an arena_delta entry written by hand)
    at: datetime
    arena: str = ""
    rank: int | None = None
    arena_score: float | None = None
    delta: float | None = None  # against the previous recorded result
    delta_best: float | None = None  # against the best recorded result before it
    note: str = ""  # the result's note, or the entry's title and body
    submission_id: int | None = None
    submission_score: float | None = None
    run: str | None = None


@dataclass(frozen=True)
class Best:
    submission_id: int
    score: float
    run: str
    status: str
    ts: datetime
    approach: str  # the experiment's title, hypothesis or id, else ""
    harness_id: str
    artifact_path: str
    artifact_sha256: str  # a 12-character prefix, "" when unknown
    commit: str
    arena: ArenaFeedback | None  # this submission's latest arena result


@dataclass
class FailedApproach:
    # invalid, rejected, regressed, failed_approach, arena_regressed, run_failed, run_abandoned (one item,
    # many sources)
    reasons: list[str]
    title: str
    score: float | None
    run: str | None
    submission_id: int | None
    entry_id: int | None
    why: str
    at: datetime
    _whys: list[str] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class Approach:
    """A run note or a comment tagged `#approach`: what the team says was tried."""

    source: str  # "note" or "comment"
    run: str  # the run's external id
    run_name: str  # its display name, "" without one
    submission_id: int | None  # a comment on a submission
    author: str
    at: datetime  # last written
    text: str  # the Markdown source, as written


@dataclass(frozen=True)
class CarryForward:
    project: str
    metric: str
    maximize: bool
    n: int
    best: Best | None
    failed: list[FailedApproach]
    arena: ArenaFeedback | None
    approaches: list[Approach] = field(default_factory=list)

    @property
    def text(self) -> str:
        return render_carry_forward(self)


def _approach(sub: Submission) -> str:
    """What the agent was trying: the experiment's title or hypothesis, else the run's branch, else its
    kickoff message (annotated by `_with_approach`), else ""."""
    exp = sub.experiment
    if exp:
        return exp.title or exp.hypothesis[:120] or f"experiment {exp.external_id}"
    return _run_approach(sub.run, getattr(sub, "kickoff", None))


def _run_approach(run, kickoff: str | None) -> str:
    if run.git_branch:
        return f"branch {run.git_branch}" + (f" @ {run.git_commit[:10]}" if run.git_commit else "")
    kickoff = _oneline(kickoff or "", 120)
    return f"kickoff: {kickoff}" if kickoff else ""


def _with_approach(rows, run_field: str = "run"):
    """Annotate each row with its run's kickoff message (the run's first runtime message), one subquery."""
    first = RuntimeMessage.objects.filter(run=OuterRef(run_field)).order_by("seq", "id").values("body")[:1]
    return rows.annotate(kickoff=Subquery(first))


def _counted(project: Project):
    """The project's submissions not excluded by an admin (a run's or a score's exclusion)."""
    return Submission.objects.filter(project=project, excluded_at__isnull=True, run__excluded_at__isnull=True)


def _name(sub: Submission) -> str:
    """What to call a submission in a list: its experiment, else its number and artifact."""
    ref = sub.artifact_ref
    if re.fullmatch(r"[0-9a-f]{64}", ref or ""):
        ref = f"sha256 {ref[:12]}"  # a digest names the bytes; twelve characters tell them apart
    return _approach(sub) or f"submission #{sub.pk}" + (f" ({ref})" if ref else "")


def _result_feedback(result: ArenaResult) -> ArenaFeedback:
    sub = result.submission
    return ArenaFeedback(
        "result",
        result.created,
        result.arena,
        result.rank,
        result.arena_score,
        result.delta,
        result.delta_best,
        result.note,
        sub.pk,
        sub.score,
        sub.run.external_id,
    )


def _entry_feedback(entry: KnowledgeEntry) -> ArenaFeedback:
    sub = entry.submission
    return ArenaFeedback(
        "entry",
        entry.created,
        note="\n".join(filter(None, [entry.title, entry.body])),
        submission_id=sub.pk if sub else None,
        submission_score=sub.score if sub else None,
        run=sub.run.external_id if sub else None,
    )


def _latest_arena(project: Project) -> ArenaFeedback | None:
    """The newest ArenaResult, unless a newer arena_delta entry was written by hand (an entry on the
    same submission within seconds of the result is the result's own, written by the lifecycle)."""
    result = (
        ArenaResult.objects.filter(submission__project=project)
        .select_related("submission__run")
        .order_by("-created", "-id")
        .first()
    )
    entry = (
        KnowledgeEntry.objects.filter(project=project, kind=KnowledgeKind.ARENA_DELTA)
        .select_related("submission__run")
        .order_by("-created", "-id")
        .first()
    )
    if entry is not None and (
        result is None
        or (
            entry.created > result.created
            and not (
                entry.submission_id == result.submission_id
                and entry.created - result.created < OWN_ENTRY_WINDOW
            )
        )
    ):
        return _entry_feedback(entry)
    return _result_feedback(result) if result else None


def _best(project: Project) -> Best | None:
    """The best verified submission; when none passed verification yet, the best unverified one (its
    status says so). Never an invalid, rejected or excluded one."""
    order = "-score" if project.scenario.maximize else "score"
    rows = _with_approach(
        Submission.objects.filter(project=project).select_related("run", "artifact__blob", "experiment")
    )
    sub = (
        rows.counted().order_by(order, "ts", "id").first()
        or rows.counted(unverified=True).order_by(order, "ts", "id").first()
    )
    if sub is None:
        return None
    result = (
        ArenaResult.objects.filter(submission=sub)
        .select_related("submission__run")
        .order_by("-created", "-id")
        .first()
    )
    ref = sub.artifact_ref
    sha = sub.artifact.blob.sha256 if sub.artifact else (ref if SHA256_RE.match(ref) else "")
    path = sub.artifact.path if sub.artifact else ("" if sha else ref)
    return Best(
        sub.pk,
        sub.score,
        sub.run.external_id,
        sub.status,
        sub.ts,
        _approach(sub),
        sub.harness_id,
        path,
        sha[:12],
        sub.commit,
        _result_feedback(result) if result else None,
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _failed(project: Project, n: int) -> list[FailedApproach]:
    """Five sources, each limited to its newest 4n rows (so the query count is fixed and dedupe rarely
    starves the list), merged per submission (or per entry without one), newest first, cut to n."""
    limit, maximize = 4 * n, project.scenario.maximize
    items: dict[tuple[str, int], FailedApproach] = {}

    def add(key, reason, at, why, *, sub=None, title="", entry_id=None):
        item = items.get(key)
        if item is None:
            item = items[key] = FailedApproach(
                [],
                title or _name(sub),
                sub.score if sub else None,
                sub.run.external_id if sub else None,
                sub.pk if sub else None,
                entry_id,
                "",
                at,
            )
        elif title and entry_id and item.entry_id is None:  # a person's name for the approach wins
            item.title, item.entry_id = title, entry_id
        if reason not in item.reasons:
            item.reasons.append(reason)
        if why and why not in item._whys:
            item._whys.append(why)
        item.at = max(item.at, at)

    # (a) invalid, rejected or refused submissions: why = the last transition into that status (reason, who).
    last = SubmissionTransition.objects.filter(
        submission=OuterRef("pk"), to_status=OuterRef("status")
    ).order_by("-created", "-id")
    bad = (
        _with_approach(_counted(project).filter(status__in=BAD))
        .select_related("run", "experiment")
        .annotate(
            reason=Subquery(last.values("reason")[:1]),
            by_label=Subquery(last.values("by_label")[:1]),
            failed_at=Coalesce(Subquery(last.values("created")[:1]), F("updated")),
        )
        .order_by("-failed_at", "-id")[:limit]
    )
    for sub in bad:
        reason = (sub.reason or "").strip()
        if sub.status == SubmissionStatus.REJECTED:
            comment = f": {reason}" if reason and reason != "rejected" else ""
            why = f"rejected by {sub.by_label or 'a reviewer'}{comment}"
        elif sub.status == SubmissionStatus.REFUSED:
            arena = project.scenario.arena_name or "the arena"
            why = f"refused by {arena} (recorded by {sub.by_label or 'a reviewer'}): {reason}"
        else:
            outcome = (sub.verification_outcome or "failed").replace("_", " ")
            code = f" (exit {sub.verification_exit_code})" if sub.verification_exit_code is not None else ""
            tail = _last_line(sub.verification_output)
            why = (
                f"verification {outcome}{code}"
                + (f": {reason}" if reason else "")
                + (f" — {tail}" if tail and tail != reason else "")
            )
        add(("s", sub.pk), sub.status, sub.failed_at, why, sub=sub)

    # (b) score regressions, only when the project sets a threshold: worse than the best valid score of
    # the same run before it by more than `regression_threshold` — a new run's first scores are where
    # it starts, not a regression. Without a threshold nearly every hill-climbing step is "worse than
    # the best", which would drown the explicit failures.
    if project.regression_threshold is not None:
        prior = Window(
            Max("score") if maximize else Min("score"),
            partition_by=[F("run_id")],
            order_by=[F("ts").asc(), F("id").asc()],
            frame=RowRange(start=None, end=-1),
        )
        worse = F("prior_best") - F("score") if maximize else F("score") - F("prior_best")
        regressed = (
            # The rule a run's best reads (`RUN_RULE`, here of runs not excluded): its best so far then.
            _with_approach(Submission.objects.filter(project=project).counted(unverified=True))
            .select_related("run", "experiment")
            .annotate(prior_best=prior)
            .annotate(worse_by=worse)
            .filter(worse_by__gt=max(project.regression_threshold, 0))
            .order_by("-ts", "-id")[:limit]
        )
        for sub in regressed:
            add(
                ("s", sub.pk),
                "regressed",
                sub.ts,
                f"{numbers.number(sub.worse_by)} worse than its run's best so far then "
                f"({numbers.number(sub.prior_best)})",
                sub=sub,
            )

    # (c) failed approaches written by hand: why = the body (else the title says it all).
    entries = (
        KnowledgeEntry.objects.filter(project=project, kind=KnowledgeKind.FAILED_APPROACH)
        .select_related("submission__run", "submission__experiment")
        .order_by("-created", "-id")[:limit]
    )
    for entry in entries:
        key = ("s", entry.submission_id) if entry.submission_id else ("e", entry.pk)
        add(
            key,
            "failed_approach",
            entry.created,
            entry.body,
            sub=entry.submission,
            title=entry.title,
            entry_id=entry.pk,
        )

    # (d) arena results worse than the previous recorded result (delta in the wrong direction).
    worse_arena = {"delta__lt": 0} if maximize else {"delta__gt": 0}
    results = (
        ArenaResult.objects.filter(submission__project=project, **worse_arena)
        .select_related("submission__run", "submission__experiment")
        .order_by("-created", "-id")[:limit]
    )
    for result in results:
        rank = result.rank if result.rank is not None else "—"
        note = f": {result.note.strip()}" if result.note.strip() else ""
        score, delta = numbers.number(result.arena_score), numbers.signed_text(result.delta)
        why = f"arena rank {rank}, score {score} ({delta} vs previous){note}"
        add(("s", result.submission_id), "arena_regressed", result.created, why, sub=result.submission)

    # (e) runs that failed, with the reason their source gave (why: family and detail), and runs a reviewer
    # closed as abandoned after their harness went silent (why: the reviewer's reason).
    failed_runs = _with_approach(
        Run.objects.filter(
            project=project, state__in=[RunState.FAILED, RunState.ABANDONED], excluded_at__isnull=True
        ),
        "pk",
    ).order_by("-finished_at", "-last_progress_at", "-id")[:limit]
    for run in failed_runs:
        abandoned = run.state == RunState.ABANDONED
        why = (
            ": ".join(
                filter(None, [None if abandoned else run.failure_family, _oneline(run.failure_detail, 200)])
            )
            or "no reason given"
        )
        at = run.finished_at or run.last_progress_at
        title = _run_approach(run, run.kickoff) or f"run {run.external_id}"
        item = items.setdefault(
            ("r", run.pk), FailedApproach([], title, run.best_score, run.external_id, None, None, "", at)
        )
        item.reasons.append("run_abandoned" if abandoned else "run_failed")
        item._whys.append(f"the run was abandoned — {why}" if abandoned else f"the run failed — {why}")

    ordered = sorted(
        items.values(), key=lambda i: (i.at, i.submission_id or 0, i.entry_id or 0), reverse=True
    )[:n]
    for item in ordered:
        item.why = "; ".join(item._whys)
    return ordered


APPROACH_TAG = "approach"


def _approaches(project: Project, n: int) -> list[Approach]:
    """The newest `n` run notes and comments that say `#approach` (as a word: not `#approaches`), from
    runs not excluded, comments not deleted. Two queries, each of its newest 4n candidates."""
    limit, tag = 4 * n, f"#{APPROACH_TAG}"
    notes = (
        RunNote.objects.filter(run__project=project, run__excluded_at__isnull=True, body__icontains=tag)
        .select_related("run", "edited_by")
        .order_by("-updated", "-id")[:limit]
    )
    comments = (
        Comment.objects.filter(project=project, deleted_at__isnull=True, body__icontains=tag)
        .exclude(Q(run__excluded_at__isnull=False) | Q(submission__run__excluded_at__isnull=False))
        .select_related("run", "submission__run", "author")
        .order_by("-created", "-id")[:limit]
    )
    found = [
        Approach(
            "note",
            note.run.external_id,
            note.run.display_name,
            None,
            note.edited_by.get_username() if note.edited_by else "someone",
            note.updated,
            note.body,
        )
        for note in notes
        if markdown.has_hashtag(note.body, APPROACH_TAG)
    ]
    for comment in comments:
        if not markdown.has_hashtag(comment.body, APPROACH_TAG):
            continue
        run = comment.run or comment.submission.run
        found.append(
            Approach(
                "comment",
                run.external_id,
                run.display_name,
                comment.submission_id,
                comment.author.get_username() if comment.author else "someone",
                comment.edited_at or comment.created,
                comment.body,
            )
        )
    return sorted(found, key=lambda a: a.at, reverse=True)[:n]


def carry_forward(project: Project, n: int = N_DEFAULT) -> CarryForward:
    """What the next run should know, in a fixed number of queries whatever the history:

    - **best**: the project's best verified submission by score in the scenario's direction (when
      none passed verification yet, the best unverified one, marked so); never an invalid, rejected or
      excluded one (a score the validator, a reviewer or an admin refused is not a result to build on);
      ties go to the earliest. With its run, status, artifact path and sha256 prefix, and its latest
      arena result if any.
    - **failed**: the last `n` failed or regressed approaches, newest first, one item per submission
      (or per hand-written entry without one), each with its score and why, drawn from
      (a) submissions now `invalid` (why: verification outcome, exit code, the reason recorded, the
      validator's last output line) or `rejected` (why: who rejected it and their comment), dated by
      that transition; (b) when `project.regression_threshold` is set, submissions worse than the best
      valid score of their own run before them by more than the threshold (why: by how much); (c)
      `failed_approach` entries (why: the body; the entry's title names the approach); (d) arena
      results worse than the previous recorded result; (e) failed runs (why: the source's reason).
      Each item is named by its approach: experiment, else branch, else kickoff message. An item found by
      several sources lists every reason and why. Items
      are dated when they became invalid/rejected (a), were scored (b), written (c) or recorded (d).
    - **arena**: the newest ArenaResult (rank, arena score, deltas vs previous and vs best, note), or a
      hand-written `arena_delta` entry when one is newer than it.
    - **approaches**: the newest `n` run notes and comments tagged `#approach`, newest first, with their
      run, author and date.
    """
    if not N_MIN <= n <= N_MAX:
        raise InvalidInput("n", f"Must be between {N_MIN} and {N_MAX}.")
    scenario = project.scenario
    return CarryForward(
        project.slug,
        scenario.score_metric,
        scenario.maximize,
        n,
        _best(project),
        _failed(project, n),
        _latest_arena(project),
        _approaches(project, n),
    )


def _oneline(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text or "").strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _arena_line(a: ArenaFeedback, *, with_submission: bool = True) -> str:
    when = a.at.strftime("%Y-%m-%d")
    if a.source == "entry":
        about = (
            f" (submission #{a.submission_id}, score {numbers.number(a.submission_score)}, from run {a.run})"
            if a.submission_id and with_submission
            else ""
        )
        return f"{_oneline(a.note)}{about}, noted {when}"
    rank = a.rank if a.rank is not None else "—"
    line = (
        f"{a.arena + ': ' if a.arena else ''}rank {rank}, score {numbers.number(a.arena_score)} "
        f"({numbers.signed_text(a.delta)} vs previous, {numbers.signed_text(a.delta_best)} vs best)"
    )
    if with_submission:
        score = numbers.number(a.submission_score)
        line += f" for submission #{a.submission_id} (score {score}) from run {a.run}"
    line += f", {when}"
    return line + (f" — {_oneline(a.note)}" if a.note.strip() else "")


def _item_score(item: FailedApproach) -> str:
    """A failed approach's score as the block and the page's table both say it: a submission's own score,
    or a failed run's best (the best that counts in its figures), named so."""
    if item.score is None:
        return "no score"
    if item.submission_id is None and item.run:
        return f"its best score {numbers.number(item.score)}"
    return f"score {numbers.number(item.score)}"


def render_carry_forward(cf: CarryForward) -> str:
    """The block as plain text with light markdown, one line per fact, newest first, dates in UTC —
    meant to be pasted as is into the next run's kickoff message (no relative times, no HTML)."""
    direction = "maximize" if cf.maximize else "minimize"
    lines = [f"## Carry-forward: {cf.project} ({direction} {cf.metric})", ""]
    if cf.best:
        b = cf.best
        artifact = " @ ".join(filter(None, [b.artifact_path, b.artifact_sha256]))
        status = b.status if b.status in VERIFIED_STATUSES else f"{b.status}, not verified yet"
        lines.append(
            f"**Best so far:** {numbers.number(b.score)} — run {b.run}, submission #{b.submission_id} "
            f"({status})"
            + (f", {_oneline(b.approach, 120)}" if b.approach else "")
            + (f", artifact {artifact}" if artifact else "")
            + (f", commit {b.commit[:10]}" if b.commit else "")
        )
        if b.arena:
            lines.append(f"  arena: {_arena_line(b.arena, with_submission=False)}")
    else:
        lines.append("**Best so far:** no valid score yet.")
    count = len(cf.failed) or cf.n
    lines += [
        "",
        f"**Last {count} failed or regressed approach{'' if count == 1 else 'es'}** (newest first):",
    ]
    for i, item in enumerate(cf.failed, 1):
        where = ", ".join(
            filter(
                None,
                [
                    _item_score(item),
                    f"run {item.run}" if item.run else "",
                ],
            )
        )
        reasons = ", ".join(r.replace("_", " ") for r in item.reasons)
        lines.append(
            f"{i}. [{reasons}] {_oneline(item.title, 120)} ({where})"
            + (f": {_oneline(item.why)}" if item.why else "")
        )
    if not cf.failed:
        lines.append("none recorded.")
    if cf.approaches:
        lines += ["", "**Approaches noted by the team** (newest first):"]
        for a in cf.approaches:
            run = f"run {a.run}" + (f" ({_oneline(a.run_name, 60)})" if a.run_name else "")
            on = f"submission #{a.submission_id} of {run}" if a.submission_id else run
            lines.append(f"- {on}, {a.source} by {a.author}, {a.at:%Y-%m-%d}: {_oneline(a.text, 400)}")
    lines += ["", "**Latest arena feedback:** " + (_arena_line(cf.arena) if cf.arena else "none yet.")]
    return "\n".join(lines)
