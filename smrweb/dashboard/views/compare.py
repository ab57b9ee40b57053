"""Compare up to 200 runs of a project side by side: `compare/?runs=A&runs=B…`, the first run the baseline."""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_safe

from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts import compare as compare_charts  # beside tracking.queries.compare
from smrweb.tracking.queries import compare

MISSING_SHOWN = 20  # unknown ids listed by name; the rest are counted


@require_safe
@login_required
def compare_runs(request, slug: str):
    project = project_for_user(request, slug)
    requested = compare.reorder(
        compare.parse_run_ids(request.GET.getlist("runs")),
        baseline=request.GET.get("baseline", "").strip(),
        drop=request.GET.get("drop", "").strip(),
    )
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
    # The picker: the compared runs first (their order is the comparison's), then recent ones.
    shown = {run.external_id for run in selected}
    chosen = shown or set(requested)
    recent = [run for run in compare.recent_runs(project) if run.external_id not in shown]
    context["picker"] = [(run, run.external_id in chosen) for run in [*selected, *recent]]
    return render(request, "dashboard/compare.html", context, status=status)
