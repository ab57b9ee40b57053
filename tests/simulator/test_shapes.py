"""The free-form variations: two wire shapes per world, opaque entries, per-run metrics, worker
downgrades, chatty runs, and a world of many runs. The ground truth never depends on the shape."""

from __future__ import annotations

import json
import math
import time

import pytest
from managed_research.models.canonical_usage import SmrRunUsage
from managed_research.models.run_diagnostics import SmrRunActorUsage, SmrRunCostSummary

from smrweb.simulator.server import ACTIVE_RUNS_CAP, start_simulator
from smrweb.simulator.world import (
    PROGRESS_TOPIC,
    WORKER_DOWNGRADED_PROFILE,
    WORKER_PROFILE,
    World,
    parse_metrics,
    parse_shapes,
    pico_to_cents,
)
from tests.simulator.conftest import API_KEY, MIXED, START
from tests.simulator.shapes import decode_actor_tokens, decode_entry, decode_totals

TWO_METRICS = (("val_loss", "lower_is_better"), ("val_accuracy", "higher_is_better"))


def world(seed=11, ticks=130, **kwargs) -> World:
    w = World(seed=seed, start_time=START, **kwargs)
    w.tick(ticks)
    return w


def truths(w: World) -> dict[str, dict]:
    return {r["run_id"]: r for p in w.state()["projects"].values() for r in p["runs"]}


def by_shape(w: World) -> dict[str, list]:
    out: dict[str, list] = {}
    for run in w.runs.values():
        if run.exists:
            out.setdefault(run.shape, []).append(run)
    return out


# ---------------------------------------------------------------------- shapes
def test_default_is_shape_a_only_and_options_parse():
    w = world(ticks=5)
    assert {r.shape for r in w.runs.values()} == {"a"}
    assert parse_shapes("a,b") == parse_shapes(["b", "a", "a"])[::-1] == ("a", "b")
    assert parse_metrics(["acc:higher_is_better", "loss"]) == (
        ("acc", "higher_is_better"),
        ("loss", "lower_is_better"),
    )
    for bad in (
        {"shapes": "e"},
        {"shapes": ""},
        {"unreadable_every": -1},
        {"metrics": (("x", "up"),)},
        {"metrics": ()},
    ):
        with pytest.raises(ValueError):
            World(seed=1, start_time=START, **bad)


@pytest.mark.parametrize("seed", range(8))
def test_both_shapes_occur_in_every_project_of_two_or_more_runs(seed):
    w = World(seed=seed, start_time=START, project_ids=["p1", "p2"], runs=2, shapes=("a", "b"))
    for runs in w.runs_by_project.values():
        assert {r.shape for r in runs} == {"a", "b"}
    firsts = {
        World(seed=s, start_time=START, runs=1, shapes=("a", "b")).runs_by_project["sim-project"][0].shape
        for s in range(12)
    }
    assert firsts == {"a", "b"}  # the seed chooses which comes first


