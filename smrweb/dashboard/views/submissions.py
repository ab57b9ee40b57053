"""A submission's page (lifecycle history, verification, reviews, the arena handoff), its actions and
the project's review queue. Thin: the rules live in `tracking.submissions`."""

import math

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from smrweb.dashboard import live
from smrweb.dashboard.access import fragment_template, project_for_user
from smrweb.dashboard.views.runs import _can_roll_back
from smrweb.tracking import submissions, tasks
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import Role, Submission, SubmissionStatus, Verdict


class ReviewForm(forms.Form):
    comment = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}),
                              help_text="Why — shown in the submission's history.")


class ArenaResultForm(forms.Form):
    rank = forms.IntegerField(required=False, min_value=1, max_value=10_000_000, help_text="Your place on the board.")
    arena_score = forms.FloatField(required=False, help_text="The arena's own score for it (e.g. Elo).")
    note = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="What the arena said; becomes project knowledge.")

    def clean_arena_score(self):
        value = self.cleaned_data["arena_score"]
        if value is not None and not math.isfinite(value):
            raise forms.ValidationError("Enter a finite number.")
        return value

    def clean(self):
        data = super().clean()
        if not self.errors and data.get("rank") is None and data.get("arena_score") is None:
            raise forms.ValidationError("Give the arena's rank, its score, or both.")
        return data


def _submission(project, submission_id: int) -> Submission:
    return get_object_or_404(
        Submission.objects.select_related("run", "artifact__blob", "proposed_by", "uploaded_by", "project__scenario"),
        project=project, pk=submission_id)


MAIN_CHAIN = ["candidate", "verifying", "verified", "approved", "uploaded", "ranked"]
# Where a side branch leaves the main chain.
BRANCHES = {"invalid": "verifying", "rejected": "verified"}


def lifecycle_steps(status: str) -> list[tuple[str, str]]:
    """The main chain with each step done / now / ahead; a side branch (invalid, rejected) is shown
    after the step it left from, as where the submission is now."""
    if status in BRANCHES:
        last = MAIN_CHAIN.index(BRANCHES[status])
        return [(s, "done") for s in MAIN_CHAIN[: last + 1]] + [(status, "now bad")]
    now = MAIN_CHAIN.index(status)
    return [(s, "done" if i < now else "now" if i == now else "") for i, s in enumerate(MAIN_CHAIN)]


def _context(request, project, sub: Submission, **extra) -> dict:
    transitions = list(sub.transitions.select_related("by"))
    ended = [t for t in transitions if t.from_status == SubmissionStatus.VERIFYING]
    return {
        "verification_reason": ended[-1].reason if ended else "",
        "project": project,
        "sub": sub,
        "run": sub.run,
        "transitions": transitions,
        "reviews": sub.reviews.select_related("reviewer").order_by("created", "id"),
        "arena_results": sub.arena_results.select_related("recorded_by").order_by("-created", "-id"),
        "can_act": project.allows(request.user, Role.REVIEWER),
        "can_roll_back": _can_roll_back(request.user, project),
        "review_form": extra.pop("review_form", None) or ReviewForm(),
        "arena_form": extra.pop("arena_form", None) or ArenaResultForm(),
        "version": live.version(sub.pk, sub.updated.timestamp()),
        "S": SubmissionStatus,
        "steps": lifecycle_steps(sub.status),
        **extra,
    }


@require_GET
@login_required
@vary_on_headers("HX-Request")
def submission_detail(request, slug: str, submission_id: int):
    project = project_for_user(request, slug)
    sub = _submission(project, submission_id)
    context = _context(request, project, sub)
    if live.unchanged(request, context["version"]):
        return live.no_change()
    return render(request, fragment_template(request, "dashboard/submission_detail.html", "submission-live"), context)


@require_POST
@login_required
def submission_action(request, slug: str, submission_id: int, action: str):
    """verify | approve | reject | upload | record — reviewers and admins; refusals come back as messages."""
    project = project_for_user(request, slug, role=Role.REVIEWER)
    sub = _submission(project, submission_id)
    try:
        if action == "verify":
            submissions.request_verification(sub, by=request.user)
            if tasks.dispatch(tasks.verify_submission, sub.pk):
                messages.success(request, "Verification started: the validator runs on a worker.")
            else:
                messages.warning(request, "Verification recorded, but the worker queue is unreachable right now; "
                                          "it starts as soon as the queue is back.")
        elif action in ("approve", "reject"):
            form = ReviewForm(request.POST)
            if not form.is_valid():
                return render(request, "dashboard/submission_detail.html",
                              _context(request, project, sub, review_form=form), status=400)
            verdict = Verdict.APPROVE if action == "approve" else Verdict.REJECT
            outcome = submissions.review(sub, by=request.user, verdict=verdict, comment=form.cleaned_data["comment"])
            (messages.success if outcome.counted else messages.warning)(request, outcome.message)
        elif action == "upload":
            submissions.mark_uploaded(sub, by=request.user)
            messages.success(request, "Marked uploaded. Record the arena's answer when it comes.")
        elif action == "record":
            form = ArenaResultForm(request.POST)
            if not form.is_valid():
                return render(request, "dashboard/submission_detail.html",
                              _context(request, project, sub, arena_form=form), status=400)
            result = submissions.record_arena_result(sub, by=request.user, **form.cleaned_data)
            messages.success(request, "Arena result recorded" + (
                f": {result.delta:+g} against the previous result." if result.delta is not None else "."))
        else:
            messages.error(request, f"Unknown action {action!r}.")
    except TrackingError as exc:
        messages.error(request, exc.message)
    return redirect("dashboard:submission-detail", slug=project.slug, submission_id=sub.pk)


@require_GET
@login_required
def review_queue(request, slug: str):
    project = project_for_user(request, slug)
    queue = list(submissions.review_queue(project)[:200])
    return render(request, "dashboard/review_queue.html", {
        "project": project, "queue": queue, "can_act": project.allows(request.user, Role.REVIEWER)})
