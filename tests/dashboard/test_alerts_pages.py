"""The HTML face of alerts: a project's Alerts tab (rules, their delivery logs, create, mute, delete, test
sends), the inbox and its bell, the run page's loop / no-progress badges and its snooze, and the budget
guard on the settings page."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from smrweb import tasks
from smrweb.core import queue
from smrweb.dashboard.inbox import local_link
from smrweb.tracking import services
from smrweb.tracking.models import (
    AlertRule,
    AuditEvent,
    LoopFinding,
    Notification,
    NotificationStatus,
    Project,
    Run,
    RunSnooze,
)
from smrweb.tracking.queries import progress
from smrweb.tracking.services.alerts import delivery as alert_delivery
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from smrweb.tracking.services.alerts import triggers as alert_triggers
from tests.factories import push

pytestmark = pytest.mark.django_db

ALERTS = "/projects/hill/alerts/"
INBOX = "/inbox/"
T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def shown(body: bytes | str) -> str:
    """The page's text as a browser shows it: tags dropped, entities decoded, runs of white space one."""
    text = body.decode() if isinstance(body, bytes) else body
    text = re.sub(r"</?(?:div|p|li|dt|dd|td|th|tr|h[1-6]|br|option|section|nav)\b[^>]*>", " ", text)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", text)))


def turn(n, minutes, *, cost=0.01, tin=1000, tout=100, **extra):
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": "driver",
        "tokens_in": tin,
        "tokens_out": tout,
        "cost_usd": cost,
        "ts": (T0 + timedelta(minutes=minutes)).isoformat(),
        **extra,
    }


def inbox_rule(project, by, recipient="alice", trigger="run.failed") -> AlertRule:
    return services.create_alert_rule(project, by=by, trigger=trigger, channel="inbox", recipient=recipient)


def unread_badge(body: bytes) -> int:
    found = re.search(rb'class="bell-count" data-unread="(\d+)"', body)
    return int(found[1]) if found else 0


# --- the Alerts tab: who reaches it ------------------------------------------------------------------


def test_only_admins_reach_the_alerts_page_and_its_actions(client, alice, bob, victor, carol, project):
    rule = inbox_rule(project, alice)
    actions = [f"{ALERTS}{rule.pk}/{a}" for a in ("mute", "delete", "test")]
    for user, status in [(carol, 404), (victor, 403), (bob, 403)]:
        client.force_login(user)
        assert client.get(ALERTS).status_code == status
        assert client.post(ALERTS, {"trigger": "run.failed", "channel": "inbox"}).status_code == status
        for url in actions:
            assert client.post(url, {"muted": "1"}).status_code == status
    assert AlertRule.objects.get() == rule and not rule.muted
    assert not Notification.objects.exists()


def test_the_alerts_tab_sits_with_settings_and_tokens_for_admins_only(client, alice, bob, project):
    client.force_login(alice)
    for page in ("/projects/hill/", "/projects/hill/settings/", "/projects/hill/tokens/"):
        assert f'href="{ALERTS}"' in client.get(page).content.decode(), page
    body = client.get(ALERTS).content.decode()
    assert 'aria-current="page">Alerts</a>' in body
    client.force_login(bob)
    assert ALERTS not in client.get("/projects/hill/").content.decode()


# --- creating rules ----------------------------------------------------------------------------------


def test_an_admin_adds_an_inbox_rule_and_the_page_lists_it(client_alice, alice, project):
    response = client_alice.post(ALERTS, {"trigger": "run.loop", "channel": "inbox", "recipient": "alice"})
    rule = AlertRule.objects.get()
    assert response.status_code == 302 and response["Location"] == f"{ALERTS}#rule-{rule.pk}"
    assert (rule.trigger, rule.channel, rule.recipient, rule.window) == ("run.loop", "inbox", alice, None)
    assert AuditEvent.objects.filter(verb="alert_rule.created").count() == 1
    page = shown(client_alice.get(ALERTS).content)
    assert "Rule added: run is looping on a tool call → inbox of alice." in page
    assert "run.loop run is looping on a tool call" in page
    assert f"window {progress.DEFAULT_LOOP_REPEATS} (default)" in page  # the default, said to be one
    assert "Tell inbox of alice" in page


