"""Projects overview and project page (runs table, leaderboard)."""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from smrweb.dashboard.access import fragment_template, project_for_user
from smrweb.tracking import queries
from smrweb.tracking.filters import RunFilter
from smrweb.tracking.models import Project, Run, RunState

RUNS_PER_PAGE = 50


@require_GET
@login_required
@vary_on_headers("HX-Request")
def project_list(request):
    projects = Project.objects.visible_to(request.user).select_related("scenario").order_by("slug")
    context = {"summaries": queries.project_summaries(projects)}
    return render(request, fragment_template(request, "dashboard/project_list.html", "project-cards"), context)


def filter_runs(project: Project, params) -> tuple[object, dict]:
    """The project's runs narrowed by the page's filter form (invalid values are ignored)."""
    runs = Run.objects.filter(project=project).select_related("project__scenario")
    filterset = RunFilter(params, queryset=runs)
    filterset.is_valid()
    data = {k: v for k, v in filterset.form.cleaned_data.items() if k not in filterset.form.errors}
    filters = {"state": (data.get("state") or [""])[0], "stalled": bool(data.get("stalled")),
               "failed": bool(data.get("failed")), "q": (data.get("q") or "").strip()}
    return filterset.qs.order_by("-last_progress_at", "-id"), filters


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
        "health": getattr(project, "source_health", None) if project.source != "push" else None,
        "query": _without(request.GET, "page"),  # for pager links
        "poll_query": request.GET.urlencode(),  # the poll keeps the page being looked at
    }
    return render(request, fragment_template(request, "dashboard/project_detail.html", "project-live"), context)
