"""A project's spend per day and model, in the viewer's clock (issue 37 item 2): a card of the project page,
loaded and polled on its own."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from smrweb.dashboard import live
from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts.spend import spend_by_day_figure
from smrweb.tracking import queries

SPAN_CHOICES = (7, 30, 90)
DEFAULT_DAYS = 30


@require_safe
@login_required
def project_spend(request, slug: str):
    project = project_for_user(request, slug)
    try:
        days = int(request.GET.get("days", DEFAULT_DAYS))
    except ValueError:
        days = DEFAULT_DAYS
    days = days if days in SPAN_CHOICES else DEFAULT_DAYS
    zone = timezone.get_current_timezone_name()
    spend = queries.project_spend_by_day(project, zone, days)
    version = live.version(zone, days, spend.days[0], spend.models, spend.usd, spend.turns, spend.unpriced)
    if live.unchanged(request, version):
        return live.no_change()
    unpriced = sum(sum(v) for v in spend.unpriced.values())
    context = {
        "project": project,
        "spend": spend,
        "days": days,
        "span_choices": SPAN_CHOICES,
        "figure": spend_by_day_figure(spend) if spend.models else None,
        "unpriced": unpriced,
        "version": version,
    }
    return render(request, "dashboard/partials/project_spend.html", context)
