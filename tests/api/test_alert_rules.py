"""Alert rules over the API: who may read and change them, what each answer shows (the webhook secret
only on create and to admins reading one rule), bad input as a JSON 400 naming the field with nothing
written, the test send and the delivery log."""

from __future__ import annotations

import json

import pytest
from django.core import mail

from smrweb import tasks
from smrweb.core import queue
from smrweb.outbound import alerts as delivery
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AlertRule, AuditEvent, Notification, NotificationStatus, Role
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from tests.api.helpers import assert_json_error, session_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
RULES = "/api/v1/projects/hill/alert-rules/"
WEBHOOK = "https://hooks.example.com/smrweb/7c1e"
SLACK = "https://hooks.example.com/services/T000/B000/slack-credential-9f2a"


@pytest.fixture
def admin(alice, project):
    return session_client(alice)


@pytest.fixture
def queued(monkeypatch):
    """What the API queues for delivery (no broker here)."""
    calls = []
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: calls.append((task.name, *args)) or True)
    return calls


def fingerprint() -> tuple:
    return (
        AlertRule.objects.count(),
        Notification.objects.count(),
        AuditEvent.objects.filter(verb__startswith="alert_rule.").count(),
    )


def create(client, **body):
    return client.post(RULES, body, format="json")


# --- create, read, who sees what -------------------------------------------------------------------


def test_an_admin_creates_a_rule_of_each_channel(admin, project):
    cases = [
        {"trigger": "run.failed", "channel": "email", "target": "oncall@example.com"},
        {"trigger": "run.stalled", "channel": "slack", "target": SLACK},
        {"trigger": "run.budget", "channel": "webhook", "target": WEBHOOK, "threshold": 0.5},
        {"trigger": "run.loop", "channel": "inbox", "recipient": "bob", "window": 4},
    ]
    for body in cases:
        answer = create(admin, **body)
        assert answer.status_code == 201, answer.content
        data = answer.json()
        assert {k: data[k] for k in body if k not in ("target", "recipient")} == {
            k: v for k, v in body.items() if k not in ("target", "recipient")
        }
        rule = AlertRule.objects.get(pk=data["id"])
        assert rule.project == project and rule.created_by.username == "alice"
        assert data["created_by"] == "alice" and data["muted"] is False
    inbox = AlertRule.objects.get(channel="inbox")
    assert inbox.recipient.username == "bob"
    assert AuditEvent.objects.filter(verb="alert_rule.created").count() == 4


def test_the_webhook_secret_is_shown_on_create_and_to_admins_reading_the_rule_only(
    admin, project, victor, bob, api
):
    created = create(admin, trigger="run.failed", channel="webhook", target=WEBHOOK).json()
    rule = AlertRule.objects.get(pk=created["id"])
    assert created["secret"] == rule.secret and len(rule.secret) == 64
    url = f"{RULES}{rule.pk}/"
    assert admin.get(url).json()["secret"] == rule.secret
    listed = admin.get(RULES).json()
    assert listed["count"] == 1 and listed["results"][0]["secret"] is None
    assert rule.secret not in admin.get(RULES).content.decode()
    muted = admin.patch(url, {"muted": True}, format="json")
    assert muted.status_code == 200 and muted.json()["secret"] is None
    for reader in (session_client(victor), session_client(bob), api):
        for answer in (reader.get(url), reader.get(RULES), reader.get(f"{url}deliveries")):
            assert answer.status_code == 200
            assert rule.secret not in answer.content.decode()
    # An email rule has no secret to show.
    email = create(admin, trigger="run.failed", channel="email", target="a@example.com").json()
    assert email["secret"] is None and admin.get(f"{RULES}{email['id']}/").json()["secret"] is None


