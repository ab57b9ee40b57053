"""A project's settings (admins only): review, regression, budget guard and rollback, the SMR source.
Members have a tab of their own (views/members.py)."""

import math

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from smrweb.core import ratelimits
from smrweb.dashboard.access import project_for_user
from smrweb.outbound import webhooks
from smrweb.sources import smr
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Role, SourceKind
from smrweb.tracking.services import submissions


class ProjectSettingsForm(forms.Form):
    require_second_reviewer = forms.BooleanField(
        required=False,
        label="Require a second person to approve",
        help_text="A submission is approved once two different people approve it, whoever (or whatever: "
        "auto-verify) verified it; the approval of the person who proposed it does not count.",
    )
    auto_verify = forms.BooleanField(
        required=False,
        label="Verify every new score automatically",
        help_text="A worker runs the scenario's validator on each new submission as it arrives, so the "
        "project's best and leaderboard (verified submissions) fill without a click each.",
    )
    regression_threshold = forms.FloatField(
        required=False,
        min_value=0,
        label="Regression threshold",
        help_text="A run whose latest score is worse than its best by more than this shows a regression "
        "banner with a one-click rollback. Leave it empty to turn detection off.",
    )
    budget_guard = forms.BooleanField(
        required=False,
        label="Budget guard: stop a run that passes its budget",
        help_text="When a live run passes 100 % of its USD or token budget, its source is asked to stop it "
        "(SMR: a stop; REST-push: a signed stop webhook), once, audited; its budget alert says so.",
    )
    rollback_webhook_url = forms.URLField(
        required=False,
        max_length=200,
        label="Rollback webhook URL",
        assume_scheme="https",
        help_text="REST-push projects: rollbacks are POSTed here, signed (see below).",
    )

    def clean_regression_threshold(self):
        value = self.cleaned_data["regression_threshold"]
        if value is not None and not math.isfinite(value):
            raise forms.ValidationError("Enter a finite number.")
        return value


class TurnBodiesForm(forms.Form):
    capture_turn_bodies = forms.BooleanField(
        required=False,
        label="Capture prompt and response bodies",
        help_text="Store the prompt and response a source sends with each agent turn (REST prompt/response, "
        "OpenTelemetry GenAI message content, JSONL), each cut to the server's size cap. Off: they are "
        "dropped as they arrive and never stored; the REST answer counts them in bodies_dropped.",
    )


class SmrSourceForm(forms.Form):
    smr_api_key = forms.CharField(
        required=False,
        max_length=1000,
        label="New SMR API key",
        widget=forms.PasswordInput,
        help_text="Leave empty to test the key the project has. A new key is checked against the backend "
        "before it is saved (sealed; never shown again).",
    )


class ScoreMetricForm(forms.Form):
    score_metric = forms.CharField(max_length=200, label="Score metric")


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_settings(request, slug: str):
    project = project_for_user(request, slug, role=Role.ADMIN)
    action = request.POST.get("action", "") if request.method == "POST" else ""
    if action in ("test", "save_key"):
        return _smr_source(request, project, action)
    if action == "score_metric":
        return _score_metric(request, project)
    if action in ("turn_bodies", "delete_turn_bodies"):
        return _turn_bodies(request, project, action)
    initial = {f: getattr(project, f) for f in ProjectSettingsForm.base_fields}
    form = ProjectSettingsForm(request.POST or None, initial=initial)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            changes = {k: v for k, v in form.cleaned_data.items() if v != initial[k]}
            try:
                if changes:
                    services.update_project(project, by=request.user, **changes)
            except InvalidInput as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                saved = "Settings saved." if changes else "Nothing changed."
                if changes.get("auto_verify") and (progress := submissions.catch_up_progress(project)):
                    saved += (
                        f" The {progress.total} candidates already waiting are verified too, about "
                        f"{settings.SMRWEB_AUTO_VERIFY_CATCH_UP_RATE} a minute."
                    )
                messages.success(request, saved)
                return redirect("dashboard:project-settings", slug=project.slug)
        status = 400
    return _render(request, project, form=form, status=status)


