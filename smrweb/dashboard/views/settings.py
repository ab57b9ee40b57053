"""A project's review, regression and rollback settings (admins only)."""

import math

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from smrweb.dashboard.access import project_for_user
from smrweb.tracking import rollbacks, services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Role


class ProjectSettingsForm(forms.Form):
    require_second_reviewer = forms.BooleanField(
        required=False, label="Require a second person to approve",
        help_text="A reviewer's approval of a submission they proposed does not count.")
    regression_threshold = forms.FloatField(
        required=False, min_value=0, label="Regression threshold",
        help_text="A run whose latest score is worse than its best by more than this shows a regression "
                  "banner with a one-click rollback. Empty turns detection off.")
    rollback_webhook_url = forms.URLField(
        required=False, max_length=200, label="Rollback webhook URL", assume_scheme="https",
        help_text="REST-push projects: rollbacks are POSTed here, signed (see below).")

    def clean_regression_threshold(self):
        value = self.cleaned_data["regression_threshold"]
        if value is not None and not math.isfinite(value):
            raise forms.ValidationError("Enter a finite number.")
        return value


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_settings(request, slug: str):
    project = project_for_user(request, slug, role=Role.ADMIN)
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
                messages.success(request, "Settings saved." if changes else "Nothing changed.")
                return redirect("dashboard:project-settings", slug=project.slug)
        status = 400
    return render(request, "dashboard/project_settings.html", {
        "project": project, "form": form, "webhook_secret": rollbacks.webhook_secret(project)}, status=status)
