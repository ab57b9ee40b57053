"""What people wrote on runs and submissions, read side: a run's note, a comment thread, each
text rendered once (`core.markdown`, mentions of the project's members highlighted), in a fixed number of
queries whatever the length of the thread."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from smrweb.core import markdown
from smrweb.tracking.models import Comment, Membership, Project, Run, RunNote, Submission


def members_by_name(project: Project) -> dict[str, str]:
    """The project's active members who can be @mentioned: lower-cased username → username."""
    field = f"user__{get_user_model().USERNAME_FIELD}"
    names = (
        Membership.objects.filter(project=project, user__is_active=True)
        .values_list(field, flat=True)
        .order_by(field)
    )
    return {name.lower(): name for name in names}


def run_note(run: Run) -> tuple[RunNote | None, str]:
    """The run's note and its HTML ("" without one): one query, and one more for the members it may
    mention."""
    note = RunNote.objects.filter(run=run).select_related("edited_by").first()
    return note, (markdown.render(note.body, members=members_by_name(run.project)) if note else "")


def thread(*, run: Run | None = None, submission: Submission | None = None) -> list[Comment]:
    """The comments on a run or a submission, oldest first, each with `html` (deleted ones: "")."""
    subject = {"run": run} if run is not None else {"submission": submission}
    comments = list(
        Comment.objects.filter(**subject).select_related("author", "project").order_by("created", "id")
    )
    if comments:
        members = members_by_name(comments[0].project)
        for comment in comments:
            comment.html = "" if comment.is_deleted else markdown.render(comment.body, members=members)
    return comments


def comment_html(comment: Comment) -> str:
    """One comment rendered (the API's answer to a write)."""
    if comment.is_deleted:
        return ""
    return markdown.render(comment.body, members=members_by_name(comment.project))
