"""Starting a run: `POST /smr/projects/{pid}/trigger` (the SDK's `trigger_run`). The new run is planned
like the seeded ones (its own RNG, the next index of its project) but always hill-climbs; it appears at
once in `queued`, its initial runtime messages are its first messages (seq 1, 2, …), its limit is the
one asked for, and it runs from the next ticks on like any other run. The same idempotency key answers
the same run again: exactly one is created. Every call's body is kept, in order, in `trigger_log`.
"""

from __future__ import annotations

import math
from typing import Any

from smrweb.simulator.world.constants import BUDGET_USD, KICKOFF_TOPIC, ORCH_PROFILE, PROFILE_MODEL
from smrweb.simulator.world.errors import Conflict
from smrweb.simulator.world.state import Actor, SimRun
from smrweb.simulator.world.wireformat import stable_uuid

LIMIT_KEYS = {"max_spend_usd": float, "max_wallclock_seconds": int, "max_gpu_hours": float, "max_tokens": int}
MESSAGE_KEYS = {"topic", "causation_id", "mode", "sender", "action", "body", "payload"}
MESSAGE_MODES = ("queue", "interrupt", "steer")


class Invalid(Exception):
    """A request body FastAPI would refuse with 422: `errors` in its HTTPValidationError shape."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(str(errors))
        self.errors = errors


def _error(loc: list, msg: str, value: Any, type_: str = "value_error") -> Invalid:
    return Invalid([{"type": type_, "loc": ["body", *loc], "msg": msg, "input": value}])


class LaunchesMixin:
    """`trigger` (takes `World.lock` itself) and the limit a run's wire shows."""

    def _launch_state(self) -> tuple[list[dict[str, Any]], dict[tuple[str, str], str], dict[str, dict]]:
        if not hasattr(self, "trigger_log"):
            self.trigger_log: list[dict[str, Any]] = []  # every call's project and body, in order
            self.triggered_by_key: dict[tuple[str, str], str] = {}
            self.run_limits: dict[str, dict[str, Any]] = {}
        return self.trigger_log, self.triggered_by_key, self.run_limits

    def trigger(self, project_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Start a run of `project_id` as asked; (the run's wire, created). Raises Invalid (422)."""
        with self.lock:
            log, by_key, limits = self._launch_state()
            log.append({"project_id": project_id, "body": body})
            key = body.get("idempotency_key") or body.get("idempotency_key_run_create")
            if key is not None and (not isinstance(key, str) or len(key) > 128):
                raise _error(["idempotency_key"], "String should have at most 128 characters", key)
            if key and (project_id, key) in by_key:
                return self.run_wire(self.runs[by_key[(project_id, key)]]), False
            limit = self._check_limit(body.get("limit"))
            messages = self._check_messages(body.get("initial_runtime_messages"))
            profile = body.get("agent_profile")
            if profile is not None and profile not in PROFILE_MODEL:
                raise _error(
                    ["agent_profile"],
                    f"Unknown agent profile {profile!r}; known: {', '.join(sorted(PROFILE_MODEL))}",
                    profile,
                )
            if "prompt" in body:
                raise _error(["prompt"], "Extra inputs are not permitted", body["prompt"], "extra_forbidden")
            run = self._plan_triggered(project_id, profile or ORCH_PROFILE, key or "")
            limits[run.run_id] = limit
            self._start_triggered(run, messages)
            if key:
                by_key[(project_id, key)] = run.run_id
            return self.run_wire(run), True

    def _plan_triggered(self, project_id: str, profile: str, key: str) -> SimRun:
        siblings = self.runs_by_project[project_id]
        run = self._plan_run(project_id, len(siblings), 0)
        run.run_id = stable_uuid("triggered-run", self.seed, project_id, len(siblings), key)
        if run.run_id in self.runs:  # the same key again after a restart of the ids: never one id twice
            raise Conflict({"error_code": "run_id_taken", "message": "run id already exists"})
        run.fate = "climb"
        run.run_ticks = run.rng.randint(45, 75)
        run.created_tick = self.ticks
        run.requested_profile = run.resolved_profile = profile
        orch = run.actors[0]
        run.actors[0] = Actor(orch.actor_id, "orchestrator", None, profile, profile)
        self.runs[run.run_id] = run
        siblings.append(run)
        self._moving.append(run)
        return run

    def _start_triggered(self, run: SimRun, messages: list[dict[str, Any]]) -> None:
        """Created now (queued), with the initial runtime messages as its first messages."""
        now = self._stamp()
        run.state, run.live_phase = "queued", "queued"
        run.created_at = run.updated_at = now
        for m in messages:
            payload = dict(m.get("payload") or {}) if isinstance(m.get("payload"), dict) else {}
            payload.update({"topic": m.get("topic") or KICKOFF_TOPIC, "source": "trigger"})
            if m.get("causation_id"):
                payload["causation_id"] = m["causation_id"]
            self._message(
                run,
                now,
                mode=m.get("mode") or "queue",
                sender=m.get("sender") or "user",
                target="role:orchestrator",
                action=m.get("action"),
                status="consumed",
                body=m.get("body") or "",
                payload=payload,
            )

    @staticmethod
    def _check_limit(limit: Any) -> dict[str, Any]:
        if limit is None:
            return {}
        if not isinstance(limit, dict):
            raise _error(["limit"], "Input should be a valid dictionary or object", limit, "model_type")
        out: dict[str, Any] = {}
        for name, value in limit.items():
            kind = LIMIT_KEYS.get(name)
            if kind is None:
                raise _error(["limit", name], "Extra inputs are not permitted", value, "extra_forbidden")
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
                or (kind is int and not float(value).is_integer())
            ):
                raise _error(["limit", name], "Input should be a non-negative number", value)
            out[name] = kind(value)
        return out

    @staticmethod
    def _check_messages(messages: Any) -> list[dict[str, Any]]:
        if messages is None:
            return []
        if not isinstance(messages, list):
            raise _error(["initial_runtime_messages"], "Input should be a valid list", messages, "list_type")
        for i, m in enumerate(messages):
            where = ["initial_runtime_messages", i]
            if not isinstance(m, dict):
                raise _error(where, "Input should be a valid dictionary or object", m, "model_type")
            if extra := sorted(set(m) - MESSAGE_KEYS):
                raise _error(
                    [*where, extra[0]], "Extra inputs are not permitted", m[extra[0]], "extra_forbidden"
                )
            if (m.get("mode") or "queue") not in MESSAGE_MODES:
                raise _error([*where, "mode"], "Input should be 'queue', 'interrupt' or 'steer'", m["mode"])
            for name in ("topic", "causation_id", "sender", "action", "body"):
                if m.get(name) is not None and not isinstance(m[name], str):
                    raise _error([*where, name], "Input should be a valid string", m[name], "string_type")
        return messages

    def limit_wire(self, run: SimRun) -> dict[str, Any]:
        """The run's limit: the one it was triggered with, else the seeded runs' $5 budget. `budget_usd`
        is the convention the connector reads; the spec's UsageLimit spells it `max_spend_usd`."""
        _, _, limits = self._launch_state()
        limit = limits.get(run.run_id)
        if limit is None:
            return {"budget_usd": BUDGET_USD, "max_spend_usd": BUDGET_USD}
        out = dict(limit)
        if "max_spend_usd" in limit:
            out["budget_usd"] = limit["max_spend_usd"]
        return out
