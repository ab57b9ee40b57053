"""API tokens of a project: list, create (the secret is shown once), revoke. Admins only."""

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from smrweb.core import ratelimits
from smrweb.dashboard.access import project_for_user
from smrweb.tracking import services
from smrweb.tracking.models import ApiToken, Role

NEW_TOKEN_KEY = "smrweb.new_token"


class TokenForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="What will use it, e.g. “ci-harness”.")


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_tokens(request, slug: str):
    project = project_for_user(request, slug, role=Role.ADMIN)
    form = TokenForm(request.POST or None)
    limited = None
    if request.method == "POST" and form.is_valid():
        # Each user may mint SMRWEB_TOKEN_CREATE_RATE tokens (default 20 an hour), across projects.
        limited = ratelimits.hit(
            request, group="token-create", rate=settings.SMRWEB_TOKEN_CREATE_RATE, keys=(ratelimits.by_user,)
        )
        if limited:
            form.add_error("name", limited.message)
        else:
            _, raw = services.create_api_token(project, name=form.cleaned_data["name"], by=request.user)
            # Post/redirect/get: a reload must not mint a second token; the secret rides in the
            # session for exactly one page view.
            request.session[NEW_TOKEN_KEY] = raw
            return redirect("dashboard:project-tokens", slug=project.slug)
    context = {
        "project": project,
        "form": form,
        "new_token": request.session.pop(NEW_TOKEN_KEY, None),
        "tokens": ApiToken.objects.filter(project=project).select_related("created_by"),
    }
    response = render(request, "dashboard/project_tokens.html", context, status=429 if limited else 200)
    if limited:
        response["Retry-After"] = str(limited.retry_after)
    return response


@require_POST
@login_required
def revoke_token(request, slug: str, token_id: int):
    project = project_for_user(request, slug, role=Role.ADMIN)
    services.revoke_api_token(get_object_or_404(ApiToken, project=project, pk=token_id), by=request.user)
    return redirect("dashboard:project-tokens", slug=project.slug)
