"""Alerts: a project's rules, and the evaluation that turns what the write path recorded into
notifications — one per rule, subject and episode.

An *episode* is one stretch of a rule's condition on one subject, named by something that only
changes when the condition starts again: the state change that failed the run, the moment it
stalled, the best score a regression is measured from, the budget level reached, the loop's first
turn. The unique key (rule, subject, episode) is what keeps a replayed batch or a redelivered task
from notifying twice, while a run that recovers and stalls again notifies again.

Evaluation runs on a worker after the write path's commits (`signals.alerts_due`), never in a page
view. Delivery (email, Slack, webhooks) is `outbound/alerts.py`; the inbox channel is delivered here,
by writing the notification.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import F, Min, Q
from django.urls import reverse
from django.utils import timezone

from smrweb.core import numbers
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    NEVER_COUNTED,
    TERMINAL_STATES,
    AlertRule,
    ArenaResult,
    AuditEvent,
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
    StateChange,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
    Trigger,
)
from smrweb.tracking.queries import progress
from smrweb.tracking.services.audit import record_audit


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


# --- rules --------------------------------------------------------------------------------------------


def _check_rule(
    project: Project, trigger: str, channel: str, target: str, recipient: str | None, threshold, window
) -> Any:
    """Validate a rule's fields; the inbox channel's user, or None."""
    if trigger not in Trigger.values:
        raise InvalidInput("trigger", f"One of: {', '.join(Trigger.values)}.")
    if channel not in Channel.values:
        raise InvalidInput("channel", f"One of: {', '.join(Channel.values)}.")
    allowed = TRIGGER_PARAMETERS.get(trigger, {})
    for name, value in (("threshold", threshold), ("window", window)):
        if value is None:
            continue
        spec = allowed.get(name)
        if spec is None:
            raise InvalidInput(name, f"{trigger} takes no {name}.")
        if name == "window" and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidInput(name, "A whole number.")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not spec.minimum <= value <= spec.maximum
        ):
            raise InvalidInput(name, f"A number from {spec.minimum:g} to {spec.maximum:g}: {spec.meaning}.")
    if trigger == Trigger.RUN_REGRESSED and threshold is None and project.regression_threshold is None:
        raise InvalidInput(
            "threshold", "The project has no regression threshold: set one in its settings, or give one here."
        )
    if channel == Channel.INBOX:
        if target:
            raise InvalidInput("target", "The inbox channel takes a user name (recipient), not a target.")
        user = get_user_model().objects.filter(username=recipient or "", is_active=True).first()
        if user is None or not project.members.filter(pk=user.pk).exists():
            raise InvalidInput("recipient", f"{recipient or '(empty)'} is not a member of {project.slug}.")
        return user
    if recipient:
        raise InvalidInput("recipient", "Only the inbox channel takes a recipient.")
    if channel == Channel.EMAIL:
        try:
            validate_email(target)
        except ValidationError:
            raise InvalidInput("target", "A valid email address.") from None
    else:
        from smrweb.tracking.services.projects import check_outbound_url

        if not target:
            raise InvalidInput("target", "The URL to POST to.")
        check_outbound_url("target", target)
    return None


def create_alert_rule(
    project: Project,
    *,
    by: Any,
    trigger: str,
    channel: str,
    target: str = "",
    recipient: str | None = None,
    threshold: float | None = None,
    window: int | None = None,
    delivery: str | None = None,
    digest_minutes: int | None = None,
    include_candidates: bool = False,
) -> AlertRule:
    """A new rule. What its condition already holds for is recorded as suppressed (it predates the
    rule): a rule speaks of what happens after it is made, not of last month's failed runs. A rule
    that repeats an existing one (same trigger, options and destination) is refused, naming it."""
    target = (target or "").strip()
    user = _check_rule(project, trigger, channel, target, recipient, threshold, window)
    delivery, digest_minutes = _check_delivery(trigger, channel, delivery, digest_minutes)
    if include_candidates and trigger != Trigger.SCORE_NEW_BEST:
        raise InvalidInput("include_candidates", f"Only {Trigger.SCORE_NEW_BEST} takes include_candidates.")
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # one rule check at a time
        # What makes two rules the same: everything but how they deliver (a digest of a duplicate is still
        # a second notice of each event), the target compared as an address is (case-insensitively).
        identity = dict(
            project=project,
            trigger=trigger,
            channel=channel,
            recipient=user,
            threshold=threshold,
            window=window,
            include_candidates=bool(include_candidates),
        )
        same = AlertRule.objects.filter(**identity, target__iexact=target).first()
        if same is not None:
            raise DuplicateRule(same)
        rule = AlertRule.objects.create(
            **identity,
            target=target,
            delivery=delivery,
            digest_minutes=digest_minutes,
            secret=secrets.token_hex(32) if channel == Channel.WEBHOOK else "",
            created_by=by if getattr(by, "is_authenticated", False) else None,
        )
        record_audit(by, "alert_rule.created", rule, project=project, trigger=trigger, channel=channel)
        _baseline(rule)
    return rule


class DuplicateRule(InvalidInput):
    """The rule asked for exists already: two would notify the same destination twice for each event."""

    code = "duplicate_rule"

    def __init__(self, existing: AlertRule):
        when = f"{existing.created:%Y-%m-%d}"
        by = f" by {existing.created_by.get_username()}" if existing.created_by_id else ""
        super().__init__(
            "non_field_errors",
            f"This rule exists already: rule #{existing.pk}, {existing.trigger} → {existing.destination} "
            f"(added{by} on {when}{', muted' if existing.muted else ''}). Change that one, or give this one "
            "another trigger, option or destination.",
        )
        self.existing = existing  # the API's answer keeps its one error shape: the message names it


def _check_delivery(trigger: str, channel: str, delivery: str | None, minutes: int | None) -> tuple:
    """The rule's delivery and digest window: email rules of high-volume triggers default to a digest
    every DIGEST_MINUTES; other channels deliver each notification (the inbox groups them itself)."""
    if delivery is None:
        delivery = (
            Delivery.DIGEST
            if channel == Channel.EMAIL and trigger in DIGEST_BY_DEFAULT and minutes is None
            else Delivery.IMMEDIATE
        )
        if minutes is not None and channel == Channel.EMAIL:
            delivery = Delivery.DIGEST  # a window given is a digest asked for
    if delivery not in Delivery.values:
        raise InvalidInput("delivery", f"One of: {', '.join(Delivery.values)}.")
    if delivery == Delivery.IMMEDIATE:
        if minutes is not None:
            raise InvalidInput(
                "digest_minutes", "Only a digest has a window: leave it out, or ask for a digest."
            )
        return delivery, None
    if channel != Channel.EMAIL:
        raise InvalidInput(
            "delivery", "Only email rules send digests (the inbox groups notifications by itself)."
        )
    if minutes is None:
        return delivery, DIGEST_MINUTES.default
    spec = DIGEST_MINUTES
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int)
        or not spec.minimum <= minutes <= spec.maximum
    ):
        raise InvalidInput(
            "digest_minutes", f"A whole number from {spec.minimum:g} to {spec.maximum:g}: {spec.meaning}."
        )
    return delivery, minutes


def update_alert_rule(rule: AlertRule, *, by: Any, muted: bool) -> AlertRule:
    """Mute or unmute. Episodes that start while muted are recorded as suppressed and never sent later."""
    with transaction.atomic():
        now = timezone.now()
        AlertRule.objects.filter(pk=rule.pk).update(muted=muted, updated=now)
        rule.muted, rule.updated = muted, now
        record_audit(by, "alert_rule.muted" if muted else "alert_rule.unmuted", rule, project=rule.project)
    return rule


def delete_alert_rule(rule: AlertRule, *, by: Any) -> None:
    with transaction.atomic():
        record_audit(by, "alert_rule.deleted", rule, project=rule.project, trigger=rule.trigger)
        rule.delete()


def send_test(rule: AlertRule, *, by: Any) -> Notification:
    """A test notification through the rule's channel (the caller queues its delivery)."""
    with transaction.atomic():
        record_audit(by, "alert_rule.test_sent", rule, project=rule.project)
        inbox = rule.channel == Channel.INBOX
        gone = inbox and not _still_member(rule)
        if gone:
            status = NotificationStatus.SUPPRESSED
        else:
            status = NotificationStatus.SENT if inbox else NotificationStatus.PENDING
        return Notification.objects.create(
            rule=rule,
            subject=f"test:{uuid.uuid4().hex}",
            episode="test",
            recipient=rule.recipient if inbox else None,
            title=f"Test of the {rule.trigger} alert of {rule.project.name}",
            body=f"This is a test sent by {getattr(by, 'username', 'smrweb')} from the project's Alerts tab. "
            f"The rule notifies {rule.destination} when: {rule.get_trigger_display()}.",
            url=absolute_url(reverse("dashboard:project-alerts", args=[rule.project.slug])),
            status=status,
            suppressed_because="recipient no longer a member" if gone else "",
            sent_at=timezone.now() if status == NotificationStatus.SENT else None,
        )


