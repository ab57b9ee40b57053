"""The second-person rule over the API (issue 33): the submission's `approvals`, and POST
…/submissions/bulk with per-id outcomes, its bound and bad input as 400s."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Review, Role, Submission, SubmissionStatus
from smrweb.tracking.services import submissions as lifecycle
from tests.api.helpers import assert_json_error, session_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
S = SubmissionStatus
BASE = "/api/v1/projects/hill"


def auto_verified(project, value=0.5) -> Submission:
    services.ingest_events(project, "r1", parse_events(json.dumps([{"type": "score", "score": value}])))
    sub = Submission.objects.filter(project=project).order_by("-id").first()
    lifecycle.request_verification(sub, by=None, automatic=True)
    return lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "", "exited 0"))


@pytest.fixture
def rule(project, alice):
    return services.update_project(project, require_second_reviewer=True, by=alice)


def test_the_submission_says_how_many_approvals_count_and_who_is_still_needed(rule, alice, bob):
    sub = auto_verified(rule)
    detail = session_client(bob).get(f"{BASE}/submissions/{sub.pk}").json()
    assert detail["approvals"] == {
        "counted": 0,
        "needed": 2,
        "by": [],
        "still_needed": "two approvals by different people",
    }
    answer = session_client(alice).post(f"{BASE}/submissions/{sub.pk}/approve", {}, format="json").json()
    assert answer["counted"] is True and answer["submission"]["status"] == "verified"
    assert answer["submission"]["approvals"] == {
        "counted": 1,
        "needed": 2,
        "by": ["alice"],
        "still_needed": "one more approval by someone other than alice",
    }
    again = session_client(alice).post(f"{BASE}/submissions/{sub.pk}/approve", {}, format="json").json()
    assert again["counted"] is False and again["submission"]["approvals"]["counted"] == 1
    done = session_client(bob).post(f"{BASE}/submissions/{sub.pk}/approve", {}, format="json").json()
    assert done["submission"]["status"] == "approved"
    assert done["submission"]["approvals"] == {
        "counted": 2,
        "needed": 2,
        "by": ["alice", "bob"],
        "still_needed": "",
    }


def test_the_schema_documents_approvals_and_the_bulk_endpoint(client):
    schema = client.get("/api/schema/?format=json").json()
    fields = schema["components"]["schemas"]["Approvals"]["properties"]
    assert set(fields) == {"counted", "needed", "by", "still_needed"}
    assert "approvals" in schema["components"]["schemas"]["Lifecycle"]["properties"]
    bulk = schema["paths"]["/api/v1/projects/{slug}/submissions/bulk"]["post"]
    assert bulk["operationId"] == "submission_bulk" and "200" in bulk["description"]


def test_bulk_approve_answers_per_id(rule, alice, bob):
    dave = UserFactory(username="dave")
    services.add_member(rule, dave, role=Role.REVIEWER)
    mine = auto_verified(rule, 0.1)
    lifecycle.request_verification(
        Submission.objects.create(
            project=rule, run=mine.run, event_id="x", score=0.2, ts=mine.ts, status=S.INVALID
        ),
        by=bob,
    )  # bob proposes it (re-verifying an invalid one)
    proposed = Submission.objects.get(event_id="x")
    lifecycle.record_verification(proposed.pk, lifecycle.VerificationResult("passed", 0, "", "ok"))
    half = auto_verified(rule, 0.3)
    lifecycle.review(half, by=dave, verdict="approve")
    body = {"action": "approve", "ids": [mine.pk, proposed.pk, half.pk, 999999]}
    answer = session_client(bob).post(f"{BASE}/submissions/bulk", body, format="json")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    outcomes = {r["id"]: (r["outcome"], r["why"]) for r in data["results"]}
    assert outcomes == {
        mine.pk: ("approval_recorded", ""),
        proposed.pk: ("skipped", "proposed"),
        half.pk: ("approved", ""),
        999999: ("skipped", "missing"),
    }
    assert data["summary"].startswith("1 approved, 1 approval recorded")
    assert Submission.objects.get(pk=half.pk).status == S.APPROVED
    assert not Review.objects.filter(submission=proposed).exists()
    assert AuditEvent.objects.filter(verb="review.approval_recorded", object_id=str(mine.pk)).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "approve", "ids": list(range(1, 202))}, "ids"),  # past the bound
        ({"action": "approve", "ids": []}, "ids"),
        ({"action": "approve", "ids": ["x"]}, "ids"),
        ({"action": "approve", "ids": [-1]}, "ids"),
        ({"action": "approve", "ids": 5}, "ids"),
        ({"action": "delete", "ids": [1]}, "action"),
        ({"ids": [1]}, "action"),
    ],
)
def test_bulk_bad_input_is_a_400_with_the_field(project, bob, body, field):
    answer = assert_json_error(session_client(bob).post(f"{BASE}/submissions/bulk", body, format="json"), 400)
    assert [e["field"].split(".")[0] for e in answer["errors"]] == [field]


def test_bulk_at_the_bound_is_accepted(project, bob):
    answer = session_client(bob).post(
        f"{BASE}/submissions/bulk", {"action": "verify", "ids": list(range(1, 201))}, format="json"
    )
    assert answer.status_code == 200 and len(answer.json()["results"]) == 200


def test_bulk_is_a_persons_action(project, victor, carol, api, anon_api):
    body = {"action": "verify", "ids": [1]}
    assert_json_error(session_client(victor).post(f"{BASE}/submissions/bulk", body, format="json"), 403)
    assert_json_error(api.post(f"{BASE}/submissions/bulk", body, format="json"), 403)
    assert session_client(carol).post(f"{BASE}/submissions/bulk", body, format="json").status_code == 404
    assert anon_api.post(f"{BASE}/submissions/bulk", body, format="json").status_code in (401, 403)
