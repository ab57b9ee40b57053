"""Projects overview and project page (runs table, leaderboard)."""

import functools
import operator
from dataclasses import dataclass, replace
from datetime import datetime

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Max, prefetch_related_objects
from django.http import HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb.core import cachekeys, softcache
from smrweb.core.prepared import Prepared
from smrweb.dashboard import charts, live
from smrweb.dashboard.access import fragment_template, include_unverified, project_for_user
from smrweb.dashboard.templatetags.smrweb import card_version_marker
from smrweb.dashboard.views import exports, saved_views
from smrweb.tracking import queries
from smrweb.tracking.filters import DEFAULT_SORT, NARROWING, RunFilter, sort_runs
from smrweb.tracking.models import Project, Role, Run, RunState, SourceHealth
from smrweb.tracking.queries import arms, markers
from smrweb.tracking.queries.compare import MAX_RUNS as MAX_COMPARED
from smrweb.tracking.queries.figures import pending_figures
from smrweb.tracking.queries.project_chart import kept_project_scores
from smrweb.tracking.queries.projects import CONDITIONS
from smrweb.tracking.queries.views import cells, with_columns
from smrweb.tracking.services import capabilities
from smrweb.tracking.services.capabilities import Action

RUNS_PER_PAGE = 25
LEADERBOARD_PER_PAGE = 20


def _projects_version(project_ids: list[int], stamp: dict | None = None) -> str:
    """Changes whenever any run of these projects or their source health is written (one query each);
    `stamp` gets the runs' count and latest `updated` (n, last)."""
    runs = Run.objects.filter(project_id__in=project_ids).aggregate(n=Count("id"), last=Max("updated"))
    health = SourceHealth.objects.filter(project_id__in=project_ids).aggregate(last=Max("updated"))
    if stamp is not None:
        stamp.update(runs)
    return live.version(sorted(project_ids), runs["n"], runs["last"], health["last"])


@require_safe
@login_required
@vary_on_headers("HX-Request")
def project_list(request):
    every = list(
        Project.objects.visible_to(request.user).select_related("scenario", "source_health").order_by("slug")
    )
    show_archived = request.GET.get("archived") == "1"  # archived projects are hidden unless asked for
    archived_count = sum(p.archived_at is not None for p in every)
    projects = [p for p in every if show_archived or p.archived_at is None]
    # Versions hold no clock (relative times tick in the page); "spent today" starts again at midnight UTC.
    version = live.version(_projects_version([p.pk for p in projects]), timezone.now().date())
    if live.unchanged(request, version):
        return live.no_change()
    unverified = include_unverified(request)
    context = {
        "summaries": queries.project_summaries(projects, unverified=unverified, version=version),
        # The sparkline is a window of the newest scores, not the whole history the headline best reads.
        "spark_what": f"the newest {queries.SPARK_SCORES} scores of every run"
        + ("" if unverified else ", verified ones counted"),
        "version": version,
        "unverified": unverified,
        "show_archived": show_archived,
        "archived_count": archived_count,
    }
    return render(
        request, fragment_template(request, "dashboard/project_list.html", "project-cards"), context
    )


def filter_runs(project: Project, params) -> tuple[object, dict]:
    """The project's runs narrowed and sorted by the page's filter form and column headers. A value that
    does not read (an unknown sort, a state that does not exist…) is ignored, and named in `ignored`."""
    runs = Run.objects.filter(project=project)
    show_archived = params.get("archived") == "1"  # archived runs are hidden unless asked for
    if not show_archived:
        runs = runs.filter(archived_at__isnull=True)
    filterset = RunFilter(params, queryset=runs)
    filterset.is_valid()
    data = {k: v for k, v in filterset.form.cleaned_data.items() if k not in filterset.form.errors}
    sort = data.get("sort") or DEFAULT_SORT
    columns, group = saved_views.table_shape(params)
    filters = {
        "state": (data.get("state") or [""])[0],
        "stalled": bool(data.get("stalled")),
        "failed": bool(data.get("failed")),
        "failed_calls": bool(data.get("failed_calls")),
        "over_budget": data.get("over_budget") or "",
        "q": (data.get("q") or "").strip(),
        "tags": data.get("tag") or [],
        "tag_links": [{"tag": t, "without": _without_value(params, "tag", t)} for t in data.get("tag") or []],
        "params": data.get("param") or [],
        "param_links": [
            {"param": p, "without": _without_value(params, "param", p)} for p in data.get("param") or []
        ],
        "sort": sort,
        "archived": show_archived,
        "ignored": sorted(k for k in filterset.form.errors if params.get(k)),
        "columns": columns,
        "group": group,
    }
    filters["narrowed"] = any(
        filters[k]
        for k in ("state", "stalled", "failed", "failed_calls", "over_budget", "q", "tags", "params")
    )
    return sort_runs(filterset.qs, sort, group), filters


