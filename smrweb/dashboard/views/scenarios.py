"""A scenario preset's page and its preflight (run on a worker, swapped in by htmx)."""

import json
import re

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, render
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST

from smrweb.sources import tasks
from smrweb.tracking.models import Project, Scenario

TEMPLATE = "dashboard/scenario_detail.html"


def scenario_for_user(request, key: str) -> tuple[Scenario, list[Project]]:
    """The scenario and the user's projects using it: superusers see any, members of a project using
    it see it, everyone else gets 404 (as for projects, an outsider learns nothing)."""
    scenario = get_object_or_404(Scenario, key=key)
    projects = list(Project.objects.visible_to(request.user).filter(scenario=scenario).order_by("slug"))
    if not projects and not request.user.is_superuser:
        raise Http404("No such scenario.")
    return scenario, projects


def _context(scenario: Scenario, projects: list[Project]) -> dict:
    commands = {name: json.dumps(value, ensure_ascii=False) if (value := getattr(scenario, name)) else ""
                for name in ("validator_command", "scoring_command")}
    lo, hi = scenario.score_min, scenario.score_max
    bounds = f"{'−∞' if lo is None else f'{lo:g}'} … {'∞' if hi is None else f'{hi:g}'}"
    return {"scenario": scenario, "projects": projects, "commands": commands, "bounds": bounds,
            "timeout": tasks.PREFLIGHT_TIMEOUT}


def _with_code(text: str) -> str:
    """A check's detail with its `backticked` names as <code> (escaped first: details quote user input)."""
    return mark_safe(re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text)))


@require_GET
@login_required
def scenario_detail(request, key: str):
    scenario, projects = scenario_for_user(request, key)
    return render(request, TEMPLATE, _context(scenario, projects))


@require_POST
@login_required
def scenario_preflight(request, key: str):
    """Run the preflight on a worker; htmx gets the report fragment, a plain form post the whole page."""
    scenario, projects = scenario_for_user(request, key)
    context = _context(scenario, projects)
    try:
        report = tasks.preflight_on_worker(scenario.key)
    except tasks.NoWorkerAnswer as exc:
        context["error"] = str(exc)
    else:
        if report is None:  # deleted while the worker looked
            raise Http404("No such scenario.")
        for c in report["checks"]:
            c["detail_html"] = _with_code(c["detail"])
        context.update(report=report, failures=[c for c in report["checks"] if not c["ok"]])
    template = f"{TEMPLATE}#preflight-report" if request.htmx else TEMPLATE
    return render(request, template, context)