def test_the_form_starts_on_the_inbox_of_the_admin_and_explains_every_trigger(client_alice, project):
    body = client_alice.get(ALERTS).content.decode()
    assert re.search(r'<option value="inbox" selected>', body)
    assert 'name="recipient" id="id_recipient"' in body and 'value="alice"' in body
    guide = shown(body[body.index('id="trigger-guide"') :])
    for value, spec in alert_triggers.TRIGGER_PARAMETERS.items():
        for name, parameter in spec.items():
            assert f"{name}: {parameter.meaning}" in guide, (value, name)
    assert "(default 0.8)" in guide and "(default 50)" in guide and "(default off)" in guide
    assert guide.count("the project's regression threshold") == 2  # its label and its meaning, once each
    for channel in ("email", "slack", "webhook", "inbox"):
        assert f'<option value="{channel}"' in body


def test_a_rule_with_its_own_threshold_shows_it_and_the_others_their_defaults(client_alice, project):
    client_alice.post(
        ALERTS, {"trigger": "run.budget", "threshold": "0.5", "channel": "email", "target": "ops@example.com"}
    )
    client_alice.post(ALERTS, {"trigger": "source.failing", "channel": "email", "target": "ops@example.com"})
    page = shown(client_alice.get(ALERTS).content)
    assert "threshold 0.5 fraction of the run's USD or token budget" in page
    assert "window 3 (default) consecutive failed syncs" in page
    assert "email ops@example.com" in page


@pytest.mark.parametrize(
    "data, field, message",
    [
        ({"channel": "email", "target": "not-an-email"}, "target", "A valid email address."),
        ({"channel": "webhook", "target": "http://10.1.2.3/hook"}, "target", "private address"),
        ({"channel": "slack", "target": "http://169.254.169.254/latest"}, "target", "link-local"),
        ({"channel": "webhook", "target": "ftp://hooks.example/x"}, "target", "http"),
        ({"channel": "inbox", "recipient": "carol"}, "recipient", "carol is not a member of hill."),
        ({"channel": "inbox", "recipient": ""}, "recipient", "(empty) is not a member of hill."),
        ({"channel": "inbox", "recipient": "alice", "threshold": "2"}, "threshold", "takes no threshold"),
        ({"channel": "inbox", "recipient": "alice", "window": "2.5"}, "window", "Enter a whole number."),
        ({"channel": "inbox", "recipient": "alice", "threshold": "nan"}, "threshold", "Enter a number."),
        ({"channel": "pager", "target": "x"}, "channel", "Select a valid choice."),
    ],
)
def test_bad_input_is_a_form_error_with_the_field_and_nothing_is_made(
    client_alice, carol, project, data, field, message
):
    response = client_alice.post(ALERTS, {"trigger": "run.failed", **data})
    assert response.status_code == 400
    body = response.content.decode()
    assert f'id="id_{field}" aria-invalid="true"' in body or f'name="{field}" id="id_{field}"' in body
    errors = " ".join(shown(e) for e in re.findall(r'<div class="form-error"[^>]*>(.*?)</div>', body, re.S))
    assert message in errors, errors
    assert not AlertRule.objects.exists()
    assert not AuditEvent.objects.filter(verb__startswith="alert_rule.").exists()


def test_a_field_error_marks_its_own_input(client_alice, project):
    body = client_alice.post(
        ALERTS, {"trigger": "run.failed", "channel": "email", "target": "nope"}
    ).content.decode()
    assert re.search(r'name="target" id="id_target"[^>]*\n?[^>]*aria-invalid="true"', body)
    assert 'value="nope"' in body  # what was typed comes back


