"""Runs: planning a run from the seed, its lifecycle tick by tick (pending, queued, running, terminal or
wedged), the client's `stop`, and the run as the wire shows it.

What a running run does in a tick is in `activity.py`.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from smrweb.simulator.world.constants import (
    FAILURE,
    FATES,
    KICKOFF_TOPIC,
    ORCH_DOWNGRADED_PROFILE,
    ORCH_PROFILE,
    PROFILE_MODEL,
    WORKER_DOWNGRADED_PROFILE,
    WORKER_PROFILE,
)
from smrweb.simulator.world.errors import Conflict, NotFound
from smrweb.simulator.world.state import Actor, SimRun
from smrweb.simulator.world.wireformat import iso, stable_uuid


class RunsMixin:
    """Run planning, lifecycle and the run's wire shape (`run_wire`: call under `World.lock`)."""

    # ------------------------------------------------------------------ planning
    def _plan_run(self, project_id: str, index: int, stagger: int) -> SimRun:
        rng = random.Random(f"smr-sim|{self.seed}|{project_id}|{index}")
        fate = FATES[index] if index < len(FATES) else "climb"
        run_id = stable_uuid("run", self.seed, project_id, index)
        if fate == "fail":
            run_ticks = rng.randint(14, 22)
        elif fate == "wedge":
            run_ticks = rng.randint(10, 16)
        else:
            run_ticks = rng.randint(45, 75)
        requested = ORCH_PROFILE
        resolved = ORCH_DOWNGRADED_PROFILE if fate == "downgrade" else ORCH_PROFILE
        orch = Actor(stable_uuid("actor", run_id, 0), "orchestrator", None, resolved, ORCH_PROFILE)
        workers = [
            Actor(stable_uuid("actor", run_id, k), "worker", orch.actor_id, WORKER_PROFILE)
            for k in range(1, rng.randint(2, 3) + 1)
        ]
        # Everything new is drawn from a separate RNG, so the run's own stream (and every value it
        # produces) is the same whatever the shapes, metrics or downgrade options.
        side = random.Random(f"smr-sim-shape|{self.seed}|{project_id}|{index}")
        downgrade_worker = side.random() < 1 / 3 or index == 5
        which = side.randrange(len(workers))
        if self.worker_downgrades and downgrade_worker:
            workers[which].profile_id = WORKER_DOWNGRADED_PROFILE
        first = random.Random(f"smr-sim-shape|{self.seed}|{project_id}").randrange(len(self.shapes))
        metric, direction = self.metrics[index % len(self.metrics)]
        return SimRun(
            project_id=project_id,
            index=index,
            run_id=run_id,
            fate=fate,
            rng=rng,
            created_tick=index * stagger + (rng.randint(0, 1) if index else 0),
            queue_ticks=rng.randint(1, 3),
            run_ticks=run_ticks,
            baseline=round(rng.uniform(2.2, 2.6), 6),
            floor=round(rng.uniform(0.9, 1.3), 6),
            requested_profile=requested,
            resolved_profile=resolved,
            actors=[orch, *workers],
            shape=self.shapes[(first + index) % len(self.shapes)],
            metric=metric,
            metric_direction=direction,
        )

    # ------------------------------------------------------------------ evolution
    def _apply_tick(self) -> None:
        moving = self._moving
        for run in moving:
            if not (run.terminal or run.wedged):  # a client may have stopped it since the last tick
                self._step_run(run)
        if any(r.terminal or r.wedged for r in moving):
            self._moving = [r for r in moving if not (r.terminal or r.wedged)]

    def _step_run(self, run: SimRun) -> None:
        t = self.ticks
        if run.state == "pending":
            if t >= run.created_tick:
                self._create(run)
            return
        if run.terminal or run.wedged or run.state == "paused":
            return
        if run.state == "queued":
            if t >= run.created_tick + run.queue_ticks:
                now = self._stamp()
                run.state, run.live_phase = "running", "working"
                run.started_at = run.updated_at = now
            return
        # running
        if run.running_ticks >= run.run_ticks:
            if run.fate == "wedge":
                run.wedged = True  # no further output of any kind; state stays "running"
                run.wedged_at = run.updated_at
                return
            if run.fate == "fail":
                self._finish(run, "failed", failure=dict(FAILURE), reason=FAILURE["reason"])
            else:
                self._finish(run, "done", reason="completed")
            return
        run.running_ticks += 1
        self._activity(run)
        self._reply_to_steering(run)  # steering.py: replies to messages clients sent

    def _create(self, run: SimRun) -> None:
        now = self._stamp()
        run.state, run.live_phase = "queued", "queued"
        run.created_at = run.updated_at = now
        self._message(
            run,
            now,
            mode="queue",
            sender="user",
            target="role:orchestrator",
            action=None,
            status="consumed",
            body=(
                "Improve submission/optimizer.py so that the toy model reaches the lowest val_loss "
                "you can. Score every candidate; keep the best one."
            ),
            payload={"topic": KICKOFF_TOPIC, "source": "trigger"},
        )

    def _finish(
        self, run: SimRun, state: str, *, failure=None, reason=None, stop_reason=None, stop_message=None
    ) -> datetime:
        now = self._stamp()
        run.state, run.live_phase = state, "terminal"
        run.terminal_outcome = state
        run.failure = failure
        run.state_reason = reason
        run.stop_reason, run.stop_reason_message = stop_reason, stop_message
        run.finished_at = run.updated_at = now
        payload: dict[str, Any] = {"topic": "smr.run.terminal", "state": state, "terminal_outcome": state}
        if failure:
            payload["failure"] = dict(failure)
        self._message(
            run,
            now,
            mode="note",
            sender="system",
            target="role:user",
            action=None,
            status="delivered",
            body=f"Run {state}" + (f": {failure['family']}: {failure['detail']}" if failure else ""),
            payload=payload,
        )
        return now

    # ------------------------------------------------------------------ client actions
    def get_run(self, run_id: str, project_id: str | None = None) -> SimRun:
        run = self.runs.get(run_id)
        if run is None or not run.exists or (project_id is not None and run.project_id != project_id):
            raise NotFound("Run not found")
        return run

    def stop(self, run_id: str, project_id: str | None = None) -> dict[str, Any]:
        with self.lock:
            run = self.get_run(run_id, project_id)
            if run.terminal:
                raise Conflict(
                    {
                        "error_code": "terminal_run",
                        "message": f"Run is already terminal ({run.state}); nothing to stop.",
                        "retryable": False,
                        "current_state": run.state,
                        "run_id": run.run_id,
                    }
                )
            intent_id = stable_uuid("control", run.run_id, len(run.control_intents))
            now = self._stamp()
            run.control_intents.append({"control_intent_id": intent_id, "action": "stop", "ack_at": iso(now)})
            self._message(
                run,
                now,
                mode="interrupt",
                sender="user",
                target="role:orchestrator",
                action="stop",
                status="consumed",
                body="Stop requested through the API.",
                payload={"topic": "smr.control.stop", "control_intent_id": intent_id},
            )
            self._finish(
                run,
                "stopped",
                reason="user_requested",
                stop_reason="user_requested",
                stop_message="Stopped through the API",
            )
            run.wedged = False
            wire = self.run_wire(run)
            wire.update(
                {
                    "control_intent_id": intent_id,
                    "control_intent_ack_at": iso(now),
                    "enqueue_status": "accepted",
                    # the spec's compact receipt fields too, so the answer is both shapes at once
                    "control_kind": "stop",
                    "requested_state": "stopped",
                    "terminal_state": "stopped",
                    "durable_state": "stopped",
                    "accepted_at": iso(now),
                    "status_url": f"/smr/projects/{run.project_id}/runs/{run.run_id}",
                }
            )
            return wire

    # ------------------------------------------------------------------ wire shape (call under lock)
    def poll_summary_wire(self, run: SimRun, actor_limit: int = 25) -> dict[str, Any]:
        """`GET …/poll-summary` (RunObservabilitySnapshot): the run, its contract and its actors; tasks,
        events and questions empty (the simulator keeps none)."""
        wire = self.run_wire(run)
        terminal = run.terminal
        actors = [poll_summary_actor(run, a) for a in run.actors if a.dispatched or a.events]
        outcome = run.terminal_outcome if terminal else None
        return {
            "schema_version": "smr_run_observability.v1",
            "project_id": run.project_id,
            "run_id": run.run_id,
            "generated_at": iso(self.tick_time()),
            "run": wire,
            "lifecycle": wire["lifecycle"],
            "run_state": run.state,
            "terminal_outcome": outcome,
            "live_phase": run.live_phase,
            "state_reason": run.state_reason,
            "state_authority": wire["state_authority"],
            "work_completed": run.state == "done",
            "run_contract": {
                "schema_version": "smr_run_contract.v1",
                "project_id": run.project_id,
                "run_id": run.run_id,
                "state": run.state,
                "terminal": terminal,
                "terminal_outcome": outcome,
                "lifecycle": {"phase": wire["lifecycle"]["authority_phase"]},
                "finalization": {"status": "complete" if terminal else "pending"},
                "recovery": {"status": "none"},
                "tasks": {"total": 0, "terminal": 0, "nonterminal": 0},
                "artifacts": {"readiness": "ready" if terminal else "pending"},
                "execution_route": {"route": "hosted"},
                "incidents": {"unresolved": 0},
                "diagnostics": {},
            },
            "candidate_publication": {
                "outcome": "running"
                if not terminal
                else "awaiting_pr_binding"
                if run.state == "done"
                else "failed_before_branch"
            },
            "actors": {
                "total_count": len(actors),
                "counts_by_state": {},
                "counts_by_role": {},
                "items": actors[: max(0, actor_limit)],
                "latest_transitions": [],
            },
            "tasks": {"total_count": 0, "items": []},
            "runtime": {},
            "cursor": {"generated_at": iso(self.tick_time())},
        }

    def run_wire(self, run: SimRun) -> dict[str, Any]:
        terminal = run.terminal
        authority = {"queued": "queued", "running": "running", "paused": "paused"}.get(run.state, "terminal")
        lifecycle = {
            "authority_phase": authority,
            "bootstrap_phase": "dispatch_pending" if run.state == "queued" else "ready",
            "terminal_phase": run.state if terminal else "none",
            "terminal_outcome": run.terminal_outcome,
            "dispatch": {"owner": "smr-dispatcher", "pool_id": "sim-docker-pool", "host_kind": "docker"},
            "failure": dict(run.failure) if run.failure else None,
            "metadata": {},
            "updated_at": iso(run.updated_at),
        }
        model = PROFILE_MODEL[run.resolved_profile]
        roles = {
            "orchestrator": {
                "model": model,
                "agent_harness": "codex",
                "params": {"reasoning_effort": "medium"},
                "requested_profile_id": run.requested_profile,
                "resolved_profile_id": run.resolved_profile,
            },
            "reviewer": {"model": "gpt-5.4", "agent_harness": "codex"},
            "worker": {
                "permitted_models": [PROFILE_MODEL[WORKER_PROFILE]],
                "default_model": PROFILE_MODEL[WORKER_PROFILE],
                "requested_profile_id": WORKER_PROFILE,
                "resolved_profile_id": WORKER_PROFILE,
            },
        }
        if self.worker_downgrades:
            # Per worker actor: requested vs resolved. `roles` is a free-form object in the spec and
            # the SDK's SmrRoleBindings ignores keys it does not know; the per-actor usage rows
            # forbid extra keys, so this is where a worker's requested profile travels.
            workers = run.actors[1:]
            downgraded = next((a for a in workers if a.downgraded), None)
            if downgraded is not None:
                roles["worker"]["resolved_profile_id"] = downgraded.profile_id
            roles["workers"] = [
                {
                    "actor_id": a.actor_id,
                    "requested_profile_id": a.requested_profile_id,
                    "resolved_profile_id": a.profile_id,
                    "requested_model": a.requested_model,
                    "model": a.model,
                }
                for a in workers
                if a is not untyped_actor(run)
            ]
        listing: dict[str, Any] = {}
        if run.shape == "d":  # the run's actors list types the orchestrator; poll-summary the workers
            listing["actors"] = [
                {"actor_id": a.actor_id, **({"participant_role": a.role} if a.role == "orchestrator" else {})}
                for a in run.actors
            ]
        return {
            "run_id": run.run_id,
            "org_id": self.org_id,
            "project_id": run.project_id,
            "runbook": "lite",
            "trigger": "api",
            "state": run.state,
            "terminal_outcome": run.terminal_outcome,
            "live_phase": run.live_phase,
            "state_reason": run.state_reason,
            "state_authority": "backend_public_run_state_projection.v1",
            "work_completed": run.state == "done",
            **run_timestamps(run),
            "stop_reason": run.stop_reason,
            "stop_reason_message": run.stop_reason_message,
            "host_kind": "docker",
            "resolved_host_kind": "docker",
            "work_mode": "open_ended_discovery",
            "resolved_work_mode": "open_ended_discovery",
            "limit": self.limit_wire(run),
            "roles": roles,
            "status_detail": {
                "summary": f"{run.state} ({run.live_phase})",
                "last_activity_at": iso(run.updated_at),
            },
            "lifecycle": lifecycle,
            "latest_summary_artifact_id": None,
            **listing,
        }


def untyped_actor(run: SimRun):
    """Shape "d": the last worker, whose role no answer states (None in other shapes)."""
    return run.actors[-1] if run.shape == "d" and len(run.actors) > 1 else None


def run_timestamps(run: SimRun) -> dict[str, str | None]:
    """The run's lifecycle times as the wire shows them (ISO, None when not reached)."""
    return {
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at) if run.started_at else None,
        "finished_at": iso(run.finished_at) if run.finished_at else None,
        "updated_at": iso(run.updated_at),
    }


def poll_summary_actor(run: SimRun, actor: Actor) -> dict[str, Any]:
    """An actor as poll-summary lists it. Shape "d" types only the workers' roles here (the
    orchestrator's is in the run's actors list; the last worker's nowhere)."""
    typed = actor is not untyped_actor(run) and not (run.shape == "d" and actor.role == "orchestrator")
    return {
        "actor_id": actor.actor_id,
        "project_id": run.project_id,
        "run_id": run.run_id,
        "actor_type": "session",
        "state": "done" if run.terminal else "running",
        "profile_id": actor.profile_id,
        "model": actor.model,
        "participant_role": actor.role if typed else None,
        "live_session": not run.terminal,
        "updated_at": actor.latest_at,
    }
