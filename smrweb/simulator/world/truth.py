"""Ground truth: the whole world as plain JSON (`GET /_sim/state`), for tests and benchmarks to check
what a client made of the wire against what really happened.
"""

from __future__ import annotations

import math
from typing import Any

from smrweb.simulator.world.constants import BUDGET_USD
from smrweb.simulator.world.money import pico_to_cents, pico_to_usd
from smrweb.simulator.world.runs import run_timestamps
from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso


class TruthMixin:
    """`state()`: takes `World.lock` itself."""

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "seed": self.seed,
                "ticks": self.ticks,
                "tick_seconds": self.tick_seconds,
                "frozen": self.frozen,
                "start_time": iso(self.start_time),
                "now": iso(self.tick_time()),
                "org_id": self.org_id,
                "config": {
                    "shapes": list(self.shapes),
                    "unreadable_every": self.unreadable_every,
                    "metrics": [list(m) for m in self.metrics],
                    "worker_downgrades": self.worker_downgrades,
                },
                "projects": {
                    pid: {"runs": [self._truth(r) for r in runs if r.exists]}
                    for pid, runs in self.runs_by_project.items()
                },
            }

    def _truth(self, run: SimRun) -> dict[str, Any]:
        total = sum(run.pico_by_kind.values())
        unread = run.unreadable_sums
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "index": run.index,
            "fate": run.fate,
            "shape": run.shape,
            "metric": run.metric,
            "metric_direction": run.metric_direction,
            "state": run.state,
            "live_phase": run.live_phase,
            "terminal_outcome": run.terminal_outcome,
            "failure": dict(run.failure) if run.failure else None,
            "wedged": run.wedged,
            "wedged_at": iso(run.wedged_at) if run.wedged_at else None,
            "stop_reason": run.stop_reason,
            **run_timestamps(run),
            "requested_profile_id": run.requested_profile,
            "resolved_profile_id": run.resolved_profile,
            "downgraded": run.requested_profile != run.resolved_profile,
            "worker_downgraded": any(a.downgraded for a in run.actors[1:]),
            "actors": [
                {
                    "actor_id": a.actor_id,
                    "role": a.role,
                    "requested_profile_id": a.requested_profile_id,
                    "resolved_profile_id": a.profile_id,
                    "requested_model": a.requested_model,
                    "actual_model": a.model,
                    "events": a.events,
                    "input_tokens": a.input_tokens,
                    "output_tokens": a.output_tokens,
                    "pico_usd": a.pico,
                }
                for a in run.actors
            ],
            "budget_usd": BUDGET_USD,
            "usage": {
                "entries": len(run.entries),
                "inference_events": run.events_by_kind.get("inference", 0),
                "sandbox_events": run.events_by_kind.get("sandbox_seconds", 0),
                "sandbox_seconds": run.quantity_by_kind.get("sandbox_seconds", 0),
                "input_tokens": run.input_tokens,
                "output_tokens": run.output_tokens,
                "orchestrator_turns": run.orchestrator.turns,
                "worker_turns": sum(a.turns for a in run.actors[1:]),
                "total_pico_usd": total,
                "total_cents": pico_to_cents(total),
                "total_usd": pico_to_usd(total),
                "by_meter": {
                    kind: {
                        "pico_usd": pico,
                        "cents": pico_to_cents(pico),
                        "quantity": run.quantity_by_kind.get(kind, 0),
                        "events": run.events_by_kind.get(kind, 0),
                    }
                    for kind, pico in sorted(run.pico_by_kind.items())
                },
                "by_role": {role: dict(row) for role, row in run.by_role.items()},
            },
            "unreadable": {
                "entries": unread["entries"],
                "input_tokens": unread["input_tokens"],
                "output_tokens": unread["output_tokens"],
                "pico_usd": unread["pico_usd"],
                "cents": pico_to_cents(unread["pico_usd"]),
            },
            "scores": [
                {
                    "result_id": x["result_id"],
                    "experiment_id": x["experiment_id"],
                    "value": x["value"],
                    "created_at": x["created_at"],
                    "improvement": x["metadata"]["improvement"],
                }
                for x in run.results
            ],
            "best_score": None if run.best == math.inf else self._score(run, run.best),
            "artifacts": [
                {
                    "artifact_id": a["artifact_id"],
                    "digest": a["digest"],
                    "size_bytes": a["size_bytes"],
                    "path": a["path"],
                    "experiment_id": a["metadata"]["experiment_id"],
                    "score": a["metadata"]["score"],
                    "created_at": a["created_at"],
                }
                for a in run.artifacts
            ],
            "checkpoints": [
                {
                    "checkpoint_id": c["checkpoint_id"],
                    "state": c["state"],
                    "captured_at": c["captured_at"],
                    "failure_reason": c["metadata"]["failure_reason"],
                }
                for c in run.checkpoints
            ],
            "messages": {
                "count": len(run.messages),
                "last_seq": run.messages[-1]["seq"] if run.messages else 0,
                "progress_notes": run.progress_notes,
            },
            "restores": [dict(r) for r in run.restores],
            "control_intents": [dict(c) for c in run.control_intents],
        }
