"""Delivering notifications: email through Django's mail API, Slack-compatible incoming webhooks, and
signed JSON webhooks, all outbound calls through `core.outbound` (public addresses only, no
redirects, timeouts, capped answers). One attempt per call, counted in the database; the task
retries with backoff when trying again may help, and the delivery log on the Alerts tab shows each
outcome. The inbox channel needs no delivery: its notification is written as sent."""

from __future__ import annotations

import json
import logging
import smtplib
import socket
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.utils import timezone

from smrweb.core import outbound
from smrweb.sources.dispatch import retry_after
from smrweb.tracking.models import Channel, Notification
from smrweb.tracking.services.alerts import delivery, triggers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attempt:
    outcome: str  # "sent" | "retry" | "failed" | "skipped"
    retry_in: float | None = None


class Undelivered(Exception):
    def __init__(self, line: str, *, retryable: bool, hint: float | None = None):
        super().__init__(line)
        self.retryable, self.hint = retryable, hint


def backoff(attempt: int, hint: float | None = None) -> float:
    """Seconds before the next attempt: exponential from the base, or the receiver's Retry-After, capped."""
    cap = settings.SMRWEB_ALERT_RETRY_MAX_SECONDS
    base = min(settings.SMRWEB_ALERT_RETRY_BASE_SECONDS * 2 ** min(attempt - 1, 60), cap)
    if hint is None or hint != hint or hint < 0:
        return base
    return min(max(hint, base), cap)


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
    try:
        answer = outbound.post(
            url, content=body, headers=headers, timeout=settings.SMRWEB_ALERT_TIMEOUT_SECONDS
        )
    except outbound.Unresolvable as exc:
        raise Undelivered(str(exc), retryable=True) from None
    except outbound.Refused as exc:
        raise Undelivered(f"not sent: {exc}", retryable=False) from None
    except httpx.TimeoutException:
        raise Undelivered("the receiver did not answer in time", retryable=True) from None
    except httpx.HTTPError as exc:
        raise Undelivered(f"could not reach the receiver ({type(exc).__name__})", retryable=True) from None
    if 200 <= answer.status < 300:
        return
    line = f"the receiver answered HTTP {answer.status}"
    if 300 <= answer.status < 400:
        line += " (a redirect: not followed)"
    hint = retry_after(answer.headers.get("Retry-After")) if answer.status == 429 else None
    raise Undelivered(line, retryable=answer.status in (408, 429) or answer.status >= 500, hint=hint)


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
    _mail(message)


def _mail(message: EmailMessage) -> None:
    try:
        with get_connection(timeout=settings.EMAIL_TIMEOUT) as connection:
            connection.send_messages([message])
    except smtplib.SMTPRecipientsRefused as exc:
        raise Undelivered(
            f"the mail server refused the recipient ({exc.recipients})", retryable=False
        ) from None
    except (smtplib.SMTPException, OSError, socket.timeout) as exc:
        raise Undelivered(f"the mail server: {type(exc).__name__}: {exc}"[:500], retryable=True) from None


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
        _mail(digest_message(batch))
    except Undelivered as exc:
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
        body = json.dumps(payload(notification), separators=(",", ":"), sort_keys=True).encode()
        headers = outbound.signed_headers(
            rule.secret,
            body,
            timestamp=int(timezone.now().timestamp()),
            idempotency_key=f"smrweb-alert-{notification.pk}",
            agent="smrweb-alert/1",
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
    except Undelivered as exc:
        line = f"attempt {notification.attempts}: {exc}"
        if exc.retryable and not last_try:
            delay = backoff(notification.attempts, exc.hint)
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


def stop_push_run(run, *, reason: str) -> str:
    """The budget guard's stop for a push project: a signed `stop` POST to the project's webhook. Returns
    what happened, for the audit trail."""
    from smrweb.tracking.services.rollbacks import stop_webhook_request

    url = run.project.rollback_webhook_url
    if not url:
        return "not sent: the project has no webhook URL to send a stop to"
    body, headers = stop_webhook_request(run, reason=reason)
    try:
        _post(url, body, headers)
    except Undelivered as exc:
        return f"not delivered: {exc}"
    return "the webhook accepted the stop"
