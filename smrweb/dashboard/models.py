"""Per-user display preferences: which clock every page and chart uses."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Clock(models.TextChoices):
    UTC = "utc", "UTC"
    LOCAL = "local", "My browser's time zone"


class UserPreference(models.Model):
    """One row per user who changed a preference; users without one see UTC.

    `local_zone` is the IANA zone the browser reported when "local" was chosen: the server renders
    every time (text and charts) in it, and the page script keeps it current when the browser's
    zone changes (a cookie the middleware reads)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, models.CASCADE, related_name="preference")
    clock = models.CharField(max_length=10, choices=Clock, default=Clock.UTC)
    local_zone = models.CharField(max_length=64, blank=True)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user} · {self.clock}"


class SsoIdentity(models.Model):
    """A person's account at an OIDC provider (issuer + subject, the claims that never change) linked to
    the smrweb user it signs in as (dashboard/sso.py). Email addresses and user names can change or be
    reused at the provider; the subject cannot, so a second sign-in finds the same user by this row."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="sso_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created = models.DateTimeField(auto_now_add=True)
    last_login = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")]

    def __str__(self) -> str:
        return f"{self.user} · {self.issuer} · {self.subject}"
