"""`POST /api/v1/projects/{project}/runs/{run}/close` — a reviewer closes a silent run as abandoned: the
run answered, JSON errors for every refusal (token, viewer, outsider, no reason, not silent, SMR, already
finished), and abandoned runs in the runs list's filters and in the run's own answer."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Run
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db


def close_url(run_id: str, slug: str = "hill") -> str:
    return f"/api/v1/projects/{slug}/runs/{run_id}/close"


def silent_run(project, run_id: str = "r1", *, ago: timedelta | None = None) -> Run:
    ago = ago if ago is not None else project.stall_after + timedelta(minutes=1)
    with time_machine.travel(timezone.now() - ago, tick=False):
        services.ingest_events(
            project, run_id, parse_events(json.dumps([{"id": "s", "type": "state", "state": "running"}]))
        )
    return Run.objects.get(project=project, external_id=run_id)


def test_a_reviewer_closes_a_silent_run_and_gets_the_run(project, bob):
    silent_run(project)
    answer = session_client(bob).post(close_url("r1"), {"reason": "OOM-killed at 03:12"}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["external_id"], body["state"], body["stalled"]) == ("r1", "abandoned", False)
    assert body["failure"] == {"family": "closed", "detail": "OOM-killed at 03:12", "source": "bob"}
    assert body["finished_at"] is not None
    assert AuditEvent.objects.filter(verb="run.closed", actor=bob).count() == 1
    # The run's own answer and the runs list say the same.
    read = session_client(bob).get("/api/v1/projects/hill/runs/r1").json()
    assert read["state"] == "abandoned" and read["failure"]["detail"] == "OOM-killed at 03:12"


def test_the_runs_list_filters_abandoned_runs(project, bob, api):
    services.close_run(silent_run(project, "gone"), by=bob, reason="crashed")
    silent_run(project, "quiet")
    services.ingest_events(project, "live", parse_events(b'[{"type": "state", "state": "running"}]'))

    def ids(query: str) -> list[str]:
        answer = api.get(f"/api/v1/projects/hill/runs?{query}")
        assert answer.status_code == 200, answer.content
        return sorted(r["external_id"] for r in answer.json()["results"])

    assert ids("state=abandoned") == ["gone"]
    assert ids("state=live") == ["live", "quiet"]
    assert ids("q=abandoned") == ["gone"]
    assert ids("state=abandoned&state=running") == ["gone", "live", "quiet"]


@pytest.mark.parametrize("caller", ["token", "victor", "carol", "anon"])
def test_callers_who_may_not_close(project, caller, api, anon_api, victor, carol):
    silent_run(project)
    client = {
        "token": api,
        "victor": session_client(victor),
        "carol": session_client(carol),
        "anon": anon_api,
    }[caller]
    answer = client.post(close_url("r1"), {"reason": "x"}, format="json")
    status = {"token": 403, "victor": 403, "carol": 404, "anon": 401}[caller]
    body = assert_json_error(answer, status)
    if caller == "token":
        assert "Project tokens cannot close runs" in body["message"]
    assert Run.objects.get(external_id="r1").state == "running"
    assert not AuditEvent.objects.filter(verb="run.closed").exists()


@pytest.mark.parametrize("payload", [{}, {"reason": ""}, {"reason": "   "}, {"reason": "x" * 5001}])
def test_a_reason_is_required_and_bounded(project, bob, payload):
    silent_run(project)
    body = assert_json_error(session_client(bob).post(close_url("r1"), payload, format="json"), 400)
    assert [e["field"] for e in body["errors"]] == ["reason"]
    assert Run.objects.get(external_id="r1").state == "running"


def test_refusals_are_409_and_say_why(project, bob):
    client = session_client(bob)
    project.stall_after = timedelta(minutes=15)
    project.save(update_fields=["stall_after"])
    silent_run(project, "recent", ago=timedelta(minutes=5))
    body = assert_json_error(
        client.post(close_url("recent"), {"reason": "x"}, format="json"), 409, "close_refused"
    )
    assert "silent for the project's stall threshold (15m)" in body["message"]
    done = silent_run(project, "done", ago=timedelta(hours=1))
    services.ingest_events(project, "done", parse_events(b'[{"id": "d", "type": "state", "state": "done"}]'))
    done.refresh_from_db()
    body = assert_json_error(
        client.post(close_url("done"), {"reason": "x"}, format="json"), 409, "close_refused"
    )
    assert body["message"] == "The run is already done."
    assert_json_error(client.post(close_url("no-such-run"), {"reason": "x"}, format="json"), 404)


def test_an_smr_run_is_refused(bob):
    smr = services.create_project("smr-api", source="smr", smr_project_id="p-api", smr_api_key="k")
    services.add_member(smr, bob, role="reviewer")
    silent_run(smr)
    body = assert_json_error(
        session_client(bob).post(close_url("r1", "smr-api"), {"reason": "x"}, format="json"),
        409,
        "close_refused",
    )
    assert "stop the run instead" in body["message"]


def test_the_close_is_in_the_openapi_document(anon_api, db):
    import yaml

    schema = yaml.safe_load(anon_api.get("/api/schema/").content)
    operation = schema["paths"]["/api/v1/projects/{slug}/runs/{run_id}/close"]["post"]
    assert operation["operationId"] == "run_close"
    assert {"200", "400", "403", "404", "409"} <= set(operation["responses"])
    assert "close_refused" in operation["responses"]["409"]["description"]
