"""`POST /api/v1/scenarios/{key}/preflight`: run by a real Celery worker, 404/401 JSON like every API
error, 503 JSON when no worker answers, and described in the OpenAPI document."""

from __future__ import annotations

import importlib.util
import io
import json

import pytest
from django.core.management import call_command

from smrweb.sources import tasks
from tests.api.helpers import assert_json_error, session_client

URL = "/api/v1/scenarios/{}/preflight"


@pytest.fixture
def presets(db):
    call_command("load_presets", stdout=io.StringIO())


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_preflight_and_the_report_comes_back(api, presets, celery_worker):
    response = api.post(URL.format("optimizer-hill-climb"))
    assert response.status_code == 200, response.content
    report = response.json()
    assert (report["scenario"], report["ok"]) == ("optimizer-hill-climb", True)
    assert report["worker"]
    assert {"name", "group", "ok", "detail"} == set(report["checks"][0])
    assert "validator program" in {c["name"] for c in report["checks"]}


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(importlib.util.find_spec("onnx") is not None, reason="onnx is installed for this interpreter")
def test_the_worker_reports_onnx_missing_for_the_arena_preset(alice, presets, celery_worker):
    response = session_client(alice).post(URL.format("onnx-arena-dogfight"))
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["ok"] is False
    [missing] = [c for c in report["checks"] if not c["ok"]]
    assert missing["name"] == "toolchain python:onnx" and missing["group"] == "worker"
    assert missing["detail"].startswith("python package `onnx` is not installed on this worker (needed by the validator")


def test_an_unknown_scenario_is_404_json(api, presets):
    body = assert_json_error(api.post(URL.format("no-such-scenario")), 404, "not_found")
    assert body["message"] == "No Scenario matches the given query."


def test_anonymous_requests_are_refused_with_401_json(anon_api, presets):
    assert_json_error(anon_api.post(URL.format("optimizer-hill-climb")), 401, "not_authenticated")


def test_reads_only_no_get(api, presets):
    assert_json_error(api.get(URL.format("optimizer-hill-climb")), 405)


def test_no_worker_answering_is_503_json(api, presets, monkeypatch, redis_server):
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)  # nobody takes it
    monkeypatch.setattr(tasks, "PREFLIGHT_TIMEOUT", 0.3)
    response = api.post(URL.format("optimizer-hill-climb"))
    body = assert_json_error(response, 503, "no_worker")
    assert "no worker answered within 0.3 seconds" in body["message"]
    assert response["Retry-After"]


def test_an_unreachable_queue_is_503_json(api, presets, monkeypatch, settings):
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    body = assert_json_error(api.post(URL.format("optimizer-hill-climb")), 503, "no_worker")
    assert "the task queue cannot be reached" in body["message"]


def test_the_worker_side_pushes_its_report_on_the_reply_list(presets, redis_server):
    # The task body, called in-process: what the API waits for arrives on the list it named.
    report = tasks.preflight_scenario("optimizer-hill-climb", reply_to="smrweb:preflight:test")
    try:
        _, raw = redis_server.blpop(["smrweb:preflight:test"], timeout=1)
        assert json.loads(raw) == report and report["ok"] is True
        assert tasks.preflight_scenario("gone") is None
    finally:
        redis_server.delete("smrweb:preflight:test")


def test_the_schema_describes_the_preflight_and_its_report(anon_api, db):
    schema = json.loads(anon_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    operation = schema["paths"]["/api/v1/scenarios/{key}/preflight"]["post"]
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/PreflightReport"}
    assert {"401", "404", "503"} <= set(operation["responses"])
    assert "requestBody" not in operation
    component = schema["components"]["schemas"]["PreflightReport"]
    assert set(component["required"]) == {"scenario", "ok", "worker", "checks"}
    check = schema["components"]["schemas"]["PreflightCheck"]
    assert set(check["properties"]) == {"name", "group", "ok", "detail"}
