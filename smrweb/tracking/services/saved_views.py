"""Saved views, write side: a member saves the runs table's query under a name, private or shared with the
project (sharing needs the reviewer role); saving a name the person already has replaces that view. The
owner deletes a view, and so may an admin a shared one. A shared view is audited (everyone sees it)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from smrweb.tracking.errors import InvalidInput, NotAllowed
from smrweb.tracking.models import AuditVerb, Project, Role, SavedView, clean_text
from smrweb.tracking.services.audit import record_audit

NAME_MAX = SavedView._meta.get_field("name").max_length  # 100
QUERY_MAX = SavedView._meta.get_field("query").max_length  # 4000
VIEWS_PER_PERSON = 100  # per project


def save_view(project: Project, *, by: Any, name: Any, query: str, shared: bool = False) -> SavedView:
    """Save `query` (the runs table's, as `filters.view_query` keeps it: the face checks it reads) as the
    view `name` of `by` in `project`, replacing their view of that name."""
    if not project.allows(by, Role.VIEWER):
        raise NotAllowed(f"Saving a view needs membership of {project.slug}.")
    if shared and not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"Sharing a view with the project needs the reviewer role in {project.slug}.")
    name = clean_text("name", name, limit=NAME_MAX, required=True)
    if len(query) > QUERY_MAX:
        raise InvalidInput(
            "query", f"A view's query is at most {QUERY_MAX} characters (this has {len(query)})."
        )
    with transaction.atomic():
        mine = SavedView.objects.select_for_update().filter(project=project, owner=by)
        view = mine.filter(name=name).first()
        if view is None and mine.count() >= VIEWS_PER_PERSON:
            raise InvalidInput("name", f"At most {VIEWS_PER_PERSON} views per person per project.")
        was_shared = bool(view and view.shared)
        if view is None:
            view = SavedView.objects.create(project=project, owner=by, name=name, query=query, shared=shared)
        else:
            view.query, view.shared = query, shared
            view.save(update_fields=["query", "shared", "updated"])
        if shared or was_shared:
            record_audit(
                by, AuditVerb.VIEW_SAVED, view, project=project, name=name, query=query, shared=shared
            )
    return view


def may_delete_view(view: SavedView, user: Any) -> bool:
    """The owner, or a project admin for a shared view."""
    if getattr(user, "pk", None) == view.owner_id:
        return True
    return view.shared and view.project.allows(user, Role.ADMIN)


def delete_view(view: SavedView, *, by: Any) -> None:
    if not may_delete_view(view, by):
        raise NotAllowed("Only its owner (or an admin, for a shared view) may delete this view.")
    with transaction.atomic():
        if view.shared:
            record_audit(by, AuditVerb.VIEW_DELETED, view, project=view.project, name=view.name)
        view.delete()
