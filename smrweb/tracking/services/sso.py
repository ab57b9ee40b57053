"""Project memberships granted by a single-sign-on provider's claim (docs/sso.md).

The claim named by SMRWEB_OIDC_PROJECTS_CLAIM lists a person's projects, in either form:
- a list of strings, "slug" (viewer) or "slug:role" — ["lab-a:reviewer", "lab-b"];
- an object {slug: role} — {"lab-a": "reviewer", "lab-b": "viewer"}.
Each sign-in grants the listed memberships and changes roles that differ, through `add_member` (audited as
the system). It never removes a membership the claim leaves out (an admin does that on the project), and
never demotes a project's only admin. Entries it cannot use (an unknown project or role, a value that is
not a string) are skipped and logged; a claim of any other shape changes nothing and is logged."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Membership, Project, Role
from smrweb.tracking.services.members import _keep_an_admin, add_member

logger = logging.getLogger(__name__)


def parse_project_claim(value: Any) -> tuple[dict[str, str], list[str]]:
    """The claim as {slug: role} (the highest role where a slug repeats) and the problems found."""
    problems: list[str] = []
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        for entry in value:
            if not isinstance(entry, str):
                problems.append(f"entry {entry!r} is not a string")
                continue
            slug, _, role = entry.partition(":")
            pairs.append((slug, role or Role.VIEWER))
    else:
        return {}, [f"expected a list or an object, got {type(value).__name__}"]
    grants: dict[str, str] = {}
    for slug, role in pairs:
        if not isinstance(slug, str) or not isinstance(role, str) or not slug.strip():
            problems.append(f"entry {slug!r}: {role!r} is not a project slug and a role")
            continue
        slug, role = slug.strip(), role.strip().lower()
        if role not in Role.values:
            problems.append(f"{slug}: unknown role {role!r} (one of {', '.join(Role.values)})")
            continue
        if slug not in grants or Role.rank(role) > Role.rank(grants[slug]):
            grants[slug] = role
    return grants, problems


def apply_project_claim(user: Any, value: Any, *, claim: str) -> dict[str, str]:
    """Grant or change `user`'s memberships as the claim says; {slug: role} of what changed."""
    grants, problems = parse_project_claim(value)
    projects = {p.slug: p for p in Project.objects.filter(slug__in=list(grants))}
    for slug in grants.keys() - projects.keys():
        problems.append(f"{slug}: no such project")
    for problem in problems:
        logger.warning("SSO claim %r for %s: %s; ignored", claim, user.get_username(), problem)
    changed: dict[str, str] = {}
    for slug, role in grants.items():
        if slug not in projects:
            continue
        project = projects[slug]
        with transaction.atomic():
            current = (
                Membership.objects.select_for_update()
                .filter(project=project, user=user)
                .values_list("role", flat=True)
                .first()
            )
            if current == role:
                continue
            try:
                _keep_an_admin(project, user, role)
            except InvalidInput:
                logger.warning(
                    "SSO claim %r would make %s %s of %s, the project's only admin: kept admin",
                    claim,
                    user.get_username(),
                    role,
                    slug,
                )
                continue
            add_member(project, user, role=role, by=None)
            changed[slug] = role
    return changed
