"""Archive, restore and delete runs and projects; the project's retention settings with a dry-run
preview (docs/retention.md). Who may do what is the domain's (`services.archive_refusal`,
`services.deletion_refusal`); these views only ask, render and redirect."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from smrweb.dashboard.access import project_for_user, run_for_user
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, TrackingError
from smrweb.tracking.models import Role
from smrweb.tracking.services.retention import KEEP_MAX, KEEP_MIN

PREVIEW_SERIES = 50  # series listed on the preview (the counts cover all of them)


class RetentionForm(forms.Form):
    retention_metric_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=36_500,
        label="Downsample metrics of runs finished more than (days)",
        help_text="Empty: keep every metric point forever.",
    )
    retention_keep_points = forms.IntegerField(
        min_value=KEEP_MIN,
        max_value=KEEP_MAX,
        label="Points kept per series",
        help_text="LTTB keeps the line's shape; the first, last, lowest and highest points are always kept.",
    )
    retention_archived_run_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=36_500,
        label="Delete archived runs after (days)",
        help_text="Counted from archiving. Empty: archived runs are kept until someone deletes them.",
    )


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_retention(request, slug: str):
    """The project's retention settings, what the policy would remove now (a dry run), archive or
    restore the project, and the way to delete it. Admins only."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    initial = {f: getattr(project, f) for f in RetentionForm.base_fields}
    form = RetentionForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.update_retention(
                project,
                by=request.user,
                metric_days=data["retention_metric_days"],
                keep_points=data["retention_keep_points"],
                archived_run_days=data["retention_archived_run_days"],
            )
        except InvalidInput as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, "Retention settings saved; the preview below follows them.")
            return redirect("dashboard:project-retention", slug=project.slug)
    preview = services.apply_retention(project, dry_run=True)
    context = {
        "project": project,
        "form": form,
        "preview": preview,
        "preview_series": preview.series[:PREVIEW_SERIES],
        "more_series": max(0, len(preview.series) - PREVIEW_SERIES),
        "summary": services.deletion_summary(project),
    }
    return render(request, "dashboard/project_retention.html", context, status=400 if form.errors else 200)


@require_POST
@login_required
def project_archive(request, slug: str):
    """Archive the project (action=archive) or restore it (action=restore). Admins; audited."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    _archive_or_restore(
        request,
        project,
        archive=services.archive_project,
        restore=services.restore_project,
        archived=f"{project.slug} is archived: hidden from the overview, not polled, read-only.",
        restored=f"{project.slug} is restored: listed, polled and writable again.",
    )
    return redirect("dashboard:project-retention", slug=project.slug)


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_delete(request, slug: str):
    """The confirmation page (what goes, counted) and the deletion itself, typed slug. Admins."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    return _confirm_delete(request, project, back=reverse("dashboard:project-retention", args=[project.slug]))


@require_POST
@login_required
def run_archive(request, slug: str, run_id: str):
    """Archive a finished run (action=archive) or restore it (action=restore). Reviewers and admins."""
    run = run_for_user(request, slug, run_id, role=Role.VIEWER)
    if refusal := services.archive_refusal(request.user, run):
        if "role" in refusal:
            raise PermissionDenied(refusal)
        messages.error(request, refusal)
        return redirect(run.get_absolute_url())
    _archive_or_restore(
        request,
        run,
        archive=services.archive_run,
        restore=services.restore_run,
        archived=f"{run.external_id} is archived: hidden from the runs table, read-only until restored.",
        restored=f"{run.external_id} is restored: listed and writable again.",
    )
    return redirect(run.get_absolute_url())


def _archive_or_restore(request, target, *, archive, restore, archived: str, restored: str) -> None:
    """action=restore restores `target`, anything else archives it; the outcome or refusal as a message."""
    try:
        if request.POST.get("action") == "restore":
            restore(target, by=request.user)
            messages.success(request, restored)
        else:
            archive(target, by=request.user)
            messages.success(request, archived)
    except TrackingError as exc:
        messages.error(request, exc.message)


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def run_delete(request, slug: str, run_id: str):
    run = run_for_user(request, slug, run_id, role=Role.ADMIN)
    return _confirm_delete(request, run, back=run.get_absolute_url())


def _confirm_delete(request, target, *, back: str):
    is_project = not hasattr(target, "external_id")
    project = target if is_project else target.project
    error = ""
    if request.method == "POST":
        try:
            if is_project:
                summary = services.delete_project(
                    target, by=request.user, confirm=request.POST.get("confirm", "")
                )
            else:
                summary = services.delete_run(
                    target, by=request.user, confirm=request.POST.get("confirm", "")
                )
        except TrackingError as exc:
            error = exc.message
        else:
            name = services.confirmation_word(target)
            messages.success(
                request,
                f"{name} is deleted: {summary.runs} run(s), {summary.turns} turns, {summary.metric_points} "
                f"metric points, {summary.submissions} submissions, {summary.artifacts} artifacts; "
                f"{summary.blobs_freed} stored file(s) freed.",
            )
            return redirect("dashboard:project-list") if is_project else redirect(project)
    context = {
        "project": project,
        "target": target,
        "is_project": is_project,
        "word": services.confirmation_word(target),
        "summary": services.deletion_summary(target),
        "refusal": services.deletion_refusal(request.user, target),
        "error": error,
        "back": back,
    }
    return render(request, "dashboard/confirm_delete.html", context, status=400 if error else 200)
