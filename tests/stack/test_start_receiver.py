"""The demo harness's answer to `smrweb.start` against a live server: it starts a run under the id
smrweb chose, posts the kickoff as the run's first runtime message, and the run climbs; the launch is
confirmed and the run linked to its parent. A delivery retried with the same key starts nothing twice."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest

from smrweb.core import outbound
from smrweb.outbound import dispatch, webhooks
from smrweb.stack.rollback_receiver import make_handler
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run, RunLaunch, RuntimeMessage
from smrweb.tracking.services import launches
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def harness_webhook(project, token, live_server):
    handler = make_handler(
        url=live_server.url,
        tokens={"hill": token},
        secrets={"hill": webhooks.webhook_secret(project)},
        interval=0.05,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    services.update_project(project, rollback_webhook_url=f"http://127.0.0.1:{server.server_port}/rollback")
    yield server
    # The run it started would climb on into the database's teardown (on PostgreSQL a push meeting the
    # flush's TRUNCATE is a deadlock): stop it first.
    handler.stop_harness()
    server.shutdown()


def test_the_demo_harness_starts_the_named_run_with_the_kickoff_and_it_climbs(project, bob, harness_webhook):
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "done"}]'))
    parent = Run.objects.get(external_id="r1")
    launch, _ = launches.request_launch(
        project,
        by=bob,
        from_run=parent,
        kickoff="## Carry-forward: hill\n\nTry momentum.",
        model_profile="codex_gpt_5_4_medium",
        budget_usd="2",
        idempotency_key="demo-start-key-1",
    )
    assert dispatch.dispatch_launch(launch.pk).outcome == "accepted"
    launch.refresh_from_db()
    run = Run.objects.get(project=project, external_id="r1-next-1")
    assert launch.status == "confirmed" and launch.run == run and run.parent == parent
    # The harness reported the run before it answered: the answer is in the log all the same.
    assert "run r1-next-1 appeared" in launch.detail and "the webhook answered HTTP 200" in launch.detail
    kickoff = RuntimeMessage.objects.filter(run=run).order_by("seq").first()
    assert kickoff.body == "## Carry-forward: hill\n\nTry momentum."
    assert kickoff.topic == "smr.trigger.initial_runtime_message"
    assert (run.requested_profile, str(run.budget_usd)) == ("codex_gpt_5_4_medium", "2.000000")

    # It climbs: the harness keeps pushing; its scores rise (the generic scenario maximizes).
    wait_for(lambda: Run.objects.get(pk=run.pk).score_count >= 4, timeout=60)
    scores = list(run.submissions.order_by("ts").values_list("score", flat=True))
    assert Run.objects.get(pk=run.pk).best_score == max(scores) > scores[0]

    # The same delivery again (a retry after a lost answer) starts nothing new.
    launch_again = RunLaunch.objects.get(pk=launch.pk)
    body, headers = webhooks.start_request(launch_again)
    answer = outbound.post(project.rollback_webhook_url, content=body, headers=headers, timeout=10)
    assert answer.status == 200
    assert Run.objects.filter(project=project).count() == 2
