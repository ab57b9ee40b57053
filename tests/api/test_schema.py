"""The OpenAPI document: served without credentials, describes the events endpoint with the pydantic
event components, and generates without a single warning."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.management import call_command

EVENT_COMPONENTS = {"MetricEvent", "ScoreEvent", "TurnEvent", "StateEvent", "MessageEvent", "CheckpointEvent"}
EVENTS_PATH = "/api/v1/projects/{slug}/runs/{run_id}/events"


@pytest.fixture
def schema(anon_api, db) -> dict:
    response = anon_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content) if response.content.lstrip().startswith(b"{") else yaml.safe_load(
        response.content)


def test_the_schema_is_served_without_credentials(schema):
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "smrweb API"


def test_the_schema_includes_the_events_path_and_its_request(schema):
    operation = schema["paths"][EVENTS_PATH]["post"]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert request["type"] == "array" and request["maxItems"] == 5000
    refs = json.dumps(request)
    for name in EVENT_COMPONENTS:
        assert f"#/components/schemas/{name}" in refs
    assert {"200", "400", "401", "403", "413"} <= set(operation["responses"])


def test_the_schema_includes_the_event_component_schemas(schema):
    components = schema["components"]["schemas"]
    assert EVENT_COMPONENTS <= set(components)
    metric = components["MetricEvent"]
    assert {"type", "key", "value"} <= set(metric["required"])
    assert metric["additionalProperties"] is False
    assert set(components["TurnEvent"]["properties"]) >= {"turn", "actor", "kind", "tokens_in", "tokens_out",
                                                           "cost_usd"}


def test_the_schema_documents_the_read_endpoints_and_bearer_auth(schema):
    paths = schema["paths"]
    for path in ("/api/v1/projects/", "/api/v1/scenarios/", "/api/v1/projects/{slug}/runs",
                 "/api/v1/projects/{slug}/runs/{run_id}", "/api/v1/projects/{slug}/runs/{run_id}/metrics",
                 "/api/v1/projects/{slug}/runs/{run_id}/turns", "/api/v1/projects/{slug}/submissions",
                 "/api/v1/projects/{slug}/runs/{run_id}/artifacts"):
        assert path in paths, path
    schemes = schema["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())


def test_the_docs_page_is_served(anon_api, db):
    response = anon_api.get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger-ui" in response.content.lower()
    # Swagger UI's start-up code (which names the schema) is a script of its own: the CSP allows no inline code.
    assert b'<script src="/api/docs/?script="></script>' in response.content
    assert b"/api/schema/" in anon_api.get("/api/docs/?script=").content


def test_the_schema_validates_without_warnings(tmp_path, db):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    document = yaml.safe_load(out.read_text())
    assert EVENTS_PATH in document["paths"]
    assert EVENT_COMPONENTS <= set(document["components"]["schemas"])


def test_event_components_do_not_replace_the_api_components(schema):
    components = schema["components"]["schemas"]
    run_failure = json.dumps(components["Run"]["properties"]["failure"])
    ref = run_failure.split("#/components/schemas/")[1].split('"')[0]
    # A run's failure always has its three fields; the event's failure (all optional) is another shape.
    assert set(components[ref]["required"]) == {"family", "detail", "source"}
    event_failure = json.dumps(components["StateEvent"]["properties"]["failure"])
    assert "#/components/schemas/Failure" in event_failure
    assert components["Failure"]["additionalProperties"] is False
