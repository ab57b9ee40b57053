"""Exports behind the pages' "Export CSV" / "JSONL" buttons that no API list answers: the leaderboard as
the project page shows it (scope and per-run choice kept) and the compare table. The runs table, every
submission, a run's turns and its metric points are exported by the API's lists (`?format=csv|jsonl`),
which the buttons link to with the page's filters: one implementation, the JSON answer's values."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import QueryDict
from django.shortcuts import render
from django.views.decorators.http import require_safe

from smrweb.core import exports
from smrweb.dashboard.access import include_unverified, project_for_user
from smrweb.tracking import queries
from smrweb.tracking.queries import compare

LEADERBOARD_HEADER = (
    "rank",
    "id",
    "run",
    "score",
    "status",
    "harness_id",
    "artifact_ref",
    "artifact_sha256",
    "experiment",
    "commit",
    "arena_ref",
    "ts",
)
COMPARE_HEADER = (
    "external_id",
    "display_name",
    "state",
    "latest_score",
    "best_score",
    "turn_count",
    "tokens",
    "usd",
    "gain_per_usd",
    "duration_s",
    "started_at",
    "driver_turns",
    "child_turns",
    "role_unknown_turns",
    "tokens_in",
    "tokens_out",
    "tool_calls",
    "mean_turn_ms",
    *(f"delta_{k}" for k in compare.DELTA_FIELDS),
)


def export_format(request) -> str | None:
    fmt = request.GET.get("format", exports.CSV)
    return fmt if fmt in exports.FORMATS else None


def _refused(request, message: str):
    return render(
        request,
        "dashboard/link_refused.html",
        {"title": "This export cannot be made", "status": 400, "message": message},
        status=400,
    )


@require_safe
@login_required
def leaderboard_export(request, slug: str):
    """The project page's leaderboard: counted submissions, best first; `?board=all` every submission
    that counts rather than each run's best; the page's verified/unverified choice."""
    project = project_for_user(request, slug)
    fmt = export_format(request)
    if fmt is None:
        return _refused(request, "An export is csv or jsonl.")
    board = queries.counted_leaderboard(
        project, unverified=include_unverified(request), per_run=request.GET.get("board") != "all"
    )
    values = board.values_list(
        "id",
        "run__external_id",
        "score",
        "status",
        "harness_id",
        "artifact_ref",
        "artifact__blob__sha256",
        "experiment__external_id",
        "commit",
        "arena_ref",
        "ts",
    )
    rows = ((rank, *row) for rank, row in enumerate(values.iterator(chunk_size=2000), start=1))
    filename = exports.export_filename(project.slug, "leaderboard", fmt=fmt)
    return exports.export_response(LEADERBOARD_HEADER, rows, fmt=fmt, filename=filename)


@require_safe
@login_required
def compare_export(request, slug: str):
    """The compare table of `?runs=` (at most compare.MAX_RUNS): each run's figures and its differences
    to the baseline (the first run)."""
    project = project_for_user(request, slug)
    fmt = export_format(request)
    requested = compare.parse_run_ids(request.GET.getlist("runs"))
    if fmt is None:
        return _refused(request, "An export is csv or jsonl.")
    if len(requested) > compare.MAX_RUNS:
        return _refused(request, f"Compare takes at most {compare.MAX_RUNS} runs.")
    comparison = compare.compare(project, requested)
    rows = [_compare_row(s) for s in comparison.runs]  # at most MAX_RUNS rows
    filename = exports.export_filename(project.slug, "compare", fmt=fmt)
    return exports.export_response(COMPARE_HEADER, rows, fmt=fmt, filename=filename)


def _seconds(value):
    return None if value is None else value.total_seconds()


def _compare_row(s: compare.RunSeries) -> tuple:
    run = s.run
    deltas = [_seconds(s.deltas.get(k)) if k == "duration" else s.deltas.get(k) for k in compare.DELTA_FIELDS]
    return (
        run.external_id,
        run.display_name,
        run.state,
        run.latest_score,
        run.best_score,
        run.turn_count,
        s.tokens,
        str(run.cost_usd),
        s.gain_per_usd,
        _seconds(s.duration),
        run.started_at,
        s.driver_turns,
        s.child_turns,
        s.role_unknown_turns,
        run.tokens_in,
        run.tokens_out,
        s.tool_calls,
        s.mean_turn_ms,
        *deltas,
    )


def runs_export_query(filters: dict) -> str:
    """The project page's runs filters that read (`filter_runs`), as the runs API's query string."""
    query = QueryDict(mutable=True)
    if filters.get("state"):
        query["state"] = filters["state"]
    for name in ("stalled", "failed"):
        if filters.get(name):
            query[name] = "true"
    if filters.get("over_budget"):
        query["over_budget"] = filters["over_budget"]
    if filters.get("q"):
        query["q"] = filters["q"]
    if filters.get("tags"):
        query.setlist("tag", list(filters["tags"]))
    if filters.get("params"):
        query.setlist("param", list(filters["params"]))
    if filters.get("sort"):
        query["sort"] = filters["sort"]
    return query.urlencode()
