"""The submission loop over the API: every action by role (viewer, reviewer, admin, project token,
another project's token, anonymous), bad input as field errors, illegal moves as 409, one rollback."""

from __future__ import annotations

import io
import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Rollback, Submission, SubmissionStatus, VerificationOutcome
from smrweb.tracking.services import submissions as lifecycle
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db
S = SubmissionStatus
BASE = "/api/v1/projects/hill"


def scored(project, value=0.5, run="r1") -> Submission:
    artifact, _ = services.store_artifact(
        project, run, path="submission/optimizer.py", content=io.BytesIO(f"ok {value}".encode())
    )
    services.ingest_events(
        project,
        run,
        parse_events(json.dumps([{"type": "score", "score": value, "artifact": artifact.blob.sha256}])),
    )
    return Submission.objects.filter(project=project).order_by("-id").first()


def at(sub, status):
    Submission.objects.filter(pk=sub.pk).update(status=status)
    sub.refresh_from_db()
    return sub


ACTIONS = [
    ("verify", S.CANDIDATE, {}),
    ("approve", S.VERIFIED, {"comment": "ok"}),
    ("reject", S.VERIFIED, {"comment": "no"}),
    ("uploaded", S.APPROVED, {}),
    ("arena-result", S.UPLOADED, {"rank": 3, "arena_score": 1200.0}),
    ("refused", S.UPLOADED, {"reason": "over the arena's size limit"}),
]


@pytest.mark.parametrize(("action", "status", "body"), ACTIONS)
def test_viewers_tokens_and_outsiders_are_refused_every_action(
    action, status, body, project, victor, carol, api, anon_api, other_project
):
    sub = at(scored(project), status)
    url = f"{BASE}/submissions/{sub.pk}/{action}"
    assert_json_error(session_client(victor).post(url, body, format="json"), 403)
    token_answer = assert_json_error(api.post(url, body, format="json"), 403)
    assert "reviewer role" in token_answer["message"]
    assert session_client(carol).post(url, body, format="json").status_code == 404
    assert anon_api.post(url, body, format="json").status_code in (401, 403)
    other_token = services.create_api_token(other_project, name="other")[1]
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert_json_error(anon_api.post(url, body, format="json"), 403)
    sub.refresh_from_db()
    assert sub.status == status and not sub.transitions.exists()


def test_a_reviewer_drives_the_loop_over_the_api(project, bob, alice, monkeypatch):
    from smrweb import tasks

    monkeypatch.setattr(
        tasks.verify_submission, "delay_on_commit", lambda pk: None
    )  # the worker is tested elsewhere
    sub = scored(project, 0.7)
    reviewer = session_client(bob)
    answer = reviewer.post(f"{BASE}/submissions/{sub.pk}/verify")
    assert answer.status_code == 202 and answer.json()["status"] == "verifying"
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "exited 0")
    )
    answer = session_client(alice).post(
        f"{BASE}/submissions/{sub.pk}/approve", {"comment": "good"}, format="json"
    )
    assert answer.json()["counted"] is True and answer.json()["submission"]["status"] == "approved"
    assert reviewer.post(f"{BASE}/submissions/{sub.pk}/uploaded").json()["status"] == "uploaded"
    result = reviewer.post(
        f"{BASE}/submissions/{sub.pk}/arena-result",
        {"rank": 4, "arena_score": 1300.5, "note": "close"},
        format="json",
    )
    assert result.status_code == 201
    assert result.json() == {
        "id": result.json()["id"],
        "rank": 4,
        "arena_score": 1300.5,
        "delta": None,
        "delta_best": None,
        "rank_delta": None,
        "better": None,
        "note": "close",
    }
    history = reviewer.get(f"{BASE}/submissions/{sub.pk}").json()
    assert [(t["from_status"], t["to_status"], t["by_label"]) for t in history["transitions"]] == [
        ("candidate", "verifying", "bob"),
        ("verifying", "verified", "system"),
        ("verified", "approved", "alice"),
        ("approved", "uploaded", "bob"),
        ("uploaded", "ranked", "bob"),
    ]
    assert history["proposed_by"] == "bob"


