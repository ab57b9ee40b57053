"""Compare up to 200 runs of a project side by side: `compare/?runs=A&runs=B…`, the first run the baseline."""

import functools
import hashlib
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.template.loader import get_template, render_to_string
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb.dashboard import live
from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts import compare as compare_charts  # beside tracking.queries.compare
from smrweb.dashboard.clock import zone_label
from smrweb.tracking.queries import compare

TEMPLATE = "dashboard/compare.html"
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
        return render(request, f"{TEMPLATE}#pick", context)
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
        selected, missing = compare.find_markers(project, requested)
        context["compared"] = selected
        context["missing"] = missing[:MISSING_SHOWN]
        context["missing_more"] = max(len(missing) - MISSING_SHOWN, 0)
        if len(selected) >= 2:
            context["comparison_html"] = _comparison(request, project, selected)
    context["picked_now"] = bool(selected)
    if len(selected) >= 2:
        context["picker_later"] = True
    else:
        picked = compare.picked_runs(project, [marker.external_id for marker in selected])
        context["picker"] = _picker(project, picked, chosen=set(requested))
    return render(request, TEMPLATE, context, status=status)


@functools.cache
def _template_digest() -> str:
    """Kept renders are keyed by version; a changed template makes them other versions."""
    return hashlib.blake2s(get_template(TEMPLATE).template.source.encode(), digest_size=6).hexdigest()


def _comparison(request, project, runs: list[compare.RunMarker]) -> SafeString:
    """The charts and tables of two or more runs, rendered once per version of what they show and kept in
    the cache: the runs as they are now (`Run.updated` moves with every write to a run, and the parents
    named in the table), in this order, the project's slug and scenario, the viewer's clock and the
    30-second tick of the relative times. A hard reload renders it afresh (`live.wants_fresh`)."""
    scenario = project.scenario
    version = live.version(
        _template_digest(),
        project.slug,  # in the rows' links
        (scenario.pk, scenario.maximize, scenario.score_metric, scenario.name),
        timezone.get_current_timezone_name(),
        zone_label(),
        [tuple(marker) for marker in runs],
    )

    def render() -> str:
        comparison = compare.compare(project, [marker.external_id for marker in runs])
        context = {
            "project": project,
            "comparison": comparison,
            "export_query": urlencode([("runs", s.run.external_id) for s in comparison.runs]),
            **compare_charts.build(comparison),
        }
        return render_to_string(f"{TEMPLATE}#comparison", context, request=request)

    deck = live.Deck(f"compare-{project.pk}", [live.Card("comparison", version, render)])
    return mark_safe(deck.page(fresh=live.wants_fresh(request))["comparison"])


def _picker(project, selected: list, chosen: set[str] | None = None) -> list:
    """The compared runs first (their order is the comparison's), ticked, then the recent others."""
    shown = {run.external_id for run in selected}
    chosen = shown or chosen or set()
    recent = [run for run in compare.recent_runs(project) if run.external_id not in shown]
    return [(run, run.external_id in chosen) for run in [*selected, *recent]]
