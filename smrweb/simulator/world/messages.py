"""Runtime messages: the run's ordered message log (kickoff, dispatches, notes, control, terminal) and
its wire shape. `seq` orders a run's messages; two may share a timestamp.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso, stable_uuid


class MessagesMixin:
    """Appends runtime messages and serves them (`messages_wire`: call under `World.lock`)."""

    def _message(
        self,
        run: SimRun,
        now: datetime,
        *,
        mode: str,
        sender: str,
        target: str | None,
        action: str | None,
        status: str,
        body: str,
        payload: dict[str, Any],
    ) -> dict[str, Any]:
        seq = len(run.messages) + 1
        message = {
            "message_id": stable_uuid("message", run.run_id, seq),
            "created_at": iso(now),
            "seq": seq,
            "run_id": run.run_id,
            "topic": payload["topic"],
            "mode": mode,
            "sender": sender,
            "target": target,
            "action": action,
            "body": body,
            "payload": payload,
            "status": status,
        }
        run.messages.append(message)
        run.updated_at = now
        return message

    def messages_wire(
        self,
        run: SimRun,
        *,
        status: str | None = None,
        viewer_targets: list[str] | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        items = run.messages
        if status:
            items = [m for m in items if m["status"] == status]
        if viewer_targets:
            items = [m for m in items if m["target"] in viewer_targets]
        items = items[-limit:] if limit else []
        return [{**m, "payload": dict(m["payload"])} for m in items]