def _turn_bodies(request, project, action: str):
    """Turn body capture on or off (what is stored stays), or delete what is stored (confirmed, audited)."""
    if action == "delete_turn_bodies":
        if request.POST.get("confirm", "").strip() != project.slug:
            messages.error(request, f"Type {project.slug} to confirm; nothing was deleted.")
            return redirect("dashboard:project-settings", slug=project.slug)
        deleted = services.delete_turn_bodies(project, by=request.user)
        messages.success(request, f"Deleted the stored prompt and response of {deleted} turn(s).")
        return redirect("dashboard:project-settings", slug=project.slug)
    form = TurnBodiesForm(request.POST)
    if not form.is_valid():
        return _render(request, project, bodies_form=form, status=400)
    capture = form.cleaned_data["capture_turn_bodies"]
    if capture != project.capture_turn_bodies:
        services.update_project(project, by=request.user, capture_turn_bodies=capture)
        messages.success(
            request,
            "Prompt and response bodies are captured from now on."
            if capture
            else "Prompt and response bodies are no longer stored; those stored before stay until deleted.",
        )
    else:
        messages.success(request, "Nothing changed.")
    return redirect("dashboard:project-settings", slug=project.slug)


def _render(request, project, *, form=None, smr_form=None, metric_form=None, bodies_form=None, status=200):
    initial = {f: getattr(project, f) for f in ProjectSettingsForm.base_fields}
    smr_settings = project.source_settings if project.source == SourceKind.SMR else {}
    return render(
        request,
        "dashboard/project_settings.html",
        {
            "project": project,
            "form": form or ProjectSettingsForm(initial=initial),
            "webhook_secret": webhooks.webhook_secret(project),
            "smr": smr_settings,
            "smr_form": smr_form or SmrSourceForm(),
            "metric_form": metric_form
            or ScoreMetricForm(initial={"score_metric": smr_settings.get("score_metric")}),
            "declared_metrics": smr_settings.get("declared_metrics") or {},
            "catch_up": submissions.catch_up_progress(project),
            "catch_up_rate": settings.SMRWEB_AUTO_VERIFY_CATCH_UP_RATE,
            "approved_alone_count": submissions.approved_below_rule(project).count(),
            "bodies_form": bodies_form
            or TurnBodiesForm(initial={"capture_turn_bodies": project.capture_turn_bodies}),
            "stored_bodies": services.stored_turn_bodies(project),
            "body_cap": settings.SMRWEB_TURN_BODY_MAX_BYTES,
        },
        status=status,
    )


def _smr_source(request, project, action: str):
    """Test the project's SMR binding, or replace its key after the backend accepted the new one."""
    form = SmrSourceForm(request.POST)
    if project.source != SourceKind.SMR or not form.is_valid():
        return _render(request, project, smr_form=form, status=400)
    limited = ratelimits.hit(
        request, group="smr-check", rate=settings.SMRWEB_PREFLIGHT_RATE, keys=[ratelimits.by_user]
    )
    if limited:
        form.add_error(None, f"You asked too often. {limited.message}")
        response = _render(request, project, smr_form=form, status=429)
        response["Retry-After"] = str(limited.retry_after)
        return response
    key = form.cleaned_data["smr_api_key"]
    try:
        if action == "save_key":
            services.replace_smr_api_key(project, key, by=request.user, check_binding=smr.check_binding)
            messages.success(request, "The backend accepted the new key; it is saved.")
        elif key:
            smr.check_binding(
                smr_project_id=project.source_settings.get("smr_project_id", ""),
                api_key=key,
                backend_base=project.source_settings.get("backend_base", ""),
            )
            messages.success(request, "The backend accepts that key for this SMR project (not saved).")
        else:
            smr.check_project(project)
            messages.success(
                request, "Connected: the backend accepts this project's key for its SMR project."
            )
    except InvalidInput as exc:
        form.add_error("smr_api_key" if exc.field == "smr_api_key" else None, exc.message)
        return _render(request, project, smr_form=form, status=400)
    return redirect("dashboard:project-settings", slug=project.slug)


def _score_metric(request, project):
    form = ScoreMetricForm(request.POST)
    if project.source != SourceKind.SMR or not form.is_valid():
        return _render(request, project, metric_form=form, status=400)
    try:
        services.choose_score_metric(project, form.cleaned_data["score_metric"], by=request.user)
    except InvalidInput as exc:
        form.add_error("score_metric", exc.message)
        return _render(request, project, metric_form=form, status=400)
    messages.success(request, "Score metric saved; earlier results of it become scores on the next sync.")
    return redirect("dashboard:project-settings", slug=project.slug)
