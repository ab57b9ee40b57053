"""Steering a push project's run: a signed webhook to the harness (`smrweb.message`, `smrweb.pause`,
`smrweb.resume`) checked by a real HTTP receiver, retried with backoff on 503 and 429 until it is taken,
given up after the maximum number of attempts, failed at once on a 4xx; the harness reporting it back
through the API confirms it."""

from __future__ import annotations

import json

import pytest

from smrweb.outbound import dispatch, webhooks
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Project, Run, RunControl
from smrweb.tracking.services import dispatched
from tests.conftest import wait_for
from tests.sources.test_submission_loop import Receiver


@pytest.fixture
def receiver(project):
    made: list[Receiver] = []

    def start(statuses: list[int]) -> Receiver:
        made.append(Receiver(statuses, webhooks.webhook_secret(project)))
        Project.objects.filter(pk=project.pk).update(rollback_webhook_url=made[-1].url)
        return made[-1]

    yield start
    for r in made:
        r.stop()


@pytest.fixture
def running(project):
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="http://127.0.0.1:9/unset")
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    return Run.objects.get(project=project, external_id="r1")


def until_done(control_id: int) -> list[str]:
    """The task's attempts, one after another (the backoff is the task's, tested in tests/sources)."""
    outcomes = [dispatch.dispatch_control(control_id).outcome]
    while outcomes[-1] == "retry":
        outcomes.append(dispatch.dispatch_control(control_id).outcome)
    return outcomes


@pytest.mark.django_db
def test_a_message_is_posted_signed_and_retried_on_503_until_the_harness_takes_it(running, bob, receiver):
    hook = receiver([503, 503, 202])
    control = services.request_control(running, by=bob, kind="message", body="Try cosine decay.")
    assert until_done(control.pk) == ["retry", "retry", "accepted"]
    assert [s["valid"] for s in hook.seen] == [True, True, True]
    assert {s["key"] for s in hook.seen} == {f"smrweb-control-{control.pk}"}
    body = hook.seen[0]["body"]
    assert body == {
        "type": "smrweb.message",
        "control_id": control.pk,
        "project": "hill",
        "run": "r1",
        "body": "Try cosine decay.",
        "message_id": f"smrweb-control-{control.pk}",
        "requested_by": "bob",
        "requested_at": body["requested_at"],
    }
    control.refresh_from_db()
    assert (control.status, control.attempts, control.source_ref) == ("accepted", 3, control.idempotency_key)
    lines = control.detail.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "attempt 1: the webhook answered HTTP 503; retrying in 5 s",
        "attempt 2: the webhook answered HTTP 503; retrying in 10 s",
        "attempt 3: the webhook answered HTTP 202",
    ]
    # The harness reports it back as a message event with the webhook's message_id: confirmed.
    events = [{"type": "message", "id": body["message_id"], "topic": "smrweb.steer", "body": body["body"]}]
    services.ingest_events(running.project, "r1", parse_events(json.dumps(events)))
    assert RunControl.objects.get().status == "confirmed"


@pytest.mark.django_db
def test_pause_and_resume_webhooks_carry_no_body_and_are_confirmed_by_the_reported_state(
    running, alice, receiver
):
    hook = receiver([202, 200])
    pause = services.request_control(running, by=alice, kind="pause")
    assert until_done(pause.pk) == ["accepted"]
    assert hook.seen[0]["body"] | {"requested_at": ""} == {
        "type": "smrweb.pause",
        "control_id": pause.pk,
        "project": "hill",
        "run": "r1",
        "requested_by": "alice",
        "requested_at": "",
    }
    services.ingest_events(
        running.project, "r1", parse_events(b'[{"type": "state", "id": "p", "state": "paused"}]')
    )
    assert RunControl.objects.get(pk=pause.pk).status == "confirmed"
    resume = services.request_control(Run.objects.get(pk=running.pk), by=alice, kind="resume")
    assert until_done(resume.pk) == ["accepted"]
    assert hook.seen[1]["body"]["type"] == "smrweb.resume" and hook.seen[1]["key"] == resume.idempotency_key
    services.ingest_events(
        running.project, "r1", parse_events(b'[{"type": "state", "id": "r", "state": "running"}]')
    )
    assert RunControl.objects.get(pk=resume.pk).status == "confirmed"


@pytest.mark.django_db
def test_it_gives_up_after_the_maximum_number_of_attempts(running, bob, receiver, settings):
    settings.SMRWEB_DISPATCH_MAX_ATTEMPTS = 3
    hook = receiver([503] * 10)
    control = services.request_control(running, by=bob, kind="pause")
    assert until_done(control.pk) == ["retry", "retry", "failed"]
    assert len(hook.seen) == 3
    control.refresh_from_db()
    assert control.status == "failed" and control.attempts == 3
    assert control.detail.splitlines()[-1].endswith("attempt 3: the webhook answered HTTP 503; giving up")
    assert dispatch.dispatch_control(control.pk).outcome == "skipped" and len(hook.seen) == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "retried"), [(400, False), (401, False), (404, False), (429, True), (502, True)]
)
def test_what_the_answer_says_decides_whether_to_try_again(running, bob, receiver, status, retried):
    receiver([status, 200])
    control = services.request_control(running, by=bob, kind="message", body="hi")
    outcomes = until_done(control.pk)
    assert outcomes == (["retry", "accepted"] if retried else ["failed"])
    control.refresh_from_db()
    assert f"the webhook answered HTTP {status}" in control.detail


@pytest.mark.django_db
def test_a_request_whose_project_lost_its_webhook_fails_without_sending(running, bob, receiver):
    hook = receiver([200])
    control = services.request_control(running, by=bob, kind="message", body="hi")
    Project.objects.filter(pk=running.project_id).update(rollback_webhook_url="")
    assert until_done(control.pk) == ["failed"]
    assert hook.seen == [] and "not sent: This project has no webhook URL" in RunControl.objects.get().detail


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_from_the_run_page_through_a_worker_retried_then_taken(client, bob, project, receiver, celery_worker):
    hook = receiver([503, 202])
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    client.force_login(bob)
    answer = client.post("/projects/hill/runs/r1/steer", {"action": "message", "body": "widen the MLP"})
    assert answer.status_code == 302
    wait_for(lambda: RunControl.objects.get().status == "accepted", timeout=40)
    control = RunControl.objects.get()
    assert control.attempts == 2 and [s["valid"] for s in hook.seen] == [True, True]
    assert hook.seen[1]["body"]["body"] == "widen the MLP" and "HTTP 503; retrying in" in control.detail


@pytest.mark.django_db
def test_a_request_the_queue_lost_is_queued_again_by_the_stale_action_sweep(running, bob, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from smrweb import tasks

    queued: list[int] = []
    monkeypatch.setattr(tasks.dispatch_control, "delay", queued.append)
    lost = services.request_control(running, by=bob, kind="message", body="lost in transit")
    fresh = services.request_control(running, by=bob, kind="message", body="just asked")
    died = services.request_control(running, by=bob, kind="pause")
    dispatched.start_attempt(RunControl, died.pk)  # its worker died mid-attempt
    long_ago = timezone.now() - timedelta(hours=2)
    RunControl.objects.filter(pk__in=[lost.pk, died.pk]).update(updated=long_ago)
    swept = tasks.redispatch_stale_actions()["controls"]
    assert sorted(swept) == sorted(queued) == sorted([lost.pk, died.pk])
    assert fresh.pk not in queued
    assert tasks.redispatch_stale_actions()["controls"] == []  # claimed: not queued again at the next tick
