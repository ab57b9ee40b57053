"""POST/GET /api/v1/projects/{slug}/launches: 201 for a new launch, 200 for the launch an
Idempotency-Key already made, 409 for a key reused for another request or a source that cannot start
runs; field errors as JSON; people only (a token reads, never starts); the OpenAPI document says so."""

from __future__ import annotations

import json

import pytest
import yaml
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, RunLaunch

pytestmark = pytest.mark.django_db

URL = "/api/v1/projects/hill/launches"
KEY = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


@pytest.fixture
def hooked(project):
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "done"}]'))
    services.update_run_settings(project, "r1", budget_usd="4.5", requested_profile="codex_medium")
    return project


@pytest.fixture
def as_bob(bob):
    client = APIClient()
    client.force_authenticate(bob)
    return client


def post(client, body, key=KEY):
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(URL, data=json.dumps(body), content_type="application/json", headers=headers)


def test_a_reviewer_starts_a_run_and_the_same_key_answers_the_same_launch(hooked, as_bob, queued_launches):
    first = post(as_bob, {"from_run": "r1", "text": "Smaller steps."})
    assert first.status_code == 201, first.content
    body = first.json()
    assert first["Idempotency-Key"] == KEY and first["Location"] == f"{URL}/{body['id']}"
    assert (body["status"], body["from_run"], body["run"], body["external_run_id"]) == (
        "requested",
        "r1",
        None,
        "r1-next-1",
    )
    # Omitted fields took the prefill: the run's profile and budget, the carry-forward block + the text.
    assert (body["model_profile"], body["budget_usd"], body["budget_tokens"]) == (
        "codex_medium",
        "4.500000",
        None,
    )
    assert body["kickoff"].startswith("## Carry-forward: hill") and body["kickoff"].endswith(
        "\n\nSmaller steps."
    )
    assert body["requested_by"] == "bob" and body["idempotency_key"] == KEY
    assert queued_launches == [body["id"]]

    again = post(as_bob, {"from_run": "r1", "text": "Smaller steps."})
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert queued_launches == [body["id"]] and RunLaunch.objects.count() == 1  # dispatched once

    reused = post(as_bob, {"from_run": "r1", "text": "Something else."})
    assert reused.status_code == 409 and reused.json()["code"] == "idempotency_key_reused"

    listed = as_bob.get(URL).json()
    assert [row["id"] for row in listed["results"]] == [body["id"]]
    assert as_bob.get(f"{URL}/{body['id']}").json()["kickoff"] == body["kickoff"]


def test_without_a_key_each_request_starts_a_run_and_the_answer_names_the_key(
    hooked, as_bob, queued_launches
):
    one, two = post(as_bob, {"kickoff": "go"}, key=None), post(as_bob, {"kickoff": "go"}, key=None)
    assert (one.status_code, two.status_code) == (201, 201)
    assert one["Idempotency-Key"] != two["Idempotency-Key"] and len(queued_launches) == 2


def test_explicit_fields_win_over_the_prefill(hooked, as_bob, queued_launches):
    answer = post(
        as_bob,
        {"kickoff": "Only this.", "model_profile": "", "budget_usd": None, "budget_tokens": 5000},
    ).json()
    assert (answer["kickoff"], answer["model_profile"], answer["budget_usd"], answer["budget_tokens"]) == (
        "Only this.",
        "",
        None,
        5000,
    )
    plain = post(as_bob, {"carry_forward": False, "text": "No block."}, key="second-key-123").json()
    assert plain["kickoff"] == "No block."


