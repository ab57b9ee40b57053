"""A submission's page (lifecycle history, verification, reviews, the arena handoff), its actions and
the project's review queue. Thin: the rules live in `tracking.services.submissions`."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Prefetch, prefetch_related_objects
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST, require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb import tasks
from smrweb.core import numbers, queue
from smrweb.dashboard import live
from smrweb.dashboard.access import fragment_template, project_for_user
from smrweb.dashboard.artifacts import missing_bytes_page
from smrweb.sources import bundles
from smrweb.tracking.errors import ArtifactBytesMissing, InvalidInput, NoBundle, TrackingError
from smrweb.tracking.models import Review, Role, Submission, SubmissionStatus, Verdict
from smrweb.tracking.services import capabilities, handoff, submissions
from smrweb.tracking.services.capabilities import Action


class ReviewForm(forms.Form):
    context_name = "review_form"  # what the page calls it

    comment = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why — shown in the submission's history.",
    )


class UploadForm(forms.Form):
    context_name = "upload_form"  # what the page calls it

    arena_ref = forms.CharField(
        required=False,
        max_length=500,
        label="Arena submission id or URL",
        help_text="What the arena calls this upload, so its result can be traced back.",
    )
    confirm_over_limit = forms.BooleanField(
        required=False, label="Today's arena upload limit is used up: record this upload anyway"
    )


class RefusalForm(forms.Form):
    context_name = "refusal_form"  # what the page calls it

    reason = forms.CharField(
        max_length=handoff.REFUSAL_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the arena said; carried forward to the agents as a failed approach.",
    )


class ExcludeForm(forms.Form):
    context_name = "exclude_form"  # what the page calls it

    reason = forms.CharField(
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why it should not count (shown wherever it is listed, and audited).",
    )


class ArenaResultForm(forms.Form):
    context_name = "arena_form"  # what the page calls it

    rank = forms.IntegerField(
        required=False, min_value=1, max_value=10_000_000, help_text="Your place on the board."
    )
    arena_score = forms.FloatField(required=False, help_text="The arena's own score for it (e.g. Elo).")
    note = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the arena said; becomes project knowledge.",
    )
    # What a result must hold (a rank or a score, a score in range) is the domain's rule:
    # `handoff.record_arena_result` refuses with the field, shown on this form.


def _submission(project, submission_id: int) -> Submission:
    return get_object_or_404(
        Submission.objects.select_related(
            "run", "artifact__blob", "proposed_by", "uploaded_by", "project__scenario"
        ),
        project=project,
        pk=submission_id,
    )


def _version(sub: Submission) -> str:
    return live.version(sub.pk, sub.updated.timestamp())


def _reviews(sub: Submission) -> list:
    """Its reviews, each approval with what it was ("approval 1 of 2", "not counted — …")."""
    labels = {r.pk: label for r, label in submissions.approval_log(sub)}
    reviews = list(sub.reviews.select_related("reviewer").order_by("created", "id"))
    for r in reviews:
        r.approval_label = labels.get(r.pk, "")
    return reviews


def _context(request, project, sub: Submission, **extra) -> dict:
    transitions = list(sub.transitions.select_related("by"))
    ended = [t for t in transitions if t.from_status == SubmissionStatus.VERIFYING]
    return {
        # The reason the task recorded, unless it only repeats the exit code shown beside it ("exited 1").
        "verification_reason": ""
        if not ended or ended[-1].reason == f"exited {sub.verification_exit_code}"
        else ended[-1].reason,
        "project": project,
        "sub": sub,
        "run": sub.run,
        "refusal": next((t for t in reversed(transitions) if t.to_status == SubmissionStatus.REFUSED), None),
        "transitions": submissions.history(sub),
        "reviews": _reviews(sub),
        "approvals": submissions.approvals(sub),
        "approve_refusal": submissions.approval_refusal(sub, request.user),
        "approved_alone": submissions.approved_below_rule(project).filter(pk=sub.pk).exists(),
        "arena_results": sub.arena_results.select_related("recorded_by").order_by("-created", "-id"),
        "can_act": project.allows(request.user, Role.REVIEWER),
        "can_roll_back": capabilities.may(request.user, project, Action.ROLL_BACK),
        "review_form": extra.pop("review_form", None) or ReviewForm(),
        "arena_form": extra.pop("arena_form", None) or ArenaResultForm(),
        "upload_form": extra.pop("upload_form", None) or UploadForm(),
        "refusal_form": extra.pop("refusal_form", None) or RefusalForm(),
        "allowance": handoff.upload_allowance(project),
        "exclude_form": extra.pop("exclude_form", None) or ExcludeForm(),
        "is_admin": project.allows(request.user, Role.ADMIN),
        "own_approval": submissions.is_own_approval(sub, request.user),
        "becomes_proposer": project.require_second_reviewer and sub.proposed_by_id is None,
        "next_sub": submissions.next_in_queue(sub) if sub.status in submissions.QUEUE_STATUSES else None,
        "version": _version(sub),
        "S": SubmissionStatus,
        "steps": submissions.lifecycle_steps(sub.status),
        "actions": submissions.allowed_actions(sub, request.user),
        **extra,
    }


@require_safe
@login_required
@vary_on_headers("HX-Request")
def submission_detail(request, slug: str, submission_id: int):
    project = project_for_user(request, slug)
    sub = _submission(project, submission_id)
    if live.unchanged(request, _version(sub)):
        return live.no_change()
    context = _context(request, project, sub)
    return render(
        request, fragment_template(request, "dashboard/submission_detail.html", "submission-live"), context
    )


@require_safe
@login_required
def submission_bundle(request, slug: str, submission_id: int):
    """GET: the submission's signed reproducibility bundle, for whoever may read the project."""
    project = project_for_user(request, slug)
    sub = _submission(project, submission_id)
    try:
        return bundles.download(project, sub.pk)
    except ArtifactBytesMissing as exc:
        return missing_bytes_page(request, exc)
    except NoBundle as exc:
        return render(
            request,
            "dashboard/link_refused.html",
            {"status": 409, "title": "No bundle", "message": exc.message},
            status=409,
        )


