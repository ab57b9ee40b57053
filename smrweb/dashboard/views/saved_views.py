"""The project page's runs table as people shape it: chosen columns (added, moved, removed by links that
rewrite the query), a grouping, and saved views — the query under a name, private or shared — opened by
`?view=<id>`. Thin: what a column is lives in `tracking.queries.views`, what a view keeps in
`tracking.filters`, who may save or delete one in `tracking.services.saved_views`."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from smrweb.dashboard.access import project_for_user
from smrweb.tracking import queries, services
from smrweb.tracking.errors import NotAllowed, TrackingError
from smrweb.tracking.filters import checked_view_query
from smrweb.tracking.models import Project, Role
from smrweb.tracking.queries.arms import parse_group
from smrweb.tracking.queries.compare import MAX_RUNS as MAX_COMPARED
from smrweb.tracking.queries.views import Column, ColumnError, available, parse_columns

GROUP_CHOICES = [("", "No grouping"), ("profile", "Model profile"), ("kickoff", "Kickoff")]


def table_shape(params) -> tuple[list[Column], str]:
    """The columns and grouping the query asks for, those that read (the filter names the rest ignored)."""
    try:
        columns = parse_columns(params.getlist("col"))
    except ColumnError:
        columns = []
    try:
        group = parse_group(params.get("group", ""))
    except ValueError:
        group = ""
    return columns, "" if group in ("project", "scenario") else group


def _query(params, **changes) -> str:
    query = params.copy()
    for key in ("page", "lb", *changes):
        query.pop(key, None)
    for key, values in changes.items():
        if values:
            query.setlist(key, values)
    return query.urlencode()


def _kept(params, *dropped: str) -> list[tuple[str, str]]:
    return [(k, v) for k, values in params.lists() if k not in dropped for v in values]


def columns_context(project: Project, params, columns: list[Column], group: str) -> dict:
    """The columns bar: each chosen column with the links that remove it or move it left or right, what
    else can be added (the keys the project's runs have), and the grouping's choices."""
    specs = [c.spec for c in columns]
    chosen = []
    for i, column in enumerate(columns):
        left = specs[: i - 1] + [specs[i], specs[i - 1]] + specs[i + 1 :] if i else None
        right = specs[:i] + [specs[i + 1], specs[i]] + specs[i + 2 :] if i + 1 < len(specs) else None
        chosen.append(
            {
                "column": column,
                "remove": _query(params, col=[s for s in specs if s != column.spec]),
                "left": _query(params, col=left) if left else "",
                "right": _query(params, col=right) if right else "",
            }
        )
    offered = available(project)
    groups = GROUP_CHOICES + [(spec, f"tag {label}") for spec, label in offered["tag"]]
    groups += [(spec, f"param {label}") for spec, label in offered["param"]]
    return {
        "chosen": chosen,
        "offered": {
            kind: [(s, label) for s, label in rows if s not in specs] for kind, rows in offered.items()
        },
        # What the add-column form sends besides its choice (the columns chosen so far come first), and the
        # grouping form besides its own.
        "keep": _kept(params, "page", "lb"),
        "keep_for_group": _kept(params, "page", "lb", "group"),
        "groups": groups,
        "group": group,
    }


@require_safe
@login_required
def columns_bar(request, slug: str):
    """The columns bar of the runs table at the query it is asked with (loaded by the block)."""
    project = project_for_user(request, slug)
    columns, group = table_shape(request.GET)
    context = {"project": project, "shape": columns_context(project, request.GET, columns, group)}
    return render(request, "dashboard/partials/run_columns.html", context)


def arms_compare(project: Project, runs: list, group: str) -> str:
    """With a grouping: Compare's address for these runs as arms (up to Compare's limit)."""
    if not group or len(runs) < 2:
        return ""
    query = QueryDict(mutable=True)
    query.update({"runs": ",".join(r.external_id for r in runs[:MAX_COMPARED]), "group": group})
    return f"{reverse('dashboard:compare-runs', args=[project.slug])}?{query.urlencode()}"


def open_view(request, project: Project):
    """`?view=<id>` alone: the saved view's query in the URL (so every link keeps it and changing a filter
    changes it), with `view` still naming it; None when the query says more than `view`, or the view is
    not one the person may open (then `view` is listed as ignored)."""
    ident = request.GET.get("view")
    if ident is None or set(request.GET) - {"view"}:
        return None
    view = queries.find_view(project, request.user, ident)
    if view is None or not view.query:
        return None
    return redirect(f"{project.get_absolute_url()}?{view.query}&view={view.pk}")


def views_context(request, project: Project, role: str | None) -> dict:
    """The saved views bar: the views the person may open, the current one (and whether the query has moved
    off it since), and what they may do (`role`: theirs in the project)."""
    views = queries.saved_views(project, request.user)
    current = None
    if ident := request.GET.get("view"):
        current = next((v for v in views if str(v.pk) == ident.strip()), None)
    here = QueryDict(request.GET.urlencode(), mutable=True)
    here.pop("view", None)
    return {
        "views": [(v, services.may_delete_view(v, request.user)) for v in views],
        "current_view": current,
        "view_modified": current is not None and _same(current.query, here) is False,
        "may_share": role is not None and Role.rank(role) >= Role.rank(Role.REVIEWER),
    }


def _same(query: str, params) -> bool:
    try:
        return checked_view_query(params) == query
    except TrackingError:
        return False


@require_POST
@login_required
def view_save(request, slug: str):
    """Save the table's query (sent as `query`, the page's own query string) under a name."""
    project = project_for_user(request, slug)
    params = QueryDict(request.POST.get("query", "").lstrip("?"))
    try:
        query = checked_view_query(params)
        view = services.save_view(
            project,
            by=request.user,
            name=request.POST.get("name", ""),
            query=query,
            shared=request.POST.get("shared") == "1",
        )
    except NotAllowed as exc:
        raise PermissionDenied(str(exc)) from None
    except TrackingError as exc:
        messages.error(request, f"The view was not saved: {exc}")
        back = params.urlencode()
        return redirect(f"{project.get_absolute_url()}{'?' if back else ''}{back}")
    messages.success(request, f"Saved the view “{view.name}”{' for the project' if view.shared else ''}.")
    return redirect(f"{project.get_absolute_url()}?view={view.pk}")


@require_POST
@login_required
def view_delete(request, slug: str, pk: int):
    project = project_for_user(request, slug)
    view = queries.find_view(project, request.user, pk)
    if view is None:
        raise Http404("No such view.")
    try:
        services.delete_view(view, by=request.user)
    except NotAllowed as exc:
        raise PermissionDenied(str(exc)) from None
    messages.success(request, f"Deleted the view “{view.name}”.")
    return redirect(project.get_absolute_url())
