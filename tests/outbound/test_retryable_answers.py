"""One rule of which answers are retried (issue 35): a receiver answering HTTP 408 (Request Timeout) gets
another attempt, whatever the action — a rollback, the start of the next run, a steering message, an
alert. Before, alerts retried a 408 and the rest gave up at once. Each against a real local HTTP server."""

from __future__ import annotations

import json

import httpx
import pytest

from smrweb.outbound import alerts as delivery
from smrweb.outbound import dispatch, webhooks
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    Channel,
    Notification,
    Project,
    Rollback,
    Run,
    RunControl,
    RunLaunch,
    Trigger,
)
from smrweb.tracking.services import launches, rollbacks
from smrweb.tracking.services.alerts import evaluation as alerts
from tests.sources.test_alert_delivery import Receiver as SlackReceiver
from tests.sources.test_submission_loop import Receiver, scored_with_artifact

pytestmark = pytest.mark.django_db


@pytest.fixture
def hooked(project):
    """A push project whose webhook answers 408 once, then takes the request."""
    receiver = Receiver([408, 200], webhooks.webhook_secret(project))
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url=receiver.url)
    project.refresh_from_db()
    yield project, receiver
    receiver.stop()


def test_a_rollback_answered_408_is_retried(bob, hooked):
    project, receiver = hooked
    sub = scored_with_artifact(project, b"ok v1")
    rollback = rollbacks.request_rollback(by=bob, reason="r", submission=sub).rollback
    assert [dispatch.dispatch_rollback(rollback.pk).outcome for _ in range(2)] == ["retry", "applied"]
    detail = Rollback.objects.get(pk=rollback.pk).detail
    assert "HTTP 408; retrying" in detail and len(receiver.seen) == 2


def test_a_launch_answered_408_is_retried(bob, hooked):
    project, receiver = hooked
    launch, _ = launches.request_launch(
        project, by=bob, kickoff="go on", idempotency_key="5f0e4d3c-2b1a-4c9d-8e7f-6a5b4c3d2e1f"
    )
    assert [dispatch.dispatch_launch(launch.pk).outcome for _ in range(2)] == ["retry", "accepted"]
    assert "HTTP 408; retrying" in RunLaunch.objects.get(pk=launch.pk).detail and len(receiver.seen) == 2


def test_a_steering_message_answered_408_is_retried(bob, hooked):
    project, receiver = hooked
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    run = Run.objects.get(project=project, external_id="r1")
    control = services.request_control(run, by=bob, kind="message", body="Try cosine decay.")
    assert [dispatch.dispatch_control(control.pk).outcome for _ in range(2)] == ["retry", "accepted"]
    assert "HTTP 408; retrying" in RunControl.objects.get(pk=control.pk).detail and len(receiver.seen) == 2


def test_an_alert_answered_408_is_retried(alice, project):
    """Alerts retried a 408 already: the rule they had is the one all now share."""
    receiver = SlackReceiver(408, 200)
    rule = services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=Channel.SLACK, target=receiver.url
    )
    events = [{"type": "state", "state": "failed", "failure": {"family": "oom", "detail": "killed"}}]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    [pk] = alerts.evaluate_run(Run.objects.get(project=project, external_id="r1").pk).to_deliver
    assert Notification.objects.get(pk=pk).rule == rule
    assert delivery.deliver(pk).outcome == "retry"
    assert "HTTP 408; retrying" in Notification.objects.get(pk=pk).last_error
    assert delivery.deliver(pk).outcome == "sent"
    receiver.stop()


@pytest.mark.parametrize(
    ("status", "header", "retryable", "hint"),
    [
        (429, "2", True, 2.0),
        (503, "7", True, 7.0),  # RFC 9110 10.2.3: a 503 may say when to come back, too
        (502, None, True, None),
        (408, "3", True, 3.0),
        (404, "5", False, None),  # not retried: its header means nothing here
        (200, "5", False, None),
    ],
)
def test_the_hint_of_every_retryable_answer_is_read(status, header, retryable, hint):
    from smrweb.core import outbound
    from smrweb.outbound import http

    headers = httpx.Headers({"Retry-After": header} if header else {})
    sent = http.classify(outbound.Answer(status=status, headers=headers), who="the webhook")
    assert (sent.retryable, sent.hint) == (retryable, hint)
