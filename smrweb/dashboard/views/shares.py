"""Read-only share links (issue 39, item 5): the "Share…" control of the compare, tree, knowledge (arena
history) and scenario (leaderboard) pages, a project's list of its links with their Revoke buttons, and the
public page `/s/<token>/`, opened without signing in.

Thin: who may share and revoke, the token and its expiry live in `tracking.services.shares`; what each page
reads of its query string is said here (`share_query`), next to the pages. The public page renders the same
figures and tables as the signed-in pages, marked `public`: no forms, no htmx, no action buttons, no links
into signed-in pages (runs and projects are named in plain text)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts import arena as arena_chart
from smrweb.dashboard.charts import compare as compare_charts
from smrweb.dashboard.charts.style import colour
from smrweb.dashboard.views.projects import filter_runs
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, NotAllowed, ShareLinkExpired, ShareLinkUnknown
from smrweb.tracking.filters import NARROWING, checked_view_query, parse_query
from smrweb.tracking.models import Project, Role, Scenario, ShareKind, ShareLink
from smrweb.tracking.queries import compare
from smrweb.tracking.queries import tree as trees
from smrweb.tracking.queries.arena import arena_history
from smrweb.tracking.queries.scenario_board import scenario_board
from smrweb.tracking.services.shares import EXPIRY_DAYS

NEW_SHARE_KEY = "smrweb.new_share_url"  # the new link's URL rides in the session for one page view
LIST_TEMPLATE = "dashboard/project_shares.html"
PUBLIC_TEMPLATE = "dashboard/share_public.html"
EXPIRY_CHOICES = [(str(d), f"{d} day{'s' if d > 1 else ''}") for d in EXPIRY_DAYS]
LINKS_SHOWN = 200


class ShareForm(forms.Form):
    kind = forms.ChoiceField(choices=ShareKind.choices)
    query = forms.CharField(required=False, max_length=services.shares.QUERY_MAX, strip=False)
    expires = forms.TypedChoiceField(choices=EXPIRY_CHOICES, coerce=int, initial="7", label="Expires in")


# --- what each page reads of its query string -------------------------------------------------------------


def share_query(kind: str, params) -> str:
    """The part of `params` (a QueryDict or MultiValueDict) the `kind` page reads, in one order, checked:
    InvalidInput naming what does not read (the form shows it next to the control)."""
    if kind == ShareKind.COMPARE:
        runs = compare.reorder(
            compare.parse_run_ids(params.getlist("runs")),
            baseline=params.get("baseline", "").strip(),
            drop=params.get("drop", "").strip(),
        )
        # `project:run` names runs of other projects: a link to one project's page never shows another's.
        runs = [rid for rid in runs if ":" not in rid]
        if len(runs) < 2:
            raise InvalidInput("query", "Pick two or more runs of this project to share a comparison.")
        if len(runs) > compare.MAX_RUNS:
            raise InvalidInput("query", f"A comparison holds at most {compare.MAX_RUNS} runs.")
        return urlencode([("runs", rid) for rid in runs])
    if kind == ShareKind.TREE:
        kept = QueryDict(mutable=True)
        for key in (*NARROWING, "archived"):
            if values := [v for v in params.getlist(key) if v.strip()]:
                kept.setlist(key, values)
        return checked_view_query(kept)
    if kind == ShareKind.ARENA:
        x = params.get("arena_x", "time")
        return "" if x not in arena_chart.AGAINST or x == "time" else urlencode([("arena_x", x)])
    return ""  # the leaderboard reads nothing of its query


# --- the control on each page, and creating a link ---------------------------------------------------


def share_control(request, kind: str, *, project: Project | None = None, scenario: Scenario | None = None):
    """What a page's "Share…" control needs; empty (no control) for someone who may not share it."""
    if not services.may_share(request.user, project=project, scenario=scenario):
        return {}
    return {
        "share": {
            "project": project.slug if project is not None else "",
            "scenario": scenario.key if project is None else "",
            "kind": kind,
            "query": request.GET.urlencode(),
            "choices": EXPIRY_CHOICES,
            "new_url": request.session.pop(NEW_SHARE_KEY, None),
        }
    }