def test_readers_who_are_not_admins_see_only_the_origin_of_a_url_target(admin, victor, api):
    create(admin, trigger="run.stalled", channel="slack", target=SLACK)
    create(admin, trigger="run.failed", channel="email", target="oncall@example.com")
    full = {r["channel"]: r for r in admin.get(RULES).json()["results"]}
    assert full["slack"]["target"] == SLACK and SLACK in full["slack"]["destination"]
    for reader in (session_client(victor), api):
        rows = {r["channel"]: r for r in reader.get(RULES).json()["results"]}
        assert rows["slack"]["target"] == "https://hooks.example.com/…"
        assert "slack-credential" not in json.dumps(rows)
        assert rows["email"]["target"] == "oncall@example.com"


def test_changes_are_for_admin_sessions_and_never_for_tokens(
    admin, project, victor, bob, carol, api, anon_api, other_project
):
    rule_id = create(admin, trigger="run.failed", channel="email", target="a@example.com").json()["id"]
    url = f"{RULES}{rule_id}/"
    before = fingerprint()
    body = {"trigger": "run.failed", "channel": "email", "target": "b@example.com"}
    for client in (session_client(victor), session_client(bob)):
        assert "admin role" in assert_json_error(client.post(RULES, body, format="json"), 403)["message"]
        assert_json_error(client.patch(url, {"muted": True}, format="json"), 403)
        assert_json_error(client.delete(url), 403)
        assert_json_error(client.post(f"{url}test"), 403)
    answer = assert_json_error(api.post(RULES, body, format="json"), 403)
    assert "Project tokens cannot manage alert rules" in answer["message"]
    assert_json_error(api.patch(url, {"muted": True}, format="json"), 403)
    assert_json_error(api.delete(url), 403)
    assert (
        "Project tokens cannot send test alerts" in assert_json_error(api.post(f"{url}test"), 403)["message"]
    )
    # Outsiders do not learn that the project exists; a token of another project is told its scope.
    outsider = session_client(carol)
    for answer in (outsider.get(RULES), outsider.post(RULES, body, format="json"), outsider.get(url)):
        assert_json_error(answer, 404)
    other = services.create_api_token(other_project, name="other")[1]
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {other}")
    assert "scoped to project" in assert_json_error(anon_api.post(RULES, body, format="json"), 403)["message"]
    assert_json_error(anon_api.get(url), 403)
    anon_api.credentials()
    assert_json_error(anon_api.get(RULES), 401)
    assert fingerprint() == before
    assert AlertRule.objects.get(pk=rule_id).muted is False


def test_a_rule_of_another_project_is_not_found_through_this_one(admin, carol, other_project):
    theirs = services.create_alert_rule(
        other_project, by=carol, trigger="run.failed", channel="email", target="c@example.com"
    )
    assert_json_error(admin.get(f"{RULES}{theirs.pk}/"), 404)
    assert_json_error(admin.delete(f"{RULES}{theirs.pk}/"), 404)
    assert_json_error(admin.get(f"{RULES}{theirs.pk}/deliveries"), 404)
    assert AlertRule.objects.filter(pk=theirs.pk).exists()


def test_mute_unmute_and_delete(admin, project):
    rule_id = create(admin, trigger="run.failed", channel="inbox", recipient="alice").json()["id"]
    url = f"{RULES}{rule_id}/"
    created = admin.get(url).json()["updated"]
    muted = admin.patch(url, {"muted": True}, format="json").json()
    assert muted["muted"] is True and muted["updated"] > created
    assert AlertRule.objects.get(pk=rule_id).muted is True
    assert admin.patch(url, {"muted": False}, format="json").json()["muted"] is False
    assert [e.verb for e in AuditEvent.objects.filter(verb__in=["alert_rule.muted", "alert_rule.unmuted"])]
    answer = admin.delete(url)
    assert answer.status_code == 204 and not answer.content
    assert not AlertRule.objects.filter(pk=rule_id).exists()
    assert AuditEvent.objects.filter(verb="alert_rule.deleted").exists()
    assert_json_error(admin.get(url), 404)


