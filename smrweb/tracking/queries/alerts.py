"""Reads of alerts: a project's rules with their delivery logs, a person's inbox, and what the run page
says about a run's loops, progress and snooze. Each answers in a fixed number of queries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db.models import Case, Count, F, IntegerField, Max, Q, QuerySet, Value, When, Window
from django.db.models.functions import Left, RowNumber, StrIndex, TruncHour

from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    AlertRule,
    LoopFinding,
    LoopPattern,
    Notification,
    NotificationKind,
    Project,
    Run,
    RunSnooze,
    Trigger,
)
from smrweb.tracking.queries import progress
from smrweb.tracking.services.alerts.triggers import counted_label

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
    """Notifications about projects the person can still see (an alert's rule's, a mention's comment's, a
    guard's own)."""
    visible = Project.objects.visible_to(user)
    return Q(rule__project__in=visible) | Q(comment__project__in=visible) | Q(project__in=visible)


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
        .select_related("rule__project", "comment__project", "project")
        .order_by("-created", "-id")
    )


# --- the inbox: filters, groups, mentions first ----------------------------------------------------------

KINDS = ("mention", "guard", "alert", *Trigger.values)  # "alert": any rule's; a trigger: that rule kind's
GROUP_ITEMS = 50  # a group's items listed when it is opened; the filter shows them all
PINNED_MENTIONS = 20


@dataclass(frozen=True)
class InboxFilter:
    """What the inbox shows: a kind (a mention, any alert, one trigger's), one project, unread only."""

    kind: str = ""
    project: Project | None = None
    unread: bool = False

    @property
    def active(self) -> bool:
        return bool(self.kind or self.project or self.unread)

    def q(self) -> Q:
        q = Q()
        if self.kind == "mention":
            q &= Q(kind=NotificationKind.MENTION)
        elif self.kind == "guard":
            q &= Q(kind=NotificationKind.GUARD)
        elif self.kind == "alert":
            q &= Q(kind=NotificationKind.ALERT)
        elif self.kind:
            q &= Q(kind=NotificationKind.ALERT, rule__trigger=self.kind)
        if self.project is not None:
            q &= Q(rule__project=self.project) | Q(comment__project=self.project) | Q(project=self.project)
        if self.unread:
            q &= Q(read_at__isnull=True)
        return q

    def params(self) -> dict[str, str]:
        """The filter as query parameters (for links and the mark-read form)."""
        shown = {"kind": self.kind, "project": self.project.slug if self.project else ""}
        return {k: v for k, v in {**shown, "unread": "1" if self.unread else ""}.items() if v}


def inbox_filter(user, params: Mapping) -> InboxFilter:
    """The filter named by `params` (kind, project, unread); InvalidInput names the field it refuses."""
    kind = str(params.get("kind") or "").strip()
    if kind and kind not in KINDS:
        raise InvalidInput("kind", f"One of: {', '.join(KINDS)}.")
    slug = str(params.get("project") or "").strip()
    project = None
    if slug:
        project = Project.objects.visible_to(user).filter(slug=slug).first()
        if project is None:
            raise InvalidInput("project", f"No project {slug[:100]!r} that you can see.")
    unread = str(params.get("unread") or "").strip().lower()
    if unread not in ("", "0", "1", "true", "false"):
        raise InvalidInput("unread", "1 or 0 (true or false).")
    return InboxFilter(kind=kind, project=project, unread=unread in ("1", "true"))


_SUBJECT_KIND = Left("subject", StrIndex("subject", Value(":")) - 1)  # "submission" of "submission:7"
_SOLO = Case(  # a mention is a row of its own (a person talking to you), so are a guard's act and a test send
    When(
        Q(kind__in=[NotificationKind.MENTION, NotificationKind.GUARD]) | Q(subject__startswith="test:"),
        then=F("id"),
    ),
    default=Value(0),
    output_field=IntegerField(),
)


@dataclass
class InboxGroup:
    """One rule's notifications about one kind of subject in one hour ("12 submissions waiting for
    review"), or a single notification (a mention, or a group of one)."""

    key: str  # "<rule>:<subject kind>:<hour as epoch>" or "n:<id>": what marking it read names
    count: int
    unread: int
    latest: datetime
    top: int  # its newest notification's id: marking it read stops there
    items: list[Notification]
    label: str = ""

    @property
    def single(self) -> Notification | None:
        return self.items[0] if self.count == 1 and self.items else None


