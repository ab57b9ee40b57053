"""The arena's answers beyond a rank (issue 39, item 2): an upload the arena refused (with its reason,
audited, out of the project's numbers, carried forward as a failed approach, uploadable again), and the
arena's daily upload limit counted in its own zone from its own reset time, with a confirmation to go
over it — in the domain, on the submission and review pages, and over the API."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError

from smrweb.tracking import queries
from smrweb.tracking.errors import IllegalTransition, InvalidInput, NotAllowed, OverUploadLimit
from smrweb.tracking.models import (
    AuditEvent,
    Scenario,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
    VerificationOutcome,
)
from smrweb.tracking.models.scenario import arena_zone
from smrweb.tracking.services import handoff
from smrweb.tracking.services import submissions as lifecycle
from tests.api.helpers import assert_json_error, session_client
from tests.api.test_submission_loop_api import scored

pytestmark = pytest.mark.django_db
S = SubmissionStatus
UTC = dt.UTC


def approved(project, alice, bob, value: float, run: str = "r1") -> Submission:
    sub = scored(project, value, run)
    lifecycle.request_verification(sub, by=bob)
    sub = lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "exited 0")
    )
    return lifecycle.review(sub, by=alice, verdict="approve").submission


def limit(project, n, zone="UTC", resets=dt.time(0, 0)):
    scenario = project.scenario
    scenario.arena_daily_limit, scenario.arena_timezone, scenario.arena_resets_at = n, zone, resets
    scenario.full_clean()
    scenario.save()
    project.refresh_from_db()


# --- refused -------------------------------------------------------------------------------------------


def test_a_refused_upload_leaves_the_numbers_is_audited_and_carried_forward(project, alice, bob, victor):
    low = approved(project, alice, bob, 0.4, run="r1")
    high = handoff.mark_uploaded(approved(project, alice, bob, 0.9, run="r2"), by=alice, arena_ref="A-17")
    assert queries.carry_forward(project).best.score == 0.9

    with pytest.raises(InvalidInput) as empty:
        handoff.record_refusal(high, by=bob, reason="   ")
    assert empty.value.field == "reason"
    high.refresh_from_db()
    assert high.status == S.UPLOADED  # nothing half-written
    with pytest.raises(NotAllowed):
        handoff.record_refusal(high, by=victor, reason="no")

    high = handoff.record_refusal(high, by=bob, reason="The file is over the arena's 50 MB limit.")
    assert high.status == S.REFUSED
    move = SubmissionTransition.objects.get(submission=high, to_status=S.REFUSED)
    assert (move.from_status, move.by_label, move.reason) == (
        S.UPLOADED,
        "bob",
        "The file is over the arena's 50 MB limit.",
    )
    audit = AuditEvent.objects.get(verb="submission.refused")
    assert audit.project == project and audit.actor == bob
    assert audit.detail["reason"] == "The file is over the arena's 50 MB limit."
    assert audit.detail["from_status"] == S.UPLOADED and audit.detail["arena_ref"] == "A-17"

    carried = queries.carry_forward(project)
    assert carried.best.score == 0.4 and carried.best.submission_id == low.pk  # no longer the best
    failed = [f for f in carried.failed if f.submission_id == high.pk]
    assert len(failed) == 1 and failed[0].reasons == ["refused"]
    assert "refused by" in failed[0].why and "over the arena's 50 MB limit" in failed[0].why
    assert "over the arena's 50 MB limit" in carried.text

    again = handoff.mark_uploaded(high, by=alice, arena_ref="A-18")  # fixed: uploaded again
    assert again.status == S.UPLOADED and again.arena_ref == "A-18"
    assert queries.carry_forward(project).best.score == 0.9


def test_only_an_uploaded_submission_can_be_refused(project, alice, bob):
    sub = approved(project, alice, bob, 0.5)
    with pytest.raises(IllegalTransition) as early:
        handoff.record_refusal(sub, by=bob, reason="refused")
    assert "mark it uploaded" in early.value.message
    ranked = handoff.mark_uploaded(sub, by=alice)
    handoff.record_arena_result(ranked, by=alice, rank=3, arena_score=None)
    ranked.refresh_from_db()
    with pytest.raises(IllegalTransition):
        handoff.record_refusal(ranked, by=bob, reason="refused")
    assert not AuditEvent.objects.filter(verb="submission.refused").exists()


# --- the daily limit -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "zone", "resets", "start", "next_start"),
    [
        # 06:00 in New York is 11:00 UTC in winter: at 10:59 UTC the day began yesterday.
        ("2026-01-15T10:59:00+00:00", "America/New_York", dt.time(6), "2026-01-14T06:00", "2026-01-15T06:00"),
        ("2026-01-15T11:00:00+00:00", "America/New_York", dt.time(6), "2026-01-15T06:00", "2026-01-16T06:00"),
        # Across the spring change (8 March 2026): the day is 23 hours, still from 06:00 to 06:00.
        ("2026-03-08T12:00:00+00:00", "America/New_York", dt.time(6), "2026-03-08T06:00", "2026-03-09T06:00"),
        ("2026-06-30T23:30:00+00:00", "Asia/Tokyo", dt.time(0), "2026-07-01T00:00", "2026-07-02T00:00"),
        ("2026-06-30T23:30:00+00:00", "UTC", dt.time(0), "2026-06-30T00:00", "2026-07-01T00:00"),
    ],
)
def test_the_arenas_day_is_counted_in_its_own_zone(project, now, zone, resets, start, next_start):
    limit(project, 3, zone, resets)
    begin, end = handoff.arena_day(project.scenario, dt.datetime.fromisoformat(now))
    tz = ZoneInfo(zone)
    assert begin == dt.datetime.fromisoformat(start).replace(tzinfo=tz)
    assert end == dt.datetime.fromisoformat(next_start).replace(tzinfo=tz)
    assert begin.tzinfo is end.tzinfo and end > begin
    assert begin <= dt.datetime.fromisoformat(now) < end


def test_uploads_are_counted_against_the_limit_and_going_over_needs_a_confirmation(
    project, other_project, alice, bob, carol
):
    limit(project, 2, "Europe/Paris", dt.time(9, 30))
    assert handoff.upload_allowance(project).left == 2
    first = handoff.mark_uploaded(approved(project, alice, bob, 0.1), by=alice)
    handoff.record_refusal(first, by=bob, reason="wrong format")  # the arena counted it all the same
    handoff.mark_uploaded(approved(project, alice, bob, 0.2), by=alice)
    allowance = handoff.upload_allowance(project)
    assert (allowance.limit, allowance.used, allowance.left, allowance.used_up) == (2, 2, 0, True)
    assert allowance.reset_clock == "09:30" and allowance.zone == "Europe/Paris"
    assert allowance.text().startswith("No uploads left today (resets 09:30 Europe/Paris, in ")

    third = approved(project, alice, bob, 0.3)
    with pytest.raises(OverUploadLimit) as over:
        handoff.mark_uploaded(third, by=alice)
    assert over.value.field == "confirm_over_limit" and over.value.status == 409
    assert "takes 2 uploads a day" in over.value.message and "09:30 Europe/Paris" in over.value.message
    third.refresh_from_db()
    assert third.status == S.APPROVED and not third.transitions.filter(to_status=S.UPLOADED).exists()

    third = handoff.mark_uploaded(third, by=alice, confirm_over_limit=True)
    assert third.status == S.UPLOADED
    audits = list(AuditEvent.objects.filter(verb="submission.uploaded").order_by("id"))
    assert [(a.detail["uploads_today"], a.detail["over_limit"]) for a in audits] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    assert all(a.detail["daily_limit"] == 2 for a in audits)
    assert (
        "over the arena's daily limit of 2, confirmed" in third.transitions.get(to_status=S.UPLOADED).reason
    )

    # Another project on the same scenario has its own count; uploads before the arena's day do not count.
    assert handoff.upload_allowance(other_project).used == 0 or other_project.scenario != project.scenario
    day_start = handoff.upload_allowance(project).day_start
    SubmissionTransition.objects.filter(to_status=S.UPLOADED).update(
        created=day_start - dt.timedelta(seconds=1)
    )
    assert handoff.upload_allowance(project).used == 0


def test_without_a_limit_nothing_is_counted_against(project, alice, bob):
    for value in (0.1, 0.2, 0.3):
        handoff.mark_uploaded(approved(project, alice, bob, value), by=alice)
    allowance = handoff.upload_allowance(project)
    assert allowance.limit is None and allowance.left is None and not allowance.used_up
    assert allowance.used == 3 and allowance.text() == ""


def test_a_scenario_refuses_a_zone_that_does_not_exist(project):
    assert arena_zone("Asia/Kolkata").key == "Asia/Kolkata"
    for bad in ("Mars/Olympus", "../etc/passwd", "", "Europe/"):
        scenario = Scenario(key="s-bad", name="bad", arena_timezone=bad)
        with pytest.raises(ValidationError) as refused:
            scenario.full_clean()
        assert "arena_timezone" in refused.value.message_dict


# --- the pages -----------------------------------------------------------------------------------------


def _page(client, sub):
    return client.get(f"/projects/hill/submissions/{sub.pk}/")


def test_the_submission_and_review_pages_say_how_many_uploads_are_left(project, alice, bob, client_alice):
    limit(project, 2, "America/New_York", dt.time(6))
    sub = approved(project, alice, bob, 0.5)
    page = _page(client_alice, sub).content.decode()
    assert 'data-arena-allowance="2"' in page and "left today" in page
    assert "resets 06:00" in page and "America/New_York" in page
    assert 'name="confirm_over_limit"' not in page  # nothing to confirm yet
    scenario_page = " ".join(client_alice.get(f"/scenarios/{project.scenario.key}/").content.decode().split())
    assert "2 uploads a day per project · the day starts 06:00 America/New_York" in scenario_page
    queue = client_alice.get("/projects/hill/review/").content.decode()
    assert 'data-arena-allowance="2"' in queue and "America/New_York" in queue

    handoff.mark_uploaded(approved(project, alice, bob, 0.6), by=alice)
    handoff.mark_uploaded(approved(project, alice, bob, 0.7), by=alice)
    page = _page(client_alice, sub).content.decode()
    assert 'data-arena-allowance="0"' in page and "No uploads left today" in page
    assert 'name="confirm_over_limit"' in page

    url = f"/projects/hill/submissions/{sub.pk}/upload"
    refused = client_alice.post(url, {"arena_ref": "A-1"})
    assert refused.status_code == 400
    assert "takes 2 uploads a day" in refused.content.decode()
    sub.refresh_from_db()
    assert sub.status == S.APPROVED
    done = client_alice.post(url, {"arena_ref": "A-1", "confirm_over_limit": "on"})
    assert done.status_code == 302
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED and sub.arena_ref == "A-1"


def test_a_refusal_is_recorded_from_the_submission_page(project, alice, bob, client_alice):
    sub = handoff.mark_uploaded(approved(project, alice, bob, 0.5), by=alice)
    page = _page(client_alice, sub).content.decode()
    assert f"/projects/hill/submissions/{sub.pk}/refuse" in page and "Record refusal" in page
    assert "left today" not in page  # the scenario sets no limit

    url = f"/projects/hill/submissions/{sub.pk}/refuse"
    empty = client_alice.post(url, {"reason": ""})
    assert empty.status_code == 400 and "form-error" in empty.content.decode()
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED
    assert client_alice.post(url, {"reason": "Banned import: ctypes"}).status_code == 302
    sub.refresh_from_db()
    assert sub.status == S.REFUSED
    page = _page(client_alice, sub).content.decode()
    assert "data-arena-refused" in page and "Banned import: ctypes" in page
    assert f"/projects/hill/submissions/{sub.pk}/upload" in page  # may be uploaded again
    knowledge = client_alice.get("/projects/hill/knowledge/").content.decode()
    assert "Banned import: ctypes" in knowledge and "refused by the arena" in knowledge


def test_a_viewer_sees_the_allowance_but_no_forms(project, alice, bob, victor, client):
    limit(project, 1)
    sub = handoff.mark_uploaded(approved(project, alice, bob, 0.5), by=alice)
    client.force_login(victor)
    page = _page(client, sub).content.decode()
    assert 'data-arena-allowance="0"' in page
    assert "/refuse" not in page and 'name="confirm_over_limit"' not in page
    assert client.post(f"/projects/hill/submissions/{sub.pk}/refuse", {"reason": "x"}).status_code == 403
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED


# --- the API -------------------------------------------------------------------------------------------

BASE = "/api/v1/projects/hill"


def test_the_api_reports_the_allowance_refuses_over_the_limit_and_records_refusals(project, alice, bob):
    limit(project, 1, "Asia/Tokyo", dt.time(4, 15))
    reviewer = session_client(bob)
    first = approved(project, alice, bob, 0.5)
    answer = reviewer.post(f"{BASE}/submissions/{first.pk}/uploaded", {"arena_ref": "T-1"}, format="json")
    assert answer.status_code == 200
    uploads = answer.json()["arena_uploads"]
    assert (uploads["limit"], uploads["used"], uploads["left"], uploads["timezone"]) == (
        1,
        1,
        0,
        "Asia/Tokyo",
    )
    assert uploads["resets_at"].endswith("+09:00") and "T04:15:00" in uploads["resets_at"]

    second = approved(project, alice, bob, 0.6)
    url = f"{BASE}/submissions/{second.pk}/uploaded"
    body = assert_json_error(reviewer.post(url, {}, format="json"), 409, "arena_daily_limit_reached")
    assert body["errors"][0]["field"] == "confirm_over_limit"
    assert (
        reviewer.post(url, {"confirm_over_limit": True}, format="json").json()["arena_uploads"]["used"] == 2
    )

    refused_url = f"{BASE}/submissions/{first.pk}/refused"
    missing = assert_json_error(reviewer.post(refused_url, {}, format="json"), 400)
    assert missing["errors"][0]["field"] == "reason"
    blank = assert_json_error(reviewer.post(refused_url, {"reason": "  "}, format="json"), 400)
    assert blank["errors"][0]["field"] == "reason"
    done = reviewer.post(refused_url, {"reason": "timed out on their side"}, format="json")
    assert done.status_code == 200 and done.json()["status"] == "refused"
    assert done.json()["transitions"][-1]["reason"] == "timed out on their side"


def test_the_scenario_api_takes_the_limit_and_refuses_a_bad_zone(alice):
    alice.is_staff = True
    alice.save()
    staff = session_client(alice)
    made = staff.post(
        "/api/v1/scenarios/",
        {"key": "arena-x", "name": "Arena X", "arena_daily_limit": 5, "arena_timezone": "Europe/Berlin"},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["arena_daily_limit"] == 5 and made.json()["arena_resets_at"] == "00:00"
    bad = staff.post(
        "/api/v1/scenarios/", {"key": "arena-y", "name": "Y", "arena_timezone": "Moon/Base"}, format="json"
    )
    assert assert_json_error(bad, 400)["errors"][0]["field"] == "arena_timezone"
    assert not Scenario.objects.filter(key="arena-y").exists()
    negative = staff.post(
        "/api/v1/scenarios/", {"key": "arena-z", "name": "Z", "arena_daily_limit": -1}, format="json"
    )
    assert assert_json_error(negative, 400)["errors"][0]["field"] == "arena_daily_limit"
