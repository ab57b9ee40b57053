"""Steering a live run, as a client does it: a runtime message to the orchestrator (which the simulated
agent acknowledges with a reply a few live ticks later), and pause / resume. They are client actions
like `stop`: they apply even while the world is frozen; what follows from them (the reply) takes ticks.

A paused run emits nothing: no entries, messages or results, until it is resumed.
"""

from __future__ import annotations

from typing import Any

from smrweb.simulator.world.errors import Conflict
from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso, stable_uuid

REPLY_TICKS = 2  # the agent answers a message on its 2nd live tick after it arrived
REPLY_TOPIC = "smr.orchestrator.reply"
MODE_MAX = 32  # the spec's maxLength of `mode`
SPAWN_POLICIES = ("live_only", "request_template")


class Unprocessable(Exception):
    """A request body the real API refuses with 422 (FastAPI's shape, built by the handler)."""

    def __init__(self, loc: list[str], type_: str, msg: str, value: Any):
        super().__init__(msg)
        self.error = {"type": type_, "loc": loc, "msg": msg, "input": value}


class SteeringMixin:
    """`enqueue_message`, `pause`, `resume` (take `World.lock`); `_reply_to_steering` runs in a tick."""

    def enqueue_message(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /smr/runs/{rid}/runtime/messages`: store the message (status `queued`) and answer it as
        `SmrWorkerRuntimeMessageResponse`. The run's orchestrator replies after REPLY_TICKS live ticks."""
        with self.lock:
            run = self.get_run(run_id)
            _check_message(body)
            if run.terminal:
                raise Conflict(_refusal("terminal_run", f"Run is already terminal ({run.state}).", run))
            payload = dict(body.get("payload") or {})
            topic = body.get("topic") or payload.get("topic") or "smr.runtime.message"
            now = self._stamp()
            message = self._message(
                run,
                now,
                mode=body.get("mode") or "steer",
                sender=body.get("sender") or "user",
                target=body.get("target") or "role:orchestrator",
                action=body.get("action"),
                status="queued",
                body=body.get("body") or "",
                payload={**payload, "topic": topic},
            )
            message["causation_id"] = body.get("causation_id")
            if not run.wedged:  # a wedged run never answers anything
                run.pending_replies.append((message, self.ticks + REPLY_TICKS))
            return {**message, "payload": dict(message["payload"])}

    def pause(self, run_id: str, project_id: str | None = None) -> dict[str, Any]:
        """`POST …/pause`: a running run becomes `paused` (live phase `paused`) and emits nothing more
        until resumed."""
        with self.lock:
            run = self.get_run(run_id, project_id)
            if run.terminal:
                raise Conflict(_refusal("terminal_run", f"Run is already terminal ({run.state}).", run))
            if run.state == "paused":
                raise Conflict(_refusal("already_in_state", "Run is already paused.", run))
            if run.state != "running":
                raise Conflict(_refusal("runtime_not_live", f"Run is {run.state}: nothing runs yet.", run))
            return self._lifecycle(run, "pause", "paused", "Pause requested through the API.")

    def resume(self, run_id: str, project_id: str | None = None) -> dict[str, Any]:
        """`POST …/resume`: a paused run is `running` again from the next tick."""
        with self.lock:
            run = self.get_run(run_id, project_id)
            if run.terminal:
                raise Conflict(_refusal("terminal_run", f"Run is already terminal ({run.state}).", run))
            if run.state != "paused":
                raise Conflict(_refusal("already_in_state", f"Run is {run.state}, not paused.", run))
            return self._lifecycle(run, "resume", "running", "Resume requested through the API.")

    def _lifecycle(self, run: SimRun, action: str, state: str, text: str) -> dict[str, Any]:
        intent_id = stable_uuid("control", run.run_id, len(run.control_intents))
        now = self._stamp()
        run.control_intents.append({"control_intent_id": intent_id, "action": action, "ack_at": iso(now)})
        self._message(
            run,
            now,
            mode="interrupt",
            sender="user",
            target="role:orchestrator",
            action=action,
            status="consumed",
            body=text,
            payload={"topic": f"smr.control.{action}", "control_intent_id": intent_id},
        )
        run.state, run.live_phase = state, "paused" if state == "paused" else "working"
        run.updated_at = now
        wire = self.run_wire(run)
        wire.update(
            {
                "control_intent_id": intent_id,
                "control_intent_ack_at": iso(now),
                "enqueue_status": "accepted",
                "control_kind": action,
                "requested_state": state,
                "durable_state": state,
                "accepted_at": iso(now),
                "status_url": f"/smr/projects/{run.project_id}/runs/{run.run_id}",
            }
        )
        return wire

    def _reply_to_steering(self, run: SimRun) -> None:
        """In a live tick: the orchestrator acknowledges each message whose time has come."""
        due = [(m, t) for m, t in run.pending_replies if t <= self.ticks]
        if not due:
            return
        run.pending_replies = [(m, t) for m, t in run.pending_replies if t > self.ticks]
        for message, _ in due:
            text = " ".join((message["body"] or message["action"] or "").split())
            excerpt = text if len(text) <= 160 else text[:159] + "…"
            reply = self._message(
                run,
                self._stamp(),
                mode="note",
                sender="role:orchestrator",
                target="role:user",
                action=None,
                status="delivered",
                body=f"Acknowledged: “{excerpt}”. Adjusting the plan accordingly.",
                payload={"topic": REPLY_TOPIC, "in_reply_to": message["message_id"]},
            )
            reply["causation_id"] = message["message_id"]


def _refusal(code: str, message: str, run: SimRun) -> dict[str, Any]:
    """The 409 detail the SDK turns into `ManagedResearchRunControlError` (or, for a message, a
    structured `SmrApiError`)."""
    return {
        "error_code": code,
        "message": message,
        "retryable": False,
        "current_state": run.state,
        "run_id": run.run_id,
    }


def _check_message(body: dict[str, Any]) -> None:
    """What the spec's `SmrRuntimeMessageCreateRequest` allows; a message says something."""
    for name in ("topic", "causation_id", "sender", "target", "participant_session_id", "action", "body"):
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise Unprocessable(["body", name], "string_type", "Input should be a valid string", value)
    mode = body.get("mode")
    if mode is not None and (not isinstance(mode, str) or not 1 <= len(mode) <= MODE_MAX):
        raise Unprocessable(
            ["body", "mode"], "string_too_long", f"String should have at most {MODE_MAX} characters", mode
        )
    policy = body.get("spawn_policy")
    if policy is not None and policy not in SPAWN_POLICIES:
        raise Unprocessable(
            ["body", "spawn_policy"],
            "literal_error",
            "Input should be 'live_only' or 'request_template'",
            policy,
        )
    payload = body.get("payload")
    if payload is not None and not isinstance(payload, dict):
        raise Unprocessable(["body", "payload"], "dict_type", "Input should be a valid dictionary", payload)
    if not (body.get("body") or body.get("action") or payload):
        raise Unprocessable(
            ["body"],
            "value_error",
            "Value error, a runtime message needs a body, an action or a payload",
            body,
        )
