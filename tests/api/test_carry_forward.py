"""`GET /api/v1/projects/{slug}/knowledge/carry-forward?n=N`: the block as data and text, with the same
access rules as the other project reads, and n checked."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from smrweb.tracking import queries, services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import KnowledgeKind, Submission, VerificationOutcome
from smrweb.tracking.services import handoff, knowledge
from smrweb.tracking.services import submissions as lifecycle
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/projects/hill/knowledge/carry-forward"


def scored(project, value, run="r1") -> Submission:
    services.ingest_events(project, run, parse_events(json.dumps([{"type": "score", "score": value}])))
    return Submission.objects.filter(project=project).order_by("-id").first()


def test_the_answer_has_best_failed_arena_and_the_text(api, project, alice, bob):
    broken = lifecycle.request_verification(scored(project, 0.99), by=bob)
    lifecycle.record_verification(
        broken.pk, lifecycle.VerificationResult(VerificationOutcome.FAILED, 1, "", "exited 1")
    )
    good = scored(project, 0.9, run="r2")
    good = lifecycle.request_verification(good, by=bob)
    good = lifecycle.record_verification(
        good.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "", "ok")
    )
    good = handoff.mark_uploaded(lifecycle.review(good, by=alice, verdict="approve").submission, by=alice)
    handoff.record_arena_result(good, by=alice, rank=12, arena_score=1234.0, note="beat the baseline")
    knowledge.add_entry(project, by=bob, kind=KnowledgeKind.FAILED_APPROACH, title="Random search")

    response = api.get(URL)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"project", "best", "failed", "arena", "approaches", "text"}
    assert body["project"] == "hill"
    best = body["best"]
    assert (best["submission_id"], best["score"], best["run"], best["status"]) == (
        good.pk,
        0.9,
        "r2",
        "ranked",
    )
    assert best["arena"]["rank"] == 12 and best["arena"]["note"] == "beat the baseline"
    assert [(f["reasons"], f["score"], f["title"]) for f in body["failed"]] == [
        (["failed_approach"], None, "Random search"),
        (["invalid"], 0.99, f"submission #{broken.pk}"),
    ]
    assert body["failed"][1]["why"] == "verification failed (exit 1): exited 1"
    arena = body["arena"]
    assert (arena["source"], arena["rank"], arena["arena_score"], arena["submission_id"]) == (
        "result",
        12,
        1234.0,
        good.pk,
    )
    assert body["text"] == queries.carry_forward(project).text


def test_an_empty_project_answers_nulls_and_a_text_that_says_so(api, project):
    body = api.get(URL).json()
    assert (body["best"], body["failed"], body["arena"]) == (None, [], None)
    assert "no valid score yet" in body["text"] and "none recorded." in body["text"]


def test_n_picks_how_many_failed_approaches(api, project, bob):
    for i in range(7):
        knowledge.add_entry(project, by=bob, kind=KnowledgeKind.FAILED_APPROACH, title=f"idea {i}")
    assert len(api.get(URL).json()["failed"]) == 3
    assert [f["title"] for f in api.get(URL, {"n": 5}).json()["failed"]] == [
        f"idea {i}" for i in (6, 5, 4, 3, 2)
    ]
    assert len(api.get(URL, {"n": 20}).json()["failed"]) == 7


@pytest.mark.parametrize("n", ["0", "21", "-1", "abc", "1.5", ""])
def test_a_bad_n_is_a_400_naming_the_field(api, project, n):
    if n == "":
        assert api.get(URL, {"n": n}).status_code == 200  # empty means the default
        return
    body = assert_json_error(api.get(URL, {"n": n}), 400, "invalid")
    assert body["errors"] == [{"index": None, "field": "n", "message": body["message"]}]
    assert "between 1 and 20" in body["message"]


@pytest.mark.parametrize("username", ["alice", "bob", "victor"])
def test_every_member_may_read_it_with_a_session(project, username, request):
    assert session_client(request.getfixturevalue(username)).get(URL).status_code == 200


def test_an_outsider_cannot_tell_the_project_exists(project, carol):
    assert_json_error(session_client(carol).get(URL), 404, "not_found")
    assert_json_error(session_client(carol).get("/api/v1/projects/nope/knowledge/carry-forward"), 404)


def test_another_projects_token_is_refused_with_403(project, other_project):
    raw = services.create_api_token(other_project, name="theirs")[1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert_json_error(client.get(URL), 403)
    assert client.get("/api/v1/projects/other/knowledge/carry-forward").status_code == 200


def test_no_credentials_is_401(anon_api, project):
    assert_json_error(anon_api.get(URL), 401, "not_authenticated")


def test_the_endpoint_is_in_the_schema(anon_api, db):
    schema = json.loads(anon_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    operation = schema["paths"]["/api/v1/projects/{slug}/knowledge/carry-forward"]["get"]
    assert [p["name"] for p in operation["parameters"] if p["in"] == "query"] == ["n"]
    assert {"200", "400", "401", "403", "404"} <= set(operation["responses"])
    component = schema["components"]["schemas"]["CarryForward"]
    assert set(component["required"]) == {"project", "best", "failed", "arena", "approaches", "text"}
