"""Finding N8: deeply nested JSON (`[` × 50,000 or `{"a":` × 20,000) made every DRF JSON endpoint answer
500 (RecursionError in the parser). Every endpoint of the API that takes a body, found by walking its URL
patterns, is sent such bodies with real path parameters: none answers 500, and each that reads the body
answers the API's JSON error naming the nesting, having written nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from smrweb.api.parsers import MAX_DEPTH, too_deep
from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, Submission
from tests.api.helpers import assert_json_error, session_client
from tests.factories import UserFactory

BODIES = {
    "lists": "[" * 50_000 + "]" * 50_000,
    "objects": '{"a":' * 20_000 + "1" + "}" * 20_000,
    "just past the bound": json.dumps(json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))),
}
# The endpoints the review found answering 500 (besides MLflow's, tests/mlflow): each must be reached.
REVIEWED = {
    "alert-rule-list",
    "alert-rule-detail",
    "run-note",
    "run-comments",
    "submission-comments",
    "run-tags",
    "run-messages",
    "launch-list",
    "submission-arena-result",
    "submission-reject",
    "project-list",
    "run-detail",
}


def _api_patterns():
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver) and getattr(entry, "namespace", None) == "api":
            for pattern in entry.url_patterns:
                if isinstance(pattern, URLPattern):
                    yield pattern


@pytest.fixture
def world(project, alice):
    run = services.ingest_events(project, "r1", ev.parse_events(b'[{"type": "score", "score": 0.5}]')).run
    artifact, _ = services.store_artifact(
        project, "r1", path="a.txt", content=io.BytesIO(b"x"), kind="other", content_type="text/plain"
    )
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="inbox", recipient="alice"
    )
    comment = services.add_comment(by=alice, body="hi", run=run)
    services.set_tag(run, key="k", value="v", by=alice)
    return {
        "slug": project.slug,
        "run_id": "r1",
        "submission_id": Submission.objects.get(run=run).pk,
        "rule_id": rule.pk,
        "comment_id": comment.pk,
        "artifact_id": artifact.pk,
        "scenario_key": project.scenario.key,
    }


def _url(pattern: URLPattern, world: dict) -> str:
    kwargs = {}
    for name in pattern.pattern.converters:
        if name == "key":
            kwargs[name] = world["scenario_key"] if "scenario" in pattern.name else "k"
        else:
            kwargs[name] = world[name]
    from django.urls import reverse

    return reverse(f"api:{pattern.name}", kwargs=kwargs)


def _writes(pattern: URLPattern) -> list[str]:
    view = pattern.callback
    cls = getattr(view, "view_class", None) or getattr(getattr(view, "__wrapped__", None), "view_class", None)
    if cls is None:
        return []
    return [m for m in ("post", "put", "patch") if hasattr(cls, m)]


def test_the_nesting_check_is_iterative_and_exact():
    assert not too_deep(json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH))
    assert too_deep(json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)))
    assert not too_deep({"a": [1, 2, {"b": "c"}]}) and not too_deep("x")
    assert too_deep(json.loads('{"a":' * 900 + "1" + "}" * 900))  # near the interpreter's limit


@pytest.mark.parametrize("shape", list(BODIES))
def test_no_endpoint_answers_500_to_deeply_nested_json(world, shape, alice):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    client = session_client(root)
    client.raise_request_exception = False
    reached = set()
    for pattern in _api_patterns():
        for method in _writes(pattern):
            url = _url(pattern, world)
            last_audit = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
            response = getattr(client, method)(url, BODIES[shape], content_type="application/json")
            assert response.status_code != 500, (method, url, response.content[:300])
            if response.status_code == 400 and response.json().get("code") == "parse_error":
                assert "nests more than 32 levels" in assert_json_error(response, 400)["message"]
                written = AuditEvent.objects.filter(pk__gt=last_audit).values_list("verb", flat=True)
                assert list(written) == [], (method, url)  # refused whole: nothing written
                reached.add(pattern.name)
    assert REVIEWED <= reached, REVIEWED - reached


def test_a_token_gets_the_same_answer(api, world):
    response = api.patch("/api/v1/projects/hill/runs/r1", BODIES["objects"], content_type="application/json")
    assert_json_error(response, 400, "parse_error")
