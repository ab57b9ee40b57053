"""The reviewer's workbench: an artifact's preview, a submission's diff, and the review queue's
expandable panel (preview + diff + validator output + approve/reject without leaving the queue).
Fragments loaded by htmx when a reviewer opens them, so the pages they sit on stay as fast as before.
Thin: what is compared with what, and how bytes are read, is `tracking.queries.review`."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST, require_safe

from smrweb.dashboard.access import project_for_user, run_for_user
from smrweb.dashboard.views.submissions import ReviewForm
from smrweb.tracking.errors import InvalidInput, NoComparison, SummaryPending, TrackingError
from smrweb.tracking.models import Artifact, Role, Submission, Verdict
from smrweb.tracking.queries import review
from smrweb.tracking.services import submissions

VIEWS = ("split", "unified")


@require_safe
@login_required
def artifact_preview(request, slug: str, run_id: str, artifact_id: int):
    """`?more=1` shows up to `core.preview.FULL_BYTES` instead of the first `PREVIEW_BYTES`."""
    run = run_for_user(request, slug, run_id)
    artifact = get_object_or_404(Artifact.objects.select_related("blob", "run"), run=run, pk=artifact_id)
    more = request.GET.get("more") == "1"
    return render(
        request,
        "dashboard/partials/artifact_preview.html",
        {
            "project": run.project,
            "artifact": artifact,
            "preview": review.artifact_preview(artifact, more=more),
        },
    )


def _submission(project, submission_id: int) -> Submission:
    return get_object_or_404(
        Submission.objects.select_related("run", "artifact__blob", "project__scenario", "proposed_by"),
        project=project,
        pk=submission_id,
    )


def diff_context(sub: Submission, against: str | None, view: str | None) -> dict:
    """What the diff partial needs; a refusal (nothing approved yet, no stored bytes) is shown in place."""
    context = {
        "sub": sub,
        "against": (against or "approved").strip().lower(),
        "view": view if view in VIEWS else "split",
        "picker": review.picker_choices(sub, chosen=against),
    }
    try:
        context["diff"] = review.artifact_diff(sub, against, highlight=True)
    except SummaryPending as exc:  # the fragment polls until the worker has read the models
        context["pending"] = exc.message
    except NoComparison as exc:
        if against:  # asked for by name: say there is none
            context["refusal"] = exc.message
            return context
        # The default, and nothing approved yet (a new project): the best is the next useful comparison.
        try:
            context["diff"] = review.artifact_diff(sub, "best", highlight=True)
        except SummaryPending as pending:
            context["against"], context["fallback"], context["pending"] = "best", exc.message, pending.message
        except TrackingError:
            context["refusal"] = exc.message
        else:
            context["against"], context["fallback"] = "best", exc.message
    except TrackingError as exc:
        context["refusal"] = exc.message
    return context


@require_safe
@login_required
def submission_diff(request, slug: str, submission_id: int):
    """`?against=approved|best|<id>` and `?view=split|unified`."""
    project = project_for_user(request, slug)
    sub = _submission(project, submission_id)
    context = diff_context(sub, request.GET.get("against"), request.GET.get("view"))
    return render(request, "dashboard/partials/submission_diff.html", {"project": project, **context})


def _panel(request, project, sub: Submission, **extra) -> dict:
    return {
        "project": project,
        "sub": sub,
        "preview": review.artifact_preview(sub.artifact) if sub.artifact else None,
        "can_act": project.allows(request.user, Role.REVIEWER),
        "actions": submissions.allowed_actions(sub, request.user),
        "own_approval": submissions.is_own_approval(sub, request.user),
        "approve_refusal": submissions.approval_refusal(sub, request.user),
        "approvals": submissions.approvals(sub),
        "review_form": extra.pop("review_form", None) or ReviewForm(),
        **diff_context(sub, request.GET.get("against"), request.GET.get("view")),
        **extra,
    }


@require_safe
@login_required
def review_panel(request, slug: str, submission_id: int):
    """One review-queue row, opened: preview, diff, the validator's output and the review form."""
    project = project_for_user(request, slug)
    sub = _submission(project, submission_id)
    return render(request, "dashboard/partials/review_panel.html", _panel(request, project, sub))


@require_POST
@login_required
def queue_review(request, slug: str, submission_id: int, verdict: str):
    """Approve or reject from the queue: the panel comes back with the outcome (or the form's error) and
    the row's status badge, swapped out of band, so the reviewer moves on without a page load."""
    project = project_for_user(request, slug, role=Role.REVIEWER)
    sub = _submission(project, submission_id)
    form = ReviewForm(request.POST)
    outcome, status = None, 200
    if verdict not in (Verdict.APPROVE, Verdict.REJECT):
        form.add_error(None, f"Unknown verdict {verdict!r}.")
    elif form.is_valid():
        try:
            outcome = submissions.review(
                sub, by=request.user, verdict=verdict, comment=form.cleaned_data["comment"]
            )
        except InvalidInput as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        except TrackingError as exc:
            form.add_error(None, exc.message)
    if form.errors:
        status = 400
    else:
        sub = _submission(project, submission_id)
    return render(
        request,
        "dashboard/partials/review_panel.html",
        _panel(request, project, sub, review_form=form if form.errors else None, outcome=outcome, acted=True),
        status=status,
    )
