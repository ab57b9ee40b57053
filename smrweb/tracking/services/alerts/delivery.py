"""The bookkeeping of delivering notifications (outbound/alerts.py sends): claims, outcomes, the
sweep's list of stuck deliveries, and digests — an email rule's held notifications, one email per window."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from smrweb.tracking.models import (
    AlertRule,
    Notification,
    NotificationStatus,
)
from smrweb.tracking.services.alerts.triggers import DIGEST_MAX_ITEMS, DIGEST_MINUTES


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
