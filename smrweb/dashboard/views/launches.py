"""Start the next run: the form (prefilled from the run it comes from, with the carry-forward block as an
editable kickoff) and the launch's status page, which polls itself until the new run appears. Thin:
who may, what is checked and the audit trail live in `tracking.services.launches`."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb import tasks
from smrweb.core import queue
from smrweb.dashboard import live
from smrweb.dashboard.access import fragment_template, project_for_user
from smrweb.tracking import queries
from smrweb.tracking.errors import InvalidInput, TrackingError
from smrweb.tracking.models import OPEN_DISPATCH, DispatchStatus, Role, Run, RunLaunch, SourceKind
from smrweb.tracking.services import capabilities, launches
from smrweb.tracking.services.capabilities import Action

RECENT_LAUNCHES = 10
SHOWN_FIELDS = ("carry_forward", "text", "model_profile", "budget_usd", "budget_tokens", "git_commit")


class LaunchForm(forms.Form):
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=100)
    from_run = forms.CharField(widget=forms.HiddenInput, required=False, max_length=200)
    carry_forward = forms.CharField(
        required=False,
        max_length=launches.KICKOFF_MAX,
        widget=forms.Textarea(attrs={"rows": 14}),
        label="Carry-forward",
        help_text="What the project has learned, as the knowledge page renders it; edit freely.",
    )
    text = forms.CharField(
        required=False,
        max_length=launches.KICKOFF_MAX,
        widget=forms.Textarea(attrs={"rows": 5}),
        label="Your text",
        help_text="What to try this time; it follows the block in the kickoff message.",
    )
    model_profile = forms.CharField(required=False, max_length=200, label="Model profile")
    budget_usd = forms.CharField(required=False, max_length=40, label="Budget (USD)")
    budget_tokens = forms.CharField(required=False, max_length=40, label="Budget (tokens)")
    git_commit = forms.CharField(required=False, max_length=64, label="Start at commit")


def _from_run(project, run_id: str) -> Run | None:
    return Run.objects.filter(project=project, external_id=run_id).first() if run_id else None


def _n(request) -> int:
    try:
        return queries.parse_n(request.GET.get("n"))
    except InvalidInput:
        return queries.N_DEFAULT


@require_http_methods(["GET", "POST"])
@login_required
def launch_new(request, slug: str):
    """GET: the form, prefilled (`?from=<run id>` for "start another like this", `?n=` failed approaches
    in the block). POST: record the launch (the form's key makes a double submit one launch), queue its
    dispatch, and go to its status page."""
    project = project_for_user(request, slug, role=Role.REVIEWER)
    refusal = capabilities.refusal(project, Action.LAUNCH)
    status = 200
    if request.method == "POST":
        form = LaunchForm(request.POST)
        from_run = _from_run(project, request.POST.get("from_run", ""))
        status = 400
        if form.is_valid() and not refusal:
            data = form.cleaned_data
            if data["from_run"] and from_run is None:
                form.add_error(None, f"{project.slug} has no run {data['from_run']!r}.")
            else:
                try:
                    launch, created = launches.request_launch(
                        project,
                        by=request.user,
                        from_run=from_run,
                        kickoff=launches.compose_kickoff(data["carry_forward"], data["text"]),
                        model_profile=data["model_profile"],
                        budget_usd=data["budget_usd"],
                        budget_tokens=data["budget_tokens"],
                        git_commit=data["git_commit"],
                        idempotency_key=data["idempotency_key"],
                    )
                except InvalidInput as exc:
                    form.add_error(exc.field if exc.field in SHOWN_FIELDS else None, exc.message)
                except TrackingError as exc:
                    form.add_error(None, exc.message)
                else:
                    _say(request, launch, created)
                    return redirect("dashboard:launch-detail", project.slug, launch.pk)
        defaults = queries.launch_defaults(project, from_run, n=_n(request))
    else:
        from_run = _from_run(project, request.GET.get("from", ""))
        defaults = queries.launch_defaults(project, from_run, n=_n(request))
        form = LaunchForm(
            initial={
                "idempotency_key": launches.new_key(),
                "from_run": from_run.external_id if from_run else "",
                "carry_forward": defaults.carry_forward,
                "model_profile": defaults.model_profile,
                "budget_usd": defaults.budget_usd if defaults.budget_usd is not None else "",
                "budget_tokens": defaults.budget_tokens if defaults.budget_tokens is not None else "",
                "git_commit": defaults.git_commit,
            }
        )
    context = {
        "project": project,
        "form": form,
        "defaults": defaults,
        "refusal": refusal,
        "effect": capabilities.effect(project.source, Action.LAUNCH),
        "is_git": project.source == SourceKind.GIT,
        "recent": RunLaunch.objects.filter(project=project)
        .select_related("from_run", "run", "requested_by")
        .order_by("-created", "-id")[:RECENT_LAUNCHES],
    }
    return render(request, "dashboard/launch_new.html", context, status=status)


def _say(request, launch: RunLaunch, created: bool) -> None:
    if not created:
        messages.warning(
            request, "This form was already sent: it started one run, shown here; nothing new was requested."
        )
    elif queue.dispatch(tasks.dispatch_launch, launch.pk):
        # Gone once the live page changes: its status badge says where the launch stands from then on.
        messages.success(
            request,
            "Launch requested; a worker is asking the source to start the run.",
            extra_tags="until-change",
        )
    else:
        messages.warning(
            request,
            "Launch requested; the worker queue is unreachable right now, so it is dispatched as soon as "
            "the queue is back.",
            extra_tags="until-change",
        )


@require_safe
@login_required
@vary_on_headers("HX-Request")
def launch_detail(request, slug: str, launch_id: int):
    """Where a launch stands; polls itself until it is confirmed (the new run is linked) or failed."""
    project = project_for_user(request, slug)
    launch = get_object_or_404(
        RunLaunch.objects.select_related("project", "from_run", "run", "requested_by"),
        project=project,
        pk=launch_id,
    )
    version = live.version(
        launch.pk, launch.updated.timestamp(), launch.run.updated.timestamp() if launch.run else 0
    )
    if live.unchanged(request, version):
        return live.no_change()
    context = {
        "project": project,
        "launch": launch,
        "version": version,
        "live": launch.status in (*OPEN_DISPATCH, DispatchStatus.ACCEPTED)
        or (launch.run is not None and not launch.run.is_terminal),
    }
    return render(request, fragment_template(request, "dashboard/launch_detail.html", "launch-live"), context)