def _create(request, form: ShareForm, *, project=None, scenario=None) -> str | None:
    """The new link's absolute URL, or None with the refusal on the form."""
    if not form.is_valid():
        return None
    kind = form.cleaned_data["kind"]
    if (kind == ShareKind.LEADERBOARD) != (project is None):
        form.add_error("kind", "This page cannot share that.")
        return None
    try:
        query = share_query(kind, parse_query(form.cleaned_data["query"]))
        _, raw = services.create_share_link(
            by=request.user,
            kind=kind,
            days=form.cleaned_data["expires"],
            query=query,
            project=project,
            scenario=scenario,
        )
    except InvalidInput as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return None
    return request.build_absolute_uri(reverse("dashboard:share-public", args=[raw]))


def _created(request, form: ShareForm, url: str | None, back: str):
    """htmx: the control's result in place (the URL once, or the refusal); a plain post: the URL rides in
    the session to the page it is shown on once (post/redirect/get: a reload creates nothing)."""
    if request.htmx:
        return render(request, "dashboard/partials/share_box.html#result", {"new_url": url, "form": form})
    if url is None:
        return None
    request.session[NEW_SHARE_KEY] = url
    return redirect(back)


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_shares(request, slug: str):
    """A project's share links (every member sees them), and creating one (reviewers and admins)."""
    role = Role.REVIEWER if request.method == "POST" else Role.VIEWER
    project = project_for_user(request, slug, role=role)
    form, status = ShareForm(), 200
    if request.method == "POST":
        form = ShareForm(request.POST)
        back = reverse("dashboard:project-shares", args=[project.slug])
        if (response := _created(request, form, _create(request, form, project=project), back)) is not None:
            return response
        status = 400
    links = list(
        ShareLink.objects.filter(project=project)
        .select_related("created_by", "revoked_by")
        .order_by("-created", "-pk")[:LINKS_SHOWN]
    )
    context = {
        "project": project,
        "form": form,
        "new_url": request.session.pop(NEW_SHARE_KEY, None),
        "links": _rows(request, links, project),
        "can_share": services.may_share(request.user, project=project),
    }
    return render(request, LIST_TEMPLATE, context, status=status)


@require_POST
@login_required
def scenario_share(request, key: str):
    """Share a scenario's leaderboard (a member of one of its projects)."""
    # The scenario page's own rule: 404 for a scenario the person cannot see.
    scenario = get_object_or_404(Scenario.objects.visible_to(request.user), key=key)
    if not services.may_share(request.user, scenario=scenario):
        raise PermissionDenied(f"Sharing the leaderboard of {scenario.key} needs a project on it.")
    form = ShareForm(request.POST)
    back = reverse("dashboard:scenario-detail", args=[scenario.key]) + "#scenario-board"
    url = _create(request, form, scenario=scenario)
    if (response := _created(request, form, url, back)) is not None:
        return response
    return render(request, "dashboard/share_refused.html", {"form": form, "back": back}, status=400)


@require_POST
@login_required
def revoke_share(request, pk: int):
    """Revoke a link: its creator, an admin of its project, a superuser. Anyone else learns nothing of it."""
    link = get_object_or_404(ShareLink.objects.select_related("project", "scenario"), pk=pk)
    if link.project is not None:
        project_for_user(request, link.project.slug)  # 404 for an outsider
    if not services.may_revoke(link, request.user):
        if link.project is None:
            raise Http404
        raise PermissionDenied("Only its creator or an admin of the project may revoke this link.")
    try:
        services.revoke_share_link(link, by=request.user)
    except NotAllowed as exc:  # pragma: no cover - checked above
        raise PermissionDenied(exc.message) from None
    if link.project is not None:
        return redirect("dashboard:project-shares", slug=link.project.slug)
    return redirect(reverse("dashboard:scenario-detail", args=[link.scenario.key]) + "#share-links")


def leaderboard_links(request, scenario: Scenario) -> list[dict]:
    """The scenario page's list: the leaderboard links the viewer created (every one, for a superuser)."""
    links = ShareLink.objects.filter(scenario=scenario).select_related("created_by", "revoked_by")
    if not request.user.is_superuser:
        links = links.filter(created_by=request.user)
    return _rows(request, list(links.order_by("-created", "-pk")[:LINKS_SHOWN]))