def test_the_two_shapes_differ_in_every_free_form_place():
    w = world(**MIXED)
    shaped = by_shape(w)
    a, b = shaped["a"][0], shaped["b"][0]
    with w.lock:
        ua, ub = w.usage_wire(a), w.usage_wire(b)
        ca, cb = w.cost_summary_wire(a), w.cost_summary_wire(b)
        xa, xb = w.actor_usage_wire(a), w.actor_usage_wire(b)
    keys_a = {k for e in ua["entries"] if "opaque" not in e for k in e}
    keys_b = {k for e in ub["entries"] if "opaque" not in e for k in e}
    assert keys_a >= {
        "entry_id",
        "created_at",
        "meter_kind",
        "actor_id",
        "actor_role",
        "parent_actor_id",
        "model",
        "turn_index",
        "input_tokens",
        "output_tokens",
        "cost_pico_usd",
        "tool_calls",
        "duration_ms",
        "quantity",
        "quantity_unit",
    }
    assert keys_b == {
        "id",
        "recorded_at",
        "meter",
        "actor",
        "model_name",
        "step",
        "tokens",
        "cost_usd",
        "tool_calls",
        "latency_ms",
        "units",
        "unit",
    }
    assert keys_a & keys_b == {"tool_calls"}  # same name, but a list of names vs a list of {"name": ...}
    assert all(isinstance(t, str) for e in ua["entries"] if "opaque" not in e for t in e["tool_calls"])
    assert all(set(t) == {"name"} for e in ub["entries"] if "opaque" not in e for t in e["tool_calls"])
    assert {e["actor"]["role"] for e in ub["entries"] if "actor" in e} == {"lead", "subagent"}
    assert {e["meter"] for e in ub["entries"] if "meter" in e} == {"inference_tokens", "sandbox_time"}
    assert not set(ua["totals"]) & set(ub["totals"])
    assert "tokens" in ua and "token_usage" in ua and "tokens" not in ub and "token_usage" not in ub
    assert "total_pico_usd" in ua["cost"] and not any("pico" in k for k in ub["cost"])
    assert not any("pico" in k for k in ub) and not any("pico" in k for k in json.dumps(cb).split('"'))
    assert {m["meter_kind"] for m in ca["by_meter"]} == {"inference", "sandbox_seconds"}
    assert {m["meter_kind"] for m in cb["by_meter"]} == {"inference_tokens", "sandbox_time"}
    assert {r["participant_role"] for r in xa["actors"]} == {"orchestrator", "worker"}
    assert {r["participant_role"] for r in xb["actors"]} == {"driver", "subagent"}
    assert not {k for r in xa["actors"] for k in r["token_usage"]} & {
        k for r in xb["actors"] for k in r["token_usage"]
    }
    # every shape parses with the SDK's typed parsers
    for usage, summary, actors in ((ua, ca, xa), (ub, cb, xb)):
        SmrRunUsage.from_wire(usage)
        SmrRunCostSummary.from_wire(summary)
        SmrRunActorUsage.from_wire(actors)


def test_shape_b_money_is_exact_and_reconciles_with_the_typed_totals():
    w = world(shapes=("b",))
    with w.lock:
        for run in w.runs.values():
            usage = w.usage_wire(run)
            entries = [decode_entry(e) for e in usage["entries"]]
            pico = sum(e["pico"] for e in entries)
            assert pico == sum(run.pico_by_kind.values())
            assert usage["cost"]["total_cents"] == usage["total_cost_cents"] == pico_to_cents(pico)
            assert decode_totals(usage["totals"])["input_tokens"] == sum(e["input_tokens"] for e in entries)


@pytest.mark.parametrize(
    "options", [{}, {"unreadable_every": 4, "metrics": TWO_METRICS, "worker_downgrades": True}]
)
def test_ground_truth_does_not_depend_on_the_shapes(options):
    worlds = {
        shapes: world(seed=5, shapes=shapes, project_ids=["p1", "p2"], **options)
        for shapes in (("a",), ("a", "b"), ("b",))
    }

    def comparable(w):
        state = w.state()
        state.pop("config")
        for project in state["projects"].values():
            for run in project["runs"]:
                run.pop("shape")
                messages = run.pop("messages")  # shape-b runs also post progress notes
                run["messages_without_notes"] = messages["count"] - messages["progress_notes"]
        return state

    base = comparable(worlds[("a",)])
    for shapes, w in worlds.items():
        assert comparable(w) == base, shapes
        with w.lock:  # and the non-free-form answers are the same too
            for run in w.runs.values():
                ref = worlds[("a",)].runs[run.run_id]
                assert w.results_wire(
                    run.project_id,
                    experiment_id=None,
                    metric=None,
                    comparison_cohort_key=None,
                    truth_status=None,
                    limit=500,
                ) == worlds[("a",)].results_wire(
                    run.project_id,
                    experiment_id=None,
                    metric=None,
                    comparison_cohort_key=None,
                    truth_status=None,
                    limit=500,
                )
                assert w.checkpoints_wire(run) == worlds[("a",)].checkpoints_wire(ref)
                assert w.manifest_wire(run) == worlds[("a",)].manifest_wire(ref)
    assert {r["shape"] for r in truths(worlds[("a", "b")]).values()} == {"a", "b"}
    assert {r["shape"] for r in truths(worlds[("b",)]).values()} == {"b"}