def _without_value(params, key: str, value: str) -> str:
    """The query string without one value of a repeated parameter (a tag chip's ×), back on page one."""
    params = params.copy()
    params.setlist(key, [v for v in params.getlist(key) if v.strip() != value])
    params.pop("page", None)
    return params.urlencode()


# The runs table's sortable columns (RunFilter sort keys) and the direction a first click sorts in: names A→Z,
# numbers and times largest or latest first, scores best first (lowest first when the scenario minimizes).
SORTABLE = {"run": "", "state": "", "latest": "-", "best": "-", "turns": "-", "spend": "-", "activity": "-"}


def sort_links(url: str, params, current: str, *, maximize: bool = True, columns=()) -> dict[str, dict]:
    """Per sortable column (and chosen column, `col:<spec>`): the query string that sorts by it (a click on
    the current column flips the direction) and the current direction ("asc", "desc" or "")."""
    base = params.copy()
    for key in ("sort", "page"):
        base.pop(key, None)
    links = {}
    chosen = {f"col:{c.spec}": "-" if c.kind == "spend" else "" for c in columns}  # spend: largest first
    for key, first in {**SORTABLE, **chosen}.items():
        direction = "desc" if current == f"-{key}" else "asc" if current == key else ""
        if not maximize and key in ("latest", "best"):
            first = ""
        target = (key if direction == "desc" else f"-{key}") if direction else f"{first}{key}"
        query = base.copy()
        query["sort"] = target
        links[key] = {
            "url": f"{url}?{query.urlencode()}",
            "direction": direction,
            "next": "descending" if target.startswith("-") else "ascending",
        }
    return links


def _with(params, **changes) -> str:
    """The query string with some parameters set (None: removed) and the leaderboard back on page one."""
    params = params.copy()
    for key, value in {"lb": None, **changes}.items():
        params.pop(key, None)
        if value is not None:
            params[key] = value
    return params.urlencode()


def _without(params, key: str) -> str:
    """The query string minus one parameter (so pager links do not pile up `page=`)."""
    params = params.copy()
    params.pop(key, None)
    return params.urlencode()


