"""The evaluation engine: each rule of a project against a run, a submission or a source as it is now;
new episodes become notifications (one per rule, subject and episode). Also the loop findings a run's
badge shows, the budget guard, the spend guards (`guards.py`: the spend-aware stop and the day budget),
and the sweep's list of what changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from smrweb.tracking.models import (
    TERMINAL_STATES,
    AlertRule,
    AuditEvent,
    AuditVerb,
    Channel,
    Delivery,
    LoopFinding,
    Notification,
    NotificationStatus,
    Project,
    Run,
    RunSnooze,
    RunState,
    SourceHealth,
    Submission,
    SubmissionStatus,
    Trigger,
)
from smrweb.tracking.queries import progress
from smrweb.tracking.services.alerts import guards
from smrweb.tracking.services.alerts.triggers import (
    MIN_LOOP_REPEATS,
    RUN_TRIGGERS,
    SOURCE_TRIGGERS,
    SUBMISSION_TRIGGERS,
    Episode,
    budget_fraction,
    new_best_candidates,
    run_episodes,
    source_episodes,
    submission_episodes,
)
from smrweb.tracking.services.audit import record_audit


@dataclass
class Evaluation:
    """What one evaluation did: notifications to deliver, whether the budget guard asked for a stop, and
    what the spend guards asked for (pauses to dispatch, stops to send: run id and reason)."""

    to_deliver: list[int] = field(default_factory=list)
    stop_requested: bool = False
    controls: list[int] = field(default_factory=list)
    stops: list[tuple[int, str]] = field(default_factory=list)


def still_member(rule: AlertRule) -> bool:
    """An inbox rule's person is still an active member of the project."""
    return rule.project.members.filter(pk=rule.recipient_id, is_active=True).exists()


def _snoozed(run: Run | None, now: datetime) -> bool:
    return run is not None and RunSnooze.objects.filter(run=run, until__gt=now).exists()


def _record(rule: AlertRule, episode: Episode, *, baseline: bool, now: datetime) -> Notification | None:
    """Write the episode's notification unless it exists; returns it when it is new and waits for
    delivery."""
    inbox = rule.channel == Channel.INBOX
    why = ""
    if baseline:
        why = "predates the rule"
    elif rule.muted:
        why = "rule muted"
    elif _snoozed(episode.run, now):
        why = "run snoozed"
    elif inbox and not still_member(rule):
        why = "recipient no longer a member"
    status = (
        NotificationStatus.SUPPRESSED
        if why
        else NotificationStatus.SENT
        if inbox
        else NotificationStatus.PENDING
    )
    digest = rule.delivery == Delivery.DIGEST and not inbox
    if digest and status == NotificationStatus.PENDING:
        status = NotificationStatus.HELD  # the digest task sends it with the window's others
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                rule=rule,
                project_id=rule.project_id,
                subject=episode.subject,
                episode=episode.key[:200],
                run=episode.run,
                submission=episode.submission,
                recipient=rule.recipient if inbox else None,
                title=episode.title[:300],
                body=episode.body,
                url=episode.url[:1000],
                status=status,
                in_digest=digest,
                suppressed_because=why,
                sent_at=now if status == NotificationStatus.SENT else None,
            )
    except IntegrityError:
        return None  # this episode was recorded already: a replay, a redelivery, a second worker
    return notification if status == NotificationStatus.PENDING else None


