"""Projects overview and project page (runs table, leaderboard)."""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from smrweb.dashboard.access import project_for_user
from smrweb.tracking import queries
from smrweb.tracking.models import TERMINAL_STATES, Project, Run, RunState

RUNS_PER_PAGE = 50


def _fragment(request, template: str, fragment: str) -> str:
    """One URL, one view: htmx polls get the named partial, everything else the full page."""
    if request.htmx and not request.htmx.history_restore_request:
        return f"{template}#{fragment}"
    return template


@require_GET
@login_required
@vary_on_headers("HX-Request")
def project_list(request):
    projects = Project.objects.visible_to(request.user).select_related("scenario").order_by("slug")
    context = {"summaries": queries.project_summaries(projects)}
    return render(request, _fragment(request, "dashboard/project_list.html", "project-cards"), context)


def filter_runs(project: Project, params) -> tuple[object, dict]:
    runs = Run.objects.filter(project=project).select_related("project__scenario")
    state = params.get("state", "")
    if state == "live":
        runs = runs.exclude(state__in=TERMINAL_STATES)
    elif state in RunState.values:
        runs = runs.filter(state=state)
    if params.get("stalled"):
        runs = runs.filter(stalled_since__isnull=False).exclude(state__in=TERMINAL_STATES)
    if params.get("failed"):
        runs = runs.filter(state=RunState.FAILED)
    if q := params.get("q", "").strip():
        runs = runs.filter(Q(external_id__icontains=q) | Q(failure_detail__icontains=q))
    filters = {"state": state, "stalled": bool(params.get("stalled")), "failed": bool(params.get("failed")), "q": q}
    return runs.order_by("-last_progress_at", "-id"), filters


def _without(params, key: str) -> str:
    """The query string minus one parameter (so pager links do not pile up `page=`)."""
    params = params.copy()
    params.pop(key, None)
    return params.urlencode()


@require_GET
@login_required
@vary_on_headers("HX-Request")
def project_detail(request, slug: str):
    project = project_for_user(request, slug)
    runs, filters = filter_runs(project, request.GET)
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    histories = queries.score_histories(r.pk for r in page)
    rows = [(run, histories.get(run.pk, [])) for run in page]
    context = {
        "project": project,
        "page": page,
        "rows": rows,
        "filters": filters,
        "states": RunState.values,
        "leaderboard": queries.leaderboard(project)[:20],
        "query": _without(request.GET, "page"),  # for pager links
        "poll_query": request.GET.urlencode(),  # the poll keeps the page being looked at
    }
    return render(request, _fragment(request, "dashboard/project_detail.html", "project-live"), context)