def test_illegal_moves_are_409_with_the_next_step(project, bob):
    sub = scored(project)
    body = assert_json_error(
        session_client(bob).post(f"{BASE}/submissions/{sub.pk}/uploaded"), 409, "illegal_transition"
    )
    assert "next: verify it first" in body["message"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"rank": 0},
        {"rank": "x"},
        {"arena_score": "NaN"},
        {"note": "x" * 5001},
        {"rank": None, "arena_score": None},
    ],
)
def test_bad_arena_results_are_field_errors_and_write_nothing(project, bob, body):
    sub = at(scored(project), S.UPLOADED)
    assert_json_error(
        session_client(bob).post(f"{BASE}/submissions/{sub.pk}/arena-result", body, format="json"), 400
    )
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED and not sub.arena_results.exists()


def test_rollback_over_the_api_creates_one_and_returns_the_open_one_after(project, bob, monkeypatch):
    from smrweb import tasks

    monkeypatch.setattr(tasks.dispatch_rollback, "delay_on_commit", lambda pk: None)
    project.rollback_webhook_url = "https://harness.example/rollback"
    project.save()
    sub = scored(project)
    client = session_client(bob)
    first = client.post(
        f"{BASE}/runs/r1/rollback", {"submission": sub.pk, "reason": "regressed"}, format="json"
    )
    assert first.status_code == 202 and first.json()["status"] == "requested"
    again = client.post(f"{BASE}/runs/r1/rollback", {"submission": sub.pk}, format="json")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert Rollback.objects.count() == 1


@pytest.mark.parametrize("body", [{}, {"submission": 999999}, {"checkpoint": "nope"}, {"submission": "x"}])
def test_rollback_targets_that_do_not_exist_are_field_errors(project, bob, body):
    project.rollback_webhook_url = "https://harness.example/rollback"
    project.save()
    scored(project)
    answer = session_client(bob).post(f"{BASE}/runs/r1/rollback", body, format="json")
    assert answer.status_code in (400, 409)
    assert answer.json()["message"]
    assert not Rollback.objects.exists()


def test_viewers_and_tokens_cannot_roll_back(project, victor, api):
    project.rollback_webhook_url = "https://harness.example/rollback"
    project.save()
    sub = scored(project)
    assert_json_error(
        session_client(victor).post(f"{BASE}/runs/r1/rollback", {"submission": sub.pk}, format="json"), 403
    )
    token_answer = assert_json_error(
        api.post(f"{BASE}/runs/r1/rollback", {"submission": sub.pk}, format="json"), 403
    )
    assert "reviewer role" in token_answer["message"]
    assert not Rollback.objects.exists()


def test_a_rejection_needs_a_reason_and_an_upload_link_must_be_http(project, bob):
    reviewer = session_client(bob)
    sub = at(scored(project), S.VERIFIED)
    body = assert_json_error(
        reviewer.post(f"{BASE}/submissions/{sub.pk}/reject", {"comment": " "}, format="json"), 400
    )
    assert body["errors"][0]["field"] == "comment"
    sub.refresh_from_db()
    assert sub.status == S.VERIFIED and not sub.reviews.exists()
    sub = at(sub, S.APPROVED)
    body = assert_json_error(
        reviewer.post(
            f"{BASE}/submissions/{sub.pk}/uploaded", {"arena_ref": "ftp://arena.example/81"}, format="json"
        ),
        400,
    )
    assert body["errors"][0]["field"] == "arena_ref"
    ok = reviewer.post(
        f"{BASE}/submissions/{sub.pk}/uploaded", {"arena_ref": "https://arena.example/s/81"}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["arena_ref"] == "https://arena.example/s/81"
