"""Activity: what a running run does in one tick (an orchestrator turn, worker turns and their
dispatch, sandbox seconds, maybe a scored attempt, and shape "b"'s progress notes).

All of it is drawn from the run's own RNG, in a fixed order: reordering a draw changes the world.
"""

from __future__ import annotations

import math

from smrweb.simulator.world.constants import ORCH_TOOLS, PROGRESS_TOPIC, SANDBOX_PICO_PER_SECOND, WORKER_TOOLS
from smrweb.simulator.world.state import SimRun


class ActivityMixin:
    """One live tick of a run; the usage, experiments and messages mixins record what it emits."""

    def _activity(self, run: SimRun) -> None:
        rng = run.rng
        orch = run.orchestrator
        progress = run.running_ticks
        # 1 orchestrator turn
        in_tok = rng.randint(3000, 6000) + 120 * progress
        out_tok = rng.randint(200, 1200)
        tools = sorted(rng.sample(ORCH_TOOLS, rng.randint(0, 3)))
        self._inference(run, orch, in_tok, out_tok, tools, rng.randint(800, 9000))
        # 0-2 worker turns
        workers = run.actors[1:]
        active = [orch]
        for _ in range(rng.choice((0, 1, 1, 2))):
            worker = rng.choice(workers)
            if not worker.dispatched:
                worker.dispatched = True
                self._message(
                    run,
                    self._stamp(),
                    mode="queue",
                    sender="role:orchestrator",
                    target=f"actor:{worker.actor_id}",
                    action=None,
                    status="consumed",
                    body="Sweep the learning-rate schedule and report val_loss for each candidate.",
                    payload={"topic": "smr.orchestrator.dispatch", "actor_id": worker.actor_id},
                )
            in_tok = rng.randint(1500, 6000)
            out_tok = rng.randint(100, 900)
            tools = sorted(rng.sample(WORKER_TOOLS, rng.randint(0, 3)))
            self._inference(run, worker, in_tok, out_tok, tools, rng.randint(500, 6000))
            active.append(worker)
        # sandbox seconds for one of this tick's actors
        sandbox_actor = rng.choice(active)
        seconds = rng.randint(5, 30)
        self._entry(
            run,
            meter_kind="sandbox_seconds",
            actor=sandbox_actor,
            model=None,
            turn_index=None,
            input_tokens=0,
            output_tokens=0,
            cost=seconds * SANDBOX_PICO_PER_SECOND,
            tool_calls=[],
            duration_ms=seconds * 1000,
            quantity=seconds,
            quantity_unit="seconds",
        )
        # maybe a scored attempt
        if rng.random() < (0.6 if run.attempts == 0 else 0.4):
            self._attempt(run)
        if run.shape == "b":
            self._progress_note(run)

    def _progress_note(self, run: SimRun) -> None:
        """Shape "b" runs are chatty: a progress note every live tick. It takes the time of the run's
        last event of this tick (no fresh world timestamp, so every other value stays the same
        whatever the shape); order messages by `seq`."""
        run.progress_notes += 1
        best = "none yet" if run.best == math.inf else f"{self._score(run, run.best):.4f}"
        self._message(
            run,
            run.updated_at,
            mode="note",
            sender="role:orchestrator",
            target="role:user",
            action=None,
            status="delivered",
            body=(
                f"Progress: tick {run.running_ticks}, {len(run.entries)} ledger entries, "
                f"{run.attempts} attempts, best {run.metric} {best}."
            ),
            payload={"topic": PROGRESS_TOPIC, "tick": run.running_ticks, "attempts": run.attempts},
        )
