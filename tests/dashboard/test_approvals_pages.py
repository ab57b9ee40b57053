"""The second-person rule on the pages (issue 33): the queue's bulk form (bounded, bad input refused,
back to the same queue page), the listing of approvals given by one person before the rule held on
the queue and the settings page, and the catch-up progress beside the auto-verify setting."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Project, Submission
from smrweb.tracking.services import submissions as lifecycle

pytestmark = pytest.mark.django_db


def auto_verified(project, value=0.5) -> Submission:
    services.ingest_events(project, "r1", parse_events(json.dumps([{"type": "score", "score": value}])))
    sub = Submission.objects.filter(project=project).order_by("-id").first()
    lifecycle.request_verification(sub, by=None, automatic=True)
    return lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "", "exited 0"))


def flashes(response) -> list[str]:
    return [m.message for m in response.wsgi_request._messages]


def test_bulk_from_the_queue_acts_and_comes_back_to_the_same_page(client, alice, bob, project):
    services.update_project(project, require_second_reviewer=True, by=alice)
    subs = [auto_verified(project, 0.1 * i) for i in range(1, 4)]
    client.force_login(bob)
    answer = client.post(
        "/projects/hill/review/bulk",
        {"action": "approve", "ids": [s.pk for s in subs], "back": "status=verified&page=1&evil=1"},
    )
    assert answer.status_code == 302 and answer["Location"] == "/projects/hill/review/?status=verified&page=1"
    assert flashes(answer) == ["3 approvals recorded (waiting for a second approver)."]
    assert all(lifecycle.approvals(Submission.objects.get(pk=s.pk)).by == ("bob",) for s in subs)
    page = client.get("/projects/hill/review/?status=verified&all=1").content.decode()
    assert page.count('data-row-approvals="1/2"') == 3 and "someone other than bob" in page


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"action": "approve", "ids": ["1x"]}, "Select submissions by their numbers."),
        ({"action": "approve"}, "Name at least one submission."),
        ({"action": "drop", "ids": ["1"]}, "One of verify, approve."),
        ({"action": "verify", "ids": [str(i) for i in range(1, 202)]}, "At most 200 submissions at a time"),
    ],
)
def test_bulk_bad_input_says_why_and_changes_nothing(client, bob, project, data, said):
    sub = auto_verified(project)
    client.force_login(bob)
    answer = client.post("/projects/hill/review/bulk", data)
    assert answer.status_code == 302 and flashes(answer)[0].startswith(said)
    assert Submission.objects.get(pk=sub.pk).status == "verified" and not sub.reviews.exists()


def test_viewers_cannot_bulk(client, victor, project):
    sub = auto_verified(project)
    client.force_login(victor)
    assert (
        client.post("/projects/hill/review/bulk", {"action": "approve", "ids": [sub.pk]}).status_code == 403
    )
    assert "data-bulk-form" not in client.get("/projects/hill/review/").content.decode()


def test_approvals_given_alone_are_listed_on_the_queue_and_the_settings(client, alice, bob, project):
    one = auto_verified(project)
    lifecycle.review(one, by=alice, verdict="approve")
    client.force_login(alice)
    assert "data-approved-alone-list" not in client.get("/projects/hill/review/").content.decode()
    services.update_project(project, require_second_reviewer=True, by=alice)
    queue = client.get("/projects/hill/review/").content.decode()
    assert (
        "Approved by one person before the rule held" in queue and f'data-approved-alone="{one.pk}"' in queue
    )
    settings_page = client.get("/projects/hill/settings/").content.decode()
    assert (
        "data-approved-alone-count" in settings_page
        and "1 submission approved by one person" in settings_page
    )
    detail = client.get(f"/projects/hill/submissions/{one.pk}/").content.decode()
    assert "data-approved-alone" in detail
    assert Submission.objects.get(pk=one.pk).status == "approved"  # listed, not changed


def test_the_settings_page_shows_the_catch_up_progress(client, alice, project):
    for i in range(3):
        services.ingest_events(project, "r1", parse_events(json.dumps([{"type": "score", "score": i}])))
    services.update_project(project, auto_verify=True, by=alice)
    lifecycle.catch_up_verifications(project.pk, limit=1)
    client.force_login(alice)
    page = client.get("/projects/hill/settings/").content.decode()
    assert 'data-catch-up="1/3"' in page and "<b>1 of 3</b> queued or done" in page
    Project.objects.filter(pk=project.pk).update(auto_verify=False)
    assert "data-catch-up" not in client.get("/projects/hill/settings/").content.decode()