@pytest.mark.parametrize(
    "body",
    [{}, {"muted": "perhaps"}, {"muted": True, "trigger": "run.stalled"}, {"target": "x@example.com"}],
)
def test_a_patch_takes_muted_only(admin, body):
    rule_id = create(admin, trigger="run.failed", channel="email", target="a@example.com").json()["id"]
    answer = assert_json_error(admin.patch(f"{RULES}{rule_id}/", body, format="json"), 400, "invalid")
    fields = {e["field"] for e in answer["errors"]}
    assert fields & {"muted", "trigger", "target"}, answer
    if "trigger" in body or "target" in body:
        assert "Only `muted` can be changed" in json.dumps(answer)
    rule = AlertRule.objects.get(pk=rule_id)
    assert (rule.muted, rule.trigger, rule.target) == (False, "run.failed", "a@example.com")


# --- bad input: a JSON 400 naming the field, nothing written -----------------------------------------


BAD = [
    ({"trigger": "run.exploded", "channel": "email", "target": "a@example.com"}, "trigger"),
    ({"trigger": "run.failed", "channel": "pigeon", "target": "a@example.com"}, "channel"),
    ({"channel": "email", "target": "a@example.com"}, "trigger"),
    ({"trigger": "run.failed", "channel": "email", "target": "a@example.com", "window": 5}, "window"),
    ({"trigger": "run.loop", "channel": "email", "target": "a@example.com", "threshold": 0.5}, "threshold"),
    ({"trigger": "run.failed", "channel": "email", "target": "not an address"}, "target"),
    ({"trigger": "run.failed", "channel": "email"}, "target"),
    ({"trigger": "run.failed", "channel": "webhook", "target": "ftp://hooks.example.com/x"}, "target"),
    ({"trigger": "run.failed", "channel": "slack", "target": ""}, "target"),
    ({"trigger": "run.failed", "channel": "inbox", "recipient": "carol"}, "recipient"),
    ({"trigger": "run.failed", "channel": "inbox", "recipient": "nobody-at-all"}, "recipient"),
    ({"trigger": "run.failed", "channel": "inbox"}, "recipient"),
    ({"trigger": "run.failed", "channel": "inbox", "recipient": "bob", "target": "b@example.com"}, "target"),
    (
        {"trigger": "run.failed", "channel": "email", "target": "a@example.com", "recipient": "bob"},
        "recipient",
    ),
    ({"trigger": "run.budget", "channel": "email", "target": "a@example.com", "threshold": 1.5}, "threshold"),
    ({"trigger": "run.budget", "channel": "email", "target": "a@example.com", "threshold": 0}, "threshold"),
    (
        {"trigger": "run.budget", "channel": "email", "target": "a@example.com", "threshold": "NaN"},
        "threshold",
    ),
    (
        {"trigger": "run.budget", "channel": "email", "target": "a@example.com", "threshold": "1e999"},
        "threshold",
    ),
    (
        {"trigger": "run.budget", "channel": "email", "target": "a@example.com", "threshold": "most"},
        "threshold",
    ),
    (
        {"trigger": "run.budget", "channel": "email", "target": "a@example.com", "threshold": True},
        "threshold",
    ),
    ({"trigger": "run.loop", "channel": "email", "target": "a@example.com", "window": True}, "window"),
    ({"trigger": "run.loop", "channel": "email", "target": "a@example.com", "window": 1}, "window"),
    ({"trigger": "run.loop", "channel": "email", "target": "a@example.com", "window": 2.5}, "window"),
    (
        {"trigger": "run.no_progress", "channel": "email", "target": "a@example.com", "window": 10**30},
        "window",
    ),
    ({"trigger": "run.regressed", "channel": "email", "target": "a@example.com"}, "threshold"),
    ({"trigger": "run.failed", "channel": "email", "target": "a@example.com", "treshold": 0.5}, "treshold"),
    ({"trigger": "run.failed", "channel": "email", "target": "a@example.com", "secret": "mine"}, "secret"),
]


@pytest.mark.parametrize(("body", "field"), BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD)])
def test_bad_input_is_a_field_error_and_writes_nothing(admin, body, field):
    before = fingerprint()
    answer = assert_json_error(create(admin, **body), 400, "invalid")
    assert answer["errors"] and answer["errors"][0]["field"] == field, answer
    assert answer["errors"][0]["message"]
    assert fingerprint() == before


