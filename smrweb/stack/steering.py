"""How the demo's harness is steered: the webhook receiver takes smrweb's signed `smrweb.message`,
`smrweb.pause` and `smrweb.resume` and leaves them in the harness's inbox (a directory per run it drives,
next to the token file); the harness reads its inbox every tick — a paused run takes no turns and reports
the state `paused`, a resumed one reports `running` again, and the agent acknowledges a message by
reporting it back (a `message` event whose id is the webhook's `message_id`, which confirms it in
smrweb) with a reply of its own.

A run the harness no longer drives (finished, or gone silent) has no inbox: the receiver answers 409.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

TYPES = ("smrweb.message", "smrweb.pause", "smrweb.resume")
SAFE = re.compile(r"^[A-Za-z0-9._:@+=~-]{1,200}$")  # project slugs and run ids, as smrweb allows them


def inbox_dir(token_file: str | os.PathLike) -> Path:
    """The demo's harness inbox: beside the token file both processes are given."""
    return Path(token_file).resolve().parent / "demo-harness-inbox"


def run_dir(inbox: Path, project: str, run: str) -> Path | None:
    if not (SAFE.match(project) and SAFE.match(run)) or ".." in project or ".." in run:
        return None
    return inbox / f"{project}--{run}"


# --- the receiver's side --------------------------------------------------------------------------------


def deliver(payload: dict, inbox: Path) -> tuple[int, str]:
    """Leave a steering request in the run's inbox: (HTTP status, what happened). 202: the harness acts
    at its next tick and reports back through the API."""
    where = run_dir(inbox, str(payload.get("project", "")), str(payload.get("run", "")))
    if where is None:
        return 400, "not a run this harness could drive"
    if not where.is_dir():
        return 409, f"this harness does not drive run {payload['run']} (it ended or went silent)"
    kind = payload["type"].removeprefix("smrweb.")
    if kind == "pause":
        (where / "paused").touch()
        return 202, "the run pauses at the harness's next tick"
    if kind == "resume":
        (where / "paused").unlink(missing_ok=True)
        return 202, "the run resumes at the harness's next tick"
    body = str(payload.get("body") or "").strip()
    control_id = payload.get("control_id")
    if not body or not payload.get("message_id") or not isinstance(control_id, int):
        return 400, "a message needs a body, a message_id and a control_id"
    spool = where / f".{uuid.uuid4().hex}.tmp"
    spool.write_text(json.dumps({"message_id": payload["message_id"], "body": body}), encoding="utf-8")
    spool.replace(where / f"message-{control_id}.json")  # whole or not at all
    return 202, "the agent reads it at its next turn"


# --- the harness's side ---------------------------------------------------------------------------------


def reset_inbox(inbox: Path | None) -> None:
    """A harness starting drives no run yet: what an earlier one left (it was killed) is cleared, so the
    runs it drove are refused rather than accepted and never acted on."""
    if inbox is not None:
        shutil.rmtree(inbox, ignore_errors=True)


def open_inbox(inbox: Path | None, project: str, run: str) -> None:
    """The harness drives this run: steering requests for it are taken."""
    if inbox is not None and (where := run_dir(inbox, project, run)) is not None:
        where.mkdir(parents=True, exist_ok=True)


def close_inbox(inbox: Path | None, project: str, run: str) -> None:
    """The run ended or went silent: steering requests for it are refused from now on."""
    if inbox is not None and (where := run_dir(inbox, project, run)) is not None:
        shutil.rmtree(where, ignore_errors=True)


def is_paused(inbox: Path | None, project: str, run: str) -> bool:
    where = run_dir(inbox, project, run) if inbox is not None else None
    return where is not None and (where / "paused").exists()


def take_messages(inbox: Path | None, project: str, run: str) -> list[dict]:
    """The messages left for this run, oldest first, each taken once."""
    where = run_dir(inbox, project, run) if inbox is not None else None
    if where is None or not where.is_dir():
        return []
    taken = []
    for path in sorted(where.glob("message-*.json"), key=lambda p: int(p.stem.split("-", 1)[1])):
        try:
            taken.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        path.unlink(missing_ok=True)
    return taken


def reported(message: dict) -> list[dict]:
    """The events by which the agent reports a message back: the message itself under the id smrweb gave
    it (which confirms it there), and the agent's reply."""
    text = " ".join(message["body"].split())
    excerpt = text if len(text) <= 160 else text[:159] + "…"
    return [
        {
            "type": "message",
            "id": message["message_id"],
            "topic": "smrweb.steer",
            "target": "role:orchestrator",
            "mode": "steer",
            "body": message["body"],
        },
        {
            "type": "message",
            "id": f"{message['message_id']}:reply",
            "topic": "agent.reply",
            "target": "role:user",
            "mode": "note",
            "body": f"Acknowledged: “{excerpt}”. Adjusting the plan accordingly.",
        },
    ]