def snooze_run(run: Run, *, by: Any, hours: float) -> RunSnooze:
    if not 0 < hours <= 24 * 30:
        raise InvalidInput("hours", "From a minute to 30 days (720 hours).")
    with transaction.atomic():
        snooze, _ = RunSnooze.objects.update_or_create(
            run=run,
            defaults={"until": timezone.now() + timedelta(hours=hours), "by": by},
        )
        record_audit(by, "run.snoozed", run, project=run.project, until=snooze.until.isoformat())
    return snooze


def unsnooze_run(run: Run, *, by: Any) -> None:
    with transaction.atomic():
        if RunSnooze.objects.filter(run=run).delete()[0]:
            record_audit(by, "run.unsnoozed", run, project=run.project)


def mark_read(
    user: Any, ids: list[int] | None = None, *, where: Q | None = None, upto: int | None = None
) -> int:
    """Mark the person's inbox notifications read: all of them, those of `ids`, or those matching an
    inbox filter or group (`where`, from queries.alerts) — only up to `upto`, the newest one the
    person saw, so what arrived since stays unread."""
    rows = Notification.objects.filter(recipient=user, read_at__isnull=True)
    if ids is not None:
        rows = rows.filter(pk__in=ids)
    if where is not None:
        rows = rows.filter(where)
    if upto is not None:
        rows = rows.filter(pk__lte=upto)
    return rows.update(read_at=timezone.now())


