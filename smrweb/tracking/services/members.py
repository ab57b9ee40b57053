"""Project members and their roles; a project always keeps an admin."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from smrweb.tracking.errors import (
    InvalidInput,
    NotAllowed,
)
from smrweb.tracking.models import (
    AuditVerb,
    Membership,
    Project,
    Role,
)
from smrweb.tracking.services.audit import record_audit


def add_member(project: Project, user: Any, *, role: str, by: Any = None) -> Membership:
    """Give a user a role in a project (or change it)."""
    with transaction.atomic():
        membership, _ = Membership.objects.update_or_create(
            project=project, user=user, defaults={"role": role}
        )
        record_audit(
            by, AuditVerb.MEMBER_SET, membership, project=project, user=user.get_username(), role=role
        )
    return membership


def set_member(project: Project, *, username: str, role: str, by: Any) -> Membership:
    """An admin adds a teammate (an existing account, by user name or e-mail) with a role, or changes
    their role. The project always keeps an admin."""
    from django.contrib.auth import get_user_model

    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Adding members needs the admin role in {project.slug}.")
    if role not in Role.values:
        raise InvalidInput("role", f"Choose one of {', '.join(Role.values)}.")
    name = (username or "").strip()
    users = get_user_model().objects.filter(is_active=True)
    user = users.filter(username=name).first() or (
        users.filter(email__iexact=name).first() if "@" in name else None
    )
    if user is None:
        raise InvalidInput(
            "username",
            f"No active account is called {name!r}: invite their e-mail address instead, and they make "
            "their own account when they accept.",
        )
    with transaction.atomic():
        _keep_an_admin(project, user, role)
        return add_member(project, user, role=role, by=by)


def remove_member(project: Project, user: Any, *, by: Any) -> None:
    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Removing members needs the admin role in {project.slug}.")
    with transaction.atomic():
        _keep_an_admin(project, user, None)
        deleted, _ = Membership.objects.filter(project=project, user=user).delete()
        if deleted:
            record_audit(by, AuditVerb.MEMBER_REMOVED, project, project=project, user=user.get_username())


def _keep_an_admin(project: Project, user: Any, role: str | None) -> None:
    admins = set(
        Membership.objects.select_for_update()
        .filter(project=project, role=Role.ADMIN)
        .values_list("user_id", flat=True)
    )
    if admins == {user.pk} and role != Role.ADMIN:
        raise InvalidInput(
            "role",
            f"{user.get_username()} is the only admin of {project.slug}: make someone else admin first.",
        )