@require_POST
@login_required
def submission_action(request, slug: str, submission_id: int, action: str):
    """verify | approve | reject | upload | record | refuse — reviewers and admins; refusals come back
    as messages."""
    project = project_for_user(request, slug, role=Role.REVIEWER)
    sub = _submission(project, submission_id)
    by = request.user
    try:
        if action == "verify":
            submissions.request_verification(sub, by=request.user)
            if queue.dispatch(tasks.verify_submission, sub.pk):
                messages.success(
                    request,
                    "Verification started: the validator runs on a worker.",
                    extra_tags="until-change",
                )
            else:
                messages.warning(
                    request,
                    "Verification recorded, but the worker queue is unreachable right now; "
                    "it starts as soon as the queue is back.",
                )
        elif action in ("approve", "reject"):
            verdict = Verdict.APPROVE if action == "approve" else Verdict.REJECT
            outcome = _submit(
                ReviewForm(request.POST),
                lambda data: submissions.review(sub, by=by, verdict=verdict, comment=data["comment"]),
            )
            (messages.success if outcome.counted else messages.warning)(request, outcome.message)
        elif action == "upload":
            _submit(UploadForm(request.POST), lambda data: handoff.mark_uploaded(sub, by=by, **data))
            messages.success(
                request, "Marked uploaded. Record the arena's answer (its rank, or that it refused the file)."
            )
        elif action == "refuse":
            _submit(RefusalForm(request.POST), lambda data: handoff.record_refusal(sub, by=by, **data))
            messages.warning(
                request,
                "Recorded as refused by the arena: it no longer counts in the project's numbers and is "
                "carried forward as a failed approach.",
            )
        elif action == "record":
            result = _submit(
                ArenaResultForm(request.POST),
                lambda data: handoff.record_arena_result(sub, by=request.user, **data),
            )
            (messages.warning if _worse(result, project) else messages.success)(
                request, _arena_flash(result, project)
            )
        elif action == "include":
            submissions.include_submission(sub, by=request.user)
            messages.success(request, "Counted again in the project's numbers.")
        elif action == "exclude":
            _submit(
                ExcludeForm(request.POST),
                lambda data: submissions.exclude_submission(sub, by=request.user, reason=data["reason"]),
            )
            messages.success(
                request,
                "Excluded from the project's numbers (best, leaderboard, charts, "
                "carry-forward). Include it again at any time.",
            )
        else:
            messages.error(request, f"Unknown action {action!r}.")
    except FormRefused as refused:
        form = refused.form
        return render(
            request,
            "dashboard/submission_detail.html",
            _context(request, project, sub, **{form.context_name: form}),
            status=400,
        )
    except TrackingError as exc:
        messages.error(request, exc.message)
    return redirect("dashboard:submission-detail", slug=project.slug, submission_id=sub.pk)


class FormRefused(Exception):
    """A form with errors: the page is answered again with it (400)."""

    def __init__(self, form: forms.Form):
        super().__init__(form.errors)
        self.form = form


def _submit(form: forms.Form, act):
    """`act(cleaned_data)` for a valid form, and what it returns. A domain refusal of one of the form's
    fields (InvalidInput) is put on that field (or over the form); FormRefused when the form has errors."""
    if form.is_valid():
        try:
            return act(form.cleaned_data)
        except InvalidInput as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
    raise FormRefused(form)


