"""Scenario presets and their preflight (being built)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse


@login_required
def scenario_detail(request, key: str):
    return HttpResponse("not built yet", status=501)


@login_required
def scenario_preflight(request, key: str):
    return HttpResponse("not built yet", status=501)
