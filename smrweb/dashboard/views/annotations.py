"""What people write on runs and submissions, on the pages: a run's name, pin and tags (plain forms that
come back to the run page, whose title shows them), its note (an htmx form that answers with the note's
card), and the comment threads of runs and submissions (one URL per thread: the fragment for htmx, a page
of its own otherwise; writes answer with the thread). Thin: rules, roles and the audit live in
`tracking.services.annotations`."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from smrweb.dashboard.access import project_for_user, run_for_user
from smrweb.tracking import services
from smrweb.tracking.errors import NotAllowed, TrackingError
from smrweb.tracking.models import Comment, Role, Run, Submission
from smrweb.tracking.queries import annotations
from smrweb.tracking.services.annotations import TEXT_MAX


def run_page_context(request, run: Run, role: str | None) -> dict:
    """What the run page shows of its tags (every render: the title shows them), and, on full renders,
    its note and comments."""
    can_write = role is not None and Role.rank(role) >= Role.rank(Role.REVIEWER)
    context = {"tags": list(run.tags.all()), "can_annotate": can_write}
    if not request.htmx:
        note, note_html = annotations.run_note(run)
        context.update(note=note, note_html=note_html, **_thread_context(request, role, run=run))
    return context


def _thread_context(
    request, role: str | None, *, run: Run | None = None, submission: Submission | None = None
) -> dict:
    rank = Role.rank(role) if role else -1
    back = request.get_full_path()
    if request.htmx and request.htmx.current_url_abs_path:
        back = request.htmx.current_url_abs_path  # the page the thread is shown in
    return {
        "thread_loaded": True,
        "thread_id": f"comments-run-{run.pk}" if run else f"comments-sub-{submission.pk}",
        "back": back,
        "comments": annotations.thread(run=run, submission=submission),
        "comment_run": run,
        "comment_sub": submission,
        "can_comment": rank >= Role.rank(Role.REVIEWER),
        "can_moderate": rank >= Role.rank(Role.ADMIN),
        "text_max": TEXT_MAX,
    }


# --- name, pin, tags ------------------------------------------------------------------------------------


@require_POST
@login_required
def run_labels(request, slug: str, run_id: str):
    """Rename the run (`display_name`) or pin / unpin it (`pinned` 1 or 0): reviewers and admins."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    changes = {}
    if "display_name" in request.POST:
        changes["display_name"] = request.POST["display_name"]
    if "pinned" in request.POST:
        changes["pinned"] = request.POST["pinned"] == "1"
    try:
        run = services.update_run_labels(run, by=request.user, **changes)
    except TrackingError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _labelled(run, changes))
    return redirect(run.get_absolute_url() + "#run-tags")


def _labelled(run: Run, changes: dict) -> str:
    if "pinned" in changes:
        return (
            f"{run.name} is pinned: first in the project's runs."
            if run.pinned
            else f"{run.name} is unpinned."
        )
    if run.display_name:
        return f"{run.external_id} is called “{run.display_name}” on pages now."
    return f"{run.external_id} goes by its id again."


@require_POST
@login_required
def run_tags(request, slug: str, run_id: str):
    """Tag the run (`tag`: a label, or key=value) or take a tag off (`remove`: its key)."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    try:
        if "remove" in request.POST:
            key = request.POST["remove"]
            if services.remove_tag(run, key=key, by=request.user):
                messages.success(request, f"Removed the tag {key}.")
        else:
            key, value = services.parse_tag(request.POST.get("tag", ""))
            tag = services.set_tag(run, key=key, value=value, by=request.user)
            messages.success(request, f"Tagged {run.name} {tag}.")
    except TrackingError as exc:
        messages.error(request, f"Not tagged: {exc.message}")
    return redirect(run.get_absolute_url() + "#run-tags")


# --- the note ---------------------------------------------------------------------------------------------


@require_POST
@login_required
def run_note(request, slug: str, run_id: str):
    """Save the run's note (reviewers and admins); htmx gets the note's card back, a plain post the page."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    body, error = request.POST.get("body", ""), ""
    try:
        services.save_note(run, body=body, by=request.user)
    except TrackingError as exc:
        error = exc.message
    if not request.htmx:
        if error:
            messages.error(request, f"The note was not saved: {error}")
        return redirect(run.get_absolute_url() + "#run-note")
    note, note_html = annotations.run_note(run)
    context = {
        "project": run.project,
        "run": run,
        "note": note,
        "note_html": note_html,
        "can_annotate": True,
        "note_error": error,
        "note_draft": body if error else None,
        "text_max": TEXT_MAX,
    }
    return render(request, "dashboard/partials/run_notes.html", context)


# --- comments ---------------------------------------------------------------------------------------------


def _thread_response(request, project, *, run=None, submission=None, error: str = "", draft: str = ""):
    context = {
        "project": project,
        "run": run or submission.run,
        "sub": submission,
        "comment_error": error,
        "comment_draft": draft,
        **_thread_context(request, project.role_of(request.user), run=run, submission=submission),
    }
    if request.htmx:
        return render(request, "dashboard/partials/comments.html", context)
    return render(request, "dashboard/comments.html", context, status=400 if error else 200)


def _back_to(request, comment: Comment) -> str:
    """Where a plain (no htmx) write goes back to: the page the thread was shown in (`next`), else the
    run page or the submission's comments page."""
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return f"{target.split('#')[0]}#comment-{comment.pk}"
    if comment.run_id:
        return f"{comment.run.get_absolute_url()}#comment-{comment.pk}"
    url = reverse("dashboard:submission-comments", args=[comment.project.slug, comment.submission_id])
    return f"{url}#comment-{comment.pk}"


def _add(request, project, **subject):
    body = request.POST.get("body", "")
    try:
        comment = services.add_comment(by=request.user, body=body, **subject)
    except TrackingError as exc:
        return _thread_response(request, project, error=exc.message, draft=body, **subject)
    if request.htmx:
        return _thread_response(request, project, **subject)
    return redirect(_back_to(request, comment))


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def run_comments(request, slug: str, run_id: str):
    """The run's comments; POST adds one (reviewers and admins)."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER if request.method == "POST" else Role.VIEWER)
    if request.method == "POST":
        return _add(request, run.project, run=run)
    return _thread_response(request, run.project, run=run)


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def submission_comments(request, slug: str, submission_id: int):
    """The submission's comments (the submission page loads them with htmx); POST adds one."""
    project = project_for_user(request, slug, role=Role.REVIEWER if request.method == "POST" else Role.VIEWER)
    sub = get_object_or_404(
        Submission.objects.select_related("run__project", "project"), project=project, pk=submission_id
    )
    if request.method == "POST":
        return _add(request, project, submission=sub)
    return _thread_response(request, project, submission=sub)


@require_POST
@login_required
def comment_action(request, slug: str, comment_id: int):
    """Edit (`action=edit`, `body`: the author) or delete (`action=delete`: the author or an admin) a
    comment; answers with its thread."""
    project = project_for_user(request, slug, role=Role.REVIEWER)
    comment = get_object_or_404(
        Comment.objects.select_related("project", "run__project", "submission__run"),
        project=project,
        pk=comment_id,
    )
    subject = {"run": comment.run} if comment.run_id else {"submission": comment.submission}
    error = ""
    try:
        if request.POST.get("action") == "delete":
            services.delete_comment(comment, by=request.user)
        else:
            services.edit_comment(comment, by=request.user, body=request.POST.get("body", ""))
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from None  # someone else's comment
    except TrackingError as exc:
        error = exc.message
    if request.htmx or error:
        return _thread_response(request, project, error=error, **subject)
    return redirect(_back_to(request, comment))