@require_safe
@login_required
@vary_on_headers("HX-Request", live.CARDS_HEADER)
def project_detail(request, slug: str):
    """The project page. The runs and leaderboard block is a live card: its poll (X-Smrweb-Cards) gets 204,
    or the rows, counts and banners that changed out of band (dashboard/live.py); any other htmx request
    (filters, sorting, pagers) gets the block whole."""
    project = project_for_user(request, slug)
    if (opened := saved_views.open_view(request, project)) is not None:
        return opened  # `?view=<id>`: the view's query in the URL
    unverified = include_unverified(request)
    every_submission = request.GET.get("board") == "all"
    stamp: dict = {}
    base = _projects_version([project.pk], stamp)
    version = live.version(base, request.GET.urlencode(), unverified)
    if live.unchanged(request, version):
        return live.no_change()
    sent = live.sent_cards(request)
    if sent is not None and sent.get("project-live") == version:
        return live.no_change()

    @functools.cache
    def context() -> dict:
        runs, filters = filter_runs(project, request.GET)
        # The table shows neither the sources' cursors nor retention's notes: two JSON columns not decoded.
        rows_read = runs.prefetch_related("tags").defer(*ROW_DEFERRED)
        page = Paginator(rows_read, RUNS_PER_PAGE).get_page(request.GET.get("page"))
        for run in page:
            run.project = project  # already read with its scenario: not joined into every row
        excluded = queries.excluded_run_ids(project)
        counts = queries.run_condition_counts(project)
        pending = None if unverified else queries.pending_scores(project, excluded)
        regressions = queries.regressions(project)
        _keep_outline(scope, block_version, stamp, page, project, counts, pending, regressions)
        board = queries.leaderboard_page(
            project,
            excluded=excluded,
            version=base,
            unverified=unverified,
            per_run=not every_submission,
            page=request.GET.get("lb"),
            per_page=LEADERBOARD_PER_PAGE,
        )
        return {
            "project": project,
            "page": page,
            "run_rows": _run_rows(request, project, _decorated(list(page), shape), digest),
            "filters": filters,
            "sorts": sort_links(
                project.get_absolute_url(),
                request.GET,
                filters["sort"],
                maximize=project.scenario.maximize,
                columns=filters["columns"],
            ),
            "arms_compare": saved_views.arms_compare(project, list(page), filters["group"]),
            "counts": counts,
            "states": RunState.values,
            "leaderboard": board,
            "leaderboard_offset": max(board.start_index() - 1, 0),
            "results_gap": queries.results_gap(project, counts),
            "every_submission": every_submission,
            "unverified": unverified,
            "pending": pending,
            "board_query": _without(request.GET, "lb"),
            "scope_links": {
                "verified": _with(request.GET, unverified="0"),
                "unverified": _with(request.GET, unverified="1"),
                "per_run": _with(request.GET, board=None),
                "all": _with(request.GET, board="all"),
            },
            "regressions": regressions,
            "can_roll_back": capabilities.may(request.user, project, Action.ROLL_BACK),
            "is_admin": project.allows(request.user, Role.ADMIN),
            "health": getattr(project, "source_health", None) if project.source != "push" else None,
            "metric_choice": _metric_choice(project),
            "query": _without(request.GET, "page"),  # for pager links
            "poll_query": request.GET.urlencode(),  # the poll keeps the page being looked at
            "runs_export_query": exports.runs_export_query(filters),  # the Export buttons (the runs API's)
            "board_export_query": "board=all" if every_submission else "",
            "version": version,
            "runs": runs,
            "csrf_token": live.CSRF_PLACEHOLDER,  # one render serves every viewer; each answer gets its token
            "max_compare": MAX_COMPARED,
        }

    # Cached renders of the block are keyed by its version and what else they depend on (the viewer's buttons
    # and zone); the page shows the version alone.
    may_roll_back = capabilities.may(request.user, project, Action.ROLL_BACK)
    viewer = f"{may_roll_back}|{timezone.get_current_timezone_name()}"
    template = "dashboard/project_detail.html"
    scope, block_version = f"project-{project.pk}", live.card_version(version, viewer)
    shape = saved_views.table_shape(request.GET)
    digest = _row_digest(project, shape)
    deck = live.Deck(
        scope,
        [
            live.Card(
                "project-live",
                block_version,
                lambda: render_to_string(f"{template}#project-live", context(), request=request),
            )
        ],
    )
    if sent is not None:
        old = live.card_version(sent.get("project-live"), viewer)
        # The block's outline and render at the version the poll shows, in one cache read.
        found = softcache.get_many(
            [_outline_key(scope, old), cachekeys.live_card(scope, "project-live", old)]
        )
        alone = _changed_rows_alone(
            request, project, found.get(_outline_key(scope, old)), stamp, digest, shape
        )
        answer = None
        if alone is not None:
            rows, outline = alone
            also = {_outline_key(scope, block_version): outline}  # for the next poll
            parts = {**rows, **_version_part(version)}
            answer = deck.answer_parts("project-live", old, parts, found=found, also=also)
        if answer is None:
            answer = deck.answer({"project-live": old})
        return live.no_change() if answer is None else HttpResponse(live.with_token(request, answer))
    page_context = dict(context())
    if not request.htmx:
        role = Role.ADMIN if page_context["is_admin"] else project.role_of(request.user)
        page_context.update(saved_views.views_context(request, project, role))
        chart_query = narrowing_query(request.GET)
        page_context.update(
            _chart_context(
                project, unverified, page_context.pop("runs") if chart_query else None, chart_query
            ),
            chart_query=chart_query,
        )
    response = render(request, fragment_template(request, template, "project-live"), page_context)
    response.content = live.with_token(request, deck.keep(response.content.decode())).encode()
    return response


