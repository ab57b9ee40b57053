"""The tree of attempts (issue 39): a project's runs as the tree they grew into, following the runs
table's filters. The domain is `tracking.queries.tree`; this view only reads the request and renders."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_safe

from smrweb.dashboard.access import fragment_template, project_for_user
from smrweb.dashboard.views.projects import filter_runs, narrowing_query
from smrweb.dashboard.views.shares import share_control
from smrweb.tracking.models import RunState, ShareKind
from smrweb.tracking.queries import tree as trees


@require_safe
@login_required
def project_tree(request, slug: str):
    project = project_for_user(request, slug)
    runs, filters = filter_runs(project, request.GET)
    matching = runs if filters["narrowed"] else None
    tree = trees.project_tree(project, matching=matching, archived=filters["archived"])
    context = {
        "project": project,
        "tree": tree,
        "rows": tree.rows(),
        "filters": filters,
        "states": RunState.values,
        "query": narrowing_query(request.GET),  # the filters, for the link back to the runs table
    }
    template = fragment_template(request, "dashboard/project_tree.html", "tree")
    if "#" not in template:  # the whole page: its Share… control (a fragment would spend the new link's URL)
        context.update(share_control(request, ShareKind.TREE, project=project))
    return render(request, template, context)
