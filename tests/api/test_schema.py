"""The OpenAPI document: served without credentials, describes the events endpoint with the pydantic
event components, and generates without a single warning."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from django.core.management import call_command

EVENT_COMPONENTS = {"MetricEvent", "ScoreEvent", "TurnEvent", "StateEvent", "MessageEvent", "CheckpointEvent"}
EVENTS_PATH = "/api/v1/projects/{slug}/runs/{run_id}/events"


@pytest.fixture
def schema(anon_api, db) -> dict:
    response = anon_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return (
        json.loads(response.content)
        if response.content.lstrip().startswith(b"{")
        else yaml.safe_load(response.content)
    )


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
    assert set(components["TurnEvent"]["properties"]) >= {
        "turn",
        "actor",
        "kind",
        "tokens_in",
        "tokens_out",
        "cost_usd",
    }


def test_the_schema_documents_the_read_endpoints_and_bearer_auth(schema):
    paths = schema["paths"]
    for path in (
        "/api/v1/projects/",
        "/api/v1/scenarios/",
        "/api/v1/projects/{slug}/runs",
        "/api/v1/projects/{slug}/runs/{run_id}",
        "/api/v1/projects/{slug}/runs/{run_id}/metrics",
        "/api/v1/projects/{slug}/runs/{run_id}/turns",
        "/api/v1/projects/{slug}/submissions",
        "/api/v1/projects/{slug}/runs/{run_id}/artifacts",
        "/api/v1/projects/{slug}/alert-rules/",
        "/api/v1/projects/{slug}/alert-rules/{rule_id}/",
        "/api/v1/projects/{slug}/alert-rules/{rule_id}/deliveries",
    ):
        assert path in paths, path
    schemes = schema["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())


def test_the_docs_page_is_served(anon_api, db):
    response = anon_api.get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger-ui" in response.content.lower()
    # Swagger UI's start-up code (which names the schema) is a script of its own: the CSP allows no inline
    # code.
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


# --- examples that cannot hurt (issue 14) -------------------------------------------------------------

WRITES = ("post", "put", "patch")


def _example(operation: dict):
    media, example = _first_example(operation)
    return media, (example["value"] if example else None)


def _first_example(operation: dict):
    content = operation.get("requestBody", {}).get("content", {})
    for media in ("application/json", "multipart/form-data"):
        if media in content:
            examples = content[media].get("examples") or {}
            return media, (next(iter(examples.values())) if examples else None)
    return None, None


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_every_write_with_a_json_body_has_a_realistic_example_marked_as_one(schema):
    missing = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            media, example = _first_example(operation) if method in WRITES else (None, None)
            value = example["value"] if example else None
            if media == "application/json" and value is None:
                missing.append(f"{method.upper()} {path}")
            elif value is not None:
                text = json.dumps(value)
                # A body with no text at all (`{"muted": true}`) writes nothing a reader could mistake
                # for real data; its summary says it is an example instead.
                said = text if _strings(value) else example.get("summary", "")
                assert "example" in said.lower(), (
                    f"{method.upper()} {path}: the example does not say it is one"
                )
                assert '"string"' not in text and "2147483647" not in text
    assert not missing, f"write operations without an example: {missing}"


def test_the_examples_pass_the_contract_when_sent(client, alice, bob, project):
    """Each example, sent as is by someone allowed to, is accepted by the real endpoint."""
    from smrweb.tracking import services
    from smrweb.tracking.events import parse_events
    from smrweb.tracking.models import Submission
    from smrweb.tracking.services import submissions as lifecycle

    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    ops = {(m, p): o for p, ms in schema["paths"].items() for m, o in ms.items()}

    def send(method, path, expect, **ids):
        _, value = _example(ops[(method, path)])
        url = path.format(slug="hill", run_id="example-run", **ids)
        response = getattr(client, method)(url, data=json.dumps(value), content_type="application/json")
        assert response.status_code in expect, (path, response.status_code, response.content[:400])
        return response

    send("post", EVENTS_PATH, {200})
    assert send("post", EVENTS_PATH, {200}).json() == {"run": "example-run", "accepted": 0, "duplicates": 6}
    send("patch", "/api/v1/projects/{slug}/runs/{run_id}", {200})
    logs_path = "/api/v1/projects/{slug}/runs/{run_id}/logs"
    assert send("post", logs_path, {201}).json()["kept"] == 2
    assert send("post", logs_path, {200}).json()["repeat"] is True  # the same batch id: a no-op
    send("post", "/api/v1/projects/", {201})
    send("post", "/api/v1/scenarios/", {201})
    sub = Submission.objects.get(run__external_id="example-run")
    lifecycle.request_verification(sub, by=bob)
    lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "", "ok"))
    send("post", "/api/v1/projects/{slug}/submissions/{submission_id}/reject", {200}, submission_id=sub.pk)
    services.ingest_events(
        project, "example-run", parse_events(json.dumps([{"type": "score", "score": 3.2}]))
    )
    other = Submission.objects.exclude(pk=sub.pk).get()
    lifecycle.request_verification(other, by=bob)
    lifecycle.record_verification(other.pk, lifecycle.VerificationResult("passed", 0, "", "ok"))
    send("post", "/api/v1/projects/{slug}/submissions/{submission_id}/approve", {200}, submission_id=other.pk)
    send(
        "post", "/api/v1/projects/{slug}/submissions/{submission_id}/uploaded", {200}, submission_id=other.pk
    )
    result = send(
        "post",
        "/api/v1/projects/{slug}/submissions/{submission_id}/arena-result",
        {201},
        submission_id=other.pk,
    ).json()
    assert (result["rank"], result["better"]) == (7, None)
    other.refresh_from_db()
    assert other.arena_ref == "https://arena.example/s/812"
    # The rollback example names a submission id that is not this run's: a 400 naming the field, not a 500.
    response = send("post", "/api/v1/projects/{slug}/runs/{run_id}/rollback", {400})
    assert response.json()["errors"][0]["field"] == "submission"
    # The close example is well formed (not a 400); the run has just sent news, so it is refused (409).
    refused = send("post", "/api/v1/projects/{slug}/runs/{run_id}/close", {409})
    assert refused.json()["code"] == "close_refused"
    rule = send("post", "/api/v1/projects/{slug}/alert-rules/", {201}).json()
    assert (rule["trigger"], rule["channel"], rule["target"]) == ("run.failed", "email", "oncall@example.com")
    muted = send("patch", "/api/v1/projects/{slug}/alert-rules/{rule_id}/", {200}, rule_id=rule["id"])
    assert muted.json()["muted"] is True
    view = send("post", "/api/v1/projects/{slug}/views", {201}).json()
    assert view["params"]["col"] == ["param:lr", "metric:val_loss:min"] and view["shared"] is True


def test_try_it_out_sends_reads_only_unless_the_operator_turns_writes_on(anon_api, db):
    script = anon_api.get("/api/docs/?script=").content.decode()
    assert re.search(r'"supportedSubmitMethods": \[\s*"get",\s*"head",\s*"options"\s*\]', script)
    schema = yaml.safe_load(anon_api.get("/api/schema/").content)
    assert (
        "reads only" in schema["info"]["description"]
        and "[← Back to the dashboard](/)" in schema["info"]["description"]
    )
