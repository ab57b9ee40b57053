"""Scenario preflight over the API: `POST /api/v1/scenarios/{key}/preflight` queues it for a real Celery
worker and answers 202 at once; `GET …/preflight/{id}` answers 202 until the report is there, then 200.
The web process never waits on a worker (red-team finding 9), callers only reach scenarios they may see,
and a burst from one caller is refused with 429."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command

from smrweb import tasks
from smrweb.tracking import services
from smrweb.tracking.models import Scenario
from tests.api.helpers import assert_json_error, session_client
from tests.conftest import wait_for
from tests.factories import admin_project

URL = "/api/v1/scenarios/{}/preflight"


@pytest.fixture
def presets(db):
    call_command("load_presets", stdout=io.StringIO())


@pytest.fixture
def climb(presets, project):
    """hill (whose token `api` is) uses the optimizer preset."""
    project.scenario = Scenario.objects.get(key="optimizer-hill-climb")
    project.save()
    return project


def _report(client, key: str, *, timeout: float = 60) -> dict:
    asked = client.post(URL.format(key))
    assert asked.status_code == 202, asked.content
    body = asked.json()
    assert (
        body["status"] == "pending" and asked["Location"] == body["poll"] == f"{URL.format(key)}/{body['id']}"
    )

    def ready():
        answer = client.get(body["poll"])
        assert answer.status_code in (200, 202), answer.content
        return answer.json() if answer.status_code == 200 else None

    return wait_for(ready, timeout=timeout, interval=0.3)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_preflight_and_the_report_comes_back(api, climb, celery_worker):
    report = _report(api, "optimizer-hill-climb")
    assert (report["scenario"], report["ok"]) == ("optimizer-hill-climb", True)
    assert report["worker"]
    assert {"name", "group", "ok", "detail"} == set(report["checks"][0])
    assert "validator program" in {c["name"] for c in report["checks"]}


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_worker_reports_a_missing_python_package(alice, presets, celery_worker):
    Scenario.objects.filter(key="onnx-arena-dogfight").update(
        required_toolchains=["python3", "python:onnx", "python:smrweb_no_such_package"]
    )
    report = _report(session_client(alice), "onnx-arena-dogfight")  # a shared preset: any user may check it
    assert report["ok"] is False
    [missing] = [c for c in report["checks"] if not c["ok"]]  # onnx itself is there: smrweb ships it
    assert missing["name"] == "toolchain python:smrweb_no_such_package" and missing["group"] == "worker"
    assert missing["detail"].startswith(
        "python package `smrweb_no_such_package` is not installed on this worker"
    )


def test_asking_never_waits_for_a_worker(api, climb, monkeypatch, redis_server):
    """Nobody takes the task: the POST still answers at once, and the poll says pending, then 503."""
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    started = time.monotonic()
    asked = api.post(URL.format("optimizer-hill-climb"))
    assert asked.status_code == 202 and time.monotonic() - started < tasks.PREFLIGHT_TIMEOUT
    poll = asked.json()["poll"]
    assert api.get(poll).json()["status"] == "pending"
    monkeypatch.setattr(tasks, "PREFLIGHT_TIMEOUT", 0.0)  # the message has expired
    body = assert_json_error(api.get(poll), 503, "no_worker")
    assert "no worker took it within 0 seconds" in body["message"] and api.get(poll)["Retry-After"]


def test_the_reviews_burst_of_ten_is_cut_at_the_default_rate(api, climb, monkeypatch, redis_server):
    """Ten preflights in a row from one token: six are queued (SMRWEB_PREFLIGHT_RATE's default, 6 a
    minute), four refused; none ran anything in the web process."""
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    statuses = [api.post(URL.format("optimizer-hill-climb")).status_code for _ in range(10)]
    assert statuses == [202] * 6 + [429] * 4


def test_a_burst_from_one_caller_is_refused_with_429_and_others_still_ask(
    api, climb, alice, monkeypatch, redis_server, settings
):
    settings.SMRWEB_PREFLIGHT_RATE = "2/d"  # django-ratelimit windows are fixed: a minute one can end mid-test
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    assert [api.post(URL.format("optimizer-hill-climb")).status_code for _ in range(2)] == [202, 202]
    response = api.post(URL.format("optimizer-hill-climb"))
    body = assert_json_error(response, 429, "rate_limited")
    assert body["message"].startswith("Too many attempts.") and int(response["Retry-After"]) > 0
    assert session_client(alice).post(URL.format("optimizer-hill-climb")).status_code == 202  # another caller


def test_the_poll_is_bound_to_its_scenario_and_unknown_ids_are_404(api, climb, monkeypatch, redis_server):
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    request_id = api.post(URL.format("optimizer-hill-climb")).json()["id"]
    assert_json_error(api.get(f"{URL.format('optimizer-hill-climb')}/{'0' * 32}"), 404, "not_found")
    assert_json_error(api.get(f"{URL.format('optimizer-hill-climb')}/not-an-id"), 404, "not_found")
    assert_json_error(api.get(f"{URL.format('generic')}/{request_id}"), 404)  # not hill's scenario: hidden


def test_callers_reach_only_scenarios_they_may_see(
    api, presets, project, alice, carol, monkeypatch, redis_server
):
    """The review's probe: a token of one project ran another team's scenario preflight. Now 404."""
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    services.create_scenario(key="exec-tests", name="Exec", validator_command=["python3", "{artifact}"])
    admin_project("theirs", scenario=Scenario.objects.get(key="exec-tests"), by=carol)
    for client in (api, session_client(alice)):
        assert_json_error(client.post(URL.format("exec-tests")), 404, "not_found")
    assert api.post(URL.format("optimizer-hill-climb")).status_code == 404  # a token: its own project's only
    assert session_client(carol).post(URL.format("exec-tests")).status_code == 202


def test_an_unknown_scenario_is_404_json(api, presets):
    body = assert_json_error(api.post(URL.format("no-such-scenario")), 404, "not_found")
    assert body["message"] == "No Scenario matches the given query."


def test_anonymous_requests_are_refused_with_401_json(anon_api, presets):
    assert_json_error(anon_api.post(URL.format("optimizer-hill-climb")), 401, "not_authenticated")


def test_an_unreachable_queue_is_503_json(api, climb, monkeypatch, settings):
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    body = assert_json_error(api.post(URL.format("optimizer-hill-climb")), 503, "no_worker")
    assert "the task queue cannot be reached" in body["message"]


def test_the_worker_side_stores_its_report_where_the_asker_polls(presets, redis_server):
    # The task body, called in-process: what the poll reads arrives under the request's id.
    request_id = "a" * 32
    report = tasks.preflight_scenario("optimizer-hill-climb", request_id=request_id)
    try:
        state = tasks.preflight_state("optimizer-hill-climb", request_id)
        assert state["status"] == "done" and state["report"] == report and report["ok"] is True
        assert tasks.preflight_state("generic", request_id) is None
        assert tasks.preflight_scenario("gone") is None
    finally:
        redis_server.delete(f"smrweb:preflight:{request_id}")


def test_the_schema_describes_the_preflight_and_its_report(anon_api, db):
    schema = json.loads(anon_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    operation = schema["paths"]["/api/v1/scenarios/{key}/preflight"]["post"]
    assert operation["responses"]["202"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PreflightPending"
    }
    assert {"401", "404", "429", "503"} <= set(operation["responses"])
    assert "requestBody" not in operation
    result = schema["paths"]["/api/v1/scenarios/{key}/preflight/{request_id}"]["get"]
    assert result["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PreflightReport"
    }
    component = schema["components"]["schemas"]["PreflightReport"]
    assert set(component["required"]) == {"scenario", "ok", "worker", "checks"}
    check = schema["components"]["schemas"]["PreflightCheck"]
    assert set(check["properties"]) == {"name", "group", "ok", "detail"}