def test_a_private_webhook_is_accepted_when_the_operator_allows_private_addresses(
    client_alice, project, settings
):
    data = {"trigger": "run.failed", "channel": "webhook", "target": "http://10.1.2.3/hook"}
    assert not settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS  # refused by default (the parametrized test above)
    settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS = True
    assert client_alice.post(ALERTS, data).status_code == 302
    assert AlertRule.objects.get().target == "http://10.1.2.3/hook"


def test_each_channel_takes_only_its_own_destination_field(client_alice, alice, project):
    # The recipient box starts filled with the admin's name: an email rule must not trip over it.
    client_alice.post(
        ALERTS,
        {"trigger": "run.failed", "channel": "email", "target": "ops@example.com", "recipient": "alice"},
    )
    client_alice.post(
        ALERTS,
        {"trigger": "run.stalled", "channel": "inbox", "target": "ops@example.com", "recipient": "alice"},
    )
    email, inbox = AlertRule.objects.order_by("trigger")
    assert (email.channel, email.target, email.recipient) == ("email", "ops@example.com", None)
    assert (inbox.channel, inbox.target, inbox.recipient) == ("inbox", "", alice)


# --- mute, delete, test send -----------------------------------------------------------------------


def test_mute_and_unmute_a_rule(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    url = f"{ALERTS}{rule.pk}/mute"
    response = client_alice.post(url, {"muted": "1"}, follow=True)
    rule.refresh_from_db()
    assert rule.muted
    page = shown(response.content)
    assert "Muted: run failed → inbox of alice." in page
    assert "muted" in page and "Unmute" in page
    client_alice.post(url, {"muted": "0"})
    rule.refresh_from_db()
    assert not rule.muted
    verbs = list(
        AuditEvent.objects.filter(verb__in=["alert_rule.muted", "alert_rule.unmuted"]).values_list(
            "verb", flat=True
        )
    )
    assert sorted(verbs) == ["alert_rule.muted", "alert_rule.unmuted"]


def test_delete_asks_first_and_removes_the_rule(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    body = client_alice.get(ALERTS).content.decode()
    assert re.search(
        rf'action="{ALERTS}{rule.pk}/delete" class="inline"\s+data-confirm="Delete the rule', body
    )
    response = client_alice.post(f"{ALERTS}{rule.pk}/delete")
    assert response.status_code == 302 and response["Location"] == ALERTS
    assert not AlertRule.objects.exists()
    assert AuditEvent.objects.filter(verb="alert_rule.deleted").exists()


def test_another_projects_rule_is_not_found(client_alice, carol, other_project):
    rule = inbox_rule(other_project, carol, recipient="carol")
    for action in ("mute", "delete", "test"):
        assert client_alice.post(f"{ALERTS}{rule.pk}/{action}", {"muted": "1"}).status_code == 404
    assert AlertRule.objects.filter(pk=rule.pk, muted=False).exists()
    assert not Notification.objects.exists()


def test_actions_refuse_get(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    for action in ("mute", "delete", "test"):
        assert client_alice.get(f"{ALERTS}{rule.pk}/{action}").status_code == 405


def test_test_sends_from_the_page_are_limited_too(client_alice, alice, project, settings, monkeypatch):
    """Finding N5 on the Alerts tab: past SMRWEB_ALERT_TEST_RATE the page says so and sends nothing."""
    settings.SMRWEB_ALERT_TEST_RATE = "2/h"
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: True)
    rule = inbox_rule(project, alice)
    for _ in range(2):
        client_alice.post(f"{ALERTS}{rule.pk}/test")
    response = client_alice.post(f"{ALERTS}{rule.pk}/test", follow=True)
    assert "No test sent: too many tests. Too many attempts. Try again in" in shown(response.content)
    assert Notification.objects.count() == 2


def test_a_test_to_the_inbox_arrives_at_once_and_is_not_queued(client_alice, alice, project, monkeypatch):
    queued = []
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: queued.append((task, args)) or True)
    rule = inbox_rule(project, alice)
    response = client_alice.post(f"{ALERTS}{rule.pk}/test", follow=True)
    notification = Notification.objects.get()
    assert (notification.recipient, notification.status) == (alice, NotificationStatus.SENT)
    assert queued == []
    page = shown(response.content)
    assert "Test sent to the inbox of alice." in page
    assert "Test of the run.failed alert of Hill climb" in page  # in the rule's delivery log
    assert unread_badge(response.content) == 1


def test_a_test_to_email_is_queued_for_a_worker_and_logged_pending(client_alice, alice, project, monkeypatch):
    queued = []
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: queued.append((task, args)) or True)
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.stalled", channel="email", target="ops@example.com"
    )
    response = client_alice.post(f"{ALERTS}{rule.pk}/test", follow=True)
    notification = Notification.objects.get()
    assert queued == [(tasks.deliver_notification, (notification.pk,))]
    assert notification.status == NotificationStatus.PENDING and notification.recipient is None
    page = shown(response.content)
    assert "Test queued for email ops@example.com" in page
    assert re.search(
        rf'data-notification="{notification.pk}" data-status="pending"', response.content.decode()
    )