def test_a_private_webhook_address_is_refused_unless_the_operator_allows_it(admin, settings):
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = []
    for url in ("http://127.0.0.1:8000/hook", "http://10.1.2.3/hook", "http://169.254.169.254/latest"):
        for channel in ("webhook", "slack"):
            answer = assert_json_error(create(admin, trigger="run.failed", channel=channel, target=url), 400)
            assert answer["errors"][0]["field"] == "target"
            assert "address" in answer["errors"][0]["message"]
    assert not AlertRule.objects.exists()
    settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS = True
    assert (
        create(admin, trigger="run.failed", channel="webhook", target="http://10.1.2.3/hook").status_code
        == 201
    )


def test_a_body_that_is_not_json_or_not_an_object_is_a_clear_400(admin):
    before = fingerprint()
    answer = assert_json_error(
        admin.post(RULES, data="{trigger: run.failed", content_type="application/json"), 400
    )
    assert answer["code"] == "parse_error" and "JSON" in answer["message"]
    answer = assert_json_error(
        admin.post(RULES, data="[1, 2]", content_type="application/json"), 400, "invalid"
    )
    assert "dictionary" in answer["errors"][0]["message"]
    answer = assert_json_error(admin.post(RULES, data="NaN", content_type="application/json"), 400)
    assert_json_error(admin.post(RULES, data="trigger=run.failed", content_type="text/plain"), 415)
    assert fingerprint() == before


# --- test send and the delivery log -------------------------------------------------------------------


def test_a_test_send_to_the_inbox_is_there_at_once(admin, alice, queued):
    rule_id = create(admin, trigger="score.new_best", channel="inbox", recipient="alice").json()["id"]
    answer = admin.post(f"{RULES}{rule_id}/test")
    assert answer.status_code == 202, answer.content
    data = answer.json()
    assert data["status"] == "sent" and data["episode"] == "test" and data["sent_at"]
    assert Notification.objects.get(pk=data["id"]).recipient == alice
    assert queued == []  # nothing to deliver
    assert AuditEvent.objects.filter(verb="alert_rule.test_sent").count() == 1


def test_a_test_send_by_email_is_queued_and_delivered(admin, queued):
    rule_id = create(admin, trigger="run.failed", channel="email", target="oncall@example.com").json()["id"]
    data = admin.post(f"{RULES}{rule_id}/test").json()
    assert data["status"] == "pending" and data["attempts"] == 0
    assert queued == [(tasks.deliver_notification.name, data["id"])]
    assert delivery.deliver(data["id"]).outcome == "sent"
    [message] = mail.outbox
    assert message.to == ["oncall@example.com"] and "Test of the run.failed alert" in message.subject
    [row] = admin.get(f"{RULES}{rule_id}/deliveries").json()["results"]
    assert (row["id"], row["status"], row["attempts"], row["last_error"]) == (data["id"], "sent", 1, "")


def test_a_muted_rule_still_sends_its_tests(admin, queued):
    rule_id = create(admin, trigger="run.failed", channel="email", target="oncall@example.com").json()["id"]
    admin.patch(f"{RULES}{rule_id}/", {"muted": True}, format="json")
    assert admin.post(f"{RULES}{rule_id}/test").json()["status"] == "pending"
    assert len(queued) == 1


def test_a_failed_delivery_shows_its_error_and_next_attempt(admin, settings, queued):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2  # nothing listens
    rule_id = create(admin, trigger="run.failed", channel="email", target="oncall@example.com").json()["id"]
    pk = admin.post(f"{RULES}{rule_id}/test").json()["id"]
    assert delivery.deliver(pk).outcome == "retry"
    [row] = admin.get(f"{RULES}{rule_id}/deliveries").json()["results"]
    assert row["status"] == "retrying" and row["attempts"] == 1 and row["next_attempt_at"]
    assert "attempt 1: the mail server" in row["last_error"] and "retrying in" in row["last_error"]


