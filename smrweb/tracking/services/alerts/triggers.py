"""What each alert trigger means: its parameters (`threshold`, `window`), how its notifications are
counted, and the episodes its condition holds on a run, a submission or a source right now."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.urls import reverse

from smrweb.core import numbers
from smrweb.tracking.models import (
    RUN_RULE,
    AgentTurn,
    AlertRule,
    ArenaResult,
    Project,
    Run,
    RunState,
    SourceHealth,
    StateChange,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
    Trigger,
)
from smrweb.tracking.queries import progress


@dataclass(frozen=True)
class Parameter:
    meaning: str
    default: float | int | None
    minimum: float
    maximum: float


# What `threshold` and `window` mean for each trigger (a trigger missing here takes neither).
TRIGGER_PARAMETERS: dict[str, dict[str, Parameter]] = {
    Trigger.RUN_BUDGET: {
        "threshold": Parameter(
            "fraction of the run's USD or token budget; notifies again at 1.0", 0.8, 0.01, 1.0
        ),
    },
    Trigger.RUN_REGRESSED: {
        "threshold": Parameter(
            "worse than the run's best by more than this (default: the project's regression threshold)",
            None,
            0.0,
            1e300,
        ),
    },
    Trigger.RUN_NO_PROGRESS: {
        "window": Parameter(
            "turns without a better score (unset with a USD threshold: spend only)",
            progress.DEFAULT_NO_PROGRESS_TURNS,
            1,
            10**7,
        ),
        "threshold": Parameter("or this many USD spent without a better score", None, 0.0001, 1e9),
    },
    Trigger.RUN_LOOP: {
        "window": Parameter(
            "the same call this many times in a row, or two calls alternating this many times over",
            progress.DEFAULT_LOOP_REPEATS,
            progress.DEFAULT_LOOP_REPEATS,
            1000,
        ),
    },
    Trigger.SOURCE_FAILING: {
        "window": Parameter("consecutive failed syncs", 3, 1, 10**6),
    },
    Trigger.RUN_ERRORS: {
        "window": Parameter("failed calls in a row (the run's newest turns)", 5, 1, 10**6),
    },
}

# Loops are kept from this many repeats on: the least a rule may ask for, and what the badge shows.
MIN_LOOP_REPEATS = progress.DEFAULT_LOOP_REPEATS

RUN_TRIGGERS = (
    Trigger.RUN_FAILED,
    Trigger.RUN_STALLED,
    Trigger.RUN_DOWNGRADED,
    Trigger.RUN_BUDGET,
    Trigger.RUN_REGRESSED,
    Trigger.SCORE_NEW_BEST,
    Trigger.RUN_NO_PROGRESS,
    Trigger.RUN_LOOP,
    Trigger.RUN_ERRORS,
)
SUBMISSION_TRIGGERS = (Trigger.SUBMISSION_NEEDS_REVIEW, Trigger.SUBMISSION_APPROVED, Trigger.ARENA_RESULT)
SOURCE_TRIGGERS = (Trigger.SOURCE_FAILING,)

# High-volume triggers: their email rules send a digest unless asked otherwise (a verified submission
# each was 1,085 emails in 38 minutes of the demo). Failures, stalls, loops and budgets stay immediate.
DIGEST_BY_DEFAULT = (Trigger.SUBMISSION_NEEDS_REVIEW, Trigger.SCORE_NEW_BEST, Trigger.RUN_REGRESSED)
DIGEST_MINUTES = Parameter("minutes between digest emails", 30, 5, 24 * 60)
DIGEST_MAX_ITEMS = 200  # per email; the rest waits for the next one

# How a group of one rule's notifications is counted ("12 submissions waiting for review").
TRIGGER_NOUNS: dict[str, tuple[str, str]] = {
    Trigger.RUN_FAILED: ("run failed", "runs failed"),
    Trigger.RUN_STALLED: ("run stalled", "runs stalled"),
    Trigger.RUN_DOWNGRADED: ("run downgraded", "runs downgraded"),
    Trigger.RUN_BUDGET: ("run at its budget alert level", "runs at their budget alert level"),
    Trigger.RUN_REGRESSED: ("run regressed", "runs regressed"),
    Trigger.SCORE_NEW_BEST: ("new project best", "new project bests"),
    Trigger.RUN_NO_PROGRESS: ("run without progress", "runs without progress"),
    Trigger.RUN_LOOP: ("run looping", "runs looping"),
    Trigger.RUN_ERRORS: ("run failing its calls", "runs failing their calls"),
    Trigger.SUBMISSION_NEEDS_REVIEW: ("submission waiting for review", "submissions waiting for review"),
    Trigger.SUBMISSION_APPROVED: ("submission ready to upload", "submissions ready to upload"),
    Trigger.ARENA_RESULT: ("arena result", "arena results"),
    Trigger.SOURCE_FAILING: ("source sync failing", "source sync failures"),
}


def counted_label(trigger: str, count: int) -> str:
    """ "12 submissions waiting for review": a digest's subject and an inbox group's title."""
    one, many = TRIGGER_NOUNS.get(trigger, ("notification", "notifications"))
    return f"{count:,} {one if count == 1 else many}"


def parameter(rule: AlertRule, name: str) -> Any:
    """The rule's `threshold` or `window`, or the trigger's default."""
    value = getattr(rule, name)
    if value is not None:
        return value
    spec = TRIGGER_PARAMETERS.get(rule.trigger, {}).get(name)
    return spec.default if spec else None


def absolute_url(path: str) -> str:
    return f"{settings.SMRWEB_BASE_URL}{path}"


def submission_url(sub: Submission) -> str:
    return absolute_url(reverse("dashboard:submission-detail", args=[sub.project.slug, sub.pk]))


@dataclass(frozen=True)
class Episode:
    subject: str
    key: str
    title: str
    body: str
    url: str
    run: Run | None = None
    submission: Submission | None = None


def _run_label(run: Run) -> str:
    return f"{run.project.name}: run {run.external_id}"


def run_episodes(rule: AlertRule, run: Run, memo: dict) -> Iterator[Episode]:
    """The rule's condition on the run now: zero or more episodes (budget levels can be two)."""
    trigger, url, label = rule.trigger, absolute_url(run.get_absolute_url()), _run_label(run)
    subject = f"run:{run.pk}"

    def episode(key: str, title: str, body: str, **kw) -> Episode:
        return Episode(kw.pop("subject", subject), key, title, body, url, run=run, **kw)

    if trigger == Trigger.RUN_FAILED and run.state == RunState.ABANDONED:
        # A silent run a reviewer closed: it ended without success, so the failure rule says so.
        change = StateChange.objects.filter(run=run, state=RunState.ABANDONED).order_by("-ts", "-id").first()
        yield episode(
            f"abandoned:{change.pk if change else run.finished_at}",
            f"{label} abandoned",
            f"{label} was closed as abandoned"
            + (f" by {run.failure_source}" if run.failure_source else "")
            + " after its harness went silent."
            + (f"\nReason: {run.failure_detail[:1000]}" if run.failure_detail else "")
            + f"\nBest score {numbers.number(run.best_score)}, spend {numbers.usd(run.spend_usd)}.",
        )
    elif trigger == Trigger.RUN_FAILED and run.state == RunState.FAILED:
        change = StateChange.objects.filter(run=run, state=RunState.FAILED).order_by("-ts", "-id").first()
        family = run.failure_family or "unknown"
        yield episode(
            f"failed:{change.pk if change else run.finished_at}",
            f"{label} failed ({family})",
            f"{label} failed. Family: {family}."
            + (f"\nDetail: {run.failure_detail[:1000]}" if run.failure_detail else "")
            + (f"\nReported by: {run.failure_source}" if run.failure_source else "")
            + f"\nBest score {numbers.number(run.best_score)}, spend {numbers.usd(run.spend_usd)}.",
        )
    elif trigger == Trigger.RUN_STALLED and run.is_stalled:
        yield episode(
            f"stalled:{run.stalled_since.isoformat()}",
            f"{label} stalled",
            f"{label} has sent nothing since {run.last_progress_at:%Y-%m-%d %H:%M} UTC (the project calls a "
            f"run stalled after {numbers.duration(run.project.stall_after)} without news). State: {run.state}"
            + (f", phase {run.live_phase}" if run.live_phase else "")
            + ".",
        )
    elif trigger == Trigger.RUN_DOWNGRADED and run.is_downgraded:
        asked, got = run.requested_profile, run.actual_profile
        actors = run.downgraded_actors
        if actors:
            detail = "; ".join(
                f"{a.get('actor') or a.get('role')}: asked {a['requested']}, got {a['actual']}"
                for a in actors
            )
        else:
            detail = f"asked {asked}, got {got}"
        yield episode(
            f"downgraded:{detail}",
            f"{label} downgraded",
            f"{label} runs on another model than asked: {detail}.",
        )
    elif trigger == Trigger.RUN_BUDGET:
        yield from _budget_episodes(rule, run, memo, episode, label)
    elif trigger == Trigger.RUN_REGRESSED:
        yield from _regression_episodes(rule, run, episode, label)
    elif trigger == Trigger.SCORE_NEW_BEST:
        yield from _new_best_episodes(rule, run, episode, label)
    elif trigger == Trigger.RUN_NO_PROGRESS and not run.is_terminal:
        if "progress" not in memo:
            memo["progress"] = progress.progress_since_best(run)
        p = memo["progress"]
        # A rule with a USD threshold and no window watches spend only; otherwise turns (default 50).
        usd = rule.threshold
        turns = parameter(rule, "window") if rule.window is not None or usd is None else None
        if p.stuck(turns=turns, usd=usd):
            since = (
                f"its best score {numbers.number(p.best_score)}"
                if p.best_submission_id
                else "it started (no score yet)"
            )
            yield episode(
                f"since-best:{p.best_submission_id or 'none'}",
                f"{label}: no better score for {p.turns} turns",
                f"{label} has made {p.turns} turns, {numbers.tokens(p.tokens)} tokens and "
                f"{numbers.usd(p.usd)} "
                f"since {since} without improving on it (this rule: "
                + " or ".join(
                    filter(
                        None, [f"{turns} turns" if turns else "", numbers.usd(usd) if usd is not None else ""]
                    )
                )
                + ").",
            )
    elif trigger == Trigger.RUN_ERRORS:
        yield from _error_streak_episodes(rule, run, episode, label)
    elif trigger == Trigger.RUN_LOOP:
        repeats = parameter(rule, "window")
        for finding in memo["loops"]:
            needed = repeats if finding.pattern == "repeat" else 2 * repeats
            if finding.repeats >= needed:
                yield episode(
                    f"loop:{finding.pk}",
                    f"{label} is looping: {finding.call[:150]} ×{finding.repeats}",
                    f"{label} ({finding.actor}) repeats itself: {finding.call} — "
                    f"{finding.get_pattern_display()}, "
                    f"{finding.repeats} calls over turns {finding.first_turn}–{finding.last_turn}. "
                    "The repeats "
                    f"cost {numbers.tokens(finding.wasted_tokens)} tokens and "
                    f"{numbers.usd(finding.wasted_usd)}.",
                )