def test_a_test_send_says_so_when_the_queue_is_down(client_alice, alice, project, monkeypatch):
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: False)
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.stalled", channel="slack", target="https://hooks.example/slack"
    )
    response = client_alice.post(f"{ALERTS}{rule.pk}/test", follow=True)
    assert "the worker queue cannot be reached right now" in shown(response.content)
    assert Notification.objects.get().status == NotificationStatus.PENDING  # the stale sweep finds it


def test_the_test_send_is_queued_only_when_the_request_commits(
    client_alice, alice, project, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr(tasks.deliver_notification, "delay", lambda pk: sent.append(pk))
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.stalled", channel="email", target="ops@example.com"
    )
    with django_capture_on_commit_callbacks(execute=True):
        client_alice.post(f"{ALERTS}{rule.pk}/test")
    assert sent == [Notification.objects.get().pk]


def test_a_webhook_rule_shows_its_signing_secret_and_how_to_check_it(client_alice, alice, project):
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="webhook", target="https://hooks.example/alerts"
    )
    assert len(rule.secret) == 64
    body = client_alice.get(ALERTS).content.decode()
    assert body.count(rule.secret) == 2  # shown, and on its copy button
    page = shown(body)
    for part in ("X-Smrweb-Timestamp", "X-Smrweb-Signature: sha256=<hex>", "HMAC-SHA256", "Idempotency-Key"):
        assert part in page
    assert "<X-Smrweb-Timestamp>.<body>" in page
    inbox_only = inbox_rule(project, alice, trigger="run.stalled")
    assert inbox_only.secret == "" and body.count("data-webhook-secret") == 1


# --- the delivery log ---------------------------------------------------------------------------------


def test_the_delivery_log_says_how_each_delivery_went(client_alice, alice, project, settings):
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="webhook", target="https://hooks.example/alerts"
    )
    retrying, failed, sent, _pending = (services.send_test(rule, by=alice) for _ in range(4))
    soon = timezone.now() + timedelta(minutes=5)
    alert_delivery.finish_delivery(
        alert_delivery.claim_delivery(retrying.pk), error="HTTP 503 from hooks.example", retry_at=soon
    )
    alert_delivery.finish_delivery(
        alert_delivery.claim_delivery(failed.pk), error="HTTP 410 from hooks.example"
    )
    alert_delivery.finish_delivery(alert_delivery.claim_delivery(sent.pk))
    services.update_alert_rule(rule, by=alice, muted=True)
    suppressed = Notification.objects.create(
        rule=rule,
        subject="run:1",
        episode="failed:1",
        title="hill: run r1 failed (oom)",
        body="…",
        url="http://localhost:8000/projects/hill/runs/r1/",
        status=NotificationStatus.SUPPRESSED,
        suppressed_because="rule muted",
    )
    body = client_alice.get(ALERTS).content.decode()

    def row(n) -> str:
        found = re.search(rf'<tr data-notification="{n.pk}".*?</tr>', body, re.S)
        assert found, n.pk
        return shown(found[0])

    assert re.search(r"retrying HTTP 503 from hooks.example next attempt in (4m 5\ds|5m)", row(retrying))
    assert "failed HTTP 410 from hooks.example" in row(failed)
    assert row(failed).endswith("1 ")
    assert "sent" in row(sent)
    assert "suppressed rule muted" in row(suppressed)
    assert "pending" in row(_pending)


