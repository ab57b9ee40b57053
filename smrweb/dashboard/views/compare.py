"""Compare up to 50 runs of a project side by side (being built)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from smrweb.dashboard.access import project_for_user


@require_GET
@login_required
def compare_runs(request, slug: str):
    project_for_user(request, slug)
    return HttpResponse("compare: not built yet", status=501)
