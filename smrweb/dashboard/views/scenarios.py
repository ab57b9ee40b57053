"""A scenario preset's page and its preflight (run on a worker, swapped in by htmx)."""

import json
import re

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST, require_safe

from smrweb import tasks
from smrweb.core import numbers, ratelimits
from smrweb.dashboard.views.shares import leaderboard_links, share_control
from smrweb.tracking.models import Project, Scenario, ShareKind
from smrweb.tracking.queries.scenario_board import scenario_board

TEMPLATE = "dashboard/scenario_detail.html"


def scenario_for_user(request, key: str) -> tuple[Scenario, list[Project]]:
    """The scenario, if the user may see it (`Scenario.objects.visible_to`, the API's rule too; 404
    otherwise, as for projects), and the user's projects using it."""
    scenario = get_object_or_404(Scenario.objects.visible_to(request.user), key=key)
    projects = list(Project.objects.visible_to(request.user).filter(scenario=scenario).order_by("slug"))
    return scenario, projects


def _context(scenario: Scenario, projects: list[Project]) -> dict:
    commands = {
        name: json.dumps(value, ensure_ascii=False) if (value := getattr(scenario, name)) else ""
        for name in ("validator_command", "scoring_command")
    }
    lo, hi = scenario.score_min, scenario.score_max
    bounds = f"{numbers.MINUS + '∞' if lo is None else f'{lo:g}'} … {'∞' if hi is None else f'{hi:g}'}"
    return {
        "scenario": scenario,
        "projects": projects,
        "board": scenario_board(scenario, projects),
        "commands": commands,
        "bounds": bounds,
        "timeout": tasks.PREFLIGHT_TIMEOUT,
    }


def _with_code(text: str) -> str:
    """A check's detail with its `backticked` names as <code> (escaped first: details quote user input)."""
    return mark_safe(re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text)))


@require_safe
@login_required
def scenario_detail(request, key: str):
    scenario, projects = scenario_for_user(request, key)
    context = _context(scenario, projects)
    context.update(share_control(request, ShareKind.LEADERBOARD, scenario=scenario))
    context["share_links"] = leaderboard_links(request, scenario) if context.get("share") else []
    if request_id := request.GET.get("preflight", ""):  # a preflight asked without JavaScript
        context = _with_preflight(context, scenario, request_id[:64])
    return render(request, TEMPLATE, context)


@require_POST
@login_required
def scenario_preflight(request, key: str):
    """Queue a preflight on a worker and answer at once: htmx gets the fragment that polls for the report,
    a plain form post is sent back to the page, which shows the report once it is there."""
    scenario, projects = scenario_for_user(request, key)
    context = _context(scenario, projects)
    limited = ratelimits.hit(
        request, group="preflight", rate=settings.SMRWEB_PREFLIGHT_RATE, keys=[ratelimits.by_user]
    )
    if limited:
        context["error"] = f"you asked too often. {limited.message}"
    else:
        try:
            request_id = tasks.request_preflight(scenario.key)
        except tasks.NoWorkerAnswer as exc:
            context["error"] = str(exc)
        else:
            if not request.htmx:
                return redirect(
                    f"{reverse('dashboard:scenario-detail', args=[scenario.key])}?preflight={request_id}"
                )
            context.update(pending=request_id, status="pending")
    template = f"{TEMPLATE}#preflight-report" if request.htmx else TEMPLATE
    # htmx 2 swaps 2xx answers only: the refusal is said in the fragment; a plain post gets a 429.
    response = render(request, template, context, status=429 if limited and not request.htmx else 200)
    if limited:
        response["Retry-After"] = str(limited.retry_after)
    return response


@require_safe
@login_required
def scenario_preflight_result(request, key: str, request_id: str):
    """The preflight fragment: still polling while the worker has not answered, then the report."""
    scenario, projects = scenario_for_user(request, key)
    context = _with_preflight(_context(scenario, projects), scenario, request_id)
    return render(request, f"{TEMPLATE}#preflight-report", context)


def _with_preflight(context: dict, scenario: Scenario, request_id: str) -> dict:
    try:
        state = tasks.preflight_state(scenario.key, request_id)
    except tasks.NoWorkerAnswer as exc:
        return {**context, "error": str(exc)}
    if state is None or state["status"] == "gone":
        return {**context, "error": "that preflight is unknown or expired (reports are kept 10 minutes)"}
    if state["status"] == "no_worker":
        return {**context, "error": f"no worker took it within {tasks.PREFLIGHT_TIMEOUT:g} seconds"}
    if state["status"] != "done":
        return {**context, "pending": request_id, "status": state["status"]}
    report = state["report"]
    for c in report["checks"]:
        c["detail_html"] = _with_code(c["detail"])
    return {**context, "report": report, "failures": [c for c in report["checks"] if not c["ok"]]}
