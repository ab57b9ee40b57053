"""`GET /api/v1/projects/{project}/tree` (issue 39): the tree of attempts as JSON — nodes in drawing order,
every edge with its kind, the runs filter (and its errors, never a 500)."""

from __future__ import annotations

import pytest

from smrweb.tracking import services
from tests.tracking.test_tree import ingest, launched, scored

pytestmark = pytest.mark.django_db


@pytest.fixture
def grown(project, bob):
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    ingest(project, "root", {"type": "state", "id": "st", "state": "running"})
    scored(project, "root", 0.5, by=bob)
    launched(project, bob, "root", "better")
    scored(project, "better", 0.8, by=bob)
    launched(project, bob, "root", "worse")
    scored(project, "worse", 0.2, by=bob)
    return project


def test_the_tree_as_json(api, grown):
    answer = api.get("/api/v1/projects/hill/tree")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["project"], body["maximize"], body["best_run"], body["best_score"]) == (
        "hill",
        True,
        "better",
        0.8,
    )
    assert (body["total"], body["matched"]) == (3, 3)
    nodes = {n["run"]: n for n in body["nodes"]}
    assert [n["run"] for n in body["nodes"]][0] == "root"  # each run before the runs that come from it
    assert nodes["better"] | {"spend_usd": None} == {
        "run": "better", "name": "better", "url": "/projects/hill/runs/better/", "state": "running",
        "best_score": 0.8, "spend_usd": None, "turns": 0, "parent": "root", "kind": "launch", "via": "",
        "dead": "", "on_best_path": True, "matches": True, "size": 1, "rollbacks": [],
    }  # fmt: skip
    assert nodes["better"]["spend_usd"] == "0.000000"
    assert (nodes["worse"]["dead"], nodes["worse"]["on_best_path"]) == ("regressed", False)
    assert (nodes["root"]["parent"], nodes["root"]["kind"], nodes["root"]["size"]) == (None, "", 3)
    assert sorted((e["parent"], e["child"], e["kind"]) for e in body["edges"]) == [
        ("root", "better", "launch"),
        ("root", "worse", "launch"),
    ]


def test_the_runs_filter_narrows_it(api, grown):
    body = api.get("/api/v1/projects/hill/tree?q=worse").json()
    assert [(n["run"], n["matches"]) for n in body["nodes"]] == [("root", False), ("worse", True)]
    assert (body["matched"], body["best_run"]) == (1, None)
    assert [e["child"] for e in body["edges"]] == ["worse"]


@pytest.mark.parametrize(
    "query, field",
    [
        ("state=nope", "state"),
        ("archived=2", "archived"),
        ("view=99", "view"),
        ("over_budget=maybe", "over_budget"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, grown, query, field):
    answer = api.get(f"/api/v1/projects/hill/tree?{query}")
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] and body["message"] and [e["field"] for e in body["errors"]] == [field]
