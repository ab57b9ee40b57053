"""Mail through Django's mail API (EMAIL_URL): `send`, the one way a message goes out (alert emails and
digests, invitations), and invitation e-mails, sent while the admin waits, so the Members tab can say
at once whether the mail server took it. The link is absolute under SMRWEB_BASE_URL."""

from __future__ import annotations

import logging
import smtplib
import socket

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.template.loader import render_to_string
from django.urls import reverse

from smrweb.outbound.http import Failed
from smrweb.tracking import services
from smrweb.tracking.models import ProjectInvitation

log = logging.getLogger(__name__)


def send(message: EmailMessage) -> None:
    """Hand one message to the mail server; `http.Failed` when it did not take it (a refused recipient
    is final, anything else may pass on another attempt)."""
    try:
        with get_connection(timeout=settings.EMAIL_TIMEOUT) as connection:
            connection.send_messages([message])
    except smtplib.SMTPRecipientsRefused as exc:
        raise Failed(
            f"the mail server refused the recipient ({', '.join(exc.recipients)})", retryable=False
        ) from None
    except (smtplib.SMTPException, OSError, socket.timeout) as exc:
        raise Failed(f"the mail server: {type(exc).__name__}: {exc}"[:500], retryable=True) from None


def invitation_url(invitation: ProjectInvitation) -> str:
    token = services.invitation_token(invitation)
    return f"{settings.SMRWEB_BASE_URL}{reverse('dashboard:invitation', args=[token])}"


def send_invitation(invitation: ProjectInvitation) -> str:
    """Mail the invitation's current link; record and return what went wrong ("" when the server took it)."""
    project = invitation.project
    inviter = invitation.invited_by.get_username() if invitation.invited_by else "An admin"
    body = render_to_string(
        "dashboard/email/invitation.txt",
        {
            "invitation": invitation,
            "project": project,
            "inviter": inviter,
            "url": invitation_url(invitation),
            "days": settings.SMRWEB_INVITE_MAX_AGE_DAYS,
        },
    )
    message = EmailMessage(
        subject=f"[smrweb] {inviter} invites you to {project.name} ({project.slug})",
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[invitation.email],
        headers={"X-Smrweb-Invitation": str(invitation.pk)},
    )
    error = ""
    try:
        send(message)
    except Failed as exc:
        error = exc.line
    if error:
        log.warning("invitation %s to %s not sent: %s", invitation.pk, invitation.email, error)
    services.record_invitation_sent(invitation, error=error)
    return error
