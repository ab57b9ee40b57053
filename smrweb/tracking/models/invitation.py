"""Invitations to a project: an admin names an e-mail address and a role; whoever holds the link sent
there, and signs in (or signs up) with that address, joins once (services/invitations.py)."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from smrweb.tracking.models.project import Project, Role


def new_nonce() -> str:
    return secrets.token_urlsafe(16)


class ProjectInvitation(models.Model):
    """One invitation. Its link is `<id>.<signature>`: the signature covers the id, the address and the
    nonce, so a link names one address, and resending (a new nonce) retires every older link."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254)  # stored lower-cased; compared case-insensitively
    role = models.CharField(max_length=10, choices=Role, default=Role.VIEWER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    nonce = models.CharField(max_length=32, default=new_nonce)
    created = models.DateTimeField(auto_now_add=True)
    renewed_at = models.DateTimeField(default=timezone.now)  # invited or resent: the link expires from here
    sent_at = models.DateTimeField(null=True, blank=True)  # the mail server took the latest e-mail
    send_error = models.CharField(max_length=500, blank=True)  # why the latest e-mail did not go out
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-renewed_at", "-id"]
        constraints = [
            # One open invitation per address and project: inviting again renews it.
            models.UniqueConstraint(
                fields=["project", "email"],
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_open_project_email_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} as {self.role} of {self.project}"

    @property
    def expires_at(self):
        return self.renewed_at + timedelta(days=settings.SMRWEB_INVITE_MAX_AGE_DAYS)

    @property
    def is_open(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None

    @property
    def is_expired(self) -> bool:
        return timezone.now() >= self.expires_at

    @property
    def state(self) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.is_expired else "pending"
