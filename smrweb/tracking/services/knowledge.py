"""Project knowledge, write side: hand-written entries, validated (errors name the field),
role-checked again (reviewers and admins write knowledge, whatever the caller checked) and audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from smrweb.tracking.errors import InvalidInput, NotAllowed
from smrweb.tracking.models import (
    AuditVerb,
    KnowledgeEntry,
    KnowledgeKind,
    Project,
    Role,
    Submission,
)
from smrweb.tracking.services import record_audit

TITLE_MAX = KnowledgeEntry._meta.get_field("title").max_length  # 300


BODY_MAX = 20_000  # a page of prose; the carry-forward block shortens each item further


def _check(project: Project, by: Any, *, kind: str, title: str, body: str) -> tuple[str, str]:
    """Role first (a viewer learns nothing from field errors), then each field; returns the clean text."""
    if not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"To write project knowledge you need the reviewer role in {project.slug}.")
    if kind not in KnowledgeKind.values:
        raise InvalidInput("kind", f"Choose one of {', '.join(KnowledgeKind.values)}; not {kind!r}.")
    title, body = (title or "").strip(), (body or "").strip()
    if not title:
        raise InvalidInput("title", "Give the entry a title.")
    if len(title) > TITLE_MAX:
        raise InvalidInput("title", f"A title is at most {TITLE_MAX} characters (this one has {len(title)}).")
    if len(body) > BODY_MAX:
        raise InvalidInput("body", f"The body is at most {BODY_MAX} characters (this one has {len(body)}).")
    for name, value in (("title", title), ("body", body)):
        if "\x00" in value:
            raise InvalidInput(name, "The NUL character cannot be stored.")
    return title, body


def add_entry(
    project: Project, *, by: Any, kind: str, title: str, body: str = "", submission: Submission | None = None
) -> KnowledgeEntry:
    """Write an entry by hand; `submission` (of this project) gives a failed approach its score."""
    title, body = _check(project, by, kind=kind, title=title, body=body)
    if submission is not None and submission.project_id != project.pk:
        raise InvalidInput("submission", f"Submission #{submission.pk} is not in {project.slug}.")
    with transaction.atomic():
        entry = KnowledgeEntry.objects.create(
            project=project, kind=kind, title=title, body=body, submission=submission, created_by=by
        )
        record_audit(
            by,
            AuditVerb.KNOWLEDGE_ADDED,
            entry,
            project=project,
            kind=kind,
            title=title[:200],
            submission=submission.pk if submission else None,
        )
    return entry


def edit_entry(entry: KnowledgeEntry, *, by: Any, title: str, body: str, kind: str) -> KnowledgeEntry:
    """Change an entry's text or kind (also the arena_delta entries the lifecycle wrote). The audit
    keeps the previous title and kind, so an edit that rewrites history can be seen."""
    project = entry.project
    title, body = _check(project, by, kind=kind, title=title, body=body)
    with transaction.atomic():
        entry = KnowledgeEntry.objects.select_for_update().get(pk=entry.pk)
        before = {"kind": entry.kind, "title": entry.title[:200]}
        changed = [
            name
            for name, value in (("kind", kind), ("title", title), ("body", body))
            if getattr(entry, name) != value
        ]
        entry.kind, entry.title, entry.body = kind, title, body
        if changed:
            entry.save(update_fields=changed)
            record_audit(
                by, AuditVerb.KNOWLEDGE_EDITED, entry, project=project, changed=changed, before=before
            )
    return entry
