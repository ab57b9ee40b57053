"""Steering an SMR run through the real `managed-research` SDK against the simulator: a message from the run
page reaches the backend with the right body, comes back in the run's runtime messages (confirming the
request) and the simulated agent replies; pause and resume from the API move the run's state, which the
poller brings back; SMR's refusals and faults are retried or recorded as they deserve, and a message whose
answer was lost is not sent twice."""

from __future__ import annotations

import httpx
import pytest

from smrweb.outbound import dispatch
from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, Run, RunControl, RuntimeMessage
from smrweb.tracking.services import dispatched
from tests.api.helpers import session_client
from tests.conftest import wait_for
from tests.sources.smr_project import smr_project_on

API_KEY, SMR_PROJECT = "steer-key", "smr-steer"


@pytest.fixture
def simulator(start_sim):
    # The world moves only when a test ticks it: run 0 is running with 35+ ticks to go.
    return start_sim(
        api_key=API_KEY, project_ids=[SMR_PROJECT], runs=2, tick=0.1, seed=5, warmup=10, auto_tick=False
    )


@pytest.fixture
def smr_project(alice, bob, victor, simulator):
    return smr_project_on(
        simulator,
        slug="smr-steer",
        key="steer",
        api_key=API_KEY,
        smr_project=SMR_PROJECT,
        alice=alice,
        bob=bob,
        victor=victor,
    )


def live_run(project, simulator) -> Run:
    """Run 0 of the world: a climbing run, running for a long while yet."""
    first = simulator.world.runs_by_project[SMR_PROJECT][0]
    assert first.state == "running"
    return Run.objects.get(project=project, state="running", external_id=first.run_id)


def calls(simulator, route: str) -> list[dict]:
    return [c for c in simulator.stats.snapshot()["calls"] if c["route"] == route]


def synced(project, predicate):
    """Sync (as the poller does) until `predicate()` holds; the worker's own syncs may hold the lease."""

    def check():
        sync.sync_project(project, owner="test")
        return predicate()

    return wait_for(check, timeout=30, interval=0.3)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_message_from_the_run_page_reaches_smr_comes_back_and_the_agent_replies(
    client, bob, smr_project, simulator, celery_worker
):
    run = live_run(smr_project, simulator)
    client.force_login(bob)
    words = "Try cosine decay; keep the batch size at 64."
    answer = client.post(
        f"/projects/smr-steer/runs/{run.external_id}/steer", {"action": "message", "body": words}
    )
    assert answer.status_code == 302
    control = RunControl.objects.get()
    wait_for(lambda: RunControl.objects.get().status in ("accepted", "confirmed"))

    [sent] = calls(simulator, "enqueue_message")
    assert sent == {
        "method": "POST",
        "path": f"/smr/runs/{run.external_id}/runtime/messages",
        "route": "enqueue_message",
        "body": {
            "body": words,
            "topic": "smrweb.steer",
            "mode": "steer",
            "causation_id": f"smrweb-control-{control.pk}",
        },
    }
    control.refresh_from_db()
    messages = httpx.get(
        f"{simulator.url}/smr/runs/{run.external_id}/runtime/messages",
        headers={"Authorization": f"Bearer {API_KEY}"},
    ).json()
    [in_world] = [m for m in messages if m.get("causation_id") == control.idempotency_key]
    assert control.source_ref == in_world["message_id"] and in_world["body"] == words
    assert f"SMR queued the message (message {in_world['message_id']}, #{in_world['seq']})" in control.detail

    # The poller brings the message back among the run's runtime messages: the request is confirmed.
    synced(smr_project, lambda: RunControl.objects.get().status == "confirmed")
    mine = RuntimeMessage.objects.get(run=run, event_id=f"message:{control.source_ref}")
    assert (mine.body, mine.topic, mine.mode, mine.target) == (
        words,
        "smrweb.steer",
        "steer",
        "role:orchestrator",
    )

    # Two live ticks later the agent acknowledges it.
    simulator.world.tick(3)
    reply = synced(
        smr_project, lambda: RuntimeMessage.objects.filter(run=run, topic="smr.orchestrator.reply").first()
    )
    assert reply.body == f"Acknowledged: “{words}”. Adjusting the plan accordingly." and reply.seq > mine.seq
    page = client.get(f"/projects/smr-steer/runs/{run.external_id}/").content.decode()
    assert "Acknowledged: “Try cosine decay" in page and 'data-control-status="confirmed"' in page
    verbs = list(
        AuditEvent.objects.filter(object_type="runcontrol").order_by("id").values_list("verb", "actor")
    )
    assert verbs == [
        ("control.requested", bob.pk),
        ("control.dispatched", None),
        ("control.accepted", None),
        ("control.confirmed", None),
    ]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_pause_and_resume_from_the_api_move_the_run_and_are_confirmed_by_its_state(
    alice, smr_project, simulator, celery_worker
):
    run = live_run(smr_project, simulator)
    api = session_client(alice)
    pause = api.post(f"/api/v1/projects/smr-steer/runs/{run.external_id}/pause")
    assert pause.status_code == 202, pause.content
    wait_for(lambda: RunControl.objects.get(pk=pause.json()["id"]).status in ("accepted", "confirmed"))
    assert calls(simulator, "pause") == [
        {
            "method": "POST",
            "path": f"/smr/projects/{SMR_PROJECT}/runs/{run.external_id}/pause",
            "route": "pause",
            "body": None,
        }
    ]
    [truth] = [
        r for r in simulator.world.state()["projects"][SMR_PROJECT]["runs"] if r["run_id"] == run.external_id
    ]
    assert truth["state"] == "paused" and [c["action"] for c in truth["control_intents"]] == ["pause"]
    synced(smr_project, lambda: RunControl.objects.get(pk=pause.json()["id"]).status == "confirmed")
    assert Run.objects.get(pk=run.pk).state == "paused"
    control = RunControl.objects.get(pk=pause.json()["id"])
    assert "SMR accepted the pause (run paused)" in control.detail and control.detail.endswith(
        "the run reported paused"
    )
    assert control.source_ref == truth["control_intents"][0]["control_intent_id"]

    # Paused, the run takes no turns however long the world runs.
    turns = Run.objects.get(pk=run.pk).turns.count()
    simulator.world.tick(5)
    sync.sync_project(smr_project, owner="test")
    assert Run.objects.get(pk=run.pk).turns.count() == turns

    resume = api.post(f"/api/v1/projects/smr-steer/runs/{run.external_id}/resume")
    assert resume.status_code == 202, resume.content
    synced(smr_project, lambda: RunControl.objects.get(pk=resume.json()["id"]).status == "confirmed")
    assert [c["route"] for c in calls(simulator, "resume")] == ["resume"]
    simulator.world.tick(2)
    synced(smr_project, lambda: Run.objects.get(pk=run.pk).turns.count() > turns)
    assert Run.objects.get(pk=run.pk).state == "running"
    listed = api.get(f"/api/v1/projects/smr-steer/runs/{run.external_id}/controls").json()["results"]
    assert [(c["kind"], c["status"], c["requested_by"]) for c in listed] == [
        ("resume", "confirmed", "alice"),
        ("pause", "confirmed", "alice"),
    ]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_smr_refusing_a_pause_of_a_run_it_ended_fails_the_request_with_its_reason(
    bob, smr_project, simulator, celery_worker
):
    run = live_run(smr_project, simulator)
    simulator.world.stop(run.external_id)  # ended at the source; smrweb has not polled since
    control = services.request_control(run, by=bob, kind="pause")
    from smrweb.tasks import dispatch_control

    dispatch_control.delay(control.pk)
    wait_for(lambda: RunControl.objects.get().status == "failed")
    control.refresh_from_db()
    assert (
        control.attempts == 1
        and "refused" in control.detail
        and "already terminal (stopped)" in control.detail
    )
    assert control.detail.endswith("giving up")


