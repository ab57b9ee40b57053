"""Read-only share links (issue 39, item 5), write side: create, revoke, and resolve a token when the
public page `/s/<token>/` is opened.

Who may:
- share a project's comparison, tree or arena history: its reviewers and admins;
- share a scenario's leaderboard across projects: anyone who is a member of at least one project on that
  scenario (a superuser too). The page shows, each time it is opened, the rows its creator could read at
  that moment: a project the creator leaves drops out of the shared board, and a creator who can no
  longer see the scenario (or whose account is gone) has a link that answers 404;
- revoke a link: its creator, an admin of its project, or a superuser.

A project link, likewise, only works while its creator can still read the project (a member removed from
it, or deleted, leaves links that answer 404: revoke is the admin's lever, removal is another).

Creating and revoking are audited (`share_link.created`, `share_link.revoked`); opening a link is not: each
view is counted by one UPDATE of the link's `view_count` and `last_viewed`, so an often-viewed link never
floods the audit trail. Only the sha256 of the token is stored; the raw token is returned once.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from smrweb.tracking.errors import InvalidInput, NotAllowed, ShareLinkExpired, ShareLinkUnknown
from smrweb.tracking.models import (
    PROJECT_KINDS,
    AuditVerb,
    Project,
    Role,
    Scenario,
    ShareKind,
    ShareLink,
    hash_token,
)
from smrweb.tracking.services.audit import record_audit

EXPIRY_DAYS = (1, 7, 30, 90)  # what the page offers
MAX_DAYS = 90
QUERY_MAX = ShareLink._meta.get_field("query").max_length  # 4000
ACTIVE_PER_PERSON = 100  # unexpired, unrevoked links per person per project (or scenario)
TOKEN_BYTES = 32  # 43 URL-safe characters


def may_share(by: Any, *, project: Project | None = None, scenario: Scenario | None = None) -> bool:
    """Whether `by` may share a page of `project` (the reviewer role) or the leaderboard of `scenario`
    (a member of at least one of its projects)."""
    if project is not None:
        return project.allows(by, Role.REVIEWER)
    if scenario is None or not getattr(by, "is_authenticated", False):
        return False
    return Project.objects.visible_to(by).filter(scenario=scenario).exists()


def create_share_link(
    *,
    by: Any,
    kind: str,
    days: int,
    query: str = "",
    project: Project | None = None,
    scenario: Scenario | None = None,
) -> tuple[ShareLink, str]:
    """A new link to the `kind` page of `project` (compare, tree, arena) or to `scenario`'s leaderboard,
    showing `query` (already normalised by the face: `dashboard.shares.share_query`), valid for `days`
    days. Returns the row and the raw token, which is never stored."""
    if kind not in ShareKind.values:
        raise InvalidInput("kind", f"One of {', '.join(ShareKind.values)}.")
    if kind in PROJECT_KINDS:
        if project is None:
            raise InvalidInput("kind", "A comparison, a tree or an arena history is shared from its project.")
        scenario = None
        if not may_share(by, project=project):
            raise NotAllowed(f"Sharing a page of {project.slug} needs the reviewer role there.")
    else:
        if scenario is None:
            raise InvalidInput("kind", "A leaderboard is shared from its scenario.")
        project = None
        if not may_share(by, scenario=scenario):
            raise NotAllowed(f"Sharing the leaderboard of {scenario.key} needs a project on it.")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise InvalidInput("expires", f"A link lives 1 to {MAX_DAYS} days.")
    if len(query) > QUERY_MAX:
        raise InvalidInput("query", f"What a link shows is at most {QUERY_MAX} characters of query.")
    raw = secrets.token_urlsafe(TOKEN_BYTES)
    now = timezone.now()
    with transaction.atomic():
        mine = ShareLink.objects.select_for_update().filter(
            created_by=by, project=project, scenario=scenario, revoked_at__isnull=True, expires_at__gt=now
        )
        if len(mine) >= ACTIVE_PER_PERSON:
            raise InvalidInput(
                "expires", f"You have {ACTIVE_PER_PERSON} active links here: revoke some before sharing more."
            )
        link = ShareLink.objects.create(
            project=project,
            scenario=scenario,
            kind=kind,
            query=query,
            token_hash=hash_token(raw),
            created_by=by,
            expires_at=now + timedelta(days=days),
        )
        record_audit(
            by,
            AuditVerb.SHARE_LINK_CREATED,
            link,
            project=project,
            kind=kind,
            query=query,
            scenario=scenario.key if scenario else None,
            expires_at=link.expires_at.isoformat(),
        )
    return link, raw


def may_revoke(link: ShareLink, user: Any, *, project_admin: bool | None = None) -> bool:
    """The link's creator, an admin of its project, or a superuser. `project_admin`: whether `user` is an
    admin of the link's project, when the caller knows (a list of one project's links asks once)."""
    if not getattr(user, "is_authenticated", False):
        return False
    if user.pk == link.created_by_id or user.is_superuser:
        return True
    if link.project_id is None:
        return False
    return link.project.allows(user, Role.ADMIN) if project_admin is None else project_admin


def revoke_share_link(link: ShareLink, *, by: Any) -> ShareLink:
    """Revoke `link`: it answers 404 from now on. Revoking a revoked link changes nothing (one audit row)."""
    if not may_revoke(link, by):
        raise NotAllowed("Only its creator or an admin of its project may revoke this link.")
    with transaction.atomic():
        revoked = ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=by
        )
        if revoked:
            record_audit(
                by,
                AuditVerb.SHARE_LINK_REVOKED,
                link,
                project=link.project,
                kind=link.kind,
                scenario=link.scenario.key if link.scenario_id else None,
            )
    link.refresh_from_db()
    return link


def resolve_share_link(raw: str) -> ShareLink:
    """The link `raw` opens, counted as one view; ShareLinkUnknown (404) for a token never issued, a
    revoked link or one whose creator can no longer read what it shows, ShareLinkExpired (410) for one
    whose time is up. Expiry is told apart from the rest only for a genuine, unrevoked link."""
    if not isinstance(raw, str) or not 20 <= len(raw) <= 100:
        raise ShareLinkUnknown("This share link does not exist or was revoked.")
    link = (
        ShareLink.objects.select_related("project__scenario", "scenario", "created_by")
        .filter(token_hash=hash_token(raw))
        .first()
    )
    if link is None or link.revoked_at is not None or not _creator_still_reads(link):
        raise ShareLinkUnknown("This share link does not exist or was revoked.")
    now = timezone.now()
    if link.expires_at <= now:
        raise ShareLinkExpired(f"This share link expired on {link.expires_at:%Y-%m-%d %H:%M} UTC.")
    # One cheap UPDATE per view, deliberately not an audit row: a link pasted into a channel may be opened
    # thousands of times; the audit trail records who created and revoked it.
    ShareLink.objects.filter(pk=link.pk).update(view_count=F("view_count") + 1, last_viewed=now)
    link.view_count += 1
    link.last_viewed = now
    return link


def _creator_still_reads(link: ShareLink) -> bool:
    creator = link.created_by
    if creator is None or not creator.is_active:
        return False
    if link.project_id is not None:
        return link.project.allows(creator, Role.VIEWER)
    return Scenario.objects.visible_to(creator).filter(pk=link.scenario_id).exists()
