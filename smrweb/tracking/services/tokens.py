"""Project API tokens: minted once, stored hashed, revocable."""

from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from smrweb.tracking.models import (
    ApiToken,
    AuditVerb,
    Project,
    hash_token,
)
from smrweb.tracking.services.audit import record_audit


def create_api_token(project: Project, *, name: str, by: Any = None) -> tuple[ApiToken, str]:
    """Create a project-scoped token. Returns the row and the raw token, which is never stored."""
    raw = ApiToken.PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            project=project,
            name=name,
            token_hash=hash_token(raw),
            hint=raw[:10],
            created_by=by if getattr(by, "is_authenticated", False) else None,
        )
        record_audit(by, AuditVerb.TOKEN_CREATED, token, project=project, name=name)
    return token, raw


def revoke_api_token(token: ApiToken, *, by: Any = None) -> ApiToken:
    """Revoke a token; requests bearing it are refused from now on."""
    with transaction.atomic():
        if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
            record_audit(by, AuditVerb.TOKEN_REVOKED, token, project=token.project, name=token.name)
    token.refresh_from_db()
    return token


def authenticate_token(raw: str) -> ApiToken | None:
    """The active token matching `raw`, with its last-used time refreshed (at most once a minute)."""
    # The project with its scenario, which every API view then uses (api.access.project_for); the hash
    # is unique, so no ORDER BY to compile.
    found = ApiToken.objects.select_related("project__scenario").filter(token_hash=hash_token(raw))
    token = next(iter(found.order_by()[:1]), None)
    if token is None or not token.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
