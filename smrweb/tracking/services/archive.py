"""Archiving runs and projects: out of the default lists, read-only, restorable (docs/retention.md).

An archived run (or any run of an archived project) takes no new events, artifacts, reviews, rollbacks
or steering; pollers skip archived projects. Its scores still count in the project's numbers: archiving
tidies the lists, excluding a run is how it leaves the numbers."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from smrweb.tracking.errors import Archived, ArchiveRefused, NotAllowed
from smrweb.tracking.models import ApiToken, AuditVerb, Project, Role, Run
from smrweb.tracking.services.audit import record_audit


def archive_role(target: Run | Project) -> str:
    """The one rule of who archives and restores what: reviewers and admins archive runs, admins
    archive projects (deleting either is for admins: `services.deletion`)."""
    return Role.ADMIN if isinstance(target, Project) else Role.REVIEWER


def _allows(project: Project, user: Any, role: str, have: str | None | bool) -> bool:
    """`project.allows(user, role)`, or from `have` (the user's role, already read) without a query."""
    if have is False:
        return project.allows(user, role)
    return have is not None and Role.rank(have) >= Role.rank(role)


def archive_refusal(user: Any, target: Run | Project, *, have: str | None | bool = False) -> str:
    """Why `user` may not archive or restore `target` ("" when they may). `have`: the user's role in the
    project when the caller already read it (a page), else it is read here."""
    project = target if isinstance(target, Project) else target.project
    role = archive_role(target)
    if isinstance(user, ApiToken) or not _allows(project, user, role, have):
        what = "a project" if isinstance(target, Project) else "a run"
        return f"Archiving or restoring {what} needs the {role} role in {project.slug}."
    if isinstance(target, Run) and target.archived_at is None and not target.is_terminal:
        return f"Run {target.external_id} is {target.state}: only a finished run can be archived."
    return ""


def may_archive(user: Any, target: Run | Project) -> bool:
    return not archive_refusal(user, target)


def check_writable(project: Project, run: Run | None = None) -> None:
    """Refuse a write into an archived project or run (ingest, uploads, reviews, rollbacks, steering)."""
    if project.archived_at is not None:
        raise Archived(
            f"Project {project.slug} is archived: it is read-only until an admin restores it "
            "(project settings). Nothing was written."
        )
    if run is not None and run.archived_at is not None:
        raise Archived(
            f"Run {run.external_id} is archived: it is read-only until a reviewer restores it "
            "(the run page). Nothing was written."
        )


def _set_archived(target: Run | Project, *, by: Any, archive: bool) -> Run | Project:
    if refusal := archive_refusal(by, target):
        raise NotAllowed(refusal) if "role" in refusal else ArchiveRefused(refusal)
    model = type(target)
    what = model.__name__.lower()
    project = target if isinstance(target, Project) else target.project
    with transaction.atomic():
        locked = model.objects.select_for_update(of=("self",)).get(pk=target.pk)
        if archive == (locked.archived_at is not None):
            raise ArchiveRefused(f"This {what} is {'already' if archive else 'not'} archived.")
        locked.archived_at = timezone.now() if archive else None
        locked.archived_by = by if archive and getattr(by, "is_authenticated", False) else None
        locked.save(update_fields=["archived_at", "archived_by", "updated"])
        record_audit(
            by,
            AuditVerb(f"{what}.{'archived' if archive else 'restored'}"),
            locked,
            project=project,
            **({"run": locked.external_id} if isinstance(locked, Run) else {"project_slug": locked.slug}),
        )
    target.archived_at, target.archived_by = locked.archived_at, locked.archived_by
    return target


def archive_run(run: Run, *, by: Any) -> Run:
    return _set_archived(run, by=by, archive=True)


def restore_run(run: Run, *, by: Any) -> Run:
    return _set_archived(run, by=by, archive=False)


def archive_project(project: Project, *, by: Any) -> Project:
    return _set_archived(project, by=by, archive=True)


def restore_project(project: Project, *, by: Any) -> Project:
    return _set_archived(project, by=by, archive=False)