def update_loop_findings(run: Run) -> list[LoopFinding]:
    """Look for loops in the run's recent tool calls and keep them: a stretch that grows updates its
    finding, one that began before the scanned window extends the finding that holds its start. One
    read of the known findings per actor; a write only for what changed. Returns the run's findings."""
    for actor, calls in progress.recent_calls(run).items():
        loops = progress.find_loops(calls, MIN_LOOP_REPEATS) if calls else []
        if not loops:
            continue
        window_start = calls[0].turn
        known = {
            f.first_turn: f
            for f in LoopFinding.objects.filter(run=run, actor=actor, last_turn__gte=window_start - 1)
        }
        for loop in loops:
            label = loop.label[:500]
            earlier = next(
                (f for f in known.values() if f.first_turn < window_start and f.call == label),
                None,
            )
            if loop.first_turn == window_start and earlier is not None:
                if loop.last_turn > earlier.last_turn:
                    extra = sum(1 for c in calls if earlier.last_turn < c.turn <= loop.last_turn)
                    LoopFinding.objects.filter(pk=earlier.pk).update(
                        last_turn=loop.last_turn,
                        repeats=earlier.repeats + extra,
                        wasted_tokens=max(earlier.wasted_tokens, loop.wasted_tokens),
                        wasted_usd=max(earlier.wasted_usd, loop.wasted_usd),
                        updated=timezone.now(),
                    )
                continue
            values = {
                "pattern": loop.pattern,
                "call": label,
                "last_turn": loop.last_turn,
                "repeats": loop.repeats,
                "wasted_tokens": loop.wasted_tokens,
                "wasted_usd": loop.wasted_usd,
            }
            finding = known.get(loop.first_turn)
            if finding is None:
                LoopFinding.objects.update_or_create(
                    run=run, actor=actor, first_turn=loop.first_turn, defaults=values
                )  # update_or_create: a concurrent evaluation may have written it meanwhile
            elif any(getattr(finding, k) != v for k, v in values.items()):
                LoopFinding.objects.filter(pk=finding.pk).update(updated=timezone.now(), **values)
    return list(LoopFinding.objects.filter(run=run))


def _guard_budget(run: Run, memo: dict) -> bool:
    """The project's budget guard: a live run past 100 % of its budget is asked to stop, once (audited)."""
    if not run.project.budget_guard or run.is_terminal:
        return False
    reading = budget_fraction(run)
    if reading is None or reading[0] < 1.0:
        return False
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()  # one guard decision per run at a time
        if AuditEvent.objects.filter(
            verb=AuditVerb.RUN_STOP_REQUESTED,
            object_type="run",
            object_id=str(run.pk),
            detail__budget_guard=True,
        ).exists():
            return False
        fraction, unit = reading
        record_audit(
            None,
            AuditVerb.RUN_STOP_REQUESTED,
            run,
            project=run.project,
            budget_guard=True,
            reason=f"budget guard: {fraction:.0%} of its {unit} budget",
        )
    memo["guard_stopped"] = True
    return True


def changed_since(since: datetime, limit: int = 1000) -> dict[str, list[int]]:
    """What may need an evaluation: runs, submissions and failing sources changed since `since`, in
    projects with rules of the matching kind (the sweep's list; evaluating twice is harmless)."""
    with_rules = AlertRule.objects.filter(muted=False)
    run_projects = with_rules.filter(trigger__in=RUN_TRIGGERS).values("project_id")
    guarded = guards.guarded_projects()
    sub_projects = with_rules.filter(trigger__in=(*SUBMISSION_TRIGGERS, Trigger.SCORE_NEW_BEST)).values(
        "project_id"
    )
    source_projects = with_rules.filter(trigger__in=SOURCE_TRIGGERS).values("project_id")
    return {
        "run": list(
            Run.objects.filter(
                Q(project_id__in=run_projects) | Q(project_id__in=guarded), updated__gte=since
            ).values_list("pk", flat=True)[:limit]
        ),
        "submission": list(
            Submission.objects.filter(updated__gte=since, project_id__in=sub_projects).values_list(
                "pk", flat=True
            )[:limit]
        ),
        "source": list(
            SourceHealth.objects.filter(
                updated__gte=since, consecutive_failures__gt=0, project_id__in=source_projects
            ).values_list("project_id", flat=True)[:limit]
        ),
    }


def _rules(project: Project, triggers) -> list[AlertRule]:
    return list(
        AlertRule.objects.filter(project=project, trigger__in=triggers).select_related("project", "recipient")
    )


def _notify(result: Evaluation, rules: list[AlertRule], episodes_of) -> Evaluation:
    """Record each rule's episodes; what is new and waits for delivery goes into `result`."""
    now = timezone.now()
    for rule in rules:
        for episode in episodes_of(rule):
            if (notification := _record(rule, episode, baseline=False, now=now)) is not None:
                result.to_deliver.append(notification.pk)
    return result


