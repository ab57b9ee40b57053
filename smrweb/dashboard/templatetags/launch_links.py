"""Links to "Start the next run" and a run's lineage, for the pages that show them with one line:
`{% launch_button project "Start the next run" %}` (project and knowledge pages) and
`{% run_lineage run %}` (the run page: "started from", "next runs", "nested in", "nested runs", "Start
another like this"). Each
asks `capabilities.may(…, Action.LAUNCH)` (reviewers and admins, where the source can start runs)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.urls import reverse

from smrweb.tracking.queries import tree
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
    """One query for the run's parent, children and MLflow nesting together (`queries.tree.lineage`; the
    person's role comes from the page's `can_launch` when it has one)."""
    links = tree.lineage(run)
    may = context.get("can_launch")  # the run page knows the person's role already
    if may is None:
        may = capabilities.may(context["request"].user, run.project, Action.LAUNCH)
    url = _launch_url(run.project, **{"from": run.external_id}) if may else ""
    return {
        "parent": links.parent,
        "children": links.children,
        "nested_in": links.nested_in,
        "nested": links.nested,
        "launch_url": url,
    }