def test_the_log_shows_the_last_twenty_per_rule_newest_first(client_alice, alice, project):
    rules = [inbox_rule(project, alice, trigger=t) for t in ("run.failed", "run.stalled")]
    made = {rule.pk: [services.send_test(rule, by=alice).pk for _ in range(23)] for rule in rules}
    body = client_alice.get(ALERTS).content.decode()
    for rule in rules:
        section = body[body.index(f'id="rule-{rule.pk}"') :]
        section = section[: section.index("</section>")]
        shown_ids = [int(i) for i in re.findall(r'data-notification="(\d+)"', section)]
        assert shown_ids == made[rule.pk][::-1][:20]
        assert "latest 20 (older ones are kept, not shown)" in shown(section)


def test_the_alerts_page_reads_in_a_fixed_number_of_queries(
    client_alice, alice, project, django_assert_max_num_queries
):
    inbox_rule(project, alice)
    with django_assert_max_num_queries(12) as small:
        client_alice.get(ALERTS)
    for trigger in ("run.stalled", "run.loop", "run.budget", "score.new_best"):
        rule = inbox_rule(project, alice, trigger=trigger)
        for _ in range(5):
            services.send_test(rule, by=alice)
    with django_assert_max_num_queries(len(small.captured_queries)):
        client_alice.get(ALERTS)


# --- the inbox ------------------------------------------------------------------------------------------


def test_the_inbox_shows_only_the_persons_own_notifications(client, alice, bob, project):
    mine = services.send_test(inbox_rule(project, alice), by=alice)
    theirs = services.send_test(inbox_rule(project, alice, recipient="bob", trigger="run.stalled"), by=alice)
    theirs.title = "bob's own note 4e1f"
    theirs.save()
    client.force_login(alice)
    body = client.get(INBOX).content.decode()
    assert f'data-notification="{mine.pk}"' in body and f'data-notification="{theirs.pk}"' not in body
    assert "bob's own note 4e1f" not in html.unescape(body)
    client.force_login(bob)
    body = client.get(INBOX).content.decode()
    assert f'data-notification="{theirs.pk}"' in body and f'data-notification="{mine.pk}"' not in body


def test_the_inbox_needs_a_sign_in(client):
    response = client.get(INBOX)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert client.post("/inbox/read", {"all": "1"}).status_code == 302


