"""Issue 33 §5 over the API: the rule fields delivery, digest_minutes and include_candidates (defaults,
bad input as a 400 naming the field, nothing made), duplicate rules refused naming the existing one, and
the person's inbox filtered by kind and project and marked read per filter (a token has no inbox)."""

from __future__ import annotations

import pytest

from smrweb.tracking import services
from smrweb.tracking.models import AlertRule
from tests.api.helpers import assert_json_error, session_client
from tests.tracking.test_alerts import evaluate, push
from tests.tracking.test_inbox import needs_review

pytestmark = pytest.mark.django_db
RULES = "/api/v1/projects/hill/alert-rules/"


def test_rule_fields_default_by_trigger_and_are_answered(alice, project):
    api = session_client(alice)
    review = api.post(
        RULES, {"trigger": "submission.needs_review", "channel": "email", "target": "r@example.com"}
    )
    assert review.status_code == 201, review.content
    assert (review.json()["delivery"], review.json()["digest_minutes"]) == ("digest", 30)
    failed = api.post(
        RULES, {"trigger": "run.failed", "channel": "email", "target": "r@example.com"}, format="json"
    )
    assert (failed.json()["delivery"], failed.json()["digest_minutes"]) == ("immediate", None)
    best = api.post(
        RULES,
        {"trigger": "score.new_best", "channel": "inbox", "recipient": "alice", "include_candidates": True},
        format="json",
    )
    assert best.status_code == 201 and best.json()["include_candidates"] is True
    hourly = api.post(
        RULES,
        {
            "trigger": "submission.approved",
            "channel": "email",
            "target": "r@example.com",
            "digest_minutes": 60,
        },
        format="json",
    )
    assert (hourly.json()["delivery"], hourly.json()["digest_minutes"]) == ("digest", 60)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"channel": "inbox", "recipient": "alice", "delivery": "digest"}, "delivery"),
        ({"channel": "email", "target": "r@example.com", "delivery": "weekly"}, "delivery"),
        ({"channel": "email", "target": "r@example.com", "digest_minutes": 1}, "digest_minutes"),
        ({"channel": "email", "target": "r@example.com", "digest_minutes": "often"}, "digest_minutes"),
        ({"channel": "email", "target": "r@example.com", "include_candidates": True}, "include_candidates"),
        (
            {"channel": "email", "target": "r@example.com", "include_candidates": "perhaps"},
            "include_candidates",
        ),
    ],
)
def test_a_bad_rule_field_is_a_400_naming_it_and_nothing_is_made(alice, project, body, field):
    answer = session_client(alice).post(RULES, {"trigger": "submission.needs_review", **body}, format="json")
    error = assert_json_error(answer, 400)
    assert field in answer.content.decode() and error
    assert not AlertRule.objects.exists()


def test_a_duplicate_rule_is_a_400_naming_the_existing_one(alice, project):
    api = session_client(alice)
    body = {"trigger": "run.stalled", "channel": "email", "target": "ops@example.com"}
    first = api.post(RULES, body, format="json").json()
    again = api.post(RULES, {**body, "target": "OPS@example.com"}, format="json")
    error = assert_json_error(again, 400, "duplicate_rule")
    assert error["errors"][0]["field"] == "non_field_errors"
    assert f"rule #{first['id']}" in error["message"]
    assert AlertRule.objects.count() == 1


def test_the_inbox_filters_by_kind_and_project_and_marks_read_per_filter(alice, bob, project, token):
    services.create_alert_rule(
        project, by=alice, trigger="submission.needs_review", channel="inbox", recipient="alice"
    )
    services.create_alert_rule(project, by=alice, trigger="run.failed", channel="inbox", recipient="alice")
    needs_review(project, bob, 3)
    evaluate(push(project, "f", {"type": "state", "state": "failed", "failure": {"family": "oom"}}))
    api = session_client(alice)
    everything = api.get("/api/v1/inbox").json()
    assert everything["count"] == 4
    review = api.get("/api/v1/inbox", {"kind": "submission.needs_review", "project": "hill"}).json()
    assert review["count"] == 3 and {r["trigger"] for r in review["results"]} == {"submission.needs_review"}
    assert {r["project"] for r in review["results"]} == {"hill"}
    seen = review["results"][0]["id"]
    marked = api.post("/api/v1/inbox/read", {"kind": "submission.needs_review", "upto": seen}, format="json")
    assert marked.status_code == 200 and marked.json() == {"marked": 3}
    assert api.get("/api/v1/inbox", {"unread": "1"}).json()["count"] == 1
    # Bad filters: a 400 naming the field; a token has no inbox.
    assert_json_error(api.get("/api/v1/inbox", {"kind": "pager"}), 400)
    assert "project" in api.get("/api/v1/inbox", {"project": "nope"}).content.decode()
    bad = api.post("/api/v1/inbox/read", {"ids": [1], "kind": "mention"}, format="json")
    assert assert_json_error(bad, 400)["errors"][0]["field"] == "ids"
    assert_json_error(api.post("/api/v1/inbox/read", {"colour": "red"}, format="json"), 400)
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert_json_error(client.get("/api/v1/inbox"), 403)
