"""Links to "Start the next run" and a run's lineage, for the pages that show them with one line:
`{% launch_button project "Start the next run" %}` (project and knowledge pages) and
`{% run_lineage run %}` (the run page: "started from", "next runs", "Start another like this"). Each
asks `capabilities.may(…, Action.LAUNCH)` (reviewers and admins, where the source can start runs)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.db.models import Q
from django.urls import reverse

from smrweb.tracking.models import Run
from smrweb.tracking.services import capabilities
from smrweb.tracking.services.capabilities import Action

register = template.Library()


def _launch_url(project, **query) -> str:
    query = {k: v for k, v in query.items() if v not in (None, "")}
    url = reverse("dashboard:launch-new", args=[project.slug])
    return f"{url}?{urlencode(query)}" if query else url


@register.inclusion_tag("dashboard/partials/launch_button.html", takes_context=True)
def launch_button(
    context, project, label: str = "Start the next run", from_run: str = "", n=None, primary=False
):
    user = context["request"].user
    may = capabilities.may(user, project, Action.LAUNCH)
    url = _launch_url(project, **{"from": from_run, "n": n}) if may else ""
    return {"url": url, "label": label, "primary": primary}


@register.inclusion_tag("dashboard/partials/run_lineage.html", takes_context=True)
def run_lineage(context, run):
    """One query for the run's parent and children together (the person's role comes from the page's
    `can_launch` when it has one)."""
    related = list(
        Run.objects.filter(Q(pk=run.parent_id) | Q(parent=run) if run.parent_id else Q(parent=run))
        .only("pk", "project_id", "external_id", "display_name", "parent_id", "started_at")
        .order_by("started_at", "id")
    )
    for r in related:
        r.project = run.project  # for get_absolute_url, without a query per run
    parent = next((r for r in related if r.pk == run.parent_id), None)
    children = [r for r in related if r.parent_id == run.pk]
    may = context.get("can_launch")  # the run page knows the person's role already
    if may is None:
        may = capabilities.may(context["request"].user, run.project, Action.LAUNCH)
    url = _launch_url(run.project, **{"from": run.external_id}) if may else ""
    return {"parent": parent, "children": children, "launch_url": url}