def test_the_bell_counts_unread_and_is_on_every_page(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    assert unread_badge(client_alice.get("/").content) == 0
    assert 'aria-label="Inbox, 0 unread"' in client_alice.get("/").content.decode()
    for _ in range(3):
        services.send_test(rule, by=alice)
    for page in ("/", "/projects/hill/", ALERTS, INBOX, "/preferences/"):
        assert unread_badge(client_alice.get(page).content) == 3, page


def test_the_bell_says_99_plus_beyond_99(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    for _ in range(100):
        services.send_test(rule, by=alice)
    body = client_alice.get("/").content.decode()
    assert re.search(r'data-unread="100">99\+</span', body)


def test_unread_notifications_are_marked_and_link_to_their_page(client_alice, alice, project, settings):
    settings.SMRWEB_BASE_URL = "https://smrweb.example"
    rule = inbox_rule(project, alice)
    first, second = services.send_test(rule, by=alice), services.send_test(rule, by=alice)
    services.mark_read(alice, [first.pk])
    body = client_alice.get(INBOX).content.decode()
    items = dict(
        re.findall(r'<li class="([^"]*)"\s+data-notification="(\d+)"', body)[i][::-1] for i in range(2)
    )
    assert items == {str(second.pk): "unread", str(first.pk): ""}
    assert second.url == "https://smrweb.example/projects/hill/alerts/"
    assert f'<a class="inbox-title" href="{ALERTS}">' in body  # the path: it works on any host
    assert body.index(f'data-notification="{second.pk}"') < body.index(f'data-notification="{first.pk}"')
    assert "1 unread · 2" in shown(body)


@pytest.mark.parametrize(
    "url, link",
    [
        ("https://smrweb.example/projects/hill/runs/r1/", "/projects/hill/runs/r1/"),
        ("https://SMRWEB.example/projects/hill/?q=a#x", "/projects/hill/?q=a#x"),
        ("https://smrweb.example", "/"),
        ("https://smrweb.example//evil.example/x", "/evil.example/x"),
        ("https://elsewhere.example/projects/hill/", "https://elsewhere.example/projects/hill/"),
        ("javascript:alert(1)", ""),
        ("/projects/hill/", ""),
        ("http://[::1", ""),
    ],
)
def test_a_notification_link_is_local_when_it_points_at_this_server(settings, url, link):
    settings.SMRWEB_BASE_URL = "https://smrweb.example"
    assert local_link(url) == link


def test_mark_read_one_then_all(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    notes = [services.send_test(rule, by=alice) for _ in range(3)]
    response = client_alice.post("/inbox/read", {"id": str(notes[0].pk)})
    assert response.status_code == 302 and response["Location"] == INBOX
    assert Notification.objects.filter(read_at__isnull=True).count() == 2
    body = client_alice.get(INBOX).content
    assert unread_badge(body) == 2
    response = client_alice.post("/inbox/read", {"all": "1"}, follow=True)
    assert "Marked 2 notifications read." in shown(response.content)
    assert unread_badge(response.content) == 0
    assert not Notification.objects.filter(read_at__isnull=True).exists()
    assert "Mark all read" not in response.content.decode()


def test_nobody_marks_someone_elses_notifications_read(client, alice, bob, project):
    note = services.send_test(inbox_rule(project, alice), by=alice)
    client.force_login(bob)
    client.post("/inbox/read", {"id": str(note.pk)})
    client.post("/inbox/read", {"all": "1"})
    client.post("/inbox/read", {"id": ["x", "²", "9" * 40]})
    assert Notification.objects.get().read_at is None


def test_mark_read_returns_to_the_page_it_came_from(client_alice, alice, project):
    rule = inbox_rule(project, alice)
    notes = [services.send_test(rule, by=alice) for _ in range(51)]
    page_two = client_alice.get(f"{INBOX}?page=2").content.decode()
    assert page_two.count("data-notification=") == 1 and f'data-notification="{notes[0].pk}"' in page_two
    assert '<input type="hidden" name="page" value="2">' in page_two
    response = client_alice.post("/inbox/read", {"id": str(notes[0].pk), "page": "2"})
    assert response["Location"] == f"{INBOX}?page=2"
    assert client_alice.post("/inbox/read", {"page": "//evil.example"})["Location"] == INBOX


def test_the_inbox_is_paged_by_fifty_and_costs_the_same_with_many(
    client_alice, alice, project, django_assert_max_num_queries
):
    rule = inbox_rule(project, alice)
    services.send_test(rule, by=alice)
    with django_assert_max_num_queries(10) as small:
        client_alice.get(INBOX)
    for _ in range(120):
        services.send_test(rule, by=alice)
    with django_assert_max_num_queries(len(small.captured_queries)):
        body = client_alice.get(INBOX).content.decode()
    assert body.count("data-notification=") == 50
    assert "page 1 of 3" in shown(body)


# --- the run page: loop and no-progress badges, snooze --------------------------------------------------


def live_run(project, run_id="r1", turns=3):
    push(project, run_id, {"type": "state", "state": "running"}, *[turn(i, i) for i in range(turns)])
    return Run.objects.get(project=project, external_id=run_id)


def finding(run, pattern, repeats, **kw) -> LoopFinding:
    defaults = {
        "actor": "driver",
        "call": 'bash({"cmd":"make test"})' if pattern == "repeat" else "read(a.py) ⇄ write(a.py)",
        "first_turn": 10,
        "last_turn": 10 + repeats,
        "wasted_tokens": 12_300,
        "wasted_usd": Decimal("0.042"),
    }
    return LoopFinding.objects.create(run=run, pattern=pattern, repeats=repeats, **{**defaults, **kw})


def test_a_loop_badge_names_the_call_and_what_it_wasted(client_alice, project):
    run = live_run(project)
    finding(run, "repeat", progress.DEFAULT_LOOP_REPEATS)
    body = client_alice.get(run.get_absolute_url()).content.decode()
    assert 'data-badge="loop"' in body
    page = shown(body)
    assert 'loop: bash({"cmd":"make test"})' in page
    assert (
        'Loop: bash({"cmd":"make test"}) 3 times in a row (turns 10–13 of driver); the repeats cost '
        "12.3k tokens and $0.04." in page
    )


def test_a_ping_pong_badge_needs_twice_the_calls(client_alice, project):
    run = live_run(project)
    short = finding(run, "ping-pong", 2 * progress.DEFAULT_LOOP_REPEATS - 1)
    body = client_alice.get(run.get_absolute_url()).content.decode()
    assert 'data-badge="loop"' not in body and "data-loop=" not in body
    short.repeats = 2 * progress.DEFAULT_LOOP_REPEATS
    short.save()
    page = shown(client_alice.get(run.get_absolute_url()).content)
    assert "Ping-pong loop: read(a.py) ⇄ write(a.py) 6 calls taking turns" in page


def test_loops_below_the_badge_length_are_kept_but_not_shown(client_alice, project):
    run = live_run(project)
    finding(run, "repeat", progress.DEFAULT_LOOP_REPEATS - 1)
    body = client_alice.get(run.get_absolute_url()).content.decode()
    assert 'data-badge="loop"' not in body and "data-loop=" not in body


def test_loops_found_in_real_turns_show_on_the_run_page(client_alice, project):
    call = [{"name": "bash", "arguments": {"cmd": "pytest -x"}}]
    push(
        project,
        "loopy",
        {"type": "state", "state": "running"},
        *[turn(i, i, tool_calls=call, tin=2000, tout=50, cost=0.02) for i in range(5)],
    )
    run = Run.objects.get(external_id="loopy")
    alert_evaluation.update_loop_findings(run)  # what the evaluator does after each batch
    page = shown(client_alice.get(run.get_absolute_url()).content)
    assert 'Loop: bash({"cmd":"pytest -x"}) 5 times in a row (turns 0–4 of driver)' in page
    assert "the repeats cost 8.2k tokens and $0.08." in page


def test_no_progress_badge_after_enough_turns_since_the_best_score(client_alice, project):
    n = progress.DEFAULT_NO_PROGRESS_TURNS
    push(
        project,
        "stuck",
        {"type": "state", "state": "running"},
        turn(0, 0),
        {"type": "score", "score": 0.7, "ts": (T0 + timedelta(minutes=0.5)).isoformat()},
        *[turn(i, i, cost=0.01) for i in range(1, n)],
    )
    url = "/projects/hill/runs/stuck/"
    assert 'data-badge="no-progress"' not in client_alice.get(url).content.decode()  # n - 1 turns since
    push(project, "stuck", turn(n, n, cost=0.01))
    body = client_alice.get(url).content.decode()
    assert 'data-badge="no-progress"' in body
    assert f"No progress: {n} turns, 55.0k tokens and $0.50 since its best score (0.7)." in shown(body)
    push(project, "stuck", {"type": "state", "state": "done"})
    assert 'data-badge="no-progress"' not in client_alice.get(url).content.decode()  # finished: no badge


def test_a_run_without_scores_counts_from_its_start(client_alice, project):
    live_run(project, "fresh", turns=progress.DEFAULT_NO_PROGRESS_TURNS)
    page = shown(client_alice.get("/projects/hill/runs/fresh/").content)
    assert "No progress: 50 turns" in page and "since it started (no score yet)." in page


def test_reviewers_snooze_and_unsnooze_a_run(client, bob, project):
    run = live_run(project)
    url = f"{run.get_absolute_url()}snooze"
    client.force_login(bob)
    before = timezone.now()
    response = client.post(url, {"action": "snooze", "hours": "4"}, follow=True)
    snooze = RunSnooze.objects.get(run=run)
    assert snooze.by == bob
    assert timedelta(hours=4) <= snooze.until - before < timedelta(hours=4, minutes=1)
    page = shown(response.content)
    assert "Alerts about r1 are snoozed until" in page
    assert f"alerts snoozed until {timezone.localtime(snooze.until):%b %-d, %H:%M} UTC" in page
    assert "Unsnooze alerts" in page and "Snooze alerts" not in page.replace("Unsnooze alerts", "")
    response = client.post(url, {"action": "unsnooze"}, follow=True)
    assert not RunSnooze.objects.exists()
    assert "Alerts about r1 are sent again." in shown(response.content)
    verbs = AuditEvent.objects.filter(verb__in=["run.snoozed", "run.unsnoozed"]).values_list(
        "verb", flat=True
    )
    assert sorted(verbs) == ["run.snoozed", "run.unsnoozed"]


def test_an_expired_snooze_is_not_shown(client_alice, alice, project):
    run = live_run(project)
    services.snooze_run(run, by=alice, hours=1)
    RunSnooze.objects.update(until=timezone.now() - timedelta(minutes=1))
    body = client_alice.get(run.get_absolute_url()).content.decode()
    assert "data-snoozed" not in body and ">Snooze alerts</button>" in body


@pytest.mark.parametrize("hours", ["abc", "", "0", "-1", "721", "nan", "inf"])
def test_a_bad_snooze_length_is_said_and_nothing_is_snoozed(client_alice, project, hours):
    run = live_run(project)
    response = client_alice.post(f"{run.get_absolute_url()}snooze", {"hours": hours}, follow=True)
    assert response.status_code == 200
    assert "Not snoozed:" in shown(response.content)
    assert not RunSnooze.objects.exists()


def test_viewers_neither_see_nor_use_the_snooze(client, victor, project):
    run = live_run(project)
    client.force_login(victor)
    assert "snooze-form" not in client.get(run.get_absolute_url()).content.decode()
    assert client.post(f"{run.get_absolute_url()}snooze", {"hours": "4"}).status_code == 403
    assert not RunSnooze.objects.exists()


def test_a_finished_run_can_still_be_snoozed(client_alice, project):
    run = live_run(project)
    push(project, "r1", {"type": "state", "state": "done"})
    body = client_alice.get(run.get_absolute_url()).content.decode()
    assert "snooze-form" in body and "Stop run" not in body


# --- the budget guard on the settings page ---------------------------------------------------------------


def test_an_admin_turns_the_budget_guard_on_and_off(client_alice, project):
    url = reverse("dashboard:project-settings", args=["hill"])
    assert 'name="budget_guard" id="id_budget_guard"' in client_alice.get(url).content.decode()
    assert client_alice.post(url, {"budget_guard": "on"}).status_code == 302
    assert Project.objects.get(pk=project.pk).budget_guard
    event = AuditEvent.objects.get(verb="project.settings_changed")
    assert event.detail["budget_guard"] == "True"
    body = client_alice.get(url).content.decode()
    assert re.search(r'id="id_budget_guard"\s+checked', body)
    client_alice.post(url, {"regression_threshold": ""})  # what the form sends with every box unticked
    assert not Project.objects.get(pk=project.pk).budget_guard