# --- delivery bookkeeping (outbound/alerts.py sends) -----------------------------------------------


def claim_delivery(notification_id: int) -> Notification | None:
    """Start an attempt: pending or retrying → sending, attempts + 1. None when another attempt has it
    or it is done (a redelivered task acts once)."""
    now = timezone.now()
    claimed = Notification.objects.filter(
        Q(status=NotificationStatus.PENDING)
        | Q(status=NotificationStatus.RETRYING)
        | Q(
            status=NotificationStatus.SENDING,
            updated__lt=now - timedelta(seconds=settings.SMRWEB_STALE_ACTION_SECONDS),
        ),
        pk=notification_id,
        in_digest=False,  # a digest's notification is sent with its digest (claim_digest)
    ).update(status=NotificationStatus.SENDING, attempts=F("attempts") + 1, updated=now)
    if not claimed:
        return None
    return Notification.objects.select_related("rule__project", "rule__recipient").get(pk=notification_id)


def finish_delivery(notification: Notification, *, error: str = "", retry_at: datetime | None = None) -> None:
    """Record the attempt's outcome: sent (no error), retrying at `retry_at`, or failed."""
    now = timezone.now()
    if not error:
        fields = {
            "status": NotificationStatus.SENT,
            "sent_at": now,
            "last_error": "",
            "next_attempt_at": None,
        }
    elif retry_at is not None:
        fields = {
            "status": NotificationStatus.RETRYING,
            "last_error": error[:2000],
            "next_attempt_at": retry_at,
        }
    else:
        fields = {"status": NotificationStatus.FAILED, "last_error": error[:2000], "next_attempt_at": None}
    Notification.objects.filter(pk=notification.pk, status=NotificationStatus.SENDING).update(
        updated=now, **fields
    )