def group_q(key: str) -> Q:
    """The notifications of the group named `key` (as InboxGroup.key writes it)."""
    parts = str(key).split(":")
    try:
        if len(parts) == 2 and parts[0] == "n":
            return Q(pk=int(parts[1]))
        rule, kind, hour = parts
        start = datetime.fromtimestamp(int(hour), tz=dt_timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise InvalidInput("group", "A group of the inbox, as its page names it.") from None
    if not kind.isidentifier():
        raise InvalidInput("group", "A group of the inbox, as its page names it.")
    return Q(
        rule_id=int(rule),
        kind=NotificationKind.ALERT,
        subject__startswith=f"{kind}:",
        created__gte=start,
        created__lt=start + timedelta(hours=1),
    )


def pinned_mentions(user, filt: InboxFilter) -> list[Notification]:
    """Unread @mentions, newest first, above everything else: a person asking you something is never
    buried under a rule's notifications (the demo's mention was 4th between needs_review items)."""
    if filt.kind not in ("", "mention"):
        return []
    rows = inbox(user).filter(filt.q(), kind=NotificationKind.MENTION, read_at__isnull=True)
    return list(rows.select_related("comment")[:PINNED_MENTIONS])


def inbox_groups(user, filt: InboxFilter, *, pinned: bool = True) -> QuerySet:
    """The inbox as groups, newest first: one row per rule, subject kind and hour, each mention its
    own; the unread mentions that are pinned above are left out. Rows of values, for a Paginator;
    `fill_groups` turns a page of them into InboxGroups."""
    rows = inbox(user).filter(filt.q())
    if pinned and filt.kind in ("", "mention"):
        rows = rows.exclude(kind=NotificationKind.MENTION, read_at__isnull=True)
    return (
        rows.order_by()
        .annotate(subject_kind=_SUBJECT_KIND, hour=TruncHour("created"), solo=_SOLO)
        .values("rule_id", "subject_kind", "hour", "solo")
        .annotate(
            count=Count("id"),
            unread=Count("id", filter=Q(read_at__isnull=True)),
            latest=Max("created"),
            top=Max("id"),
        )
        .order_by("-latest", "-top")
    )


def fill_groups(user, rows, filt: InboxFilter) -> list[InboxGroup]:
    """A page of `inbox_groups` rows with their newest GROUP_ITEMS notifications each (one query)."""
    rows = list(rows)
    if not rows:
        return []
    keys = {}
    match = Q(pk__in=[])
    for row in rows:
        if row["solo"]:
            key, q = f"n:{row['solo']}", Q(pk=row["solo"])
        else:
            key = f"{row['rule_id']}:{row['subject_kind']}:{int(row['hour'].timestamp())}"
            q = group_q(key)
        keys[key] = row
        match |= q
    numbered = (
        inbox(user)
        .filter(filt.q())
        .filter(match)
        .annotate(
            subject_kind=_SUBJECT_KIND,
            hour=TruncHour("created"),
            solo=_SOLO,
            n=Window(
                RowNumber(),
                partition_by=[F("rule_id"), _SUBJECT_KIND, TruncHour("created"), _SOLO],
                order_by=[F("created").desc(), F("id").desc()],
            ),
        )
        .filter(n__lte=GROUP_ITEMS)
    )
    items: dict[str, list[Notification]] = {key: [] for key in keys}
    for n in numbered:
        key = f"n:{n.solo}" if n.solo else f"{n.rule_id}:{n.subject_kind}:{int(n.hour.timestamp())}"
        items.setdefault(key, []).append(n)
    groups = []
    for key, row in keys.items():
        members = items.get(key, [])
        group = InboxGroup(key, row["count"], row["unread"], row["latest"], row["top"], members)
        if row["count"] > 1 and members and members[0].rule is not None:
            group.label = (
                f"{counted_label(members[0].rule.trigger, row['count'])} · {members[0].rule.project.name}"
            )
        groups.append(group)
    return groups


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


def no_progress(run: Run, *, best: tuple | None | bool = False) -> progress.Progress | None:
    """Progress since best (two queries, live runs only: the turns since from the run's kept turn
    aggregates; one when the caller read the best, `progress.best_counted`) when it is long enough to warn
    about, else None."""
    if run.is_terminal:
        return None
    reading = progress.progress_since_best(run, kept=True, best=best)
    return reading if reading.turns >= progress.DEFAULT_NO_PROGRESS_TURNS else None


def run_alerts(run: Run, now: datetime, *, stuck: progress.Progress | None | bool = False) -> RunAlerts:
    """Loops (one query), `no_progress` (unless the caller read it: `stuck`) and the snooze (one)."""
    if stuck is False:
        stuck = no_progress(run)
    snooze = RunSnooze.objects.filter(run=run, until__gt=now).values_list("until", flat=True).first()
    return RunAlerts(loops=badge_loops(run), no_progress=stuck, snoozed_until=snooze)
