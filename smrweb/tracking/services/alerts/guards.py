"""The project guards that act on live runs by spend (issue 38 item 4; docs/alerts.md "Spend guards"):

- the **spend-aware stop** (`Project.spend_stop`, off by default): a live run that spent more than $X
  (or N turns, T tokens) since its best score, or whose marginal USD per point of score gained over its
  last `spend_stop_window` turns passes a ceiling, is paused — or stopped, as the project chooses;
- the **day budget** (`Project.day_budget_usd`): when the project's turns cost that much in one day of
  the project's clock (`Project.day_zone`), every live run of the project is paused.

Both act through the steering and stop paths every person's click takes (a pause is a `RunControl` the
dispatcher sends: SMR's `pause_run`, a push harness's signed `smrweb.pause`; a stop is the stop task:
SMR's stop, the signed `smrweb.stop`): pause where the source can pause, else stop where it can stop,
else the announcement says it could do neither. Each acts **once per episode**, kept as a `GuardEpisode`
row whose unique key is the bookkeeping: the spend guard's episode is "since this best score" (a new best
starts a new one), the day budget's the day. A person's Resume is the undo, and is not paused again in
the same episode. Every act is audited and announced in the inbox of the project's reviewers and admins,
with the numbers.

The rule is one function, `spend_stop_reason(limits, reading)` in `spend_rule.py`: this guard calls it on
the run's reading now (`reading_now`), the dry run on the reading after every turn of the run's history
(`run_history`), so what the settings and run pages say the rule would have done is what it does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from smrweb.core import numbers
from smrweb.tracking.models import (
    TERMINAL_STATES,
    AuditVerb,
    GuardAction,
    GuardEpisode,
    GuardKind,
    Membership,
    Notification,
    NotificationKind,
    NotificationStatus,
    Project,
    Role,
    Run,
    RunState,
    SpendStop,
)
from smrweb.tracking.services import capabilities, control
from smrweb.tracking.services.alerts.spend_rule import (
    Limits,
    Reading,
    day_spend,
    reading_now,
    spend_stop_reason,
    today_in,
)
from smrweb.tracking.services.audit import record_audit
from smrweb.tracking.services.capabilities import Action

# --- acting --------------------------------------------------------------------------------------------


@dataclass
class Acted:
    """What the guards asked for in one evaluation: pauses to dispatch, stops to send (run id, reason)."""

    controls: list[int] = field(default_factory=list)
    stops: list[tuple[int, str]] = field(default_factory=list)


def _how(run: Run, preferred: str) -> tuple[str, str]:
    """(action, why not the other) for a guard on this run: pause where the source can pause, else stop
    where it can stop (a project that chose stop: the other way round), else none, with the reasons."""
    steer = capabilities.refusal(run.project, Action.STEER)
    stop = capabilities.refusal(run.project, Action.STOP, run=run)
    order = [GuardAction.STOP, GuardAction.PAUSE] if preferred == SpendStop.STOP else None
    order = order or [GuardAction.PAUSE, GuardAction.STOP]
    for action in order:
        if action == GuardAction.PAUSE and not steer:
            return action, ""
        if action == GuardAction.STOP and not stop:
            return action, ""
    return GuardAction.NONE, f"it can neither pause nor stop this run: {steer or stop}"


def _act(run: Run, guard: str, episode: str, reason: str, reading: dict, preferred: str, out: Acted):
    """Act once for (run, guard, episode), under the run's lock: the episode row is written first, so a
    second worker or a redelivered evaluation finds it and does nothing. Returns the episode row, or None
    when this episode was acted on already."""
    with transaction.atomic():
        run = Run.objects.select_related("project__scenario").select_for_update(of=("self",)).get(pk=run.pk)
        if run.is_terminal or run.state == RunState.PAUSED:
            return None
        if GuardEpisode.objects.filter(run=run, guard=guard, episode=episode).exists():
            return None
        action, why_not = _how(run, preferred)
        pause = None
        if action == GuardAction.PAUSE:
            pause, refused = control.guard_pause(run, guard=guard)
            if pause is None:
                action, why_not = GuardAction.NONE, refused
        try:
            with transaction.atomic():
                row = GuardEpisode.objects.create(
                    project=run.project,
                    run=run,
                    guard=guard,
                    episode=episode[:100],
                    action=action,
                    reason=reason + (f" {why_not}" if why_not else ""),
                    reading=reading,
                    control=pause,
                )
        except IntegrityError:
            return None
        record_audit(
            None,
            AuditVerb.RUN_GUARD_PAUSED
            if action == GuardAction.PAUSE
            else AuditVerb.RUN_STOP_REQUESTED
            if action == GuardAction.STOP
            else AuditVerb.RUN_GUARD_UNABLE,
            run,
            project=run.project,
            guard=guard,
            episode=episode,
            reason=f"{GuardKind(guard).label}: {reason}",
            reading=reading,
            **({"why_not": why_not} if why_not else {}),
        )
        if pause is not None and getattr(pause, "is_new", False):
            out.controls.append(pause.pk)
        if action == GuardAction.STOP:
            out.stops.append((run.pk, f"{GuardKind(guard).label}: {reason}"))
        run.save(update_fields=["updated"])
    return row


def _deciders(project: Project):
    """Who hears of a guard's act: the project's active reviewers and admins (those who can Resume)."""
    return [
        m.user
        for m in Membership.objects.filter(
            project=project, role__in=[Role.REVIEWER, Role.ADMIN], user__is_active=True
        ).select_related("user")
    ]


def _announce(project: Project, *, subject: str, episode: str, title: str, body: str, url: str, run=None):
    """One inbox notification per decider (once per subject and episode: the unique key)."""
    now = timezone.now()
    for user in _deciders(project):
        try:
            with transaction.atomic():
                Notification.objects.create(
                    kind=NotificationKind.GUARD,
                    project=project,
                    subject=subject,
                    episode=episode[:200],
                    run=run,
                    recipient=user,
                    title=title[:300],
                    body=body,
                    url=url[:1000],
                    status=NotificationStatus.SENT,
                    sent_at=now,
                )
        except IntegrityError:
            pass  # announced already (a redelivered evaluation)


def _did(row: GuardEpisode, run: Run) -> str:
    if row.action == GuardAction.PAUSE:
        return f"asked its source to pause {run.external_id} (Resume on its page undoes it)"
    if row.action == GuardAction.STOP:
        return f"asked its source to stop {run.external_id}"
    return f"could not act on {run.external_id}"


def guard_spend(run: Run, out: Acted, *, reading: Reading | None = None) -> GuardEpisode | None:
    """The spend-aware stop on one run now: act once per episode when the rule holds."""
    project = run.project
    if project.spend_stop == SpendStop.OFF or run.is_terminal or run.state == RunState.PAUSED:
        return None
    limits = Limits.of(project)
    if not limits.any:
        return None
    reading = reading or reading_now(run, limits.window)
    reason = spend_stop_reason(limits, reading)
    if not reason:
        return None
    row = _act(run, GuardKind.SPEND, reading.episode, reason, reading.as_dict(), project.spend_stop, out)
    if row is None:
        return None
    from smrweb.tracking.services.alerts.triggers import absolute_url

    label = f"{project.name}: run {run.external_id}"
    verb = {GuardAction.PAUSE: "paused", GuardAction.STOP: "stopped"}.get(row.action, "not stopped")
    _announce(
        project,
        subject=f"run:{run.pk}",
        episode=f"spend:{reading.episode}",
        title=f"{label} {verb} by the spend guard: {reason}"[:300],
        body=f"{label}: {reason}. Since its best score it made {reading.turns:,} turns, "
        f"{numbers.tokens(reading.tokens)} tokens and {numbers.usd(reading.usd)}"
        + (
            f"; over its last {reading.window_turns:,} turns it spent {numbers.usd(reading.window_usd)}"
            + (
                f" and gained {numbers.number(reading.window_gain)}"
                if reading.window_gain is not None
                else ""
            )
            if reading.window_turns
            else ""
        )
        + f". The project's spend guard ({limits.words()}) {_did(row, run)}."
        + (f" {row.reason[len(reason) + 1 :]}" if row.action == GuardAction.NONE else "")
        + " It acts once per best score: a new best score starts a new episode.",
        url=absolute_url(run.get_absolute_url()),
        run=run,
    )
    return row


def guard_day_budget(project: Project, out: Acted, *, now: datetime | None = None) -> list[GuardEpisode]:
    """The day budget now: at 100 % of it, every live run of the project that is not paused is paused
    (once that day: a run a person resumes stays running until the next day of the project's clock)."""
    budget = project.day_budget_usd
    if budget is None or project.archived_at is not None:
        return []
    spent = day_spend(project, now)
    if spent < budget:
        return []
    day = today_in(project.day_zone, now)
    episode = f"day:{day.isoformat()}"
    runs = (
        Run.objects.filter(project=project, archived_at__isnull=True)
        .exclude(state__in=[*TERMINAL_STATES, RunState.PAUSED])
        .exclude(guard_episodes__guard=GuardKind.DAY, guard_episodes__episode=episode)
        .select_related("project__scenario")
    )
    reason = (
        f"the project spent {numbers.usd(spent)} today ({day.isoformat()}, {project.day_zone}), "
        f"{spent / budget:.0%} of its day budget of {numbers.usd(budget)}"
    )
    reading = {"day": day.isoformat(), "zone": project.day_zone, "spent": str(spent), "budget": str(budget)}
    rows = [
        row
        for run in runs
        if (row := _act(run, GuardKind.DAY, episode, reason, reading, SpendStop.PAUSE, out)) is not None
    ]
    if not rows:
        return rows
    from smrweb.tracking.services.alerts.triggers import absolute_url

    done = "; ".join(f"{row.run.external_id}: {row.get_action_display()}" for row in rows)
    unable = [row for row in rows if row.action == GuardAction.NONE]
    first = not GuardEpisode.objects.filter(project=project, guard=GuardKind.DAY, episode=episode).exclude(
        pk__in=[r.pk for r in rows]
    )
    _announce(
        project,
        subject=f"project:{project.pk}",
        episode=episode if first else f"{episode}:{rows[0].pk}",
        title=f"{project.name}: day budget reached, {len(rows)} live run{'s' if len(rows) != 1 else ''} "
        f"paused"[:300],
        body=f"{project.name}: {reason}. The day budget guard paused every live run of the project "
        f"({done})."
        + (
            f" It could not pause {len(unable)} of them: {unable[0].reason[len(reason) + 1 :]}"
            if unable
            else ""
        )
        + f" Resume a run on its page to let it go on today; the budget starts again at midnight "
        f"{project.day_zone}.",
        url=absolute_url(project.get_absolute_url()),
    )
    return rows


def guard_run(run: Run) -> Acted:
    """Both guards after a change to `run` (its batch added spend): the spend-aware stop on the run, and
    the project's day budget over all its live runs."""
    out = Acted()
    guard_spend(run, out)
    guard_day_budget(run.project, out)
    return out


def guarded_projects():
    """Projects where a guard is on (the alert sweep evaluates their changed runs too)."""
    return Project.objects.filter(~Q(spend_stop=SpendStop.OFF) | Q(day_budget_usd__isnull=False)).values("pk")


def latest_episode(run: Run) -> GuardEpisode | None:
    """The last time a guard acted on the run (the run page says so)."""
    return GuardEpisode.objects.filter(run=run).order_by("-created", "-id").first()