# --- a poll after one run's change: its row alone -----------------------------------------------------------
# What the block showed at a version is kept beside its render (its outline: the page's runs, how many match,
# what the rest of the block reads of the project and of those runs). A poll whose changed runs are all on
# its page, whose page and count are the same and whose rest reads the same gets those runs' rows (from
# `_run_rows`' kept rows) put into the kept render: no runs page with tags, leaderboard, counts or render of
# the block; anything else goes the usual way (`Deck.answer`).


@dataclass(frozen=True)
class _Outline:
    last: object  # the project's runs' latest `updated` at this version: later ones are what changed since
    runs: int
    page: tuple  # the page's run ids, in order, and how many match
    side: dict  # per run on the page: what the block shows of it outside its row
    rest: str  # what the block shows of the project outside the rows
    regressed: frozenset  # the runs in the regressions banner (they show their state: not a row alone)
    activity: dict  # per run on the page: (pinned, last progress), what the default sort orders by


def _side(run: Run, submissions: tuple) -> tuple:
    """What the block shows of a run outside its row: in the leaderboard (its names, its submissions) and
    the regressions banner (best, latest, count); its conditions and queue are the project's figures."""
    columns = ("external_id", "display_name", "best_score", "latest_score", "score_count", "excluded_at")
    columns += ("archived_at",)  # the archived runs' count, beside the table's filters
    return (operator.attrgetter(*columns)(run), submissions)


def _rest(project: Project, counts: dict, pending) -> str:
    """The project's conditions counts and pending scores (its kept figures) and what the block shows of
    the project itself."""
    counts = {name: counts[name] for name in CONDITIONS}
    pending = None if pending is None else (pending.count, pending.best, pending.more)
    scenario = project.scenario
    return live.version(
        sorted(counts.items()),
        pending,
        project.updated,
        project.regression_threshold,
        scenario.pk,
        scenario.maximize,
        scenario.score_metric,
    )


def _outline_key(scope: str, block_version: str) -> str:
    return cachekeys.live_card(scope, "outline", block_version)


def _keep_outline(scope, block_version, stamp, page, project, counts, pending, regressions) -> None:
    runs = list(page)
    subs = markers.submission_markers([r.pk for r in runs])
    outline = _Outline(
        stamp["last"],
        stamp["n"],
        ((*(r.pk for r in runs),), page.paginator.count),
        {r.pk: _side(r, subs.get(r.pk, markers.NO_SUBMISSIONS)) for r in runs},
        _rest(project, counts, pending),
        frozenset(r.run.pk for r in regressions),
        {r.pk: (r.pinned, r.last_progress_at) for r in runs},
    )
    softcache.set(_outline_key(scope, block_version), outline, live.CARD_CACHE_SECONDS)


def _changed_rows_alone(request, project, outline, stamp, digest, shape) -> tuple[dict, _Outline] | None:
    """The rows to put into the kept render of the block whose `outline` the poll shows when nothing else
    of it changed, by their part ids, and the outline of the block now; None otherwise (or when the
    outline is not kept)."""
    if not isinstance(outline, _Outline) or outline.runs != stamp["n"] or outline.last is None:
        return None
    changed = _changed_runs_query(tuple(shape[0])).instances(project.pk, outline.last)
    prefetch_related_objects(changed, "tags")
    if not changed or any(r.pk not in outline.side or r.pk in outline.regressed for r in changed):
        return None
    if not _still_on_top(request, outline, changed):
        runs, _ = filter_runs(project, request.GET)
        page = Paginator(runs.values_list("pk", flat=True), RUNS_PER_PAGE).get_page(request.GET.get("page"))
        if ((*page,), page.paginator.count) != outline.page:
            return None
    subs = {r.pk: markers.marker_of(r) for r in changed}  # read with them
    if any(_side(r, subs[r.pk]) != outline.side[r.pk] for r in changed):
        return None
    figures = pending_figures(project)  # one read for the counts and the pending scores
    pending = None if include_unverified(request) else queries.pending_scores(project, row=figures)
    counts = {name: getattr(figures, name) for name in CONDITIONS}
    if _rest(project, counts, pending) != outline.rest:
        return None
    for run in changed:
        run.project = project
    rows = _run_rows(request, project, _decorated(changed, shape), digest, subs)
    activity = {**outline.activity, **{r.pk: (r.pinned, r.last_progress_at) for r in changed}}
    now = replace(outline, last=stamp["last"], activity=activity)
    return {f"run-row-{r.pk}": html for r, html in zip(changed, rows, strict=True)}, now