def test_test_sends_are_limited_per_person_and_per_rule(admin, project, settings, queued):
    """Finding N5: 25 test sends in seconds mailed an unconfirmed outside address 25 times. Past
    SMRWEB_ALERT_TEST_RATE per person and per rule the API answers 429 with Retry-After, and nothing is
    recorded or sent; another admin is held by the rule's count, the same admin by their own."""
    settings.SMRWEB_ALERT_TEST_RATE = "3/h"
    rule_id = create(admin, trigger="run.failed", channel="email", target="ext@example.com").json()["id"]
    answers = [admin.post(f"{RULES}{rule_id}/test") for _ in range(25)]
    assert [a.status_code for a in answers] == [202] * 3 + [429] * 22
    refused = assert_json_error(answers[-1], 429, "rate_limited")
    assert "Too many attempts" in refused["message"] and int(answers[-1]["Retry-After"]) > 0
    assert len(queued) == 3 and Notification.objects.filter(rule_id=rule_id).count() == 3
    assert AuditEvent.objects.filter(verb="alert_rule.test_sent").count() == 3

    dana = UserFactory(username="dana")
    services.add_member(project, dana, role=Role.ADMIN)
    other_admin = session_client(dana)
    assert other_admin.post(f"{RULES}{rule_id}/test").status_code == 429  # the rule's count
    second = create(other_admin, trigger="run.failed", channel="email", target="b@example.com").json()["id"]
    assert other_admin.post(f"{RULES}{second}/test").status_code == 202  # dana's own count, a fresh rule
    assert admin.post(f"{RULES}{second}/test").status_code == 429  # alice's count
    for _, pk in queued:
        assert delivery.deliver(pk).outcome == "sent"
    assert len(mail.outbox) == 4  # of the 28 asked for


def test_the_delivery_log_is_paged_newest_first(admin, queued):
    rule_id = create(admin, trigger="run.failed", channel="inbox", recipient="alice").json()["id"]
    ids = [admin.post(f"{RULES}{rule_id}/test").json()["id"] for _ in range(5)]
    page = admin.get(f"{RULES}{rule_id}/deliveries?page_size=2").json()
    assert page["count"] == 5 and page["next"] and page["previous"] is None
    assert [r["id"] for r in page["results"]] == ids[::-1][:2]
    last = admin.get(f"{RULES}{rule_id}/deliveries?page_size=2&page=3").json()
    assert [r["id"] for r in last["results"]] == [ids[0]]
    assert set(page["results"][0]) == {
        "id",
        "subject",
        "episode",
        "title",
        "status",
        "suppressed_because",
        "attempts",
        "last_error",
        "next_attempt_at",
        "sent_at",
        "created",
    }
    assert_json_error(admin.get(f"{RULES}{rule_id}/deliveries?page=9"), 404)


def test_a_failed_run_reaches_the_log_once_and_what_predates_the_rule_is_suppressed(admin, project):
    def fail(run_id: str, n: int = 1):
        services.ingest_events(
            project,
            run_id,
            parse_events(
                json.dumps(
                    [
                        {
                            "type": "state",
                            "id": f"fail-{n}",
                            "state": "failed",
                            "failure": {"family": "oom", "detail": "CUDA out of memory"},
                        }
                    ]
                )
            ),
        )

    fail("before")
    rule_id = create(admin, trigger="run.failed", channel="inbox", recipient="alice").json()["id"]
    fail("after")
    for run in project.runs.all():
        alert_evaluation.evaluate_run(run.pk)
        alert_evaluation.evaluate_run(run.pk)  # a redelivered evaluation adds nothing
    fail("after")  # a replayed batch neither
    alert_evaluation.evaluate_run(project.runs.get(external_id="after").pk)
    rows = admin.get(f"{RULES}{rule_id}/deliveries").json()["results"]
    assert [(r["subject"].split(":")[0], r["status"], r["suppressed_because"]) for r in rows] == [
        ("run", "sent", ""),
        ("run", "suppressed", "predates the rule"),
    ]
    assert "failed (oom)" in rows[0]["title"]
    assert Notification.objects.filter(status=NotificationStatus.SENT).count() == 1
