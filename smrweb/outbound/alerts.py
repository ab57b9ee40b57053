"""Delivering notifications: email through Django's mail API, Slack-compatible incoming webhooks, and
signed JSON webhooks, all outbound calls through `core.outbound` (public addresses only, no
redirects, timeouts, capped answers). One attempt per call, counted in the database; the task
retries with backoff when trying again may help, and the delivery log on the Alerts tab shows each
outcome. The inbox channel needs no delivery: its notification is written as sent."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.utils import timezone

from smrweb.outbound import http, mail, webhooks
from smrweb.outbound.http import Attempt, Failed
from smrweb.tracking.models import Channel, Notification
from smrweb.tracking.services.alerts import delivery, triggers

log = logging.getLogger(__name__)


def payload(notification: Notification) -> dict:
    """The JSON a webhook receives (and the facts a Slack message is made of)."""
    rule = notification.rule
    return {
        "type": "smrweb.alert",
        "id": notification.pk,
        "trigger": rule.trigger,
        "project": rule.project.slug,
        "subject": notification.subject,
        "episode": notification.episode,
        "title": notification.title,
        "text": notification.body,
        "url": notification.url,
        "created": notification.created.isoformat(),
    }


def slack_message(notification: Notification) -> dict:
    """An incoming-webhook message: `text` for notifications and old clients, blocks for the channel."""
    title = notification.title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    body = notification.body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {
        "text": f"{notification.title} — {notification.url}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*<{notification.url}|{title}>*"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": body[:2900]}},
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"smrweb · {notification.rule.project.name} · {notification.rule.trigger}",
                    }
                ],
            },
        ],
    }


def _post(url: str, body: bytes, headers: dict[str, str]) -> None:
    http.post(url, body, headers, timeout=settings.SMRWEB_ALERT_TIMEOUT_SECONDS, who="the receiver").taken()


def _send_email(notification: Notification) -> None:
    message = EmailMessage(
        subject=f"[smrweb] {notification.title}",
        body=f"{notification.body}\n\n{notification.url}\n\n— smrweb alert rule: {notification.rule}",
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[notification.rule.target],
        headers={
            "X-Smrweb-Trigger": notification.rule.trigger,
            "X-Smrweb-Notification": str(notification.pk),
        },
    )
    mail.send(message)


def digest_message(batch: list[Notification]) -> EmailMessage:
    """One email for a rule's window: "12 submissions waiting for review", each item newest first
    with its link."""
    rule = batch[0].rule
    label = triggers.counted_label(rule.trigger, len(batch))
    oldest = min(n.created for n in batch)
    lines = [
        f"{label} in {rule.project.name} since {oldest:%Y-%m-%d %H:%M} UTC, newest first:",
        "",
    ]
    for n in batch:
        lines += [f"- {n.title}", f"  {n.url}"]
    lines += [
        "",
        f"— smrweb alert rule: {rule} (a digest every {rule.digest_minutes} minutes; the project's "
        "Alerts tab changes it)",
    ]
    return EmailMessage(
        subject=f"[smrweb] {label} — {rule.project.name}",
        body="\n".join(lines),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[rule.target],
        headers={
            "X-Smrweb-Trigger": rule.trigger,
            "X-Smrweb-Digest": str(len(batch)),
            "X-Smrweb-Notification": ",".join(str(n.pk) for n in batch[:50]),
        },
    )


def deliver_digest(rule_id: int) -> Attempt:
    """Send a rule's due digest: one email for its held notifications. A retryable failure holds them
    again for the next digest (until SMRWEB_ALERT_MAX_ATTEMPTS); nothing due is skipped."""
    batch = delivery.claim_digest(rule_id)
    if not batch:
        return Attempt("skipped")
    try:
        mail.send(digest_message(batch))
    except Failed as exc:
        line = f"digest attempt {batch[0].attempts}: {exc}"
        delivery.finish_digest(batch, error=line, retry=exc.retryable)
        log.warning("alert digest of rule %s not delivered: %s", rule_id, line)
        return Attempt("retry" if exc.retryable else "failed")
    delivery.finish_digest(batch)
    return Attempt("sent")


def _send(notification: Notification) -> None:
    rule = notification.rule
    if rule.channel == Channel.EMAIL:
        _send_email(notification)
    elif rule.channel == Channel.SLACK:
        body = json.dumps(slack_message(notification)).encode()
        _post(rule.target, body, {"Content-Type": "application/json", "User-Agent": "smrweb-alert/1"})
    elif rule.channel == Channel.WEBHOOK:
        body, headers = webhooks.signed(
            rule.secret, payload(notification), key=f"smrweb-alert-{notification.pk}", agent="smrweb-alert/1"
        )
        _post(rule.target, body, headers)
    # The inbox channel is delivered when the notification is written.


def deliver(notification_id: int, *, last_try: bool = False) -> Attempt:
    """One delivery attempt. A notification already sent, failed, or being sent elsewhere is skipped."""
    notification = delivery.claim_delivery(notification_id)
    if notification is None:
        return Attempt("skipped")
    last_try = last_try or notification.attempts >= settings.SMRWEB_ALERT_MAX_ATTEMPTS
    try:
        _send(notification)
    except Failed as exc:
        line = f"attempt {notification.attempts}: {exc}"
        if exc.retryable and not last_try:
            delay = http.backoff(
                notification.attempts,
                exc.hint,
                base=settings.SMRWEB_ALERT_RETRY_BASE_SECONDS,
                cap=settings.SMRWEB_ALERT_RETRY_MAX_SECONDS,
            )
            delivery.finish_delivery(
                notification,
                error=f"{line}; retrying in {delay:g} s",
                retry_at=timezone.now() + timedelta(seconds=delay),
            )
            return Attempt("retry", delay)
        delivery.finish_delivery(notification, error=f"{line}; giving up")
        log.warning("alert %s not delivered: %s", notification.pk, line)
        return Attempt("failed")
    delivery.finish_delivery(notification)
    return Attempt("sent")