@functools.lru_cache(maxsize=64)
def _changed_runs_query(columns: tuple) -> Prepared:
    """A project's runs changed since a moment, with what their rows show (the chosen `columns`, the
    submissions marker): the query a poll after each change runs, compiled once per choice of columns."""

    def build(project_id: int, since: datetime):
        changed = Run.objects.filter(project_id=project_id, updated__gt=since)
        return markers.with_submission_markers(with_columns(changed, list(columns))).defer(*ROW_DEFERRED)

    return Prepared(build, int, datetime)


def _still_on_top(request, outline: _Outline, changed: list[Run]) -> bool:
    """The page is the same without reading it: in the default view (no filter, the newest activity first,
    pinned runs first), the changed runs were the first of the page, kept their pins and only moved on, in
    the same order (the live run a viewer watches, on top). Archiving a run changes its side."""
    if request.GET or DEFAULT_SORT != "-activity":
        return False
    first = list(outline.page[0][: len(changed)])
    if {r.pk for r in changed} != set(first):
        return False
    old = outline.activity
    if any(r.pinned != old[r.pk][0] or r.last_progress_at < old[r.pk][1] for r in changed):
        return False
    order = sorted(changed, key=lambda r: (r.pinned, r.last_progress_at, r.pk), reverse=True)
    return [r.pk for r in order] == first


def _version_part(version: str) -> dict:
    """The block's version marker, as the template writes it."""
    return {"project-live--v": card_version_marker("project-live", version)}


def _row_digest(project: Project, shape: tuple) -> tuple:
    """What every row of the runs table shows besides its run: the template, the viewer's zone, the
    scenario's direction (and the project's link), the chosen columns and grouping."""
    template = "dashboard/project_detail.html"
    zone = timezone.get_current_timezone_name()
    columns, group = shape
    layout = ([c.spec for c in columns], group)
    return (live.template_digest(template), zone, project.scenario.maximize, project.slug, layout)


def _row_version(digest: tuple, run: Run) -> str:
    """A runs-table row's version: every column read of its run (not the two deferred ones), its tags, and
    its chosen columns' values and arm (read with it: a new param, tag or metric point moves `updated`)."""
    read = [f.attname for f in Run._meta.concrete_fields if f.attname not in ROW_DEFERRED]
    chosen = [value for _, value in getattr(run, "view_cells", ())], getattr(run, "arm", None)
    return live.card_version(
        *digest, operator.attrgetter(*read)(run), [str(t) for t in run.tags.all()], chosen
    )


def _decorated(runs: list[Run], shape: tuple) -> list[Run]:
    """The rows' runs with their chosen columns' cells (`view_cells`) and arm label (`arm`, one query for a
    tag, param or kickoff grouping)."""
    columns, group = shape
    labels = arms.labels(runs, group) if group and runs else {}
    for run in runs:
        run.view_cells = cells(run, columns)
        run.arm = labels.get(run.pk)
    return runs


ROW_DEFERRED = ("source_cursor", "metrics_downsampled")  # the table shows neither: two JSON columns


def _run_rows(
    request, project: Project, runs: list[Run], digest: tuple | None = None, marks: dict | None = None
) -> list[str]:
    """The runs table's rows, each kept in the cache under what it shows (every column read of its run, its
    tags, the viewer's zone): a poll after one run's new turn renders that run's row, not the table's, and
    reads its sparkline's scores from the cache when the caller has the runs' submission `marks` (kept under
    them). A score, verification or exclusion moves its run's `updated`."""
    template = "dashboard/project_detail.html"
    digest = digest or _row_digest(project, ([], ""))
    rows = [(_row_version(digest, run), run) for run in runs]

    def render(missing: list[Run]) -> str:
        if marks is not None:
            histories = queries.kept_score_histories({r.pk: marks[r.pk] for r in missing})
        else:
            histories = queries.score_histories(r.pk for r in missing)
        context = {"project": project, "rows": [(r, histories.get(r.pk, [])) for r in missing]}
        return render_to_string(f"{template}#run-rows", context, request=request)

    also = queries.kept_score_history_keys(marks) if marks is not None else []  # what `render` reads
    kept = live.kept_rows(f"project-{project.pk}", rows, render, also=also)
    return [mark_safe(html) for html in kept]  # noqa: S308


