"""A project's settings (admins only): review, regression, budget guard and rollback, the spend guards
(with their dry run over the project's history), the SMR source. Members have a tab of their own
(views/members.py)."""

import math

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from smrweb.core import ratelimits
from smrweb.dashboard.access import project_for_user
from smrweb.outbound import webhooks
from smrweb.sources import smr
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Role, SourceKind, SpendStop
from smrweb.tracking.services import submissions
from smrweb.tracking.services.alerts import spend_rule


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
        label="Harness webhook URL",
        assume_scheme="https",
        help_text="REST-push projects: what the dashboard asks of the harness — rollbacks, stops, pauses and "
        "resumes (the spend guards' too), messages, new runs — is POSTed here, signed (see below).",
    )

    def clean_regression_threshold(self):
        value = self.cleaned_data["regression_threshold"]
        if value is not None and not math.isfinite(value):
            raise forms.ValidationError("Enter a finite number.")
        return value


def _usd_field(label: str, help_text: str) -> forms.DecimalField:
    return forms.DecimalField(
        required=False,
        max_value=spend_rule.MONEY_MAX,
        max_digits=18,
        decimal_places=6,
        label=label,
        help_text=help_text,
    )


class SpendGuardForm(forms.Form):
    """The spend-aware stop and the day budget (services/alerts/spend_rule.py checks them again)."""

    spend_stop = forms.ChoiceField(
        choices=SpendStop.choices,
        label="Spend-aware stop",
        help_text="Off by default. When a live run passes a limit below, its source is asked to pause "
        "it (SMR: pause; REST push: a signed smrweb.pause) or stop it, once per best score, audited, and the "
        "project's reviewers and admins are told in their inbox. Resume on the run's page undoes a pause.",
    )
    spend_stop_usd = _usd_field(
        "USD since the best score",
        "Act when a run spent more than this since it last "
        "improved its best score (or since it started, before any score).",
    )
    spend_stop_turns = forms.IntegerField(
        required=False, min_value=1, max_value=10**9, label="or turns since the best score"
    )
    spend_stop_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=10**15, label="or tokens since the best score"
    )
    spend_stop_usd_per_point = _usd_field(
        "or USD per point of score, over the window",
        "The marginal cost: what the run spent over its last window of turns, divided by the score it "
        "gained there; a window that gained nothing counts as past any ceiling.",
    )
    spend_stop_window = forms.IntegerField(
        min_value=1, max_value=spend_rule.WINDOW_MAX, label="Window (turns)", initial=50
    )
    day_budget_usd = _usd_field(
        "Day budget (USD)",
        "When the project's turns cost this much in one day of its clock, every live run is paused (once "
        "that day; a run someone resumes goes on). Empty: no day budget.",
    )
    day_zone = forms.CharField(
        max_length=64,
        label="The project's clock",
        help_text="An IANA time zone (UTC, Europe/Paris, America/New_York): where the day budget's "
        "day starts.",
    )

    def clean(self):
        data = super().clean()
        for name in ("spend_stop_usd", "spend_stop_usd_per_point", "day_budget_usd"):
            if data.get(name) is not None and data[name] <= 0:
                self.add_error(name, "More than $0, or empty for no limit.")
        zone = data.get("day_zone")
        if zone is not None:
            try:
                spend_rule.check_spend_guard_settings({"day_zone": zone})
            except InvalidInput as exc:
                self.add_error("day_zone", exc.message)
        return data

    def limits(self) -> spend_rule.Limits:
        d = self.cleaned_data
        return spend_rule.Limits(
            usd=d["spend_stop_usd"],
            turns=d["spend_stop_turns"],
            tokens=d["spend_stop_tokens"],
            usd_per_point=d["spend_stop_usd_per_point"],
            window=d["spend_stop_window"],
        )


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
    if action in ("spend_guard", "spend_guard_preview"):
        return _spend_guard(request, project, action)
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


def _spend_guard(request, project, action: str):
    """Save the spend guards' settings, or preview them: the dry run over the project's history with the
    form's values, before they are saved (nothing changes)."""
    form = SpendGuardForm(request.POST)
    if not form.is_valid():
        return _render(request, project, guard_form=form, status=400)
    if action == "spend_guard_preview":
        dry = spend_rule.project_dry_run(
            project,
            form.limits(),
            day_budget=form.cleaned_data["day_budget_usd"],
            zone=form.cleaned_data["day_zone"],
        )
        return _render(request, project, guard_form=form, dry_run=dry, previewing=True)
    initial = {f: getattr(project, f) for f in SpendGuardForm.base_fields}
    changes = {k: v for k, v in form.cleaned_data.items() if v != initial[k]}
    try:
        if changes:
            services.update_project(project, by=request.user, **changes)
    except InvalidInput as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return _render(request, project, guard_form=form, status=400)
    messages.success(request, "Spend guards saved." if changes else "Nothing changed.")
    return redirect(reverse("dashboard:project-settings", args=[project.slug]) + "#spend-guards")


def _render(
    request,
    project,
    *,
    form=None,
    smr_form=None,
    metric_form=None,
    bodies_form=None,
    guard_form=None,
    dry_run=None,
    previewing=False,
    status=200,
):
    initial = {f: getattr(project, f) for f in ProjectSettingsForm.base_fields}
    if dry_run is None and guard_form is None:
        saved = spend_rule.Limits.of(project)
        if saved.any or project.day_budget_usd is not None:  # what the saved rule would have done
            dry_run = spend_rule.project_dry_run(project)
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
            "guard_form": guard_form
            or SpendGuardForm(initial={f: getattr(project, f) for f in SpendGuardForm.base_fields}),
            "dry_run": dry_run,
            "previewing": previewing,
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