def error_streak(run: Run, at_least: int) -> tuple[AgentTurn, list[AgentTurn]] | None:
    """The run's current streak of failed calls (its newest turns, in time order, all failed) when it is
    at least `at_least` long: (the streak's first turn, its newest few). None otherwise. Reads at most
    `at_least` turns, then the streak's start: from the newest turn that did not fail on, through the
    (run, ts) index and the partial index of failed turns, never the run's older turns."""
    if run.failed_turns < at_least:
        return None
    turns = AgentTurn.objects.filter(run=run)
    newest = list(turns.order_by("-ts", "-id").only("pk", "ts", "failed")[:at_least])
    if len(newest) < at_least or not all(t.failed for t in newest):
        return None
    last_ok = turns.filter(failed=False).order_by("-ts", "-id").values_list("ts", "pk").first()
    streak = turns.filter(failed=True)
    if last_ok is not None:
        streak = streak.filter(Q(ts__gt=last_ok[0]) | Q(ts=last_ok[0], pk__gt=last_ok[1]))
    first = streak.order_by("ts", "id").first()
    recent = list(
        turns.filter(pk__in=[t.pk for t in newest[:5]])
        .order_by("-ts", "-id")
        .only("pk", "turn", "actor", "model", "ts", "error", "http_status", "error_message")
    )
    return first, recent


