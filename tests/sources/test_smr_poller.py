"""The SMR poller against the simulator, run by a real Celery worker (and beat) over a real Redis,
with faults on: once the world stops changing and the poller has caught up, the database holds
exactly the simulator's runs, scores, spend, artifacts and checkpoints — no duplicates, no gaps, no
artifact downloaded twice. A worker SIGKILLed mid-sync loses nothing."""

from __future__ import annotations

import os
import signal
import sys
from decimal import Decimal

import httpx
import pytest

from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, Artifact, Checkpoint, Run, RuntimeMessage, Submission
from tests.conftest import _start, _wait_for_line, wait_for
from tests.factories import admin_project

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

API_KEY, SMR_PROJECT = "test-key", "smr-proj-1"
FAULTS = "429=0.08,5xx=0.06,malformed=0.05,denial=0.04,drop=0.03,slow=0.03"


@pytest.fixture
def simulator():
    from smrweb.simulator.server import start_simulator

    sim = start_simulator(
        api_key=API_KEY, project_ids=[SMR_PROJECT], runs=5, tick=0.15, seed=11, faults=FAULTS
    )
    yield sim
    sim.stop()


@pytest.fixture
def smr_project(alice, simulator):
    scenario = services.create_scenario(
        key="sim-optimizer", name="sim", score_metric="val_loss", direction="minimize"
    )
    return admin_project(
        "smr",
        scenario=scenario,
        source="smr",
        smr_project_id=SMR_PROJECT,
        smr_backend_base=simulator.url,
        smr_api_key=API_KEY,
        by=alice,
    )


def sim_state(sim) -> dict:
    return httpx.get(f"{sim.url}/_sim/state", timeout=10).json()


def world_runs(world: dict) -> list[dict]:
    return world["projects"][SMR_PROJECT]["runs"]


def turn_count(w: dict) -> int:
    return w["usage"]["orchestrator_turns"] + w["usage"]["worker_turns"]


def sim_stats(sim) -> dict:
    return httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()


def freeze_and_heal(sim) -> dict:
    httpx.post(f"{sim.url}/_sim/freeze", timeout=10).raise_for_status()
    httpx.post(f"{sim.url}/_sim/faults", json={}, timeout=10).raise_for_status()
    return sim_state(sim)


def matches_world(project, world) -> bool:
    """True when the database holds exactly the world's runs and their data."""
    runs = {r.external_id: r for r in Run.objects.filter(project=project)}
    if set(runs) != {w["run_id"] for w in world_runs(world)}:
        return False
    for w in world_runs(world):
        run = runs[w["run_id"]]
        if run.state != w["state"] or run.turn_count != turn_count(w):
            return False
        if Submission.objects.filter(run=run).count() != len(w["scores"]):
            return False
        if Checkpoint.objects.filter(run=run).count() != len(w["checkpoints"]):
            return False
        if Artifact.objects.filter(run=run).count() != len(w["artifacts"]):
            return False
    return True