def due_deliveries(now: datetime | None = None) -> list[int]:
    """Notifications whose delivery should be under way and is not (a lost task, a broker that was
    down): pending or sending for longer than the stale-action time, or retrying past their time."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.SMRWEB_STALE_ACTION_SECONDS)
    return list(
        Notification.objects.filter(
            Q(status__in=[NotificationStatus.PENDING, NotificationStatus.SENDING], updated__lt=stale)
            | Q(status=NotificationStatus.RETRYING, next_attempt_at__lte=now),
            in_digest=False,  # a digest's notifications go with their digest (digests_due)
        ).values_list("pk", flat=True)[:500]
    )


# --- digests: an email rule's held notifications, sent as one email per window -------------------------


def digests_due(now: datetime | None = None) -> list[int]:
    """Rules whose digest is due: their oldest held notification is a window old. A digest claimed
    and never finished (a worker lost mid-send) is held again first, so it goes out with the next."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.SMRWEB_STALE_ACTION_SECONDS)
    Notification.objects.filter(in_digest=True, status=NotificationStatus.SENDING, updated__lt=stale).update(
        status=NotificationStatus.HELD, updated=now
    )
    waiting = (
        Notification.objects.filter(status=NotificationStatus.HELD)
        .values("rule_id", "rule__digest_minutes")
        .annotate(oldest=Min("created"))
        .order_by()
    )
    return [
        row["rule_id"]
        for row in waiting
        if row["oldest"] <= now - timedelta(minutes=row["rule__digest_minutes"] or DIGEST_MINUTES.default)
    ]


def claim_digest(rule_id: int, now: datetime | None = None) -> list[Notification]:
    """Start sending a rule's digest: its held notifications (oldest first, at most DIGEST_MAX_ITEMS)
    → sending, attempts + 1. Empty when it is not due (a redelivered task, a second worker)."""
    now = now or timezone.now()
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(pk=rule_id).first()  # one claim per rule
        if rule is None:
            return []
        held = Notification.objects.filter(rule=rule, status=NotificationStatus.HELD).order_by(
            "created", "id"
        )
        first = held.first()
        minutes = rule.digest_minutes or DIGEST_MINUTES.default
        if first is None or first.created > now - timedelta(minutes=minutes):
            return []
        ids = list(held.values_list("pk", flat=True)[:DIGEST_MAX_ITEMS])
        Notification.objects.filter(pk__in=ids).update(
            status=NotificationStatus.SENDING, attempts=F("attempts") + 1, updated=now
        )
    return list(
        Notification.objects.filter(pk__in=ids).select_related("rule__project").order_by("-created", "-id")
    )


def finish_digest(batch: list[Notification], *, error: str = "", retry: bool = False) -> None:
    """A digest's outcome for each of its notifications: sent; held again for the next digest (a
    retryable error, attempts left); or failed."""
    now = timezone.now()
    ids = [n.pk for n in batch]
    rows = Notification.objects.filter(pk__in=ids, status=NotificationStatus.SENDING)
    if not error:
        rows.update(status=NotificationStatus.SENT, sent_at=now, last_error="", updated=now)
    elif retry:
        rows.filter(attempts__lt=settings.SMRWEB_ALERT_MAX_ATTEMPTS).update(
            status=NotificationStatus.HELD, last_error=error[:2000], updated=now
        )
        rows.update(status=NotificationStatus.FAILED, last_error=error[:2000], updated=now)
    else:
        rows.update(status=NotificationStatus.FAILED, last_error=error[:2000], updated=now)


# --- evaluation ---------------------------------------------------------------------------------------


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


@dataclass
class Evaluation:
    """What one evaluation did: notifications to deliver, and whether the budget guard asked for a stop."""

    to_deliver: list[int] = field(default_factory=list)
    stop_requested: bool = False


