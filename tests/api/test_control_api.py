"""Steering over the API: POST …/messages, …/pause, …/resume answer 202 with the request (200 with the one
still being sent), GET …/controls lists them; refusals are JSON errors with field detail; the operations are
documented in the OpenAPI document."""

from __future__ import annotations

import json

import pytest
import yaml

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, Project, RunControl
from tests.api.helpers import assert_json_error, session_client

R = "/api/v1/projects/hill/runs/r1"


@pytest.fixture
def live(project):
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="https://harness.example/hook")
    services.ingest_events(
        project, "r1", ev.parse_events(json.dumps([{"type": "state", "state": "running"}]))
    )
    return project


@pytest.fixture
def queued(monkeypatch):
    """What was queued for a worker (the broker is not needed: the request is a row first)."""
    from smrweb import tasks

    sent: list[int] = []
    monkeypatch.setattr(tasks.dispatch_control, "delay_on_commit", sent.append)
    return sent


def test_a_reviewer_sends_a_message_and_gets_202_with_the_request(live, bob, queued):
    answer = session_client(bob).post(f"{R}/messages", {"body": "Try cosine decay."}, format="json")
    assert answer.status_code == 202, answer.content
    body = answer.json()
    control = RunControl.objects.get()
    assert body == {
        "id": control.pk,
        "run": "r1",
        "kind": "message",
        "body": "Try cosine decay.",
        "status": "requested",
        "detail": "",
        "source_ref": "",
        "attempts": 0,
        "requested_by": "bob",
        "created": body["created"],
        "dispatched_at": None,
        "finished_at": None,
    }
    assert queued == [control.pk]
    # The same words again while they are being sent: the same request, 200, not queued twice.
    again = session_client(bob).post(f"{R}/messages", {"body": "Try cosine decay."}, format="json")
    assert (again.status_code, again.json()["id"]) == (200, control.pk)
    assert queued == [control.pk]


def test_pause_then_resume(live, alice, queued):
    client = session_client(alice)
    pause = client.post(f"{R}/pause")
    assert pause.status_code == 202 and pause.json()["kind"] == "pause"
    assert client.post(f"{R}/pause").status_code == 200  # a double click
    refused = assert_json_error(client.post(f"{R}/resume"), 409, "control_refused")
    assert "pause of this run is on its way (requested)" in refused["message"]
    services.control_accepted(pause.json()["id"], detail="HTTP 202")
    services.ingest_events(live, "r1", ev.parse_events(b'[{"type": "state", "state": "paused"}]'))
    assert RunControl.objects.get(pk=pause.json()["id"]).status == "confirmed"
    refused = assert_json_error(client.post(f"{R}/pause"), 409, "control_refused")
    assert refused["message"] == "The run is already paused; resume it instead."
    resume = client.post(f"{R}/resume")
    assert resume.status_code == 202 and resume.json()["kind"] == "resume"
    assert len(queued) == 2
    listed = client.get(f"{R}/controls").json()
    assert [(c["kind"], c["status"]) for c in listed["results"]] == [
        ("resume", "requested"),
        ("pause", "confirmed"),
    ]


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"body": ""}, "body", "Write the message to send (1 to 10,000 characters)."),
        ({"body": "   "}, "body", "Write the message to send (1 to 10,000 characters)."),
        ({"body": "x" * 10_001}, "body", "10,001 characters long; at most 10,000 are sent"),
        ({}, "body", "This field is required."),
        ({"body": ["a"]}, "body", "Not a valid string."),
    ],
)
def test_a_bad_message_is_a_400_naming_the_field(live, bob, queued, data, field, words):
    body = assert_json_error(session_client(bob).post(f"{R}/messages", data, format="json"), 400)
    assert body["errors"][0]["field"] == field and words in body["errors"][0]["message"]
    assert not RunControl.objects.exists() and queued == []


def test_tokens_viewers_and_outsiders_are_refused(live, api, victor, carol, queued):
    refused = assert_json_error(api.post(f"{R}/messages", {"body": "hi"}, format="json"), 403, "not_allowed")
    assert "Project tokens cannot steer runs" in refused["message"]
    assert_json_error(api.post(f"{R}/pause"), 403)
    assert_json_error(session_client(victor).post(f"{R}/pause"), 403)
    assert_json_error(session_client(carol).post(f"{R}/pause"), 404)  # carol does not see the project
    assert_json_error(session_client(victor).post("/api/v1/projects/hill/runs/nope/pause"), 404)
    assert not RunControl.objects.exists() and queued == []
    assert not AuditEvent.objects.filter(verb="control.requested").exists()
    # Reading is for whoever reaches the project, its tokens too.
    assert api.get(f"{R}/controls").json()["results"] == []
    assert session_client(victor).get(f"{R}/controls").status_code == 200


def test_a_finished_run_and_a_project_without_a_webhook_are_409s_that_say_why(project, bob, queued):
    services.ingest_events(project, "r1", ev.parse_events(b'[{"type": "state", "state": "running"}]'))
    refused = assert_json_error(session_client(bob).post(f"{R}/pause"), 409, "control_refused")
    assert "no webhook URL" in refused["message"]
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="https://harness.example/hook")
    services.ingest_events(project, "r1", ev.parse_events(b'[{"type": "state", "state": "done"}]'))
    refused = assert_json_error(session_client(bob).post(f"{R}/messages", {"body": "hi"}, format="json"), 409)
    assert refused["message"] == "The run is done: only a live run can be steered."
    assert queued == []


def test_the_operations_are_documented(anon_api, db):
    schema = yaml.safe_load(anon_api.get("/api/schema/").content)
    paths = schema["paths"]
    base = "/api/v1/projects/{slug}/runs/{run_id}"
    send = paths[f"{base}/messages"]["post"]
    assert set(send["responses"]) >= {"202", "200", "400", "403", "404", "409"}
    assert "10,000" in json.dumps(schema["components"]["schemas"]["RunMessageInRequest"])
    assert "confirmed" in paths[f"{base}/pause"]["post"]["description"]
    assert "requestBody" not in paths[f"{base}/pause"]["post"]
    assert "requestBody" not in paths[f"{base}/resume"]["post"]
    assert paths[f"{base}/controls"]["get"]["operationId"] == "run_control_list"
