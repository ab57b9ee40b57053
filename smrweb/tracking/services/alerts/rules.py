"""A project's alert rules: create (recording what the condition already holds as its baseline), mute,
delete and test; run snoozes; and marking the inbox read."""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from smrweb.tracking.errors import DuplicateRule, InvalidInput
from smrweb.tracking.models import (
    AlertRule,
    AuditVerb,
    Channel,
    Delivery,
    Notification,
    NotificationStatus,
    Project,
    Run,
    RunSnooze,
    Trigger,
)
from smrweb.tracking.services.alerts.evaluation import baseline, still_member
from smrweb.tracking.services.alerts.triggers import (
    DIGEST_BY_DEFAULT,
    DIGEST_MINUTES,
    TRIGGER_PARAMETERS,
    absolute_url,
)
from smrweb.tracking.services.audit import record_audit


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
        record_audit(
            by, AuditVerb.ALERT_RULE_CREATED, rule, project=project, trigger=trigger, channel=channel
        )
        baseline(rule)
    return rule


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
        record_audit(
            by,
            AuditVerb.ALERT_RULE_MUTED if muted else AuditVerb.ALERT_RULE_UNMUTED,
            rule,
            project=rule.project,
        )
    return rule


def delete_alert_rule(rule: AlertRule, *, by: Any) -> None:
    with transaction.atomic():
        record_audit(by, AuditVerb.ALERT_RULE_DELETED, rule, project=rule.project, trigger=rule.trigger)
        rule.delete()


def send_test(rule: AlertRule, *, by: Any) -> Notification:
    """A test notification through the rule's channel (the caller queues its delivery)."""
    with transaction.atomic():
        record_audit(by, AuditVerb.ALERT_RULE_TEST_SENT, rule, project=rule.project)
        inbox = rule.channel == Channel.INBOX
        gone = inbox and not still_member(rule)
        if gone:
            status = NotificationStatus.SUPPRESSED
        else:
            status = NotificationStatus.SENT if inbox else NotificationStatus.PENDING
        return Notification.objects.create(
            rule=rule,
            project_id=rule.project_id,
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
        record_audit(by, AuditVerb.RUN_SNOOZED, run, project=run.project, until=snooze.until.isoformat())
    return snooze


def unsnooze_run(run: Run, *, by: Any) -> None:
    with transaction.atomic():
        if RunSnooze.objects.filter(run=run).delete()[0]:
            record_audit(by, AuditVerb.RUN_UNSNOOZED, run, project=run.project)


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