def _error_streak_episodes(rule, run, episode, label) -> Iterator[Episode]:
    k = parameter(rule, "window")
    found = error_streak(run, k)
    if found is None:
        return
    first, recent = found
    kinds = ", ".join(
        dict.fromkeys(
            f"{t.error or 'error'}" + (f" (HTTP {t.http_status})" if t.http_status else "") for t in recent
        )
    )
    last = recent[0]
    yield episode(
        f"errors:{first.pk}",  # once per streak: a success ends it, the next streak is another episode
        f"{label}: its last {k} calls failed ({kinds})",
        f"{label}'s calls keep failing: its newest {k} or more calls failed, since {first.actor} "
        f"#{first.turn} at {first.ts:%Y-%m-%d %H:%M:%S} UTC "
        f"({run.failed_turns} failed of {run.turn_count} in all). "
        f"Errors: {kinds}."
        + (
            f"\nLatest ({last.model or 'no model'}): {last.error_message[:500]}" if last.error_message else ""
        ),
    )


def budget_fraction(run: Run) -> tuple[float, str] | None:
    """How much of its budget the run has used and which budget that is; None without one. The same
    reading as the run page's (`Run.budget_used_fraction`: the source's own totals where it states them)."""
    fraction = run.budget_used_fraction
    if fraction is None:
        return None
    usd = float(run.spend_usd / run.budget_usd) if run.budget_usd else None
    return fraction, "USD" if usd == fraction else "tokens"


