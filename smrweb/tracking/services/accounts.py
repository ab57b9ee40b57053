"""A person's own account: what changed in it is audited like everything else a person does."""

from __future__ import annotations

from typing import Any

from smrweb.tracking.models import AuditVerb
from smrweb.tracking.services.audit import record_audit


def password_changed(user: Any, *, how: str) -> None:
    """Audit a password set by its owner: `how` is "changed" (signed in) or "reset" (by an e-mailed link)."""
    record_audit(user, AuditVerb(f"account.password_{how}"), user, user=user.get_username())
