"""Compare up to 200 runs of a project side by side: `compare/?runs=A&runs=B…`, the first run the baseline."""

import functools
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb.core import cachekeys, softcache
from smrweb.dashboard import live
from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts import compare as compare_charts  # beside tracking.queries.compare
from smrweb.dashboard.charts import series as series_charts
from smrweb.dashboard.clock import zone_label
from smrweb.dashboard.views.shares import share_control
from smrweb.tracking.models import Project, ShareKind
from smrweb.tracking.queries import arms, compare, series

TEMPLATE = "dashboard/compare.html"
MISSING_SHOWN = 20  # unknown ids listed by name; the rest are counted
# Each table's rows in the page; the others come in one request once a table is scrolled to (or all in the
# page with ?rows=all): the page of 200 runs costs about what the page of 20 does, and its charts come first.
ROWS_FIRST = 20
LATER = ("side-rows", "turn-rows")
SERIES_CARD_SECONDS = 3600  # the later rows of each table (X-Smrweb-Only), cards of the same deck


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
    only = request.headers.get(live.ONLY_HEADER) if request.htmx else None
    if only == "series":
        return HttpResponse(_series_card(request, project, requested))
    if only in LATER:
        selected, _ = compare.find_markers(project, requested[: compare.MAX_RUNS])
        if len(selected) < 2:  # nothing to compare any more (runs were deleted): the placeholder goes
            return HttpResponse("")
        return HttpResponse(_deck(request, project, selected, shown=ROWS_FIRST).render(LATER)[only])
    if only == "pick":
        selected = compare.picked_runs(project, requested[: compare.MAX_RUNS])
        context = {
            "project": project,
            "max_runs": compare.MAX_RUNS,
            "picker": _picker(project, selected),
            "picked_now": bool(selected),
            "other_names": _other_names(requested, selected),
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
            shown = None if request.GET.get("rows") == "all" else ROWS_FIRST
            deck = _deck(request, project, selected, shown=shown)
            context["comparison_html"] = mark_safe(
                deck.page(["comparison"], fresh=live.wants_fresh(request))["comparison"]
            )
    context["picked_now"] = bool(selected)
    if len(selected) >= 2:
        # The "any metric" card loads after the page (its own request: the comparison stays incremental).
        elsewhere = series.other_projects(project, Project.objects.visible_to(request.user), requested)
        context["missing"] = [name for name in context.get("missing", []) if name not in elsewhere]
        context["elsewhere"] = elsewhere
        context["series_api"] = _series_api(project, requested, *_series_choice(request))
        context["picker_later"] = True
        context.update(share_control(request, ShareKind.COMPARE, project=project))
    else:
        picked = compare.picked_runs(project, [marker.external_id for marker in selected])
        context["picker"] = _picker(project, picked, chosen=set(requested))
        context["other_names"] = _other_names(requested, picked)
    return render(request, TEMPLATE, context, status=status)


def _deck(request, project, runs: list[compare.RunMarker], *, shown: int | None) -> live.Deck:
    """The comparison's renders, each made once per version of what it shows and kept in the cache: the
    charts with each table's first `shown` rows (all when None), and the tables' later rows. The version
    is the runs as they are now (`Run.updated` moves with every write to a run, and the parents named in
    the table), in this order, the project's slug and scenario and the viewer's clock (its relative times
    are kept current by the page script: no tick). A hard reload renders the page's afresh
    (`live.wants_fresh`)."""
    scenario = project.scenario
    version = live.version(
        live.template_digest(TEMPLATE, compare_charts),
        project.slug,  # in the rows' links
        (scenario.pk, scenario.maximize, scenario.score_metric, scenario.name),
        timezone.get_current_timezone_name(),
        zone_label(),
        [tuple(marker) for marker in runs],
    )

    @functools.cache  # the cards of one request read the runs once
    def comparison() -> compare.Comparison:
        # What is kept per run for the page (figure parts, first rows) comes with the runs: one round trip.
        also = compare_charts.kept_keys(project, runs, per_run=compare.resolution(len(runs)), shown=shown)
        return compare.compare(project, [marker.external_id for marker in runs], markers=runs, also=also)

    def render_page() -> str:
        c = comparison()
        context = {
            "project": project,
            "comparison": c,
            "export_query": urlencode([("runs", s.run.external_id) for s in c.runs]),
            **compare_charts.build(c, shown=shown),
        }
        return render_to_string(f"{TEMPLATE}#comparison", context, request=request)

    @functools.cache
    def later() -> tuple[str, str]:
        return compare_charts.later_rows(comparison(), ROWS_FIRST)

    return live.Deck(
        f"compare-{project.pk}",
        [
            live.Card("comparison", live.card_version(version, shown), render_page),
            live.Card("side-rows", version, lambda: later()[0]),
            live.Card("turn-rows", version, lambda: later()[1]),
        ],
    )


def _series_card(request, project, requested: list[str]) -> str:
    """The "any metric against any axis" card: its metric, axis and grouping from the URL (`metric`, `x`,
    `group`), the runs as requested (`project:run` names runs of other projects the viewer can read).
    Kept rendered under what it shows: the runs' trace versions (each moves with its run's row and the
    metric's rollup), their arm labels, the choices and the viewer's clock; so a view with nothing new
    reads the runs, their labels and one cache entry."""
    metric, x = _series_choice(request)
    readable = Project.objects.visible_to(request.user)
    named, missing = series.find_runs(project, readable, requested[: series.MAX_RUNS])
    runs = [run for _, run in named]
    try:
        group, group_error = arms.parse_group(request.GET.get("group", "")[:260]), ""
    except arms.GroupError as e:
        group, group_error = "", str(e)
    keys = series.trace_keys(runs, metric, x)
    of = arms.labels(runs, group) if group else {}
    version = live.version(
        live.template_digest(TEMPLATE, series_charts, arms),
        project.slug,
        (metric, x, group, group_error),
        timezone.get_current_timezone_name(),
        [(name, keys[run.pk], of.get(run.pk)) for name, run in named],
        missing,
        requested[: series.MAX_RUNS],
    )
    key = cachekeys.compare_card(version)
    if (html := softcache.get(key)) is None:
        context = _series_context(project, requested, named, missing, metric, x, keys, group, of)
        context["group_error"] = group_error
        html = render_to_string(f"{TEMPLATE}#series", context, request=request)
        softcache.set(key, html, SERIES_CARD_SECONDS)  # down: rendered again next time
    return html


def _series_context(project, requested, named, missing, metric, x, keys, group, of) -> dict:
    found = series.series(named, metric, x, missing=missing, keys=keys)
    label = project.scenario.score_metric if metric == series.SCORE else metric
    runs = [run for _, run in named]
    metric_keys = series.metric_keys(runs)
    grouping: dict = {"group": group, "arms": [], "differences": [], "arms_figure": None}
    if group:
        try:
            arm_list, differences = arms.arms(found, group, of)
        except arms.GroupError as e:
            grouping.update(group="", group_error=str(e))
        else:
            grouping.update(
                arms=arm_list,
                differences=[(d, series_charts.at_x(x, d.x)) for d in differences],
                arm_rows=series_charts.arm_rows(arm_list),
                arms_figure=series_charts.arms_figure(
                    found, arm_list, label, uirevision=f"{metric}|{x}|{group}"
                ),
            )
    return {
        **grouping,
        "group_choices": arms.choices(runs),
        "project": project,
        "series": found,
        "series_figure": None
        if grouping["arms_figure"]
        else series_charts.series_figure(found, label, uirevision=f"{metric}|{x}"),
        "series_metrics": [series.SCORE, *(k for k in metric_keys if k != series.SCORE)],
        "series_metric_missing": metric != series.SCORE and metric not in metric_keys,
        "series_axes": series.AXES,
        "series_runs": requested[: series.MAX_RUNS],
        "series_other_projects": sorted({t.run.project.slug for t in found.traces} - {project.slug}),
        "series_api": _series_api(project, requested, metric, x, grouping["group"]),
    }


def _series_choice(request) -> tuple[str, str]:
    """The card's metric and axis from the URL: anything else falls back to the score against USD."""
    metric = request.GET.get("metric", "").strip()[:200] or series.SCORE
    x = request.GET.get("x", "usd")
    return metric, x if x in series.AXIS_LABELS else "usd"


def _series_api(project, requested: list[str], metric: str, x: str, group: str = "") -> str:
    names = [("runs", name) for name in requested[: series.MAX_RUNS]]
    query = urlencode([*names, ("metric", metric), ("x", x), *([("group", group)] if group else [])])
    return reverse("api:compare-series", args=[project.slug]) + "?" + query


def _other_names(requested: list[str], found: list) -> str:
    """The picked names that are not this project's runs but name one of another (`project:run`): the
    picker's text box keeps them (whether the viewer may read them is the series card's business)."""
    here = {run.external_id for run in found}
    return ", ".join(name for name in requested if ":" in name and name not in here)


def _picker(project, selected: list, chosen: set[str] | None = None) -> list:
    """The compared runs first (their order is the comparison's), ticked, then the recent others."""
    shown = {run.external_id for run in selected}
    chosen = shown or chosen or set()
    recent = [run for run in compare.recent_runs(project) if run.external_id not in shown]
    return [(run, run.external_id in chosen) for run in [*selected, *recent]]