def evaluate_run(run_id: int) -> Evaluation:
    """Every run rule of the run's project against the run as it is now (after a batch, a stall flag,
    a state change): new episodes become notifications; loops found are kept for the badge."""
    result = Evaluation()
    run = Run.objects.select_related("project__scenario").filter(pk=run_id).first()
    if run is None:
        return result
    memo: dict[str, Any] = {"loops": update_loop_findings(run)}
    result.stop_requested = _guard_budget(run, memo)
    acted = guards.guard_run(run)
    result.controls, result.stops = acted.controls, acted.stops
    return _notify(result, _rules(run.project, RUN_TRIGGERS), lambda rule: run_episodes(rule, run, memo))


def evaluate_submission(submission_id: int) -> Evaluation:
    query = Submission.objects.select_related("project__scenario", "run__project")
    sub = query.filter(pk=submission_id).first()
    if sub is None:
        return Evaluation()
    result = _notify(
        Evaluation(), _rules(sub.project, SUBMISSION_TRIGGERS), lambda rule: submission_episodes(rule, sub)
    )
    # A verification can make a new project best (the best counts verified submissions): its run's
    # new-best rules are evaluated here, as the score's batch evaluated them when it was a candidate.
    new_best = _rules(sub.project, (Trigger.SCORE_NEW_BEST,))
    return _notify(result, new_best, lambda rule: run_episodes(rule, sub.run, {}))


def evaluate_source(project_id: int) -> Evaluation:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return Evaluation()
    return _notify(
        Evaluation(), _rules(project, SOURCE_TRIGGERS), lambda rule: source_episodes(rule, project)
    )


def baseline(rule: AlertRule) -> None:
    """Record (as suppressed) every episode the new rule's condition holds for right now."""
    now = timezone.now()
    project = rule.project
    if rule.trigger in RUN_TRIGGERS:
        runs = Run.objects.filter(project=project).select_related("project__scenario")
        if rule.trigger == Trigger.RUN_FAILED:
            runs = runs.filter(state__in=[RunState.FAILED, RunState.ABANDONED])
        elif rule.trigger == Trigger.RUN_STALLED:
            runs = runs.filter(stalled_since__isnull=False)
        elif rule.trigger == Trigger.RUN_BUDGET:
            runs = runs.filter(Q(budget_usd__isnull=False) | Q(budget_tokens__isnull=False))
        elif rule.trigger == Trigger.SCORE_NEW_BEST:
            best = new_best_candidates(rule, project)
            best = best.order_by("-score" if project.scenario.maximize else "score", "ts", "id").first()
            runs = runs.filter(pk=best.run_id) if best else runs.none()
        elif rule.trigger == Trigger.RUN_LOOP:
            runs = runs.filter(loop_findings__isnull=False).distinct()
        elif rule.trigger == Trigger.RUN_ERRORS:
            runs = runs.filter(failed_turns__gt=0)
        elif rule.trigger in (Trigger.RUN_NO_PROGRESS, Trigger.RUN_DOWNGRADED, Trigger.RUN_REGRESSED):
            runs = runs.exclude(state__in=TERMINAL_STATES)
        for run in runs.iterator(chunk_size=200):
            memo = {
                "loops": list(LoopFinding.objects.filter(run=run)) if rule.trigger == Trigger.RUN_LOOP else []
            }
            for ep in run_episodes(rule, run, memo):
                _record(rule, ep, baseline=True, now=now)
    elif rule.trigger in SUBMISSION_TRIGGERS:
        statuses = {
            Trigger.SUBMISSION_NEEDS_REVIEW: [SubmissionStatus.VERIFIED],
            Trigger.SUBMISSION_APPROVED: [SubmissionStatus.APPROVED],
            Trigger.ARENA_RESULT: [SubmissionStatus.RANKED],
        }[rule.trigger]
        subs = Submission.objects.filter(project=project, status__in=statuses).select_related(
            "project__scenario", "run__project"
        )
        for sub in subs.iterator(chunk_size=200):
            for ep in submission_episodes(rule, sub):
                _record(rule, ep, baseline=True, now=now)
    else:
        for ep in source_episodes(rule, project):
            _record(rule, ep, baseline=True, now=now)