def _metric_choice(project: Project) -> dict | None:
    """The metrics an SMR project's experiments declare, when it listens to them and they disagree."""
    declared = project.source_settings.get("declared_metrics") or {}
    return declared if project.source_settings.get("score_metric") == "auto" and len(declared) > 1 else None


CHART_FILTERS = NARROWING  # the chart follows every filter of the table, over budget and params included


def narrowing_query(params) -> str:
    """The runs-table filters the chart follows (not paging, leaderboard or scope parameters)."""
    kept = params.copy()
    for key in list(kept):
        values = [v for v in kept.getlist(key) if v] if key in CHART_FILTERS else []
        if values:
            kept.setlist(key, values)  # every tag (an empty tag box is no filter)
        else:
            kept.pop(key)
    return kept.urlencode()


def _chart_scores(project: Project, unverified: bool, runs, chart_query: str) -> tuple:
    """The chart's scores, assembled from the drawn runs' kept pieces, and its version: what it draws
    (the drawn runs' names and pieces), the filters, and what the figure's text and links show."""
    kept = kept_project_scores(project, unverified=unverified, runs=runs)
    version = live.version(
        kept.version,
        project.slug,
        project.scenario.score_metric,
        timezone.get_current_timezone_name(),
        "chart",
        unverified,
        chart_query,
    )
    return kept.scores, version


def _chart_context(project: Project, unverified: bool, runs=None, chart_query: str = "", read=None) -> dict:
    """`runs`: the runs table's filtered runs (the chart follows the filters), or None for every run;
    `read`: what `_chart_scores` answered, when the caller has it."""
    scores, version = read or _chart_scores(project, unverified, runs, chart_query)
    if not scores.total:
        return {"chart_total": 0, "chart_filtered": runs is not None, "chart_version": version}
    series = [
        # A run's display name, else its id; its scores that count, then those that do not (hollow).
        (
            name,
            Run(project=project, external_id=external_id).get_absolute_url(),
            scores.series[pk],
            scores.void.get(pk, []),
        )
        for pk, (external_id, name) in scores.runs.items()
        if pk in scores.series
    ]
    series.sort(key=lambda s: min(p[0] for p in [*s[2][:1], *s[3][:1]]))
    every_run = scores.every_run
    figure = charts.project_scores_figure(
        series,
        scores.frontier,
        maximize=project.scenario.maximize,
        metric=project.scenario.score_metric,
        start=scores.start,
        end=scores.end,
        uirevision=f"project-{project.pk}",
        frontier_label=("project best so far" if runs is None and every_run else "best so far of these runs")
        + ("" if unverified else " (verified)"),
    )
    shown = sum(len(points) + len(void) for _, _, points, void in series)
    return {
        "chart_figure": figure,
        "chart_total": scores.total,
        "chart_shown": shown,
        "chart_runs": len(series),
        "chart_matching": scores.matching,
        "chart_every_run": every_run,
        "chart_filtered": runs is not None,
        "chart_version": version,
    }


@require_safe
@login_required
def project_chart(request, slug: str):
    """The score-over-time chart of every run, polled on its own (slower than the runs table)."""
    project = project_for_user(request, slug)
    unverified = include_unverified(request)
    chart_query = narrowing_query(request.GET)
    runs = filter_runs(project, request.GET)[0] if chart_query else None
    # The version is the drawn runs' pieces (read or kept): a new turn or a change to a run the chart
    # does not draw leaves it, and the poll gets 204.
    read = _chart_scores(project, unverified, runs, chart_query)
    if live.unchanged(request, read[1]):
        return live.no_change()
    context = {
        "project": project,
        "chart_query": chart_query,
        **_chart_context(project, unverified, runs, chart_query, read),
    }
    return render(request, "dashboard/project_detail.html#project-chart", context)
