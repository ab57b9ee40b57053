"""Signed, expiring artifact links (being built)."""

from django.http import HttpResponse
from django.views.decorators.http import require_GET


@require_GET
def download_by_link(request, token: str):
    return HttpResponse("not built yet", status=501)
