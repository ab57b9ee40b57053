"""The audit log page (project admins): filters by kind, person and date, pages newest first, links the
objects that still exist, and exports the filtered log as a streamed CSV."""

import csv
import io
import json
import re
from datetime import datetime, timedelta

import pytest
import time_machine
from django.db.models import Count
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Project, Run
from smrweb.tracking.queries import audit
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
URL = "/projects/hill/audit/"
CSV_URL = "/projects/hill/audit.csv"


def _rows(response) -> list[str]:
    """The verbs of the table's rows, in page order."""
    body = response.content.decode()
    return [part.split('"', 1)[0] for part in body.split('data-verb="')[1:]]


def _csv(response) -> list[dict]:
    assert response.streaming
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def history(project, alice, bob):
    """A token made and revoked by alice, a run bob stopped, bob made reviewer again, a settings change."""
    token, _ = services.create_api_token(project, name="ci-harness", by=alice)
    services.revoke_api_token(token, by=alice)
    services.ingest_events(project, "r1", parse_events(json.dumps([{"type": "state", "state": "running"}])))
    # A push run is stopped through the project's webhook (set without an audit row of its own).
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="https://hooks.example/hill")
    run = Run.objects.get(project=project, external_id="r1")
    services.request_stop(run, by=bob)
    services.update_project(project, regression_threshold=0.5, by=alice)
    return run


def test_only_admins_see_the_log_and_its_csv(client, bob, victor, carol, project):
    for user, status in [(carol, 404), (victor, 403), (bob, 403)]:
        client.force_login(user)
        assert client.get(URL).status_code == status
        assert client.get(CSV_URL).status_code == status
    client.logout()
    assert client.get(URL).status_code == 302


def test_the_log_shows_who_did_what_newest_first_with_links(client_alice, project, history):
    response = client_alice.get(URL)
    assert response.status_code == 200
    verbs = _rows(response)
    expected = list(
        AuditEvent.objects.filter(project=project).order_by("-created", "-id").values_list("verb", flat=True)
    )
    assert verbs == expected
    assert verbs[:4] == ["project.settings_changed", "run.stop_requested", "token.revoked", "token.created"]
    body = response.content.decode()
    assert "Stop requested" in body and "Token revoked" in body
    assert f'href="/projects/hill/runs/{history.external_id}/"' in body  # the run still exists: linked
    assert "regression threshold: 0.5" in body  # the detail, summarised
    assert 'href="/projects/hill/settings/"' in body and 'href="/projects/hill/audit/"' in body  # the tabs


def test_filters_by_kind_person_and_date(client_alice, project, history, alice, bob):
    assert _rows(client_alice.get(URL, {"kind": "token"})) == ["token.revoked", "token.created"]
    assert _rows(client_alice.get(URL, {"kind": "stop"})) == ["run.stop_requested"]
    assert _rows(client_alice.get(URL, {"kind": "settings"})) == [
        "project.settings_changed",
        "project.created",
    ]
    member_verbs = _rows(client_alice.get(URL, {"kind": "member"}))
    assert member_verbs and set(member_verbs) == {"member.set"}
    assert _rows(client_alice.get(URL, {"actor": "bob"})) == ["run.stop_requested"]
    assert set(_rows(client_alice.get(URL, {"actor": "alice", "kind": "token"}))) == {
        "token.created",
        "token.revoked",
    }
    # Dates: move two rows a week back.
    week_ago = timezone.now() - timedelta(days=7)
    AuditEvent.objects.filter(verb__startswith="token.").update(created=week_ago)
    day = timezone.localdate(week_ago).isoformat()
    assert set(_rows(client_alice.get(URL, {"until": day}))) >= {"token.created", "token.revoked"}
    assert "token.created" not in _rows(client_alice.get(URL, {"since": timezone.localdate().isoformat()}))
    assert _rows(client_alice.get(URL, {"since": day, "until": day})) == ["token.revoked", "token.created"]


def test_the_person_filter_lists_each_actor_once_with_a_count(client_alice, project, history, alice, bob):
    """The walkthrough's audit page offered 991 options, one per row (`token:demo-harness` ×545): each
    actor once, sorted by name, with how many actions."""
    for _ in range(3):
        services.record_audit(bob, "run.tagged", "1", project=project)
    counts = dict(
        AuditEvent.objects.filter(project=project)
        .order_by()
        .values_list("actor_label")
        .annotate(n=Count("id"))
    )
    body = client_alice.get(URL).content.decode()
    select = body.split('<select name="actor">', 1)[1].split("</select>", 1)[0]
    options = re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', select)
    assert [value for value, _ in options] == sorted(counts, key=str.lower)
    assert len(options) == len({value for value, _ in options})
    assert dict(options)["bob"] == f"bob ({counts['bob']})" and counts["bob"] == 4


