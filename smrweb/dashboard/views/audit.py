"""A project's audit log (admins only): who did what to which object and when, filtered by kind, person
and date, paged newest first, and the same filtered log as a streamed CSV."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from smrweb.core import exports
from smrweb.dashboard.access import project_for_user
from smrweb.tracking.models import Role
from smrweb.tracking.queries import audit

PER_PAGE = 50
CSV_HEADER = ("created", "actor", "kind", "verb", "what", "object_type", "object_id", "detail")


def _filtered(request, project):
    log = audit.AuditFilter(request.GET, audit.project_events(project), project=project)
    return log, (log.qs if log.is_valid() else audit.project_events(project).none())


@require_GET
@login_required
@never_cache
def audit_log(request, slug: str):
    project = project_for_user(request, slug, role=Role.ADMIN)
    log, events = _filtered(request, project)
    page = Paginator(events, PER_PAGE).get_page(request.GET.get("page"))
    objects = audit.existing_objects(project, page.object_list)
    rows = []
    for e in page.object_list:
        link, label = _link(project, e, objects.get((e.object_type, e.object_id)))
        rows.append(
            {
                "event": e,
                "kind": audit.kind_of(e.verb).label,
                "what": audit.verb_words(e.verb),
                "summary": audit.summary(e.detail),
                "link": link,
                "label": label,
            }
        )
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "project": project,
        "filter": log,
        "page": page,
        "rows": rows,
        "query": query.urlencode(),
        "csv_url": reverse("dashboard:project-audit-csv", args=[project.slug])
        + (f"?{query.urlencode()}" if query else ""),
    }
    return render(request, "dashboard/project_audit.html", context, status=200 if log.is_valid() else 400)


@require_GET
@login_required
def audit_log_csv(request, slug: str):
    """The filtered log as CSV, newest first, streamed."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    log, events = _filtered(request, project)
    if not log.is_valid():
        return render(
            request,
            "dashboard/project_audit.html",
            {"project": project, "filter": log, "rows": [], "page": None},
            status=400,
        )
    rows = (
        (
            created.astimezone(timezone.get_current_timezone()),
            actor,
            audit.kind_of(verb).key,
            verb,
            audit.verb_words(verb),
            object_type,
            object_id,
            detail or {},
        )
        for created, actor, verb, object_type, object_id, detail in events.values_list(
            "created", "actor_label", "verb", "object_type", "object_id", "detail"
        ).iterator(chunk_size=2000)
    )
    filename = exports.export_filename(project.slug, "audit", fmt=exports.CSV)
    return exports.export_response(CSV_HEADER, rows, fmt=exports.CSV, filename=filename)


def _link(project, event, obj) -> tuple[str, str]:
    """(where the audited object is shown, what to call it) when it still exists; ("", "") when not."""
    if obj is None:
        return "", ""
    slug = project.slug
    match event.object_type:
        case "run":
            url = reverse("dashboard:run-detail", args=[slug, obj.external_id])
        case "submission":
            url = reverse("dashboard:submission-detail", args=[slug, obj.pk])
        case "rollback" | "runcontrol":
            url = reverse("dashboard:run-detail", args=[slug, obj.run.external_id])
        case "runlaunch":
            url = reverse("dashboard:launch-detail", args=[slug, obj.pk])
        case "apitoken":
            url = reverse("dashboard:project-tokens", args=[slug])
        case "membership":
            url = reverse("dashboard:project-settings", args=[slug]) + "#members"
        case "knowledgeentry":
            url = reverse("dashboard:knowledge", args=[slug]) + f"#entry-{obj.pk}"
        case "alertrule":
            url = reverse("dashboard:project-alerts", args=[slug])
        case "comment":
            if obj.run_id:
                url = reverse("dashboard:run-detail", args=[slug, obj.run.external_id])
            else:
                url = reverse("dashboard:submission-detail", args=[slug, obj.submission_id])
            url += f"#comment-{obj.pk}"
        case "project":
            url = reverse("dashboard:project-detail", args=[slug])
        case _:
            return "", ""
    return url, audit.object_label(event.object_type, obj)