def assert_field_by_field(project, world) -> None:
    project.refresh_from_db()
    runs = {r.external_id: r for r in Run.objects.filter(project=project)}
    assert set(runs) == {w["run_id"] for w in world_runs(world)}
    for w in world_runs(world):
        run = runs[w["run_id"]]
        assert run.state == w["state"], w["run_id"]
        if w.get("failure"):
            assert (run.failure_family, run.failure_detail) == (
                w["failure"]["family"],
                w["failure"]["detail"],
            )
        assert (run.requested_profile, run.actual_profile) == (
            w["requested_profile_id"],
            w["resolved_profile_id"],
        )
        assert run.is_downgraded == w["downgraded"]
        # Spend: turns == driver + child == the simulator's inference entries, to the micro-dollar;
        # the billed total (all meters) equals the backend's to the cent.
        usage = w["usage"]
        assert run.turn_count == AgentTurn.objects.filter(run=run).count() == turn_count(w)
        assert (run.tokens_in, run.tokens_out) == (usage["input_tokens"], usage["output_tokens"])
        assert run.cost_usd == run.driver_cost_usd + run.child_cost_usd
        inference = Decimal(usage["by_meter"].get("inference", {}).get("pico_usd", 0)) / 10**12
        assert abs(run.cost_usd - inference) <= Decimal("0.000001") * max(
            1, turn_count(w)
        )  # per-turn micro-dollars
        assert round(run.source_total_usd, 2) == Decimal(usage["total_cents"]) / 100
        # What the run page shows as the billed total is the backend's own, to the cent; turns and the
        # other meters add up to it within the micro-dollar rounding of each turn.
        # A shape-b backend bills in cents only: its total and its other meters are each rounded to the cent.
        cents = Decimal("0.01") if w.get("shape") == "b" else 0
        assert (
            abs(run.cost_usd + run.other_meters_usd - run.source_total_usd)
            <= Decimal("0.000001") * max(1, turn_count(w)) + cents
        )
        scores = sorted(Submission.objects.filter(run=run).values_list("score", flat=True))
        assert scores == sorted(s["value"] for s in w["scores"])
        digests = sorted(Artifact.objects.filter(run=run).values_list("blob__sha256", flat=True))
        assert digests == sorted(a["digest"].removeprefix("sha256:") for a in w["artifacts"])
        reasons = sorted(Checkpoint.objects.filter(run=run).values_list("failure_reason", flat=True))
        assert reasons == sorted(c.get("failure_reason") or "" for c in w["checkpoints"])
        assert RuntimeMessage.objects.filter(run=run).count() == w["messages"]["count"]
        # The source's own totals agree with the turns, so nothing is flagged as unaccounted; the split
        # matches the world's per-role usage.
        by_role = usage.get("by_role", {})
        if "orchestrator" in by_role:
            assert (run.driver_tokens_in, run.driver_tokens_out) == (
                by_role["orchestrator"]["input_tokens"],
                by_role["orchestrator"]["output_tokens"],
            )
        assert run.source_spend["tokens_in"] == usage["input_tokens"] and not run.unaccounted, (
            run.source_spend
        )
        assert not run.spend_unaccounted and run.entries_unreadable == 0
        if w.get("best_score") is not None and w.get("metric", "val_loss") == project.scenario.score_metric:
            assert run.best_score == w["best_score"]


def test_poller_converges_exactly_to_the_simulated_world_despite_faults(
    smr_project, simulator, celery_beat_process
):
    wait_for(lambda: Run.objects.filter(project=smr_project).count() >= 3, timeout=60)
    wait_for(lambda: sim_state(simulator)["ticks"] > 40, timeout=60)
    world = freeze_and_heal(simulator)

    wait_for(lambda: matches_world(smr_project, world), timeout=90, interval=0.5)
    assert_field_by_field(smr_project, world)
    served = sim_stats(simulator)["content_served"]  # clean 200s only: a faulted try is not a download
    assert served and max(served.values()) == 1  # every digest downloaded once
    # The data can converge through syncs that each met a fault before the heal (every step is kept);
    # the next whole sync after it is clean and records the recovery.
    health = smr_project.source_health

    def recovered() -> bool:
        health.refresh_from_db()
        return health.last_success_at is not None and health.consecutive_failures == 0

    wait_for(recovered, timeout=60, interval=0.5)
    assert health.last_error_kind  # faults were met on the way (and recorded)


