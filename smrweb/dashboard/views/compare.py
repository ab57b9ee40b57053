"""Compare up to 200 runs of a project side by side: `compare/?runs=A&runs=B…`, the first run the baseline."""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb.dashboard import live
from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts import compare as compare_charts  # beside tracking.queries.compare
from smrweb.tracking.queries import compare

MISSING_SHOWN = 20  # unknown ids listed by name; the rest are counted


@require_safe
@login_required
@vary_on_headers("HX-Request", live.ONLY_HEADER)
def compare_runs(request, slug: str):
    """The comparison; below it the run picker, which a page that compares runs loads once scrolled to
    (X-Smrweb-Only: pick): it lists a few hundred runs the comparison itself does not need."""
    project = project_for_user(request, slug)
    requested = compare.reorder(
        compare.parse_run_ids(request.GET.getlist("runs")),
        baseline=request.GET.get("baseline", "").strip(),
        drop=request.GET.get("drop", "").strip(),
    )
    if request.htmx and request.headers.get(live.ONLY_HEADER) == "pick":
        selected = compare.picked_runs(project, requested[: compare.MAX_RUNS])
        context = {
            "project": project,
            "max_runs": compare.MAX_RUNS,
            "picker": _picker(project, selected),
            "picked_now": bool(selected),
        }
        return render(request, "dashboard/compare.html#pick", context)
    context = {"project": project, "requested": requested, "max_runs": compare.MAX_RUNS}
    status = 200
    if len(requested) > compare.MAX_RUNS:
        # Refused before any lookup: the limit is what keeps the page fast.
        context["error"] = (
            f"{len(requested)} runs were picked; Compare takes at most {compare.MAX_RUNS}. "
            "Untick some and compare again."
        )
        status, selected = 400, []
    else:
        comparison = compare.compare(project, requested)
        selected = [s.run for s in comparison.runs]
        context["comparison"] = comparison
        context["export_query"] = urlencode([("runs", s.run.external_id) for s in comparison.runs])
        context["missing"] = comparison.missing[:MISSING_SHOWN]
        context["missing_more"] = max(len(comparison.missing) - MISSING_SHOWN, 0)
        if len(comparison.runs) >= 2:
            context.update(compare_charts.build(comparison))
    context["picked_now"] = bool(selected)
    if len(selected) >= 2:
        context["picker_later"] = True
    else:
        context["picker"] = _picker(project, selected, chosen=set(requested))
    return render(request, "dashboard/compare.html", context, status=status)


def _picker(project, selected: list, chosen: set[str] | None = None) -> list:
    """The compared runs first (their order is the comparison's), ticked, then the recent others."""
    shown = {run.external_id for run in selected}
    chosen = shown or chosen or set()
    recent = [run for run in compare.recent_runs(project) if run.external_id not in shown]
    return [(run, run.external_id in chosen) for run in [*selected, *recent]]
