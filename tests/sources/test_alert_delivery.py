"""Delivering alerts (outbound/alerts.py) to real receivers: an SMTP server (aiosmtpd), HTTP receivers
for Slack-style and signed webhooks. Each notification is sent once; a failing channel is retried with
backoff and logged; unsafe targets and redirects are refused; and, with a real Celery worker, an event
pushed through the API arrives as an email without anyone opening a page."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from email import message_from_string
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from smrweb import tasks
from smrweb.core import cachekeys
from smrweb.outbound import alerts as delivery
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Channel, Notification, NotificationStatus, Run, Trigger
from smrweb.tracking.services.alerts import delivery as alert_delivery
from smrweb.tracking.services.alerts import evaluation as alert_evaluation

pytestmark = pytest.mark.django_db
N = NotificationStatus


class Receiver:
    """An HTTP receiver that answers with the scripted statuses in turn (the last one from then on)."""

    def __init__(self, *statuses: int, headers: dict[str, str] | None = None):
        self.statuses, self.requests = list(statuses) or [200], []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if 300 <= status < 400:
                    self.send_header("Location", f"http://127.0.0.1:{receiver.port}/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(*statuses, **kw):
        made.append(Receiver(*statuses, **kw))
        return made[-1]

    yield make
    for r in made:
        r.stop()


@pytest.fixture(autouse=True)
def quick_retries(settings):
    settings.SMRWEB_ALERT_RETRY_BASE_SECONDS = 0.5
    settings.SMRWEB_ALERT_RETRY_MAX_SECONDS = 2
    settings.SMRWEB_ALERT_MAX_ATTEMPTS = 3


def failed_run(project, run_id="r1", detail="CUDA out of memory") -> Run:
    events = [{"type": "state", "state": "failed", "failure": {"family": "oom", "detail": detail}}]
    services.ingest_events(project, run_id, parse_events(json.dumps(events)))
    return Run.objects.get(project=project, external_id=run_id)


def notify(project, alice, channel, target) -> Notification:
    rule = services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=channel, target=target
    )
    [pk] = alert_evaluation.evaluate_run(failed_run(project).pk).to_deliver
    return Notification.objects.select_related("rule").get(pk=pk, rule=rule)


def test_email_goes_through_a_real_smtp_server_once(project, alice, smtp):
    n = notify(project, alice, Channel.EMAIL, "team@example.com")
    assert delivery.deliver(n.pk).outcome == "sent"
    assert delivery.deliver(n.pk).outcome == "skipped"  # a redelivered task sends nothing
    [message] = smtp.wait_for(1)
    time.sleep(0.3)
    assert len(smtp.messages) == 1
    assert message["to"] == ["team@example.com"]
    mail = message_from_string(message["data"])
    assert mail["Subject"] == "[smrweb] Hill climb: run r1 failed (oom)"
    assert mail["X-Smrweb-Trigger"] == "run.failed"
    text = mail.get_payload()
    assert "CUDA out of memory" in text and "https://smrweb.example/projects/hill/runs/r1/" in text
    n.refresh_from_db()
    assert n.status == N.SENT and n.attempts == 1 and n.sent_at is not None


def test_an_unreachable_mail_server_is_retried_then_logged(project, alice, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2  # nothing listens
    n = notify(project, alice, Channel.EMAIL, "team@example.com")
    first = delivery.deliver(n.pk)
    assert first.outcome == "retry" and first.retry_in == 0.5
    n.refresh_from_db()
    assert n.status == N.RETRYING and "the mail server" in n.last_error and n.next_attempt_at > timezone.now()
    assert delivery.deliver(n.pk).outcome == "retry"
    assert delivery.deliver(n.pk).outcome == "failed"  # the third of SMRWEB_ALERT_MAX_ATTEMPTS
    n.refresh_from_db()
    assert n.status == N.FAILED and n.attempts == 3 and n.last_error.endswith("giving up")


def test_the_webhook_is_signed_with_the_rules_secret_and_keeps_its_key_across_retries(
    project, alice, receiver
):
    hook = receiver(503, 200)
    n = notify(project, alice, Channel.WEBHOOK, hook.url)
    assert delivery.deliver(n.pk).outcome == "retry"
    n.refresh_from_db()
    assert n.status == N.RETRYING and "HTTP 503" in n.last_error
    assert delivery.deliver(n.pk).outcome == "sent"
    assert len(hook.requests) == 2
    for request in hook.requests:
        headers, body = request["headers"], request["body"]
        expected = hmac.new(
            n.rule.secret.encode(), headers["X-Smrweb-Timestamp"].encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        assert headers["X-Smrweb-Signature"] == f"sha256={expected}"
        assert headers["Idempotency-Key"] == f"smrweb-alert-{n.pk}"
    payload = json.loads(hook.requests[0]["body"])
    assert payload["type"] == "smrweb.alert" and payload["trigger"] == "run.failed"
    assert payload["project"] == "hill" and payload["url"].endswith("/projects/hill/runs/r1/")
    assert "CUDA out of memory" in payload["text"]


def test_slack_gets_text_and_blocks(project, alice, receiver):
    slack = receiver(200)
    n = notify(project, alice, Channel.SLACK, slack.url)
    assert delivery.deliver(n.pk).outcome == "sent"
    message = json.loads(slack.requests[0]["body"])
    assert message["text"].startswith("Hill climb: run r1 failed (oom)")
    assert message["blocks"][0]["text"]["text"].startswith("*<http://localhost:8000/projects/hill/runs/r1/|")
    assert "CUDA out of memory" in message["blocks"][1]["text"]["text"]


def test_a_429_waits_for_retry_after_and_a_4xx_is_not_retried(project, alice, receiver):
    slow = receiver(429, headers={"Retry-After": "1"})
    n = notify(project, alice, Channel.WEBHOOK, slow.url)
    assert delivery.deliver(n.pk) == delivery.Attempt("retry", 1.0)
    refused = receiver(410)
    rule = services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=Channel.SLACK, target=refused.url
    )
    other = alert_evaluation.evaluate_run(failed_run(project, "r2").pk).to_deliver
    m = Notification.objects.get(pk__in=other, rule=rule)
    assert delivery.deliver(m.pk).outcome == "failed"
    m.refresh_from_db()
    assert "HTTP 410" in m.last_error and m.attempts == 1


def test_a_redirect_is_not_followed(project, alice, receiver):
    hook = receiver(302)
    n = notify(project, alice, Channel.WEBHOOK, hook.url)
    assert delivery.deliver(n.pk).outcome == "failed"
    n.refresh_from_db()
    assert "HTTP 302 (a redirect: not followed)" in n.last_error
    assert len(hook.requests) == 1  # nothing went to the Location


def test_private_targets_are_refused_at_send_time_too(project, alice, receiver, settings):
    hook = receiver(200)
    n = notify(project, alice, Channel.WEBHOOK, hook.url)  # saved while the operator allowed loopback
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = []
    assert delivery.deliver(n.pk).outcome == "failed"
    n.refresh_from_db()
    assert "not sent" in n.last_error and "loopback" in n.last_error and hook.requests == []
    settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS = True  # a lab on one network may turn the check off
    m = services.send_test(n.rule, by=alice)
    assert delivery.deliver(m.pk).outcome == "sent" and len(hook.requests) == 1


def test_the_sweep_finds_deliveries_whose_task_was_lost(project, alice, settings):
    settings.SMRWEB_STALE_ACTION_SECONDS = 60
    n = notify(project, alice, Channel.EMAIL, "team@example.com")
    assert alert_delivery.due_deliveries() == []  # just queued
    assert alert_delivery.due_deliveries(timezone.now() + timedelta(minutes=5)) == [n.pk]
    Notification.objects.filter(pk=n.pk).update(status=N.RETRYING, next_attempt_at=timezone.now())
    assert alert_delivery.due_deliveries() == [n.pk]


def test_the_budget_guard_stops_a_push_run_with_a_signed_stop(project, alice, receiver):
    hook = receiver(200)
    services.update_project(project, budget_guard=True, rollback_webhook_url=hook.url)
    services.update_run_settings(project, "r1", budget_usd=1)
    events = [{"type": "state", "state": "running"}, {"type": "agent.turn", "turn": 1, "cost_usd": 2.0}]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    run = Run.objects.get(external_id="r1")
    assert alert_evaluation.evaluate_run(run.pk).stop_requested
    tasks.stop_run(run.pk)
    [request] = hook.requests
    assert json.loads(request["body"])["type"] == "smrweb.stop"
    assert request["headers"]["Idempotency-Key"] == f"smrweb-stop-{run.pk}"
    assert run.project.audit_events.filter(verb="run.stopped").exists()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_event_pushed_through_the_api_reaches_the_mailbox_by_the_worker(
    project, alice, api, celery_worker, mail_catcher
):
    """The whole path with real parts: REST push → commit → signal → Redis → Celery worker evaluates →
    the worker sends through SMTP. No page is opened. A replayed batch sends nothing more."""
    services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=Channel.EMAIL, target="oncall@example.com"
    )
    mail_catcher.messages.clear()
    batch = [
        {"id": "s1", "type": "state", "state": "failed", "failure": {"family": "oom", "detail": "killed"}}
    ]
    started = time.monotonic()
    answer = api.post("/api/v1/projects/hill/runs/r9/events", batch, format="json")
    assert answer.status_code in (200, 201, 202), answer.content
    [message] = mail_catcher.wait_for(1, timeout=60)
    delay = message["at"] - started
    print(f"\nevent → email on this machine: {delay * 1000:.0f} ms")
    assert "run r9 failed (oom)" in message["data"]
    assert api.post("/api/v1/projects/hill/runs/r9/events", batch, format="json").status_code in (
        200,
        201,
        202,
    )
    tasks.evaluate_alerts.delay("run", Run.objects.get(external_id="r9").pk)  # and a redelivered evaluation
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(mail_catcher.messages) == 1
    assert Notification.objects.get(rule__project=project).status == N.SENT


def test_an_evaluation_that_could_not_be_queued_is_found_by_the_sweep(project, alice, monkeypatch):
    """The broker is down when the run fails: the evaluation is not queued, its coalescing key is not
    left behind (the next change would queue again), and beat's sweep lists the run."""
    from django.core.cache import cache

    services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=Channel.INBOX, recipient="alice"
    )
    queued = []
    monkeypatch.setattr(tasks, "queue_quietly", lambda task, *args, **kw: False)  # what a down broker answers
    before = timezone.now()
    run = failed_run(project)
    tasks.queue_alert_evaluation(None, "run", run.pk)
    assert cache.get(cachekeys.alerts_due("run", run.pk)) is None
    assert alert_evaluation.changed_since(before)["run"] == [run.pk]
    monkeypatch.setattr(
        tasks, "queue_quietly", lambda task, *args, **kw: queued.append((task.name, args)) or True
    )
    cache.set("alerts:swept-at", before)
    assert tasks.sweep_alerts() == 1
    assert queued == [("smrweb.sources.tasks.evaluate_alerts", ("run", run.pk))]
    # Run by a worker, the evaluation notifies once, however often the sweep lists the run.
    tasks.evaluate_alerts("run", run.pk)
    tasks.evaluate_alerts("run", run.pk)
    assert Notification.objects.filter(status=N.SENT).count() == 1


def test_a_persons_stop_of_a_push_run_is_not_called_a_budget_guard_stop(project, alice, receiver):
    hook = receiver(200)
    services.update_project(project, rollback_webhook_url=hook.url)
    events = [{"type": "state", "state": "running"}]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    run = Run.objects.get(external_id="r1")
    services.request_stop(run, by=alice)
    tasks.stop_run(run.pk)
    assert json.loads(hook.requests[0]["body"])["reason"] == "a reviewer asked smrweb to stop the run"
