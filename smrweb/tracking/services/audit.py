"""The audit trail: every write path records who did what to which object."""

from __future__ import annotations

from typing import Any

from smrweb.tracking.errors import (
    InvalidInput,
)
from smrweb.tracking.models import (
    ApiToken,
    AuditEvent,
    AuditVerb,
    Project,
)


def record_audit(
    actor: Any, verb: AuditVerb | str, obj: Any, *, project: Project | None = None, **detail: Any
) -> AuditEvent:
    """Append an audit row. `actor` is a user, an ApiToken or None (the system). `verb` is an AuditVerb
    (a string that is not one is a ValueError: the audit page and console read only the verbs listed)."""
    verb = AuditVerb(verb)
    user, label = None, "system"
    if isinstance(actor, ApiToken):
        label = f"token:{actor.name}"
    elif actor is not None and getattr(actor, "is_authenticated", False):
        user, label = actor, actor.get_username()
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label,
        verb=verb,
        project=project,
        object_type=type(obj).__name__.lower(),
        object_id=str(getattr(obj, "pk", obj)),
        detail=detail,
    )


def _only(changes: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    """Refuse a change to a field outside `allowed`, naming it."""
    unknown = set(changes) - set(allowed)
    if unknown:
        raise InvalidInput(sorted(unknown)[0], f"Not {what}.")