def _worse(result, project) -> bool:
    return handoff.arena_better(result.delta, maximize=project.scenario.arena_maximize) is False


def _arena_flash(result, project) -> str:
    """Say what the arena's answer means: better or worse (in the arena's direction), and rank moves."""
    parts = []
    better = handoff.arena_better(result.delta, maximize=project.scenario.arena_maximize)
    if result.delta is not None:
        way = "higher" if project.scenario.arena_maximize else "lower"
        verdict = {True: "better", False: "worse", None: "no change"}[better]
        parts.append(
            f"score {numbers.signed(result.delta)} against the previous result: {verdict} ({way} is better)"
        )
    if result.rank_delta is not None:
        parts.append(
            "same rank"
            if result.rank_delta == 0
            else f"{abs(result.rank_delta)} place{'s' if abs(result.rank_delta) != 1 else ''} "
            f"{'up' if result.rank_delta < 0 else 'down'} (rank {result.rank})"
        )
    return "Arena result recorded" + (": " + "; ".join(parts) + "." if parts else ".")


QUEUE_PER_PAGE = 50
QUEUE_FILTERS = {
    "waiting": submissions.QUEUE_STATUSES,
    "candidate": (SubmissionStatus.CANDIDATE,),
    "verifying": (SubmissionStatus.VERIFYING,),
    "verified": (SubmissionStatus.VERIFIED,),
}


@require_safe
@login_required
def review_queue(request, slug: str):
    """Counts per status, a status filter, paging, and the best per run unless every one is asked for;
    each row's approvals, a selection for bulk actions, and what was approved by one person before
    the second-person rule held."""
    project = project_for_user(request, slug)
    status = request.GET.get("status") if request.GET.get("status") in QUEUE_FILTERS else "waiting"
    every = request.GET.get("all") == "1"
    queue = submissions.review_queue(project, statuses=QUEUE_FILTERS[status], per_run=not every)
    page = Paginator(queue, QUEUE_PER_PAGE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    prefetch_related_objects(page.object_list, Prefetch("reviews", Review.objects.select_related("reviewer")))
    for sub in page.object_list:
        sub.project = project  # (the same row: no query per submission)
        sub.approvals = submissions.approvals(sub)
    counts = submissions.queue_counts(project)
    params = request.GET.copy()
    params.pop("page", None)
    alone = submissions.approved_below_rule(project)
    return render(
        request,
        "dashboard/review_queue.html",
        {
            "project": project,
            "page": page,
            "counts": counts,
            "total": sum(counts.values()),
            "status": status,
            "every": every,
            "query": params.urlencode(),
            "here": request.GET.urlencode(),
            "can_act": project.allows(request.user, Role.REVIEWER),
            "bulk_max": submissions.BULK_MAX,
            "approved_alone": alone[:APPROVED_ALONE_SHOWN],
            "approved_alone_count": alone.count(),
            "allowance": handoff.upload_allowance(project),
        },
    )


APPROVED_ALONE_SHOWN = 50
QUEUE_KEEPS = ("status", "all", "page")  # what a bulk action keeps of the queue's address


@require_POST
@login_required
def review_bulk(request, slug: str):
    """Verify or approve the selected submissions (the queue's checkboxes); each one by the usual rules,
    the skipped ones counted with why, then back to the same page of the queue."""
    project = project_for_user(request, slug, role=Role.REVIEWER)
    back = QueryDict(request.POST.get("back", ""))
    target = reverse("dashboard:review-queue", args=[project.slug])
    kept = urlencode({k: back[k] for k in QUEUE_KEEPS if back.get(k)})
    ids = request.POST.getlist("ids")
    if not all(i.isdigit() for i in ids):
        messages.error(request, "Select submissions by their numbers.")
        return redirect(f"{target}?{kept}")
    try:
        results = submissions.bulk_act(
            project, by=request.user, action=request.POST.get("action", ""), ids=[int(i) for i in ids]
        )
    except TrackingError as exc:
        messages.error(request, exc.message)
        return redirect(f"{target}?{kept}")
    unqueued = sum(
        not queue.dispatch(tasks.verify_submission, r.id) for r in results if r.outcome == "verifying"
    )
    summary = submissions.bulk_summary(request.POST["action"], results) + "."
    if unqueued:
        summary += " The worker queue is unreachable right now; the verifications start once it is back."
    skipped = any(r.outcome == "skipped" for r in results)
    (messages.warning if skipped or unqueued else messages.success)(request, summary)
    return redirect(f"{target}?{kept}")
