"""Starting the next run of a push project: a signed `smrweb.start` webhook to the harness, verified by a
real HTTP receiver, retried with backoff by a real worker on 503 and not on 400; the run id smrweb chose
links the run when the harness starts pushing its events."""

from __future__ import annotations

import json

import pytest

from smrweb.outbound import dispatch, webhooks
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run, RunLaunch
from smrweb.tracking.services import launches
from tests.conftest import wait_for
from tests.sources.test_submission_loop import Receiver

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "5f0e4d3c-2b1a-4c9d-8e7f-6a5b4c3d2e1f"


@pytest.fixture
def parent(project):
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "failed"}]'))
    return Run.objects.get(project=project, external_id="r1")


def receiving(project, statuses):
    receiver = Receiver(statuses, webhooks.webhook_secret(project))
    services.update_project(project, rollback_webhook_url=receiver.url)
    return receiver


@pytest.mark.integration
def test_the_start_is_signed_retried_on_503_and_the_runs_events_confirm_it(
    client, bob, project, parent, celery_worker
):
    receiver = receiving(project, [503, 200])
    try:
        client.force_login(bob)
        response = client.post(
            "/projects/hill/launches/new",
            {
                "idempotency_key": KEY,
                "from_run": "r1",
                "carry_forward": "## Carry-forward: hill",
                "text": "Smaller steps.",
                "budget_usd": "1.50",
            },
        )
        assert response.status_code == 302
        wait_for(lambda: RunLaunch.objects.get().status == "accepted")
    finally:
        receiver.stop()
    launch = RunLaunch.objects.get()
    assert launch.attempts == 2 and "HTTP 503" in launch.detail and "retrying" in launch.detail
    assert [s["valid"] for s in receiver.seen] == [True, True]
    assert {s["key"] for s in receiver.seen} == {KEY}
    body = receiver.seen[0]["body"]
    assert (body["type"], body["run_id"], body["from_run"], body["project"]) == (
        "smrweb.start",
        "r1-next-1",
        "r1",
        "hill",
    )
    assert (
        body["kickoff"] == "## Carry-forward: hill\n\nSmaller steps." and body["budget"]["usd"] == "1.500000"
    )

    # The harness starts the run under the id smrweb chose: the first event links it.
    services.ingest_events(
        project, "r1-next-1", parse_events(json.dumps([{"type": "message", "body": "kickoff"}]))
    )
    launch.refresh_from_db()
    assert launch.status == "confirmed" and launch.run.parent == parent


def test_a_start_the_harness_refuses_fails_with_its_status_and_is_not_retried(bob, project, parent):
    receiver = receiving(project, [400])
    try:
        launch, _ = launches.request_launch(project, by=bob, kickoff="go", idempotency_key=KEY)
        assert dispatch.dispatch_launch(launch.pk).outcome == "failed"
    finally:
        receiver.stop()
    launch.refresh_from_db()
    assert launch.status == "failed" and launch.attempts == 1 and "HTTP 400" in launch.detail
    assert "giving up" in launch.detail and len(receiver.seen) == 1


def test_a_webhook_url_the_outbound_guard_refuses_is_not_retried(bob, project, parent, settings):
    services.update_project(project, rollback_webhook_url="https://hooks.example/start")
    launch, _ = launches.request_launch(project, by=bob, kickoff="go", idempotency_key=KEY)
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = []
    project.rollback_webhook_url = "http://10.0.0.1/start"  # a private address, set behind the form's back
    project.save()
    assert dispatch.dispatch_launch(launch.pk).outcome == "failed"
    launch.refresh_from_db()
    assert "not sent" in launch.detail and launch.attempts == 1
