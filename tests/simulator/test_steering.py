"""The simulator's steering routes through the real SDK and against the spec: a runtime message is stored,
answered as `SmrWorkerRuntimeMessageResponse`, listed with the run's messages and answered by the agent two
live ticks later; pause and resume move the run (a paused run emits nothing), refuse with the 409 detail the
SDK types, and every call's body is recorded for tests to read."""

from __future__ import annotations

import pytest
from managed_research.errors import SmrApiError
from managed_research.models.run_control import ManagedResearchRunControlError
from managed_research.models.run_state import RunState

from smrweb.simulator.world.steering import REPLY_TOPIC
from tests.simulator.conftest import component_schema, validate
from tests.simulator.test_contract import PR, run_of_fate, truth_runs

R = "/smr/runs/{run_id}"


def running_climber(handle) -> dict:
    return next(r for r in truth_runs(handle) if r["fate"] == "climb" and r["state"] == "running")


@pytest.fixture
def young_sim():
    """Early in the world: run 0 climbs for a long while yet (the shared worlds are 110 ticks in)."""
    from tests.simulator.conftest import make_sim

    handle = make_sim(warmup=12)
    yield handle
    handle.stop()


def test_a_message_is_stored_answered_listed_and_replied_to(young_sim, client_for, raw, check):
    client = client_for(young_sim)
    rid = running_climber(young_sim)["run_id"]
    answer = client.enqueue_runtime_message(
        rid, body="  Try cosine decay.  ", topic="smrweb.steer", mode="steer", causation_id="c-1"
    )
    assert (answer["body"], answer["topic"], answer["mode"], answer["sender"], answer["status"]) == (
        "Try cosine decay.",  # the SDK strips what it sends
        "smrweb.steer",
        "steer",
        "user",
        "queued",
    )
    assert answer["causation_id"] == "c-1" and answer["target"] == "role:orchestrator"
    listed = client.list_project_run_runtime_messages(young_sim.project_id, rid, limit=1000)
    assert listed[-1] == answer and [m["seq"] for m in listed] == list(range(1, len(listed) + 1))
    raw_answer = raw(young_sim, "POST", f"/smr/runs/{rid}/runtime/messages", json={"body": "again"})
    assert raw_answer.status_code == 200
    check("POST", R + "/runtime/messages", raw_answer.json())
    check(
        "GET",
        PR + "/runtime/messages",
        raw(young_sim, "GET", f"/smr/projects/{young_sim.project_id}/runs/{rid}/runtime/messages").json(),
    )

    young_sim.world.tick(1)
    assert not [m for m in client.runs.list_runtime_messages(rid, limit=1000) if m["topic"] == REPLY_TOPIC]
    young_sim.world.tick(1)
    replies = [m for m in client.runs.list_runtime_messages(rid, limit=1000) if m["topic"] == REPLY_TOPIC]
    assert [r["body"] for r in replies] == [
        "Acknowledged: “Try cosine decay.”. Adjusting the plan accordingly.",
        "Acknowledged: “again”. Adjusting the plan accordingly.",
    ]
    assert (
        replies[0]["causation_id"] == answer["message_id"]
        and replies[0]["payload"]["in_reply_to"] == answer["message_id"]
    )
    assert (replies[0]["sender"], replies[0]["target"], replies[0]["mode"]) == (
        "role:orchestrator",
        "role:user",
        "note",
    )


def test_bad_messages_are_422_and_a_finished_run_refuses_with_409(young_sim, client_for, raw):
    rid = running_climber(young_sim)["run_id"]
    for body, loc in (
        ({}, ["body"]),
        ({"body": "x", "mode": "m" * 33}, ["body", "mode"]),
        ({"body": 3}, ["body", "body"]),
    ):
        answer = raw(young_sim, "POST", f"/smr/runs/{rid}/runtime/messages", json=body)
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == loc, body
    failed = run_of_fate(young_sim, "fail")
    young_sim.world.tick(40)
    assert run_of_fate(young_sim, "fail")["state"] == "failed"
    with pytest.raises(SmrApiError) as refused:
        client_for(young_sim).enqueue_runtime_message(failed["run_id"], body="too late")
    assert refused.value.status_code == 409
    assert raw(young_sim, "POST", "/smr/runs/nope/runtime/messages", json={"body": "x"}).status_code == 404


