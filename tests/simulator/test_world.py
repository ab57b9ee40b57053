"""The simulated world on its own: deterministic, internally consistent, and showing every fate."""

from __future__ import annotations

import hashlib
import json

import pytest

from smrweb.simulator.world import (
    FAILURE,
    KICKOFF_TOPIC,
    ORCH_DOWNGRADED_PROFILE,
    ORCH_PROFILE,
    PICO_PER_CENT,
    World,
    pico_to_cents,
)
from tests.simulator.conftest import START


def world(seed=11, ticks=130, **kwargs) -> World:
    w = World(seed=seed, start_time=START, **kwargs)
    w.tick(ticks)
    return w


def wire_dump(w: World) -> str:
    """Everything the HTTP API could show, in one string."""
    with w.lock:
        out = {}
        for pid in w.project_ids:
            runs = w.list_runs(pid, limit=10_000)
            out[pid] = {
                "runs": [w.run_wire(r) for r in runs],
                "usage": [w.usage_wire(r) for r in runs],
                "actors": [w.actor_usage_wire(r) for r in runs],
                "manifests": [w.manifest_wire(r) for r in runs],
                "checkpoints": [w.checkpoints_wire(r) for r in runs],
                "messages": [w.messages_wire(r, limit=10_000) for r in runs],
                "experiments": w.experiments_wire(pid, run_id=None, limit=10_000),
                "results": w.results_wire(
                    pid,
                    experiment_id=None,
                    metric=None,
                    comparison_cohort_key=None,
                    truth_status=None,
                    limit=10_000,
                ),
            }
        out["bytes"] = {
            aid: hashlib.sha256(content).hexdigest() for aid, (_, _, content) in w.artifacts.items()
        }
    return json.dumps(out, sort_keys=True)


def runs_by_fate(w: World) -> dict[str, list]:
    fates: dict[str, list] = {}
    for run in w.runs.values():
        fates.setdefault(run.fate, []).append(run)
    return fates


def test_same_seed_same_world_field_for_field():
    a, b = world(seed=3), world(seed=3)
    assert a.state() == b.state()
    assert wire_dump(a) == wire_dump(b)


def test_other_seed_other_world():
    assert wire_dump(world(seed=3)) != wire_dump(world(seed=4))


def test_a_run_evolves_the_same_whatever_the_other_projects():
    solo = world(seed=5, project_ids=["p1"])
    pair = world(seed=5, project_ids=["p1", "p2"])
    assert solo.state()["projects"]["p1"] == pair.state()["projects"]["p1"]
    assert {r.run_id for r in pair.runs_by_project["p1"]}.isdisjoint(
        r.run_id for r in pair.runs_by_project["p2"]
    )


