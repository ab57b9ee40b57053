"""The tree of attempts over the API (issue 39 item 1): the domain is `tracking.queries.tree`."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.response import Response

from smrweb.api.access import project_for
from smrweb.api.schema import ERRORS
from smrweb.api.serializers.tree import TreeSerializer
from smrweb.api.views.runs import VIEW_PARAMETER, ViewFilterBackend
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.filters import NARROWING, RunFilter
from smrweb.tracking.models import Run
from smrweb.tracking.queries import tree as trees

ARCHIVED = OpenApiParameter(
    "archived",
    OpenApiTypes.INT,
    enum=[0, 1],
    description="`1`: archived runs too (the project page's rule: they are left out otherwise).",
)


def _node(tree: trees.Tree, node: trees.Node) -> dict:
    run = node.run
    return {
        "run": run.external_id,
        "name": run.name,
        "url": run.get_absolute_url(),
        "state": run.state,
        "best_score": node.best,
        "spend_usd": node.spend_usd,
        "turns": run.turn_count,
        "parent": tree.nodes[node.parent].run.external_id if node.parent is not None else None,
        "kind": node.kind,
        "via": node.via if node.kind == trees.BRANCH else "",
        "dead": node.dead,
        "on_best_path": node.on_best_path,
        "matches": node.matches,
        "size": node.size,
        "rollbacks": [{"to": e.via, "status": e.status} for e in node.rollbacks],
    }


class ProjectTree(generics.GenericAPIView):
    """The project's tree of attempts: one node per run, joined by how each run came from another — a
    launch ("start the next run"), an SMR branch from a checkpoint, an MLflow nested run (its
    `mlflow.parentRunId` tag) — with rollbacks as markers. The runs filter narrows it (the runs table's
    parameters, `?view=` too): the matching runs and the runs they come from (`matches: false`)."""

    queryset = Run.objects.none()  # the model, for the schema; `get` scopes it
    filterset_class = RunFilter
    filter_backends = [ViewFilterBackend]
    pagination_class = None

    @extend_schema(parameters=[VIEW_PARAMETER, ARCHIVED], responses={200: TreeSerializer, **ERRORS})
    def get(self, request, slug: str):
        project = project_for(request, slug)
        archived = request.query_params.get("archived", "0")
        if archived not in ("0", "1"):
            raise InvalidInput("archived", "`archived=1` shows archived runs; `0` (or nothing) hides them.")
        params = ViewFilterBackend.params(request, self)
        matching = self.filter_queryset(Run.objects.filter(project=project))
        narrowed = any(v.strip() for key in NARROWING for v in params.getlist(key))
        tree = trees.project_tree(project, matching=matching if narrowed else None, archived=archived == "1")
        nodes = [row.node for row in tree.rows(fold=False) if row.node is not None]
        names = {pk: node.run.external_id for pk, node in tree.nodes.items()}
        body = {
            "project": project.slug,
            "metric": project.scenario.score_metric,
            "maximize": project.scenario.maximize,
            "total": tree.total,
            "matched": tree.matched,
            "best_run": names.get(tree.best),
            "best_score": tree.best_score,
            "nodes": [_node(tree, node) for node in nodes],
            "edges": [
                {
                    "parent": names[e.parent],
                    "child": names[e.child],
                    "kind": e.kind,
                    "via": e.via,
                    "status": e.status,
                }
                for e in tree.edges
            ],
        }
        return Response(TreeSerializer(body).data)