# --- in process: one attempt at a time ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_5xx_is_retried_and_the_next_attempt_delivers_the_message_once(bob, smr_project, simulator):
    run = live_run(smr_project, simulator)
    control = services.request_control(run, by=bob, kind="message", body="narrow the MLP")
    simulator.set_faults("enqueue_message:5xx=1.0")
    first = dispatch.dispatch_control(control.pk)
    assert first.outcome == "retry" and first.retry_in == 5.0
    simulator.set_faults("")
    assert dispatch.dispatch_control(control.pk).outcome == "accepted"
    control.refresh_from_db()
    assert (control.status, control.attempts) == ("accepted", 2)
    assert "attempt 1: server_error" in control.detail and "retrying in 5 s" in control.detail
    sent = calls(simulator, "enqueue_message")
    assert [c["body"]["causation_id"] for c in sent] == [control.idempotency_key] * 2  # the first one failed
    delivered = [m for m in simulator.world.runs[run.external_id].messages if m.get("causation_id")]
    assert [m["body"] for m in delivered] == ["narrow the MLP"]


@pytest.mark.django_db
def test_a_message_whose_answer_was_lost_is_found_not_sent_again(bob, smr_project, simulator):
    run = live_run(smr_project, simulator)
    control = services.request_control(run, by=bob, kind="message", body="try dropout 0.1")
    dispatched.start_attempt(RunControl, control.pk)  # attempt 1 delivered it, and its answer timed out
    dispatched.note_attempt(
        RunControl, control.pk, "attempt 1: timeout: runtime message: timed out; retrying in 5 s"
    )
    delivered = simulator.world.enqueue_message(
        run.external_id, {"body": "try dropout 0.1", "causation_id": control.idempotency_key}
    )
    assert dispatch.dispatch_control(control.pk).outcome == "accepted"
    control.refresh_from_db()
    assert control.source_ref == delivered["message_id"] and control.attempts == 2
    assert calls(simulator, "enqueue_message") == []  # looked for, found, not sent twice


@pytest.mark.django_db
def test_retries_end_after_the_maximum_number_of_attempts(bob, smr_project, simulator, settings):
    settings.SMRWEB_DISPATCH_MAX_ATTEMPTS = 2
    run = live_run(smr_project, simulator)
    control = services.request_control(run, by=bob, kind="pause")
    simulator.set_faults("pause:429=1.0")
    first = dispatch.dispatch_control(control.pk)
    assert (
        first.outcome == "retry" and first.retry_in == 5.0
    )  # the 429's Retry-After (2 s) is under the floor
    assert dispatch.dispatch_control(control.pk).outcome == "failed"
    control.refresh_from_db()
    assert control.status == "failed" and control.attempts == 2
    assert control.detail.splitlines()[-1].endswith(
        "rate_limited: pause run: Too many requests (simulated); giving up"
    )
    assert dispatch.dispatch_control(control.pk).outcome == "skipped"