# ---------------------------------------------------------------------- unreadable entries
@pytest.mark.parametrize("shapes", [("a",), ("b",)])
def test_unreadable_entries_are_opaque_but_counted_in_every_typed_aggregate(shapes):
    w = world(unreadable_every=3, shapes=shapes)
    plain = world(shapes=shapes)
    for rid, truth in truths(w).items():
        run = w.runs[rid]
        with w.lock:
            usage, summary, actors = w.usage_wire(run), w.cost_summary_wire(run), w.actor_usage_wire(run)
        with plain.lock:
            plain_usage = plain.usage_wire(plain.runs[rid])
        opaque = [e for e in usage["entries"] if "opaque" in e]
        assert all(set(e) == {"opaque"} and len(e["opaque"]) > 40 for e in opaque)
        inference = truth["usage"]["inference_events"]
        unread = truth["unreadable"]
        assert len(opaque) == unread["entries"] == inference // 3
        readable = [d for d in map(decode_entry, usage["entries"]) if d is not None]
        assert sum(d["pico"] for d in readable) + unread["pico_usd"] == truth["usage"]["total_pico_usd"]
        assert unread["cents"] == pico_to_cents(unread["pico_usd"])
        totals = decode_totals(usage["totals"])
        assert totals["input_tokens"] == sum(d["input_tokens"] for d in readable) + unread["input_tokens"]
        assert totals["output_tokens"] == sum(d["output_tokens"] for d in readable) + unread["output_tokens"]
        # the typed aggregates are exactly those of the same world served without opaque entries
        assert {k: v for k, v in usage.items() if k != "entries"} == {
            k: v for k, v in plain_usage.items() if k != "entries"
        }
        assert summary["total_cents"] == truth["usage"]["total_cents"]
        assert sum(a["event_count"] for a in actors["actors"]) == len(usage["entries"])
        assert (
            sum(decode_actor_tokens(a["token_usage"])[1] for a in actors["actors"]) == totals["output_tokens"]
        )
    assert sum(t["unreadable"]["entries"] for t in truths(w).values()) > 0
    assert all(t["unreadable"]["entries"] == 0 for t in truths(plain).values())


# ---------------------------------------------------------------------- metrics
def test_each_run_scores_on_its_own_metric_and_direction():
    w = world(metrics=TWO_METRICS, ticks=150)
    for rid, truth in truths(w).items():
        run = w.runs[rid]
        metric, direction = TWO_METRICS[run.index % 2]
        assert (truth["metric"], truth["metric_direction"]) == (metric, direction)
        values = [s["value"] for s in truth["scores"]]
        assert all(math.isfinite(v) and v > 0 for v in values)
        for result in run.results:
            assert (result["metric"], result["metric_direction"]) == (metric, direction)
            assert result["delta"] == pytest.approx(result["value"] - result["baseline_value"], abs=1e-6)
        for experiment in run.experiments:
            assert set(experiment["metrics_before"]) == set(experiment["metrics_after"]) == {metric}
        improvements = [s["value"] for s in truth["scores"] if s["improvement"]]
        better = (lambda x, y: x > y) if direction == "higher_is_better" else (lambda x, y: x < y)
        assert all(better(y, x) for x, y in zip(improvements, improvements[1:]))
        if values:
            assert truth["best_score"] == (max(values) if direction == "higher_is_better" else min(values))
            assert [a["score"] for a in truth["artifacts"]] == improvements
        if direction == "higher_is_better" and len(improvements) > 2:
            assert improvements[-1] > improvements[0]  # it climbs up
    assert {t["metric"] for t in truths(w).values()} == {"val_loss", "val_accuracy"}
    default = world()
    assert {(t["metric"], t["metric_direction"]) for t in truths(default).values()} == {
        ("val_loss", "lower_is_better")
    }


