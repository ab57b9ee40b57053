"""Reads of alerts: a project's rules with their delivery logs, a person's inbox, and what the run page
says about a run's loops, progress and snooze. Each answers in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Q, QuerySet, Window
from django.db.models.functions import RowNumber

from smrweb.tracking.models import (
    AlertRule,
    LoopFinding,
    LoopPattern,
    Notification,
    Project,
    Run,
    RunSnooze,
)
from smrweb.tracking.queries import progress

DELIVERY_LOG = 20  # notifications shown per rule on the Alerts tab
LOOP_BADGES = 5  # loops named on the run page, newest first


def rules_with_log(project: Project, per_rule: int = DELIVERY_LOG) -> list[AlertRule]:
    """The project's rules, each with `log`: its last `per_rule` notifications, newest first. Two
    queries, whatever the number of rules and notifications."""
    rules = list(AlertRule.objects.filter(project=project).select_related("recipient", "created_by"))
    numbered = Notification.objects.filter(rule__project=project).annotate(
        n=Window(RowNumber(), partition_by=[F("rule_id")], order_by=[F("created").desc(), F("id").desc()])
    )
    logs: dict[int, list[Notification]] = {rule.pk: [] for rule in rules}
    if rules:
        for notification in numbered.filter(n__lte=per_rule).order_by("rule_id", "-created", "-id"):
            logs.setdefault(notification.rule_id, []).append(notification)
    for rule in rules:
        rule.log = logs.get(rule.pk, [])
    return rules


def _of_visible_projects(user) -> Q:
    """Notifications about projects the person can still see (an alert's rule's, a mention's comment's)."""
    visible = Project.objects.visible_to(user)
    return Q(rule__project__in=visible) | Q(comment__project__in=visible)


def unread_count(user) -> int:
    """How many of the person's inbox notifications (alerts and mentions) are unread (one query on the
    inbox index)."""
    if not getattr(user, "is_authenticated", False):
        return 0
    return Notification.objects.filter(
        _of_visible_projects(user), recipient=user, read_at__isnull=True
    ).count()


def inbox(user) -> QuerySet[Notification]:
    """The person's own notifications (alerts and @mentions), newest first (never anyone else's), from
    projects they can still see: someone who left a project no longer reads about it."""
    return (
        Notification.objects.filter(_of_visible_projects(user), recipient=user)
        .select_related("rule__project", "comment__project")
        .order_by("-created", "-id")
    )


@dataclass(frozen=True)
class RunAlerts:
    """What the run page shows about alerts: loops worth a badge, no progress since the best score (a
    live run at DEFAULT_NO_PROGRESS_TURNS turns or more), and the snooze in force."""

    loops: list[LoopFinding]
    no_progress: progress.Progress | None
    snoozed_until: datetime | None

    @property
    def any(self) -> bool:
        """Whether there is a loop or no progress to warn about."""
        return bool(self.loops or self.no_progress)


def badge_loops(run: Run, limit: int = LOOP_BADGES) -> list[LoopFinding]:
    """The run's loops long enough for a badge: the same call DEFAULT_LOOP_REPEATS times in a row, or a
    ping-pong of DEFAULT_LOOP_REPEATS cycles (twice as many calls). Shorter ones are kept for rules that
    ask for less, but not shown."""
    k = progress.DEFAULT_LOOP_REPEATS
    repeat = Q(pattern=LoopPattern.REPEAT, repeats__gte=k)
    shown = repeat | Q(pattern=LoopPattern.PING_PONG, repeats__gte=2 * k)
    return list(LoopFinding.objects.filter(shown, run=run).order_by("-last_turn", "-id")[:limit])


def run_alerts(run: Run, now: datetime) -> RunAlerts:
    """Loops (one query), progress since best (two, live runs only: the turns since from the run's kept
    turn aggregates) and the snooze (one)."""
    stuck = None
    if not run.is_terminal:
        reading = progress.progress_since_best(run, kept=True)
        if reading.turns >= progress.DEFAULT_NO_PROGRESS_TURNS:
            stuck = reading
    snooze = RunSnooze.objects.filter(run=run, until__gt=now).values_list("until", flat=True).first()
    return RunAlerts(loops=badge_loops(run), no_progress=stuck, snoozed_until=snooze)
