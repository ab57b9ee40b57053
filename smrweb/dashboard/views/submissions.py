"""Submission page, lifecycle actions and the review queue (being built)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse


@login_required
def review_queue(request, slug: str):
    return HttpResponse("not built yet", status=501)


@login_required
def submission_detail(request, slug: str, submission_id: int):
    return HttpResponse("not built yet", status=501)


@login_required
def submission_action(request, slug: str, submission_id: int, action: str):
    return HttpResponse("not built yet", status=501)
