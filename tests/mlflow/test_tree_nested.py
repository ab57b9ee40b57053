"""MLflow nested runs in the tree of attempts (issue 39): the MLflow client's `start_run(nested=True)` tags
the child with `mlflow.parentRunId`; the tree links the child to its parent, at any depth, and so do the run
pages ("nested in", "nested runs")."""

from __future__ import annotations

import pytest

from smrweb.tracking.models import Run
from smrweb.tracking.queries import tree as trees

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_nested_runs_are_linked_to_their_parent(tracking, api, project, client, victor):
    import mlflow

    mlflow.set_experiment("hill")
    with mlflow.start_run(run_name="sweep") as parent:
        with mlflow.start_run(run_name="lr 0.1", nested=True) as child:
            with mlflow.start_run(run_name="seed 1", nested=True) as grandchild:
                mlflow.log_metric("loss", 0.3)
        with mlflow.start_run(run_name="lr 0.01", nested=True) as sibling:
            mlflow.log_metric("loss", 0.2)
    with mlflow.start_run(run_name="alone") as alone:
        pass

    tree = trees.project_tree(project)
    nodes = {n.run.external_id: n for n in tree.nodes.values()}
    ids = {r.info.run_id: r for r in (parent, child, grandchild, sibling, alone)}
    assert set(nodes) == set(ids)
    pk = {run_id: Run.objects.get(external_id=run_id).pk for run_id in ids}
    assert (nodes[child.info.run_id].parent, nodes[child.info.run_id].kind) == (
        pk[parent.info.run_id],
        "nested",
    )
    assert nodes[grandchild.info.run_id].parent == pk[child.info.run_id]
    assert nodes[sibling.info.run_id].parent == pk[parent.info.run_id]
    assert nodes[alone.info.run_id].parent is None
    assert sorted(tree.nodes[r].run.name for r in tree.roots) == ["alone", "sweep"]

    body = api.get("/api/v1/projects/hill/tree").json()
    edges = {(e["parent"], e["child"], e["kind"]) for e in body["edges"]}
    assert edges == {
        (parent.info.run_id, child.info.run_id, "nested"),
        (child.info.run_id, grandchild.info.run_id, "nested"),
        (parent.info.run_id, sibling.info.run_id, "nested"),
    }
    assert {n["name"]: n["size"] for n in body["nodes"]}["sweep"] == 4

    # The run pages link them both ways (one query with the launch lineage).
    client.force_login(victor)
    page = client.get(f"/projects/hill/runs/{child.info.run_id}/").content.decode()
    nested_in = page.split("data-lineage-nested-in>", 1)[1].split("</span>", 1)[0]
    assert f'href="/projects/hill/runs/{parent.info.run_id}/"' in nested_in and ">sweep</a>" in nested_in
    nested = page.split("data-lineage-nested>", 1)[1].split("</span>", 1)[0]
    assert ">seed 1</a>" in nested and "lr 0.01" not in nested
    page = client.get(f"/projects/hill/runs/{parent.info.run_id}/").content.decode()
    assert "data-lineage-nested-in" not in page
    nested = page.split("data-lineage-nested>", 1)[1].split("</span>", 1)[0]
    assert ">lr 0.1</a>" in nested and ">lr 0.01</a>" in nested