def _budget_episodes(rule, run, memo, episode, label) -> Iterator[Episode]:
    reading = budget_fraction(run)
    if reading is None:
        return
    fraction, unit = reading
    # One notification per crossing: a batch that passes the rule's level and the whole budget at once
    # is one episode, at the highest level reached (two identical "at 121 %" notifications before).
    reached = [level for level in sorted({min(parameter(rule, "threshold"), 1.0), 1.0}) if fraction >= level]
    for level in reached[-1:]:
        spent = (
            f"{numbers.usd(run.spend_usd)} of {numbers.usd(run.budget_usd)}"
            if unit == "USD"
            else f"{numbers.tokens(sum(run.reported_tokens))} of {numbers.tokens(run.budget_tokens)} tokens"
        )
        guard = ""
        if level >= 1.0 and memo.get("guard_stopped"):
            guard = " The project's budget guard asked its source to stop it."
        elif level >= 1.0 and run.project.budget_guard and not run.is_terminal:
            guard = " The project's budget guard had already asked its source to stop it."
        yield episode(
            f"budget:{level:g}",
            f"{label} at {fraction:.0%} of its budget",
            f"{label} has used {spent} ({fraction:.0%}; this rule notifies at {level:.0%}).{guard}",
        )


def _regression_episodes(rule, run, episode, label) -> Iterator[Episode]:
    threshold = rule.threshold if rule.threshold is not None else run.project.regression_threshold
    if threshold is None:
        return
    maximize = run.project.scenario.maximize
    counted = Submission.objects.filter(run=run).counted(**RUN_RULE)  # the run's own figures' rule
    latest = counted.order_by("-ts", "-id").first()
    if latest is None:
        return
    before = counted.filter(Q(ts__lt=latest.ts) | Q(ts=latest.ts, id__lt=latest.pk))
    best = before.order_by("-score" if maximize else "score", "ts", "id").first()
    if best is None:
        return
    worse_by = best.score - latest.score if maximize else latest.score - best.score
    if worse_by > threshold:
        yield episode(
            f"below-best:{best.pk}",
            f"{label} regressed: {numbers.number(latest.score)} vs its best {numbers.number(best.score)}",
            f"{label}'s latest score {numbers.number(latest.score)} is {numbers.number(worse_by)} "
            "worse than its "
            f"best so far ({numbers.number(best.score)}); the threshold is {numbers.number(threshold)}. "
            f"Roll back to the best submission: {submission_url(best)}",
            submission=latest,
        )


def new_best_candidates(rule: AlertRule, project: Project):
    """The submissions a new-best rule compares: those the project's best counts (verified and on),
    or, with the rule's `include_candidates`, unverified candidates too."""
    return Submission.objects.filter(project=project).counted(unverified=rule.include_candidates)