@pytest.mark.parametrize(
    ("body", "key", "field"),
    [
        ({"kickoff": "go", "budget_usd": -1}, KEY, "budget_usd"),
        ({"kickoff": "go", "budget_usd": 0}, KEY, "budget_usd"),
        ({"kickoff": "go", "budget_usd": "NaN"}, KEY, "budget_usd"),
        ({"kickoff": "go", "budget_usd": "Infinity"}, KEY, "budget_usd"),
        ({"kickoff": "go", "budget_usd": 10**7}, KEY, "budget_usd"),
        ({"kickoff": "go", "budget_usd": "0.0000001"}, KEY, "budget_usd"),
        ({"kickoff": "go", "budget_tokens": 0}, KEY, "budget_tokens"),
        ({"kickoff": "go", "budget_tokens": 10**13}, KEY, "budget_tokens"),
        ({"kickoff": "go", "budget_tokens": "many"}, KEY, "budget_tokens"),
        ({"kickoff": ""}, KEY, "kickoff"),
        ({"kickoff": "x" * 50_001}, KEY, "kickoff"),
        ({"carry_forward": False, "text": ""}, KEY, "kickoff"),
        ({"kickoff": "go", "from_run": "nope"}, KEY, "from_run"),
        ({"kickoff": "go", "n": 0}, KEY, "n"),
        ({"kickoff": "go", "git_commit": "abc123"}, KEY, "git_commit"),
        ({"kickoff": "go", "model_profile": "two words"}, KEY, "model_profile"),
        ({"kickoff": "go"}, "bad key", "idempotency_key"),
    ],
)
def test_bad_input_is_a_json_error_naming_the_field_and_writes_nothing(
    hooked, as_bob, queued_launches, body, key, field
):
    answer = post(as_bob, body, key=key)
    assert answer.status_code == 400, answer.content
    data = answer.json()
    assert set(data) == {"code", "message", "errors"} and field in {e["field"] for e in data["errors"]}
    assert not RunLaunch.objects.exists() and queued_launches == []


def test_a_project_that_cannot_start_runs_answers_409_with_the_reason(project, as_bob, queued_launches):
    answer = post(as_bob, {"kickoff": "go"})
    assert answer.status_code == 409 and answer.json()["code"] == "launch_refused"
    assert "no webhook URL" in answer.json()["message"]


def test_viewers_and_tokens_may_read_launches_but_not_start_runs(
    hooked, victor, api, as_bob, queued_launches
):
    made = post(as_bob, {"kickoff": "go"}).json()
    viewer = APIClient()
    viewer.force_authenticate(victor)
    assert post(viewer, {"kickoff": "go"}, key="viewer-key-1234").status_code == 403
    assert post(api, {"kickoff": "go"}, key="token-key-12345").status_code == 403
    assert viewer.get(f"{URL}/{made['id']}").status_code == 200
    assert api.get(URL).json()["results"][0]["id"] == made["id"]
    assert RunLaunch.objects.count() == 1
    assert AuditEvent.objects.filter(verb="launch.requested").count() == 1


def test_another_projects_launch_is_not_found(hooked, as_bob, queued_launches, other_project, carol):
    made = post(as_bob, {"kickoff": "go"}).json()
    outsider = APIClient()
    outsider.force_authenticate(carol)
    assert outsider.get(f"{URL}/{made['id']}").status_code == 404
    assert outsider.get(f"/api/v1/projects/other/launches/{made['id']}").status_code == 404


def test_the_schema_documents_the_launch_endpoints(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    create = schema["paths"]["/api/v1/projects/{slug}/launches"]["post"]
    assert set(create["responses"]) >= {"200", "201", "400", "403", "409"}
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in create["parameters"])
    assert "get" in schema["paths"]["/api/v1/projects/{slug}/launches/{launch_id}"]


def test_the_run_api_names_each_runs_parent(hooked, as_bob, queued_launches, api):
    made = post(as_bob, {"from_run": "r1", "kickoff": "go"}).json()
    services.ingest_events(
        hooked, made["external_run_id"], parse_events(b'[{"type": "state", "state": "running"}]')
    )
    assert as_bob.get(f"{URL}/{made['id']}").json()["run"] == "r1-next-1"
    assert api.get("/api/v1/projects/hill/runs/r1-next-1").json()["parent"] == "r1"
    listed = {r["external_id"]: r["parent"] for r in api.get("/api/v1/projects/hill/runs").json()["results"]}
    assert listed == {"r1": None, "r1-next-1": "r1"}
