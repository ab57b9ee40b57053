"""Saved views and chosen columns over the API: `?col=` adds each run's param, tag, metric or spend part
(read in the runs query itself, sortable in SQL), `?view=` opens a saved view (private or shared), and
`…/views` lists, saves and deletes them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, Run, SavedView
from tests.factories import push

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/projects/hill/runs"
VIEWS = "/api/v1/projects/hill/views"


def person(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def seed(project, alice, n: int = 4):
    """`n` runs with an lr param, an arm tag, a loss metric and turns of driver and child work."""
    for i in range(n):
        run_id = f"r{i}"
        events = [
            {
                "id": f"t{i}-{k}",
                "type": "agent.turn",
                "turn": k,
                "tokens_in": 100 * (i + 1),
                "tokens_out": 10,
                "cost_usd": 0.5 * (i + 1),
                **({"actor": "w", "parent_actor": "driver"} if k else {}),
            }
            for k in range(2)
        ]
        events += [{"type": "metric", "key": "loss", "step": s, "value": 1.0 / (s + i + 1)} for s in range(5)]
        events.append({"id": f"s{i}", "type": "score", "score": 0.1 * i})
        push(project, run_id, *events)
        run = Run.objects.get(project=project, external_id=run_id)
        services.log_params(run, [("lr", ["0.1", "0.03", "10", "9"][i % 4])], by=alice)
        services.set_tag(run, key="arm", value="ab"[i % 2], by=alice)
    return list(Run.objects.filter(project=project).order_by("external_id"))


def test_columns_read_each_runs_values(api, project, alice):
    runs = seed(project, alice)
    cols = ["param:lr", "tag:arm", "metric:loss", "metric:loss:min", "metric:loss:max"]
    cols += ["spend:driver_usd", "spend:child_usd", "spend:tokens", "spend:driver_tokens"]
    answer = api.get(RUNS, {"col": cols, "sort": "run"})
    assert answer.status_code == 200, answer.content
    by_id = {r["external_id"]: r for r in answer.json()["results"]}
    for i, run in enumerate(runs):
        columns = by_id[run.external_id]["columns"]
        assert list(columns) == cols  # in the asked order
        losses = [1.0 / (s + i + 1) for s in range(5)]
        assert columns["param:lr"] == ["0.1", "0.03", "10", "9"][i]
        assert columns["tag:arm"] == "ab"[i % 2]
        assert columns["metric:loss"] == pytest.approx(losses[-1])
        assert columns["metric:loss:min"] == pytest.approx(min(losses))
        assert columns["metric:loss:max"] == pytest.approx(max(losses))
        spend = by_id[run.external_id]["spend"]
        assert columns["spend:driver_usd"] == spend["driver_inference"]["usd"]
        assert columns["spend:child_usd"] == spend["child_work"]["usd"]
        assert columns["spend:tokens"] == run.tokens_in + run.tokens_out
        assert (
            columns["spend:driver_tokens"]
            == spend["driver_inference"]["tokens_in"] + spend["driver_inference"]["tokens_out"]
        )


def test_a_run_without_the_key_reads_null_and_sorts_last(api, project, alice):
    seed(project, alice, n=2)
    push(project, "bare", {"id": "x", "type": "score", "score": 0.5})
    for sort in ("col:param:lr", "-col:param:lr"):
        rows = api.get(RUNS, {"col": "param:lr", "sort": sort}).json()["results"]
        assert rows[-1]["external_id"] == "bare"
        assert rows[-1]["columns"] == {"param:lr": None}


def test_a_param_sorts_numbers_as_numbers_then_text(api, project, alice):
    runs = seed(project, alice)
    services.log_params(Run.objects.create(project=project, external_id="t"), [("lr", "auto")], by=alice)
    order = [
        r["columns"]["param:lr"]
        for r in api.get(RUNS, {"col": "param:lr", "sort": "col:param:lr"}).json()["results"]
    ]
    assert order == ["0.03", "0.1", "9", "10", "auto"]
    order = [
        r["columns"]["param:lr"]
        for r in api.get(RUNS, {"col": "param:lr", "sort": "-col:param:lr"}).json()["results"]
    ]
    assert order == ["auto", "10", "9", "0.1", "0.03"]
    assert len(runs) == 4


def test_sort_by_a_metric_column_not_shown(api, project, alice):
    seed(project, alice)
    rows = api.get(RUNS, {"sort": "col:metric:loss:min"}).json()["results"]
    assert [r["external_id"] for r in rows] == ["r3", "r2", "r1", "r0"]  # lower loss first
    assert "columns" not in rows[0]


def test_group_puts_arms_together_then_sort(api, project, alice):
    seed(project, alice)
    rows = api.get(RUNS, {"group": "tag:arm", "sort": "-best"}).json()["results"]
    assert [r["external_id"] for r in rows] == ["r2", "r0", "r3", "r1"]
    rows = api.get(RUNS, {"group": "param:lr"}).json()["results"]
    assert [r["external_id"] for r in rows] == ["r1", "r0", "r3", "r2"]  # 0.03, 0.1, 9, 10


@pytest.mark.parametrize(
    "params, field",
    [
        ({"col": "nope:x"}, "col"),
        ({"col": "spend:bogus"}, "col"),
        ({"col": "param:"}, "col"),
        ({"col": [f"param:k{i}" for i in range(13)]}, "col"),
        ({"sort": "col:metric:"}, "sort"),
        ({"sort": "-wibble"}, "sort"),
        ({"group": "colour"}, "group"),
        ({"view": "999"}, "view"),
        ({"view": "abc"}, "view"),
    ],
)
def test_bad_columns_sorts_groups_and_views_are_field_errors(api, project, params, field):
    answer = api.get(RUNS, params)
    assert answer.status_code == 400, answer.content
    assert [e["field"] for e in answer.json()["errors"]] == [field]


def test_queries_stay_flat_with_columns(api, project, alice):
    seed(project, alice, n=6)
    cols = [f"param:k{i}" for i in range(4)] + ["metric:loss", "metric:loss:max", "tag:arm"]
    cols += ["spend:child_usd", "spend:tokens", "spend:failed_calls"]
    api.get(RUNS)  # the token's first use is written once
    with CaptureQueriesContext(connection) as plain:
        assert api.get(RUNS).status_code == 200
    with CaptureQueriesContext(connection) as wide:
        assert api.get(RUNS, {"col": cols, "sort": "-col:metric:loss"}).status_code == 200
    assert len(wide) == len(plain)


def test_saved_views_private_shared_and_runs_through_them(project, alice, bob, victor, api):
    seed(project, alice)
    as_bob, as_victor = person(bob), person(victor)
    query = "tag=arm%3Da&col=param%3Alr&col=metric%3Aloss&sort=-col%3Ametric%3Aloss&page=3&lb=2"
    mine = as_victor.post(VIEWS, {"name": "mine", "query": query}, format="json")
    assert mine.status_code == 201, mine.content
    assert mine.json()["query"] == "tag=arm%3Da&col=param%3Alr&col=metric%3Aloss&sort=-col%3Ametric%3Aloss"
    assert mine.json()["params"]["col"] == ["param:lr", "metric:loss"]
    # a viewer may keep views, not share them
    shared = as_victor.post(VIEWS, {"name": "team", "query": "state=running", "shared": True}, format="json")
    assert shared.status_code == 403
    team = as_bob.post(VIEWS, {"name": "team", "query": "group=tag%3Aarm", "shared": True}, format="json")
    assert team.status_code == 201
    private_id, team_id = mine.json()["id"], team.json()["id"]

    assert [v["name"] for v in as_victor.get(VIEWS).json()] == ["mine", "team"]
    assert [v["name"] for v in as_bob.get(VIEWS).json()] == ["team"]  # another's private view is not listed
    assert [v["name"] for v in api.get(VIEWS).json()] == ["team"]  # a token sees shared views

    rows = as_victor.get(RUNS, {"view": private_id}).json()["results"]
    assert [r["external_id"] for r in rows] == ["r0", "r2"]  # arm a, the higher last loss first
    assert list(rows[0]["columns"]) == ["param:lr", "metric:loss"]
    # a parameter of the request replaces the view's of that name
    rows = as_victor.get(RUNS, {"view": private_id, "sort": "col:metric:loss"}).json()["results"]
    assert [r["external_id"] for r in rows] == ["r2", "r0"]
    # someone else's private view reads as one that does not exist
    for client in (as_bob, api):
        answer = client.get(RUNS, {"view": private_id})
        assert answer.status_code == 400 and answer.json()["errors"][0]["field"] == "view"
        assert client.get(f"{VIEWS}/{private_id}").status_code == 404
    assert api.get(RUNS, {"view": team_id}).status_code == 200

    # saving a name again replaces the view
    again = as_bob.post(VIEWS, {"name": "team", "query": "state=failed", "shared": True}, format="json")
    assert again.json()["id"] == team_id and again.json()["query"] == "state=failed"
    audited = AuditEvent.objects.filter(project=project, verb__startswith="view.")
    assert [e.verb for e in audited.order_by("pk")] == ["view.saved", "view.saved"]  # shared ones only

    # deleting: the owner, or an admin for a shared view; a token never
    assert as_victor.delete(f"{VIEWS}/{team_id}").status_code == 403
    assert api.delete(f"{VIEWS}/{team_id}").status_code == 403
    assert person(alice).delete(f"{VIEWS}/{team_id}").status_code == 204
    assert person(alice).delete(f"{VIEWS}/{private_id}").status_code == 404  # not hers to see
    assert as_victor.delete(f"{VIEWS}/{private_id}").status_code == 204
    assert not SavedView.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "", "query": ""}, "name"),
        ({"name": "x" * 101, "query": ""}, "name"),
        ({"name": "bad", "query": "col=nope"}, "col"),
        ({"name": "bad", "query": "sort=colour"}, "sort"),
        ({"name": "bad", "query": "group=colour"}, "group"),
        ({"name": "bad", "query": "archived=2"}, "archived"),
    ],
)
def test_a_view_that_does_not_read_is_refused_with_its_field(project, bob, body, field):
    answer = person(bob).post(VIEWS, body, format="json")
    assert answer.status_code == 400, answer.content
    assert [e["field"] for e in answer.json()["errors"]] == [field]
    assert not SavedView.objects.exists()


def test_csv_export_carries_the_columns(api, project, alice):
    seed(project, alice, n=2)
    answer = api.get(RUNS, {"col": ["param:lr", "metric:loss:min"], "format": "csv", "sort": "run"})
    assert answer.status_code == 200
    lines = b"".join(answer.streaming_content).decode().splitlines()
    header = lines[0].split(",")
    assert header[-2:] == ["col.param:lr", "col.metric:loss:min"]
    assert lines[1].split(",")[-2:] == ["0.1", str(min(1.0 / (s + 1) for s in range(5)))]


@pytest.mark.parametrize("name", ["sort", "col", "q", "tag", "group"])
def test_a_percent_sign_in_what_was_typed_is_a_field_error_not_a_500(api, client, alice, project, name):
    """Found by the schema fuzzer: `?sort=turn %{x:,.0f}` raised a 500 (django-filter formats every error
    message with its params, and the message quoted the "%"). The same refusal on the runs page."""
    bad = "turn %{x:,.0f} %s %(x)s" if name != "q" else "%" * 600
    answer = api.get(RUNS, {name: bad})
    assert answer.status_code in (200, 400), answer.content
    if answer.status_code == 400:
        assert [e["field"] for e in answer.json()["errors"]] == [name]
    client.force_login(alice)
    assert client.get("/projects/hill/", {name: bad}).status_code in (200, 400)