def test_a_worker_killed_mid_sync_loses_nothing(
    smr_project, simulator, celery_queue, django_db_setup, tmp_path
):
    queue = f"{celery_queue}-kill"  # workers of this test only: the session's worker must not take the task
    wait_for(lambda: len(world_runs(sim_state(simulator))) >= 4, timeout=60)
    world = freeze_and_heal(simulator)
    simulator.set_faults("slow=1.0,slow_seconds=1")  # every request takes a second: a sync is long
    log = tmp_path / "doomed-worker.log"
    doomed = _start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "smrweb",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        log,
        {"SMRWEB_CELERY_QUEUE": queue, "SMRWEB_SMR_LEASE_SECONDS": "6"},
    )
    _wait_for_line(doomed, log, "ready.")
    from smrweb.tasks import sync_project

    sync_project.apply_async(args=[smr_project.pk], queue=queue)
    try:
        wait_for(lambda: sim_stats(simulator)["total_requests"] > 8, timeout=30)
    except AssertionError:
        raise AssertionError(log.read_text()[-3000:]) from None
    os.kill(doomed.pid, signal.SIGKILL)  # mid-sync: every request takes a second now
    doomed.wait()
    partial = AgentTurn.objects.filter(run__project=smr_project).count()

    httpx.post(f"{simulator.url}/_sim/faults", json={}, timeout=10)
    # A fresh worker and beat pick the project up again once the dead worker's lease lapses.
    beat_log, worker_log = tmp_path / "beat.log", tmp_path / "worker.log"
    worker = _start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "smrweb",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        worker_log,
        {"SMRWEB_CELERY_QUEUE": queue, "SMRWEB_SMR_LEASE_SECONDS": "6"},
    )
    beat = _start(
        [sys.executable, "-m", "celery", "-A", "smrweb", "beat", "--schedule", str(tmp_path / "sched")],
        beat_log,
        {"SMRWEB_CELERY_QUEUE": queue, "SMRWEB_SMR_LEASE_SECONDS": "6"},
    )
    try:
        wait_for(lambda: matches_world(smr_project, world), timeout=90, interval=0.5)
        assert_field_by_field(smr_project, world)
        assert partial < AgentTurn.objects.filter(run__project=smr_project).count()
        assert max(sim_stats(simulator)["content_served"].values()) == 1
    finally:
        for proc in (beat, worker):
            proc.terminate()
            proc.wait(timeout=15)


# --- issue 13: a backend that fills the spec's free-form parts another way --------------------------


@pytest.fixture
def shaped_simulator():
    """Runs alternate between the two wire shapes of the free-form parts (docs/simulator.md#shapes)."""
    from smrweb.simulator.server import start_simulator

    sim = start_simulator(
        api_key=API_KEY,
        project_ids=[SMR_PROJECT],
        runs=5,
        tick=0.15,
        seed=12,
        faults=FAULTS,
        shapes=("a", "b"),
    )
    yield sim
    sim.stop()


def test_poller_converges_on_both_wire_shapes_and_scores_the_experiments_own_metric(
    alice, shaped_simulator, celery_beat_process
):
    """A project bound without a scenario adopts the metric and direction its experiments declare; on
    both shapes the turns, tokens, cost to the micro-dollar, billed total to the cent, driver/child split,
    scores and best equal the world's, and nothing is left unaccounted."""
    project = admin_project(
        "smr-shapes",
        source="smr",
        smr_project_id=SMR_PROJECT,
        smr_backend_base=shaped_simulator.url,
        smr_api_key=API_KEY,
        by=alice,
    )
    assert project.scenario.score_metric == "score"  # nothing declared yet
    wait_for(lambda: Run.objects.filter(project=project).count() >= 3, timeout=60)
    wait_for(lambda: sim_state(shaped_simulator)["ticks"] > 40, timeout=60)
    world = freeze_and_heal(shaped_simulator)
    assert {w["shape"] for w in world_runs(world)} == {"a", "b"}

    wait_for(lambda: matches_world(project, world), timeout=90, interval=0.5)
    project.refresh_from_db()
    assert (project.scenario.score_metric, project.scenario.direction) == ("val_loss", "minimize")
    assert project.source_settings["declared_metrics"] == {"val_loss": "lower_is_better"}
    assert_field_by_field(project, world)
    best = min(w["best_score"] for w in world_runs(world) if w["best_score"] is not None)
    assert Submission.objects.filter(project=project).order_by("score").first().score == best
    health = project.source_health

    def clean() -> bool:
        health.refresh_from_db()
        return health.consecutive_failures == 0 and health.last_success_at is not None

    wait_for(clean, timeout=60, interval=0.5)
    assert health.warning == "" and health.ok
