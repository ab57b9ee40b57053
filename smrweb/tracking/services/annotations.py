"""What people write on runs and submissions, write side: a run's tags, display name and pin (people with
the reviewer role, and the project's tokens: a harness labels its runs), its note and comments (people
with the reviewer role only: prose has an author), and the @mentions that land in the inbox. Each is
validated (errors name the field), role-checked again whatever the caller checked, and audited."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from smrweb.core import markdown
from smrweb.tracking.errors import InvalidInput, NotAllowed
from smrweb.tracking.models import (
    TAG_KEY_MAX,
    ApiToken,
    AuditVerb,
    Comment,
    Notification,
    NotificationKind,
    NotificationStatus,
    Project,
    Role,
    Run,
    RunNote,
    RunTag,
    Submission,
    check_tag,
    clean_text,
    parse_tag,  # noqa: F401 (re-exported: the tag box and `?tag=` read tags with it)
)
from smrweb.tracking.queries.annotations import members_by_name
from smrweb.tracking.services.alerts.triggers import absolute_url
from smrweb.tracking.services.audit import _only, record_audit

TAGS_PER_RUN = 100
DISPLAY_NAME_MAX = Run._meta.get_field("display_name").max_length  # 200
TEXT_MAX = 20_000  # a note or a comment: a page of prose
RUN_LABELS = ("display_name", "pinned")


def _labeller(project: Project, by: Any) -> None:
    """Tags, display names and pins: the project's tokens, or people with the reviewer role."""
    if isinstance(by, ApiToken):
        if by.project_id != project.pk or not by.is_active:
            raise NotAllowed(f"This token cannot label runs of {project.slug}.")
        return
    if not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"Labelling runs needs the reviewer role in {project.slug}.")


def _writer(project: Project, by: Any, doing: str) -> None:
    """Notes and comments: people with the reviewer role (a token is no author)."""
    if isinstance(by, ApiToken) or not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"{doing} needs a signed-in person with the reviewer role in {project.slug}.")


def _touch(run: Run) -> None:
    # `updated` versions the pages' polls: the runs table shows names, pins and tags.
    Run.objects.filter(pk=run.pk).update(updated=timezone.now())


# --- tags, display name, pin ----------------------------------------------------------------------------


def set_tag(run: Run, *, key: str, value: str = "", by: Any) -> RunTag:
    """Tag the run (`value` "" makes it a label); setting a key it has replaces the value."""
    project = run.project
    _labeller(project, by)
    key, value = check_tag(key, value)
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()  # one writer of this run's tags at a time
        tag = RunTag.objects.filter(run=run, key=key).first()
        if tag is not None and tag.value == value:
            return tag
        if tag is None and RunTag.objects.filter(run=run).count() >= TAGS_PER_RUN:
            raise InvalidInput("key", f"A run has at most {TAGS_PER_RUN} tags; remove one first.")
        before = tag.value if tag else None
        if tag is None:
            tag = RunTag.objects.create(run=run, key=key, value=value)
        else:
            tag.value = value
            tag.save(update_fields=["value", "updated"])
        _touch(run)
        record_audit(
            by,
            AuditVerb.RUN_TAGGED,
            run,
            project=project,
            key=key,
            value=value[:200],
            before=before and before[:200],
        )
    return tag


def remove_tag(run: Run, *, key: str, by: Any) -> bool:
    """Take the tag off the run; False when it had none of that key."""
    project = run.project
    _labeller(project, by)
    with transaction.atomic():
        deleted, _ = RunTag.objects.filter(run=run, key=key).delete()
        if deleted:
            _touch(run)
            record_audit(by, AuditVerb.RUN_UNTAGGED, run, project=project, key=key[:TAG_KEY_MAX])
    return bool(deleted)


def update_run_labels(run: Run, *, by: Any, **changes: Any) -> Run:
    """Set the run's display name ("" shows the external id again) and/or whether it is pinned."""
    _only(changes, RUN_LABELS, "a run label")
    project = run.project
    _labeller(project, by)
    if "display_name" in changes:
        changes["display_name"] = clean_text(
            "display_name", changes["display_name"] or "", limit=DISPLAY_NAME_MAX
        )
        if "\n" in changes["display_name"] or "\r" in changes["display_name"]:
            raise InvalidInput("display_name", "A display name is one line.")
    if "pinned" in changes and not isinstance(changes["pinned"], bool):
        raise InvalidInput("pinned", "true or false.")
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("project__scenario").get(pk=run.pk)
        changed = [name for name, value in changes.items() if getattr(run, name) != value]
        if not changed:
            return run
        before = {name: getattr(run, name) for name in changed}
        for name in changed:
            setattr(run, name, changes[name])
        run.save(update_fields=[*changed, "updated"])
        if "display_name" in changed:
            record_audit(
                by,
                AuditVerb.RUN_RENAMED,
                run,
                project=project,
                name=run.display_name,
                before=before["display_name"],
            )
        if "pinned" in changed:
            record_audit(
                by, AuditVerb.RUN_PINNED if run.pinned else AuditVerb.RUN_UNPINNED, run, project=project
            )
    return run


# --- the note ---------------------------------------------------------------------------------------------