def test_cents_round_half_up_from_pico():
    assert pico_to_cents(0) == 0
    assert pico_to_cents(PICO_PER_CENT // 2 - 1) == 0
    assert pico_to_cents(PICO_PER_CENT // 2) == 1
    assert pico_to_cents(PICO_PER_CENT) == 1
    assert pico_to_cents(3 * PICO_PER_CENT + PICO_PER_CENT // 2) == 4


def test_usage_totals_equal_the_sum_of_entries_exactly():
    w = world()
    with w.lock:
        for run in w.runs.values():
            usage = w.usage_wire(run)
            entries = usage["entries"]
            total = sum(e["cost_pico_usd"] for e in entries)
            assert all(isinstance(e["cost_pico_usd"], int) and e["cost_pico_usd"] > 0 for e in entries)
            assert usage["cost"]["total_pico_usd"] == usage["total_cost_pico_usd"] == total
            assert usage["cost"]["total_cents"] == usage["total_cost_cents"] == pico_to_cents(total)
            assert usage["cost"]["total_usd"] == total / 10**12
            inference = [e for e in entries if e["meter_kind"] == "inference"]
            sandbox = [e for e in entries if e["meter_kind"] == "sandbox_seconds"]
            assert len(inference) + len(sandbox) == len(entries) == usage["totals"]["entries"]
            assert usage["totals"]["input_tokens"] == sum(e["input_tokens"] for e in entries)
            assert usage["totals"]["output_tokens"] == sum(e["output_tokens"] for e in entries)
            assert usage["totals"]["sandbox_seconds"] == sum(e["quantity"] for e in sandbox)
            assert all(e["input_tokens"] == e["output_tokens"] == 0 and e["model"] is None for e in sandbox)
            assert usage["totals"]["orchestrator_turns"] == sum(
                e["actor_role"] == "orchestrator" for e in inference
            )
            assert usage["totals"]["worker_turns"] == sum(e["actor_role"] == "worker" for e in inference)
            # turn_index counts each actor's inference turns from 0
            by_actor: dict[str, list[int]] = {}
            for e in inference:
                by_actor.setdefault(e["actor_id"], []).append(e["turn_index"])
            assert all(turns == list(range(len(turns))) for turns in by_actor.values())
            # orchestrators have no parent, workers point at their orchestrator
            orch = {e["actor_id"] for e in entries if e["actor_role"] == "orchestrator"}
            assert all(e["parent_actor_id"] is None for e in entries if e["actor_role"] == "orchestrator")
            assert (
                all(e["parent_actor_id"] in orch for e in entries if e["actor_role"] == "worker") or not orch
            )
            # entries are in time order with unique ids
            assert [e["created_at"] for e in entries] == sorted(e["created_at"] for e in entries)
            assert len({e["entry_id"] for e in entries}) == len(entries)

            summary = w.cost_summary_wire(run)
            assert summary["total_pico_usd"] == total
            assert sum(m["billed_amount_pico_usd"] for m in summary["by_meter"]) == total
            meters = {m["meter_kind"]: m for m in summary["by_meter"]}
            assert meters.get("inference", {}).get("billed_amount_pico_usd", 0) == sum(
                e["cost_pico_usd"] for e in inference
            )
            assert meters.get("sandbox_seconds", {}).get("quantity", 0) == usage["totals"]["sandbox_seconds"]

            actors = w.actor_usage_wire(run)
            assert actors["count"] == len(actors["actors"])
            assert sum(a["event_count"] for a in actors["actors"]) == len(entries)
            assert (
                sum(a["token_usage"]["input_tokens"] for a in actors["actors"])
                == usage["totals"]["input_tokens"]
            )
            for row in actors["actors"]:
                mine = [e for e in entries if e["actor_id"] == row["actor_id"]]
                assert row["billed_amount_cents"] == pico_to_cents(sum(e["cost_pico_usd"] for e in mine))
                assert {e["actor_role"] for e in mine} == {row["participant_role"]}


def test_artifact_digests_match_their_bytes():
    w = world()
    assert w.artifacts
    for run, artifact, content in w.artifacts.values():
        assert artifact["digest"] == "sha256:" + hashlib.sha256(content).hexdigest()
        assert artifact["size_bytes"] == len(content)
        assert artifact["path"] == "submission/optimizer.py"
        compile(content, "optimizer.py", "exec")  # a real Python module
        assert artifact["metadata"]["experiment_id"] in {e["experiment_id"] for e in run.experiments}
    assert len({d for _, a, _ in w.artifacts.values() for d in [a["digest"]]}) == len(w.artifacts)


def test_improvements_are_best_so_far_and_each_has_an_artifact_and_a_checkpoint():
    w = world()
    for run in w.runs.values():
        best = float("inf")
        improved = []
        for result in run.results:
            assert result["metric"] == "val_loss" and result["metric_direction"] == "lower_is_better"
            assert result["delta"] == pytest.approx(result["value"] - result["baseline_value"], abs=1e-6)
            if result["value"] < best:
                best = result["value"]
                improved.append(result["experiment_id"])
            assert result["metadata"]["improvement"] == (improved[-1:] == [result["experiment_id"]])
        assert [a["metadata"]["experiment_id"] for a in run.artifacts] == improved
        assert len(run.checkpoints) == len(run.artifacts)
        scores = [a["metadata"]["score"] for a in run.artifacts]
        assert scores == sorted(scores, reverse=True)
        assert len(run.experiments) == len(run.results)
    # the climb is noisy: not every attempt improves
    assert sum(len(r.results) for r in w.runs.values()) > sum(len(r.artifacts) for r in w.runs.values())


def test_every_fate_is_present():
    w = world(ticks=150)
    fates = runs_by_fate(w)
    assert set(fates) == {"climb", "fail", "wedge", "downgrade"}

    (failed,) = fates["fail"]
    assert failed.state == "failed" and failed.terminal_outcome == "failed"
    assert failed.failure == FAILURE
    assert failed.failure["detail"] == "repo_like_task_count_mismatch:requested=2:persisted=3"
    with w.lock:
        wire = w.run_wire(failed)
    assert wire["lifecycle"]["failure"]["family"] == "runtime"
    assert wire["lifecycle"]["terminal_phase"] == "failed"

    (downgraded,) = fates["downgrade"]
    assert (downgraded.requested_profile, downgraded.resolved_profile) == (
        ORCH_PROFILE,
        ORCH_DOWNGRADED_PROFILE,
    )
    assert {
        e["model"]
        for e in downgraded.entries
        if e["actor_role"] == "orchestrator" and e["meter_kind"] == "inference"
    } == {"gpt-5.4-mini"}
    others = [r for r in w.runs.values() if r.fate != "downgrade"]
    assert all(r.requested_profile == r.resolved_profile == ORCH_PROFILE for r in others)

    assert all(r.state == "done" and r.terminal_outcome == "done" for r in fates["climb"])
    failed_checkpoints = [c for r in w.runs.values() for c in r.checkpoints if c["state"] == "failed"]
    assert failed_checkpoints
    assert all(
        c["metadata"]["failure_reason"].startswith("RuntimeError: workspace does not exist: ")
        and not c["restorable"]
        for c in failed_checkpoints
    )
    for run in w.runs.values():
        kickoff = run.messages[0]
        assert (kickoff["seq"], kickoff["payload"]["topic"], kickoff["target"], kickoff["mode"]) == (
            1,
            KICKOFF_TOPIC,
            "role:orchestrator",
            "queue",
        )
        assert [m["seq"] for m in run.messages] == list(range(1, len(run.messages) + 1))


def test_the_wedged_run_stays_running_and_silent_forever():
    w = world(ticks=60)
    (wedged,) = runs_by_fate(w)["wedge"]
    assert wedged.state == "running" and wedged.wedged
    with w.lock:
        before = (
            w.run_wire(wedged),
            w.usage_wire(wedged),
            w.messages_wire(wedged),
            w.checkpoints_wire(wedged),
        )
    w.tick(200)
    with w.lock:
        after = (
            w.run_wire(wedged),
            w.usage_wire(wedged),
            w.messages_wire(wedged),
            w.checkpoints_wire(wedged),
        )
    assert before == after
    assert after[0]["state"] == "running" and after[0]["live_phase"] == "working"
    assert after[0]["updated_at"] < w.state()["now"]


def test_runs_keep_arriving_while_others_finish():
    w = World(seed=11, start_time=START)
    seen_counts = []
    for _ in range(60):
        seen_counts.append(sum(r.exists for r in w.runs.values()))
        w.tick()
    assert seen_counts[0] == 1 and seen_counts[-1] == 6
    assert seen_counts == sorted(seen_counts)
    w.tick(100)
    runs = [r for r in w.runs.values()]
    finished = min(r.finished_at for r in runs if r.finished_at)
    assert any(r.created_at > finished for r in runs)  # a run was created after another had finished
    assert [r.state for r in sorted(runs, key=lambda r: r.index)][:1] == ["done"]


def test_freeze_stops_every_change_and_thaw_resumes():
    w = world(ticks=20)
    w.freeze()
    before = (w.state(), wire_dump(w))
    assert w.tick(50) == 0
    assert (w.state(), wire_dump(w)) == before
    w.thaw()
    assert w.tick(5) == 5
    assert w.state()["ticks"] == before[0]["ticks"] + 5


def test_stop_and_restore_are_recorded_and_stop_refuses_terminal_runs():
    from smrweb.simulator.world import Conflict

    w = world(ticks=60)
    (wedged,) = runs_by_fate(w)["wedge"]
    ack = w.stop(wedged.run_id, wedged.project_id)
    assert ack["state"] == "stopped" and ack["terminal_outcome"] == "stopped"
    assert ack["enqueue_status"] == "accepted" and ack["control_intent_id"]
    assert [m["payload"]["topic"] for m in wedged.messages[-2:]] == ["smr.control.stop", "smr.run.terminal"]
    with pytest.raises(Conflict) as refused:
        w.stop(wedged.run_id)
    assert refused.value.detail["error_code"] == "terminal_run"
    assert refused.value.detail["current_state"] == "stopped"

    run = next(r for r in w.runs.values() if any(c["restorable"] for c in r.checkpoints))
    checkpoint = next(c for c in run.checkpoints if c["restorable"])
    ack = w.restore(
        run.run_id,
        run.project_id,
        {"checkpoint_id": checkpoint["checkpoint_id"], "mode": "in_place", "reason": "roll back"},
    )
    assert ack["accepted"] is True and ack["checkpoint_id"] == checkpoint["checkpoint_id"]
    truth = next(r for r in w.state()["projects"][run.project_id]["runs"] if r["run_id"] == run.run_id)
    assert truth["restores"][0]["reason"] == "roll back"


def test_ground_truth_is_json_and_matches_the_wire():
    w = world()
    state = json.loads(json.dumps(w.state()))
    for truth in state["projects"][w.project_ids[0]]["runs"]:
        run = w.runs[truth["run_id"]]
        with w.lock:
            usage = w.usage_wire(run)
        assert truth["usage"]["total_pico_usd"] == usage["cost"]["total_pico_usd"]
        assert truth["usage"]["input_tokens"] == usage["totals"]["input_tokens"]
        split = truth["usage"]["by_meter"]
        assert sum(m["pico_usd"] for m in split.values()) == truth["usage"]["total_pico_usd"]
        assert [s["value"] for s in truth["scores"]] == [x["value"] for x in run.results]
        assert [a["digest"] for a in truth["artifacts"]] == [a["digest"] for a in run.artifacts]
        assert truth["messages"]["count"] == len(run.messages)