def test_pause_and_resume_move_the_run_and_a_paused_run_emits_nothing(
    young_sim, client_for, raw, check, spec
):
    client = client_for(young_sim)
    pid = young_sim.project_id
    truth = running_climber(young_sim)
    rid = truth["run_id"]
    ack = client.runs.pause(rid, project_id=pid)
    assert (
        ack.run.state is RunState.PAUSED and ack.enqueue_status.value == "accepted" and ack.control_intent_id
    )
    paused = next(r for r in truth_runs(young_sim) if r["run_id"] == rid)
    assert paused["state"] == "paused" and paused["live_phase"] == "paused"
    entries = paused["usage"]["entries"]
    young_sim.world.tick(6)
    still = next(r for r in truth_runs(young_sim) if r["run_id"] == rid)
    assert still["usage"]["entries"] == entries and still["state"] == "paused"
    with pytest.raises(ManagedResearchRunControlError) as refused:
        client.runs.pause(rid, project_id=pid)
    assert refused.value.error_code.value == "already_in_state" and refused.value.current_state == "paused"
    run_answer = raw(young_sim, "GET", f"/smr/runs/{rid}").json()
    check("GET", R, run_answer)
    assert run_answer["lifecycle"]["authority_phase"] == "paused"

    resumed = raw(young_sim, "POST", f"/smr/runs/{rid}/resume")
    assert resumed.status_code == 200 and resumed.json()["state"] == "running"
    check("POST", R + "/resume", resumed.json())
    validate(component_schema(spec, "SmrRunResponse"), resumed.json())
    young_sim.world.tick(2)
    assert next(r for r in truth_runs(young_sim) if r["run_id"] == rid)["usage"]["entries"] > entries
    with pytest.raises(ManagedResearchRunControlError) as refused:
        client.resume_run(rid)
    assert refused.value.error_code.value == "already_in_state" and refused.value.current_state == "running"
    topics = [m["topic"] for m in client.runs.list_runtime_messages(rid, limit=1000)]
    assert topics.count("smr.control.pause") == 1 and topics.count("smr.control.resume") == 1
    intents = next(r for r in truth_runs(young_sim) if r["run_id"] == rid)["control_intents"]
    assert [i["action"] for i in intents] == ["pause", "resume"]


def test_pausing_a_terminal_or_queued_run_is_refused_as_the_sdk_expects(young_sim, client_for, raw):
    client = client_for(young_sim)
    rid = running_climber(young_sim)["run_id"]
    client.runs.stop(rid, project_id=young_sim.project_id)
    with pytest.raises(ManagedResearchRunControlError) as refused:
        client.pause_run(rid)
    assert refused.value.error_code.value == "terminal_run" and refused.value.retryable is False
    conflict = raw(young_sim, "POST", f"/smr/runs/{rid}/resume")
    assert conflict.status_code == 409
    assert set(conflict.json()["detail"]) == {"error_code", "message", "retryable", "current_state", "run_id"}
    while not (queued := [r for r in truth_runs(young_sim) if r["state"] == "queued"]):
        young_sim.world.tick(1)  # the next run appears queued within a few ticks
    with pytest.raises(ManagedResearchRunControlError) as refused:
        client.pause_run(queued[0]["run_id"])
    assert refused.value.error_code.value == "runtime_not_live" and refused.value.current_state == "queued"


def test_every_call_with_a_body_is_recorded_for_tests(young_sim, client_for):
    client = client_for(young_sim)
    rid = running_climber(young_sim)["run_id"]
    young_sim.stats.reset()
    client.enqueue_runtime_message(rid, body="hello", causation_id="k")
    client.pause_run(rid, project_id=young_sim.project_id)
    client.runs.list_runtime_messages(rid)  # a GET: counted, not recorded
    calls = young_sim.stats.snapshot()["calls"]
    assert calls == [
        {
            "method": "POST",
            "path": f"/smr/runs/{rid}/runtime/messages",
            "route": "enqueue_message",
            "body": {"causation_id": "k", "body": "hello"},
        },
        {
            "method": "POST",
            "path": f"/smr/projects/{young_sim.project_id}/runs/{rid}/pause",
            "route": "pause",
            "body": None,
        },
    ]


def test_client_actions_apply_while_the_world_is_frozen(young_sim, client_for):
    client = client_for(young_sim)
    rid = running_climber(young_sim)["run_id"]
    young_sim.world.freeze()
    client.enqueue_runtime_message(rid, body="frozen")
    assert client.pause_run(rid)["state"] == "paused"
    assert client.resume_run(rid)["state"] == "running"
    young_sim.world.tick(3)  # frozen: no tick, so no reply yet
    assert not [m for m in client.runs.list_runtime_messages(rid, limit=1000) if m["topic"] == REPLY_TOPIC]
    young_sim.world.thaw()
    young_sim.world.tick(2)
    assert [m for m in client.runs.list_runtime_messages(rid, limit=1000) if m["topic"] == REPLY_TOPIC]
