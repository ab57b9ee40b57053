"""Parts of a run fetched on their own from its page: one turn's detail, the turns behind a timeline bar,
and an artifact's bytes."""

from datetime import UTC, timedelta

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_safe

from smrweb.dashboard.access import run_for_user
from smrweb.dashboard.artifacts import artifact_response, missing_bytes_page
from smrweb.tracking.errors import ArtifactBytesMissing
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    TurnKind,
)
from smrweb.tracking.queries import timeline


@require_safe
@login_required
def turn_detail(request, slug: str, run_id: str, turn_id: int):
    run = run_for_user(request, slug, run_id)
    turn = get_object_or_404(AgentTurn.objects.select_related("body"), run=run, pk=turn_id)
    return render(
        request,
        "dashboard/partials/turns_panel.html",
        {"project": run.project, "run": run, "turns": [turn], "count": 1, "detail": True},
    )


MAX_BAR_WIDTH = timedelta(days=366)  # a timeline bar is at most a year wide, whatever the run's span
MAX_BAR_INDEX = 10_000_000


def _bar(query) -> tuple | None:
    """(origin, width, index, start, end) of a bar's query parameters, or None when they do not name a bar
    a timeline could draw: malformed, out of range, or beyond the calendar (red-team finding 8 found each
    of those answering 500)."""
    try:
        origin = parse_datetime(query.get("origin", ""))
        width = timedelta(microseconds=int(query.get("width_us", "")))
        index = int(query.get("bin", ""))
        if origin is None or not timedelta(0) < width <= MAX_BAR_WIDTH or not 0 <= index <= MAX_BAR_INDEX:
            return None
        start = origin + width * index
        end = start + width
        for moment in (origin, start - timedelta(seconds=1), end + timedelta(seconds=1)):  # what is queried
            moment.astimezone(UTC)  # within the calendar in UTC too (year 1 at +14:00 is not)
    except (ValueError, OverflowError, TypeError):
        return None
    return origin, width, index, start, end


@require_safe
@login_required
def turns_in_bar(request, slug: str, run_id: str):
    """The turns behind one bar of the timeline: bin `bin` of width `width_us` from `origin`, one kind."""
    run = run_for_user(request, slug, run_id)
    bar = _bar(request.GET)
    if bar is None:
        return render(
            request,
            "dashboard/partials/turns_panel.html",
            {"project": run.project, "run": run, "error": "That bar could not be read; click it again."},
            status=400,
        )
    origin, width, index, start, end = bar
    kind = {"d": TurnKind.DRIVER_INFERENCE, "c": TurnKind.CHILD_WORK, "u": TurnKind.ROLE_UNKNOWN}.get(
        request.GET.get("kind", "")
    )
    turns, count = timeline.turns_in_bin(run, origin, width, index, kind)
    return render(
        request,
        "dashboard/partials/turns_panel.html",
        {
            "project": run.project,
            "run": run,
            "turns": turns,
            "count": count,
            "start": start,
            "end": end,
            "kind": kind,
        },
    )


@require_safe
@login_required
def download_artifact(request, slug: str, run_id: str, artifact_id: int):
    run = run_for_user(request, slug, run_id)
    artifact = get_object_or_404(Artifact.objects.select_related("blob"), run=run, pk=artifact_id)
    try:
        return artifact_response(artifact)
    except ArtifactBytesMissing as exc:
        return missing_bytes_page(request, exc)