def save_note(run: Run, *, body: str, by: Any) -> RunNote | None:
    """Write the run's note (Markdown); an empty one deletes it. None when there is no note after."""
    project = run.project
    _writer(project, by, "Writing a run's note")
    body = clean_text("body", body, limit=TEXT_MAX)
    with transaction.atomic():
        note = RunNote.objects.select_for_update().filter(run=run).first()
        before = note.body if note else ""
        if body == before:
            return note
        if not body:
            note.delete()
            record_audit(by, AuditVerb.RUN_NOTE_CLEARED, run, project=project, before=before[:200])
            return None
        if note is None:
            note = RunNote.objects.create(run=run, body=body, edited_by=by)
        else:
            note.body, note.edited_by = body, by
            note.save(update_fields=["body", "edited_by", "updated"])
        record_audit(
            by,
            AuditVerb.RUN_NOTE_EDITED,
            run,
            project=project,
            chars=len(body),
            approach=markdown.has_hashtag(body, "approach"),
            before=before[:200],
        )
    return note


# --- comments and mentions --------------------------------------------------------------------------------


def add_comment(
    *, by: Any, body: str, run: Run | None = None, submission: Submission | None = None
) -> Comment:
    """Comment on a run or on a submission; the members it @mentions get it in their inbox."""
    if (run is None) == (submission is None):
        raise InvalidInput("subject", "A comment is on one run or on one submission.")
    project = (run or submission).project
    _writer(project, by, "Commenting")
    body = clean_text("body", body, limit=TEXT_MAX, required=True)
    with transaction.atomic():
        comment = Comment.objects.create(
            project=project, run=run, submission=submission, author=by, body=body
        )
        mentioned = _notify_mentions(comment, by)
        record_audit(
            by,
            AuditVerb.COMMENT_ADDED,
            comment,
            project=project,
            on=_subject(comment),
            mentioned=mentioned,
            chars=len(body),
        )
    return comment


def edit_comment(comment: Comment, *, by: Any, body: str) -> Comment:
    """The author rewrites their comment; only members it newly @mentions are notified."""
    project = comment.project
    _writer(project, by, "Editing a comment")
    if comment.author_id is None or comment.author_id != getattr(by, "pk", None):
        raise NotAllowed("Only its author can edit a comment.")
    body = clean_text("body", body, limit=TEXT_MAX, required=True)
    with transaction.atomic():
        comment = (
            Comment.objects.select_for_update(of=("self",))
            .select_related("run", "submission__run")
            .get(pk=comment.pk)
        )
        if comment.is_deleted:
            raise InvalidInput("body", "This comment was deleted.")
        if body == comment.body:
            return comment
        before = comment.body
        comment.body, comment.edited_at = body, timezone.now()
        comment.save(update_fields=["body", "edited_at"])
        mentioned = _notify_mentions(comment, by)
        record_audit(
            by, AuditVerb.COMMENT_EDITED, comment, project=project, mentioned=mentioned, before=before[:200]
        )
    return comment


def delete_comment(comment: Comment, *, by: Any) -> Comment:
    """Its author, or an admin of the project, deletes a comment: it stays in the thread as "deleted",
    its text and the inbox entries of its mentions go."""
    project = comment.project
    _writer(project, by, "Deleting a comment")
    author = comment.author_id is not None and comment.author_id == getattr(by, "pk", None)
    if not author and not project.allows(by, Role.ADMIN):
        raise NotAllowed("Only its author or an admin of the project can delete a comment.")
    with transaction.atomic():
        comment = Comment.objects.select_for_update().get(pk=comment.pk)
        if comment.is_deleted:
            return comment
        comment.body, comment.deleted_at = "", timezone.now()
        comment.save(update_fields=["body", "deleted_at"])
        Notification.objects.filter(comment=comment).delete()
        record_audit(by, AuditVerb.COMMENT_DELETED, comment, project=project, by_author=author)
    return comment


def _subject(comment: Comment) -> str:
    return f"run:{comment.run.external_id}" if comment.run_id else f"submission:{comment.submission_id}"


def _place(comment: Comment) -> tuple[str, str]:
    """How a notification names where the comment is, and the page that shows it."""
    if comment.run_id:
        run = comment.run
        return f"run {run.name}", run.get_absolute_url()
    sub = comment.submission
    url = reverse("dashboard:submission-detail", args=[comment.project.slug, sub.pk])
    return f"submission #{sub.pk} of run {sub.run.name}", url


def _notify_mentions(comment: Comment, by: Any) -> list[str]:
    """An inbox notification for each member the comment @mentions (not its author) who has none for
    this comment yet; the names of those notified now."""
    members = members_by_name(comment.project)
    names = [n for n in markdown.mentions(comment.body, members) if n != by.get_username()]
    if not names:
        return []
    User = get_user_model()
    users = {u.get_username(): u for u in User.objects.filter(**{f"{User.USERNAME_FIELD}__in": names})}
    already = set(
        Notification.objects.filter(comment=comment, recipient__in=users.values()).values_list(
            "recipient_id", flat=True
        )
    )
    place, path = _place(comment)
    who = by.get_username()
    now = timezone.now()
    new = [users[n] for n in names if n in users and users[n].pk not in already]
    Notification.objects.bulk_create(
        [
            Notification(
                kind=NotificationKind.MENTION,
                comment=comment,
                project_id=comment.project_id,
                recipient=user,
                subject=f"comment:{comment.pk}",
                episode="mention",
                run=comment.run if comment.run_id else comment.submission.run,
                submission=comment.submission,
                title=f"{who} mentioned you on {place} ({comment.project.name})"[:300],
                body=comment.body[:2000],
                url=absolute_url(f"{path}#comment-{comment.pk}")[:1000],
                status=NotificationStatus.SENT,
                sent_at=now,
            )
            for user in new
        ],
        ignore_conflicts=True,  # a concurrent edit notified them first: (comment, recipient) is unique
    )
    return [u.get_username() for u in new]