def _rows(request, links: list[ShareLink], project: Project | None = None) -> list[dict]:
    """The list's rows; `project`: the one project they all belong to (its admin role is read once)."""
    now = timezone.now()
    admin = project.allows(request.user, Role.ADMIN) if project is not None else False
    return [
        {
            "link": link,
            "state": "revoked" if link.revoked_at else "expired" if link.expires_at <= now else "active",
            "can_revoke": link.revoked_at is None
            and services.may_revoke(link, request.user, project_admin=admin),
            "what": _describe(link),
        }
        for link in links
    ]


def _describe(link: ShareLink) -> str:
    params = parse_query(link.query)
    if link.kind == ShareKind.COMPARE:
        return f"{len(params.getlist('runs'))} runs"
    if link.kind == ShareKind.ARENA:
        return f"against {params.get('arena_x', 'time')}"
    if link.kind == ShareKind.TREE:
        return "filtered" if link.query else "every run"
    return ""


# --- the public page ---------------------------------------------------------------------------------


@require_safe
@never_cache
def share_public(request, token: str):
    """GET/HEAD `/s/<token>/`, no sign-in: the shared page read-only; 410 when expired, 404 when revoked
    or unknown (HTML both). Kept out of caches and search engines; the token never leaves in a Referer."""
    try:
        link = services.resolve_share_link(token)
    except ShareLinkExpired as exc:
        response = _refused(request, 410, "Link expired", exc.message)
    except ShareLinkUnknown as exc:
        response = _refused(request, 404, "Link not found", exc.message)
    else:
        response = render(request, PUBLIC_TEMPLATE, _public_context(link))
    response["X-Robots-Tag"] = "noindex, nofollow"
    response["Referrer-Policy"] = "no-referrer"
    response["Cache-Control"] = "private, no-store"
    return response


def _refused(request, status: int, title: str, message: str):
    context = {"status": status, "title": title, "message": message, "public": True}
    return render(request, "dashboard/link_refused.html", context, status=status)


def _public_context(link: ShareLink) -> dict:
    params = parse_query(link.query)
    context = {"link": link, "public": True, "kind": link.kind, "project": link.project, "plots": False}
    if link.kind == ShareKind.COMPARE:
        context.update(_public_compare(link.project, params.getlist("runs")))
    elif link.kind == ShareKind.TREE:
        context.update(_public_tree(link.project, params))
    elif link.kind == ShareKind.ARENA:
        x = params.get("arena_x") if params.get("arena_x") in arena_chart.AGAINST else "time"
        points = arena_history(link.project)
        context.update(
            arena_points=points,
            arena_x=x,
            arena_figure=arena_chart.arena_figure(points, against=x) if points else None,
            plots=bool(points),
        )
    else:
        scenario = link.scenario
        # The rows its creator may read now: a project the creator left drops out of the shared board.
        readable = list(
            Project.objects.visible_to(link.created_by).filter(scenario=scenario).order_by("slug")
        )
        context.update(scenario=scenario, board=scenario_board(scenario, readable), projects=readable)
    return context


def _public_compare(project: Project, run_ids: list[str]) -> dict:
    found, missing = compare.find_runs(project, run_ids[: compare.MAX_RUNS])
    if len(found) < 2:
        return {"comparison": None, "missing": missing}
    c = compare.compare(project, [run.external_id for run in found], found=(found, missing))
    colours = [colour(i) for i in range(len(c.runs))]
    unit = compare_charts.time_unit(c)
    encoded, _ = compare_charts.figures(c, colours, unit, uirevision=compare_charts.uirevision(c))
    return {
        "comparison": c,
        "missing": missing,
        "rows": compare_charts.rows(c, colours),
        "unit": unit,
        "plots": True,
        **encoded,
    }


def _public_tree(project: Project, params) -> dict:
    runs, filters = filter_runs(project, params)
    matching = runs if filters["narrowed"] else None
    tree = trees.project_tree(project, matching=matching, archived=filters["archived"])
    return {"tree": tree, "rows": tree.rows(), "filters": filters}