def test_bad_filters_are_a_form_error_not_a_500(client_alice, project, history):
    response = client_alice.get(URL, {"kind": "nonsense", "since": "yesterday"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Select a valid choice" in body and "Enter a valid date" in body
    assert client_alice.get(CSV_URL, {"actor": "nobody"}).status_code == 400


def test_new_verbs_fall_into_their_group_by_prefix():
    assert audit.kind_of("run.deleted").key == "deletion"
    assert audit.kind_of("project.archived").key == "deletion"
    assert audit.kind_of("retention.applied").key == "deletion"
    assert audit.kind_of("comment.deleted").key == "annotation"
    assert audit.kind_of("alert_rule.deleted").key == "alert"
    assert audit.kind_of("submission.approved").key == "review"
    assert audit.kind_of("submission.verified").key == "transition"
    assert audit.kind_of("control.accepted").key == "steering"
    assert audit.kind_of("invite.sent").key == "member"
    assert audit.kind_of("project.settings_changed").key == "settings"
    assert audit.kind_of("artifact.stored").key == "other"


def test_the_kind_filter_in_sql_agrees_with_kind_of(project, alice):
    verbs = [
        "run.deleted",
        "project.archived",
        "comment.deleted",
        "alert_rule.deleted",
        "submission.approved",
        "submission.verified",
        "rollback.requested",
        "run.stop_requested",
        "control.accepted",
        "token.created",
        "member.set",
        "project.settings_changed",
        "artifact.stored",
        "run.tagged",
        "knowledge.added",
    ]
    for verb in verbs:
        services.record_audit(alice, verb, project, project=project)
    for key, _ in audit.KIND_CHOICES:
        in_sql = set(
            AuditEvent.objects.filter(project=project)
            .filter(audit.kind_q(key))
            .values_list("verb", flat=True)
        )
        assert in_sql == {
            v
            for v in set(AuditEvent.objects.filter(project=project).values_list("verb", flat=True))
            if audit.kind_of(v).key == key
        }, key


def test_the_log_is_paged_newest_first(client_alice, project, alice):
    start = timezone.now() - timedelta(hours=2)
    for i in range(120):
        with time_machine.travel(start + timedelta(seconds=i), tick=False):
            services.record_audit(alice, "project.settings_changed", project, project=project, n=i)
    # Newest first: the project's creation (now), then n = 119 … 0, fifty to a page.
    first = client_alice.get(URL, {"kind": "settings"}).content.decode()
    assert _rows(client_alice.get(URL, {"kind": "settings"}))[0] == "project.created"
    assert "page 1 of 3" in first and "n: 119<" in first and "n: 71<" in first and "n: 70<" not in first
    third = client_alice.get(URL, {"kind": "settings", "page": 3}).content.decode()
    assert "page 3 of 3" in third and "n: 20<" in third and "n: 0<" in third and "n: 21<" not in third
    assert 'href="?kind=settings&amp;page=2"' in third  # the pager keeps the filters


def test_a_deleted_object_is_named_but_not_linked(client_alice, project, history):
    Run.objects.filter(pk=history.pk).delete()
    body = client_alice.get(URL, {"kind": "stop"}).content.decode()
    assert f"run {history.pk}" in body and "/runs/r1/" not in body and "no longer exists" in body


def test_the_csv_is_the_filtered_log_streamed(client_alice, project, history):
    response = client_alice.get(CSV_URL, {"actor": "alice", "kind": "token"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'attachment; filename="hill-audit-' in response["Content-Disposition"]
    rows = _csv(response)
    assert [r["verb"] for r in rows] == ["token.revoked", "token.created"]
    assert rows[0]["actor"] == "alice" and rows[0]["kind"] == "token" and rows[0]["what"] == "Token revoked"
    assert json.loads(rows[0]["detail"]) == {"name": "ci-harness"}
    event = AuditEvent.objects.get(verb="token.revoked")
    assert rows[0]["object_type"] == "apitoken" and rows[0]["object_id"] == event.object_id
    assert datetime.fromisoformat(rows[0]["created"]) == event.created.replace(
        microsecond=event.created.microsecond // 1000 * 1000
    )  # ISO 8601 to the millisecond, as JSON writes it
    everything = _csv(client_alice.get(CSV_URL))
    assert len(everything) == AuditEvent.objects.filter(project=project).count()


def test_the_csv_guards_against_formulas_in_what_people_wrote(client_alice, project, alice):
    services.create_api_token(project, name='=HYPERLINK("http://evil")', by=alice)
    rows = _csv(client_alice.get(CSV_URL, {"kind": "token"}))
    assert rows[0]["detail"].startswith('{"name":"=HYPERLINK')  # inside JSON: not at the cell's start
    services.record_audit(UserFactory(username="=cmd|calc"), "run.tagged", "@SUM(A1)", project=project)
    rows = _csv(client_alice.get(CSV_URL, {"kind": "annotation"}))
    assert rows[0]["actor"] == "'=cmd|calc" and rows[0]["object_id"] == "'@SUM(A1)"


def test_objects_are_named_and_the_page_reads_in_a_fixed_number_of_queries(
    client_alice, project, history, alice, django_assert_max_num_queries
):
    body = client_alice.get(URL).content.decode()
    assert ">run r1</a>" in body and ">token ci-harness</a>" in body and ">member bob</a>" in body
    assert ">project hill</a>" in body
    with django_assert_max_num_queries(30) as few:
        client_alice.get(URL)
    for i in range(40):
        token, _ = services.create_api_token(project, name=f"t{i}", by=alice)
        services.record_audit(alice, "run.tagged", history, project=project, key=f"k{i}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        client_alice.get(URL)