def _new_best_episodes(rule, run, episode, label) -> Iterator[Episode]:
    project = run.project
    maximize = project.scenario.maximize
    counted = new_best_candidates(rule, project)
    order = ("-score" if maximize else "score", "ts", "id")
    best = counted.order_by(*order).select_related("run").first()
    if best is None or best.run_id != run.pk:
        return
    previous = counted.exclude(pk=best.pk).filter(ts__lte=best.ts).order_by(*order).first()
    change = (
        f"the previous best was {numbers.number(previous.score)} "
        f"({numbers.signed_text(best.score - previous.score)})"
        if previous
        else "the project's first score"
    )
    yield Episode(
        f"project:{project.pk}",
        f"best:{best.pk}",
        f"New best for {project.name}: {numbers.number(best.score)}",
        f"{label} scored {numbers.number(best.score)}, {change}."
        + ("" if best.is_verified else " Not verified yet: its validator has not passed it.")
        + (f" Artifact: {best.artifact_ref}" if best.artifact_ref else ""),
        submission_url(best),
        run=run,
        submission=best,
    )


def submission_episodes(rule: AlertRule, sub: Submission) -> Iterator[Episode]:
    subject, url = f"submission:{sub.pk}", submission_url(sub)
    what = f"{sub.project.name}: submission {numbers.number(sub.score)} of run {sub.run.external_id}"
    if rule.trigger in (Trigger.SUBMISSION_NEEDS_REVIEW, Trigger.SUBMISSION_APPROVED):
        status = (
            SubmissionStatus.VERIFIED
            if rule.trigger == Trigger.SUBMISSION_NEEDS_REVIEW
            else SubmissionStatus.APPROVED
        )
        if sub.status != status:
            return
        move = (
            SubmissionTransition.objects.filter(submission=sub, to_status=status)
            .order_by("-created", "-id")
            .first()
        )
        if rule.trigger == Trigger.SUBMISSION_NEEDS_REVIEW:
            title = f"{what} verified — waiting for review"
            body = f"{what} passed its validator and waits for a reviewer. Review it: {url}"
        else:
            arena = sub.project.scenario.arena_name or sub.project.scenario.key
            title = f"{what} approved — ready to upload"
            body = (
                f"{what} was approved by {move.by_label if move else 'a reviewer'}. Upload "
                f"{sub.artifact_ref or 'its artifact'} to {arena} by hand, then record the rank and "
                f"score: {url}"
            )
        yield Episode(
            subject, f"{status}:{move.pk if move else sub.pk}", title, body, url, run=sub.run, submission=sub
        )
    elif rule.trigger == Trigger.ARENA_RESULT:
        for result in ArenaResult.objects.filter(submission=sub).order_by("created", "id"):
            score = "—" if result.arena_score is None else numbers.number(result.arena_score)
            rank = "—" if result.rank is None else str(result.rank)
            yield Episode(
                subject,
                f"arena:{result.pk}",
                f"{sub.project.name}: {result.arena} rank {rank}, score {score} "
                f"({numbers.signed_text(result.delta)} vs previous)",
                f"{what} was ranked by {result.arena}: rank {rank}"
                + (f" ({numbers.rank_move(result.rank_delta)})" if result.rank_delta is not None else "")
                + f", score {score}, {numbers.signed_text(result.delta)} against the previous result and "
                f"{numbers.signed_text(result.delta_best)} against the best."
                + (f"\nNote: {result.note}" if result.note else ""),
                url,
                run=sub.run,
                submission=sub,
            )


def source_episodes(rule: AlertRule, project: Project) -> Iterator[Episode]:
    health = SourceHealth.objects.filter(project=project).first()
    needed = parameter(rule, "window")
    if health is None or health.consecutive_failures < needed:
        return
    streak = health.last_success_at.isoformat() if health.last_success_at else "never"
    yield Episode(
        f"project:{project.pk}",
        f"failing-since:{streak}",
        f"{project.name}: source sync failing ({health.consecutive_failures} in a row)",
        f"The {project.get_source_display()} source of {project.name} failed "
        f"{health.consecutive_failures} syncs in "
        f"a row (last: {health.last_error_kind or 'error'}: {health.last_error[:500]}). Last success: "
        + (f"{health.last_success_at:%Y-%m-%d %H:%M} UTC." if health.last_success_at else "never."),
        absolute_url(project.get_absolute_url()),
    )
