"""The tests' own reader of both wire shapes (docs/simulator.md, "Shapes"): it turns a usage entry,
totals or per-actor row of either shape into one canonical form, so assertions need not care which
shape a run was served in. Opaque (unreadable) entries decode to None."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

PICO = 10**12
METER = {
    "inference": "inference",
    "sandbox_seconds": "sandbox_seconds",
    "inference_tokens": "inference",
    "sandbox_time": "sandbox_seconds",
}
ENTRY_ROLE = {
    "orchestrator": "orchestrator",
    "worker": "worker",
    "lead": "orchestrator",
    "subagent": "worker",
}
PARTICIPANT_ROLE = {
    "orchestrator": "orchestrator",
    "worker": "worker",
    "driver": "orchestrator",
    "subagent": "worker",
}


def usd_text_to_pico(text: str) -> int:
    exact = Decimal(text) * PICO
    assert exact == exact.to_integral_value(), text
    return int(exact)


def decode_entry(e: dict[str, Any]) -> dict[str, Any] | None:
    if set(e) == {"opaque"}:
        return None
    if "entry_id" in e:  # shape a
        return {
            "id": e["entry_id"],
            "created_at": e["created_at"],
            "kind": e["meter_kind"],
            "actor_id": e["actor_id"],
            "role": e["actor_role"],
            "parent_id": e["parent_actor_id"],
            "model": e["model"],
            "turn": e["turn_index"],
            "input_tokens": e["input_tokens"],
            "output_tokens": e["output_tokens"],
            "pico": e["cost_pico_usd"],
            "tools": list(e["tool_calls"]),
            "quantity": e["quantity"],
        }
    tokens = e.get("tokens") or {"input": 0, "output": 0}
    return {
        "id": e["id"],
        "created_at": e["recorded_at"],
        "kind": METER[e["meter"]],
        "actor_id": e["actor"]["id"],
        "role": ENTRY_ROLE[e["actor"]["role"]],
        "parent_id": e["actor"]["parent_id"],
        "model": e.get("model_name"),
        "turn": e.get("step"),
        "input_tokens": tokens["input"],
        "output_tokens": tokens["output"],
        "pico": usd_text_to_pico(e["cost_usd"]),
        "tools": [t["name"] for t in e["tool_calls"]],
        "quantity": e["units"],
    }


def decode_totals(totals: dict[str, int]) -> dict[str, int]:
    if "input_tokens" in totals:
        return {
            "input_tokens": totals["input_tokens"],
            "output_tokens": totals["output_tokens"],
            "entries": totals["entries"],
            "inference_events": totals["inference_events"],
        }
    return {
        "input_tokens": totals["prompt_tokens"],
        "output_tokens": totals["completion_tokens"],
        "entries": totals["line_items"],
        "inference_events": totals["llm_calls"],
    }


def decode_actor_tokens(token_usage: dict[str, int]) -> tuple[int, int]:
    if "input_tokens" in token_usage:
        return token_usage["input_tokens"], token_usage["output_tokens"]
    return token_usage["prompt_tokens"], token_usage["completion_tokens"]
