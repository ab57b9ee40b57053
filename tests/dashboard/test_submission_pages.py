"""The submission page, its actions by role, form errors and the review queue."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Submission, SubmissionStatus, VerificationOutcome
from smrweb.tracking.services import submissions as lifecycle

pytestmark = pytest.mark.django_db
S = SubmissionStatus


def scored(project, value=0.5, run="r1") -> Submission:
    services.ingest_events(project, run, parse_events(json.dumps([{"type": "score", "score": value}])))
    return Submission.objects.filter(project=project).order_by("-id").first()


def url(sub, action=None):
    base = f"/projects/hill/submissions/{sub.pk}/"
    return base + action if action else base


def at(sub, status):
    Submission.objects.filter(pk=sub.pk).update(status=status)
    sub.refresh_from_db()
    return sub


def test_page_shows_status_lifecycle_and_history(client_alice, project, bob):
    sub = lifecycle.request_verification(scored(project, 0.75), by=bob)
    lifecycle.record_verification(
        sub.pk,
        lifecycle.VerificationResult(VerificationOutcome.FAILED, 1, "layer <3> has 300k params", "exited 1"),
    )
    body = client_alice.get(url(sub)).content.decode()
    assert 'data-status="invalid"' in body
    assert 'data-outcome="failed"' in body and "exit code 1" in body
    assert "layer &lt;3&gt; has 300k params" in body  # validator output escaped
    assert '<li class="now bad" aria-current="step">invalid</li>' in body
    assert body.count('<tr><td class="when"') == 2  # two transitions in the history
    assert "Verify again" in body


@pytest.mark.parametrize(
    ("status", "action"),
    [
        (S.CANDIDATE, "verify"),
        (S.VERIFIED, "approve"),
        (S.VERIFIED, "reject"),
        (S.APPROVED, "upload"),
        (S.UPLOADED, "record"),
    ],
)
def test_viewers_are_refused_every_action_and_nothing_changes(client, victor, project, status, action):
    sub = at(scored(project), status)
    client.force_login(victor)
    response = client.post(url(sub, action), {"rank": 3, "arena_score": 10})
    assert response.status_code == 403
    sub.refresh_from_db()
    assert sub.status == status and not sub.transitions.exists()


def test_outsiders_get_404_on_pages_and_actions(client, carol, project):
    sub = scored(project)
    client.force_login(carol)
    assert client.get(url(sub)).status_code == 404
    assert client.post(url(sub, "verify")).status_code == 404
    assert client.get("/projects/hill/review/").status_code == 404


def test_approve_reject_upload_record_through_the_page(client_alice, project, bob):
    sub = lifecycle.request_verification(scored(project), by=bob)
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "", "ok")
    )
    response = client_alice.post(url(sub, "approve"), {"comment": "solid"}, follow=True)
    assert "Submission approved." in response.content.decode()
    client_alice.post(url(sub, "upload"))
    response = client_alice.post(
        url(sub, "record"), {"rank": "7", "arena_score": "1201.5", "note": "top 10"}, follow=True
    )
    sub.refresh_from_db()
    assert sub.status == S.RANKED
    body = response.content.decode()
    assert "Arena result recorded." in body and "rank 7" in body and "top 10" in body


def test_an_illegal_action_comes_back_as_a_message_not_an_error(client_alice, project):
    sub = scored(project)
    response = client_alice.post(url(sub, "upload"), follow=True)
    assert response.status_code == 200
    assert (
        "A candidate submission cannot become uploaded; next: verify it first." in response.content.decode()
    )
    sub.refresh_from_db()
    assert sub.status == S.CANDIDATE


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"rank": "0"},
        {"rank": "abc"},
        {"arena_score": "nan"},
        {"arena_score": "inf"},
        {"arena_score": "1e301"},
        {"rank": "99999999999"},
    ],
)
def test_bad_arena_results_are_form_errors_and_write_nothing(client_alice, project, data):
    sub = at(scored(project), S.UPLOADED)
    response = client_alice.post(url(sub, "record"), data)
    assert response.status_code == 400
    assert 'class="form-error"' in response.content.decode()
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED and not sub.arena_results.exists()


def test_an_unknown_action_is_refused(client_alice, project):
    sub = scored(project)
    response = client_alice.post(url(sub, "delete"), follow=True)
    assert "Unknown action" in response.content.decode()


def test_verifying_page_polls_and_answers_204_when_nothing_changed(client_alice, project, bob):
    import re

    sub = lifecycle.request_verification(scored(project), by=bob)
    body = client_alice.get(url(sub), headers={"HX-Request": "true"}).content.decode()
    assert 'hx-trigger="every 2s' in body
    version = re.search(r'"X-Smrweb-Version": "([0-9a-f]+)"', body).group(1)
    assert (
        client_alice.get(url(sub), headers={"HX-Request": "true", "X-Smrweb-Version": version}).status_code
        == 204
    )
    lifecycle.record_progress(sub.pk, "layer 2 ok")
    changed = client_alice.get(url(sub), headers={"HX-Request": "true", "X-Smrweb-Version": version})
    assert changed.status_code == 200 and "layer 2 ok" in changed.content.decode()


def test_review_queue_page_lists_waiting_submissions_best_first(client_alice, project):
    for value in (0.2, 0.9, 0.5):
        scored(project, value)
    body = client_alice.get("/projects/hill/review/?all=1").content.decode()
    assert body.index(">0.9<") < body.index(">0.5<") < body.index(">0.2<")


def test_empty_review_queue_says_so(client_alice, project):
    assert "Nothing waiting" in client_alice.get("/projects/hill/review/").content.decode()


def test_an_unreachable_queue_is_a_warning_and_the_request_is_redispatched_later(
    client_alice, project, monkeypatch
):
    from datetime import timedelta

    from django.utils import timezone
    from kombu.exceptions import OperationalError

    from smrweb import tasks

    def down(*args):
        raise OperationalError("Error 111 connecting to redis")

    monkeypatch.setattr(tasks.verify_submission, "delay_on_commit", down)
    sub = scored(project)
    response = client_alice.post(url(sub, "verify"), follow=True)
    assert response.status_code == 200
    assert "worker queue is unreachable" in response.content.decode()
    sub.refresh_from_db()
    assert sub.status == S.VERIFYING  # recorded: nothing is lost

    queued = []
    monkeypatch.setattr(tasks.verify_submission, "delay", queued.append)
    assert tasks.redispatch_stale_actions()["verifications"] == []  # not stale yet
    Submission.objects.filter(pk=sub.pk).update(updated=timezone.now() - timedelta(minutes=5))
    tasks.redispatch_stale_actions()
    assert queued == [sub.pk]


def test_review_queue_queries_do_not_grow_with_the_queue(
    client_alice, project, django_assert_max_num_queries
):
    for i in range(3):
        scored(project, i / 10, run=f"a{i}")
    with django_assert_max_num_queries(12) as few:
        client_alice.get("/projects/hill/review/")
    for i in range(30):
        scored(project, i / 100, run=f"b{i}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client_alice.get("/projects/hill/review/").status_code == 200


def test_the_verification_card_does_not_repeat_the_exit_code(client_alice, project, bob):
    sub = scored(project)
    lifecycle.request_verification(sub, by=bob)
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.FAILED, 1, "FAIL x", "exited 1")
    )
    card = client_alice.get(url(sub)).content.decode().split('id="verification"')[1].split("</section>")[0]
    assert "exit code 1" in card and "exited 1" not in card and "data-verification-reason" not in card