# ---------------------------------------------------------------------- worker downgrades
def test_worker_downgrades_show_per_actor_and_index_5_always_has_one():
    w = world(worker_downgrades=True, runs=9, ticks=160)
    downgraded_runs = 0
    for rid, truth in truths(w).items():
        run = w.runs[rid]
        workers = [a for a in truth["actors"] if a["role"] == "worker"]
        moved = [a for a in workers if a["requested_model"] != a["actual_model"]]
        assert len(moved) <= 1 and truth["worker_downgraded"] == bool(moved)
        if run.index == 5:
            assert moved
        downgraded_runs += bool(moved)
        with w.lock:
            wire = w.run_wire(run)
            actors = {row["actor_id"]: row for row in w.actor_usage_wire(run)["actors"]}
        roles = wire["roles"]
        assert [
            (x["actor_id"], x["requested_profile_id"], x["resolved_profile_id"]) for x in roles["workers"]
        ] == [(a["actor_id"], a["requested_profile_id"], a["resolved_profile_id"]) for a in workers]
        for actor in truth["actors"]:
            models = {e["model"] for e in run.entries if e["actor_id"] == actor["actor_id"] and e["model"]}
            assert models <= {actor["actual_model"]}
            if actor["actor_id"] in actors:
                assert set(actors[actor["actor_id"]]["by_model"]) <= {actor["actual_model"]}
        if moved:
            assert (moved[0]["requested_profile_id"], moved[0]["resolved_profile_id"]) == (
                WORKER_PROFILE,
                WORKER_DOWNGRADED_PROFILE,
            )
            assert roles["worker"]["resolved_profile_id"] == WORKER_DOWNGRADED_PROFILE
        else:
            assert roles["worker"]["resolved_profile_id"] == WORKER_PROFILE
    assert 1 <= downgraded_runs < 9
    off = world(runs=9, ticks=20)
    assert all(not t["worker_downgraded"] for t in truths(off).values())
    with off.lock:
        assert all("workers" not in off.run_wire(r)["roles"] for r in off.runs.values() if r.exists)


# ---------------------------------------------------------------------- chatty runs
def test_shape_b_live_runs_post_a_progress_note_every_tick():
    w = world(shapes=("a", "b"), ticks=150)
    for rid, truth in truths(w).items():
        run = w.runs[rid]
        notes = [m for m in run.messages if m["topic"] == PROGRESS_TOPIC]
        assert truth["messages"]["progress_notes"] == len(notes)
        assert truth["messages"] == {
            "count": len(run.messages),
            "last_seq": len(run.messages),
            "progress_notes": len(notes),
        }
        assert [m["seq"] for m in run.messages] == list(range(1, len(run.messages) + 1))
        created = [m["created_at"] for m in run.messages]
        assert created == sorted(created)
        if run.shape == "a":
            assert not notes
            continue
        assert len(notes) == run.running_ticks
        assert all((m["mode"], m["sender"]) == ("note", "role:orchestrator") for m in notes)
        if run.fate == "climb":
            assert len(run.messages) > 50
            with w.lock:
                window = w.messages_wire(run, limit=50)
            assert [m["seq"] for m in window] == list(range(len(run.messages) - 49, len(run.messages) + 1))


# ---------------------------------------------------------------------- many runs
def test_a_thousand_run_world_is_quick():
    began = time.perf_counter()
    w = World(seed=3, start_time=START, runs=1000, shapes=("a", "b"), unreadable_every=7)
    w.tick(100)
    w.state()
    with w.lock:
        w.list_runs("sim-project", limit=200)
    assert time.perf_counter() - began < 10
    began = time.perf_counter()
    busy = World(seed=3, start_time=START, runs=1000, stagger_ticks=1, shapes=("a", "b"))
    busy.tick(100)  # ~60 runs live at any time
    assert time.perf_counter() - began < 20


def test_walking_the_runs_cursor_yields_each_of_450_runs_once(client_for):
    w = World(seed=9, start_time=START, runs=450, stagger_ticks=0, shapes=("a", "b"))
    w.tick(3)
    handle = start_simulator(world=w, api_key=API_KEY, auto_tick=False)
    try:
        client = client_for(handle)
        seen, cursor = [], None
        while True:
            page = client.runs.list(handle.project_id, limit=200, cursor=cursor)
            if not page:
                break
            assert len(page) <= 200
            seen.extend(r["run_id"] for r in page)
            cursor = f"{page[-1]['created_at']}|{page[-1]['run_id']}"
        assert len(seen) == len(set(seen)) == 450
        assert set(seen) == set(w.runs)
        active = client.runs.list_active(handle.project_id)  # capped, newest first, no cursor
        assert len(active) == ACTIVE_RUNS_CAP == 200
        assert [r["run_id"] for r in active] == [r for r in seen if not w.runs[r].terminal][:200]
    finally:
        handle.stop()