def _still_member(rule: AlertRule) -> bool:
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
    elif inbox and not _still_member(rule):
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


def _run_label(run: Run) -> str:
    return f"{run.project.name}: run {run.external_id}"


def _run_episodes(rule: AlertRule, run: Run, memo: dict) -> Iterator[Episode]:
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
    counted = Submission.objects.filter(run=run, excluded_at__isnull=True).exclude(status__in=NEVER_COUNTED)
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


def _new_best_candidates(rule: AlertRule, project: Project):
    """The submissions a new-best rule compares: those the project's best counts (verified and on),
    or, with the rule's `include_candidates`, unverified candidates too."""
    return Submission.objects.filter(project=project).counted(unverified=rule.include_candidates)


def _new_best_episodes(rule, run, episode, label) -> Iterator[Episode]:
    project = run.project
    maximize = project.scenario.maximize
    counted = _new_best_candidates(rule, project)
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


def _submission_episodes(rule: AlertRule, sub: Submission) -> Iterator[Episode]:
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


def _source_episodes(rule: AlertRule, project: Project) -> Iterator[Episode]:
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
            verb="run.stop_requested", object_type="run", object_id=str(run.pk), detail__budget_guard=True
        ).exists():
            return False
        fraction, unit = reading
        record_audit(
            None,
            "run.stop_requested",
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
    sub_projects = with_rules.filter(trigger__in=(*SUBMISSION_TRIGGERS, Trigger.SCORE_NEW_BEST)).values(
        "project_id"
    )
    source_projects = with_rules.filter(trigger__in=SOURCE_TRIGGERS).values("project_id")
    return {
        "run": list(
            Run.objects.filter(updated__gte=since, project_id__in=run_projects).values_list("pk", flat=True)[
                :limit
            ]
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
    return _notify(result, _rules(run.project, RUN_TRIGGERS), lambda rule: _run_episodes(rule, run, memo))


def evaluate_submission(submission_id: int) -> Evaluation:
    query = Submission.objects.select_related("project__scenario", "run__project")
    sub = query.filter(pk=submission_id).first()
    if sub is None:
        return Evaluation()
    result = _notify(
        Evaluation(), _rules(sub.project, SUBMISSION_TRIGGERS), lambda rule: _submission_episodes(rule, sub)
    )
    # A verification can make a new project best (the best counts verified submissions): its run's
    # new-best rules are evaluated here, as the score's batch evaluated them when it was a candidate.
    new_best = _rules(sub.project, (Trigger.SCORE_NEW_BEST,))
    return _notify(result, new_best, lambda rule: _run_episodes(rule, sub.run, {}))


def evaluate_source(project_id: int) -> Evaluation:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return Evaluation()
    return _notify(
        Evaluation(), _rules(project, SOURCE_TRIGGERS), lambda rule: _source_episodes(rule, project)
    )


def _baseline(rule: AlertRule) -> None:
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
            best = _new_best_candidates(rule, project)
            best = best.order_by("-score" if project.scenario.maximize else "score", "ts", "id").first()
            runs = runs.filter(pk=best.run_id) if best else runs.none()
        elif rule.trigger == Trigger.RUN_LOOP:
            runs = runs.filter(loop_findings__isnull=False).distinct()
        elif rule.trigger in (Trigger.RUN_NO_PROGRESS, Trigger.RUN_DOWNGRADED, Trigger.RUN_REGRESSED):
            runs = runs.exclude(state__in=TERMINAL_STATES)
        for run in runs.iterator(chunk_size=200):
            memo = {
                "loops": list(LoopFinding.objects.filter(run=run)) if rule.trigger == Trigger.RUN_LOOP else []
            }
            for ep in _run_episodes(rule, run, memo):
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
            for ep in _submission_episodes(rule, sub):
                _record(rule, ep, baseline=True, now=now)
    else:
        for ep in _source_episodes(rule, project):
            _record(rule, ep, baseline=True, now=now)
