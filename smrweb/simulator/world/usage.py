"""Usage: the run's ledger of entries (inference turns and sandbox seconds), its running sums, and the
wire shapes built from them (usage, cost summary, per-actor usage) in shape "a" or "b" (or "c"/"d": "a"
with entries naming only the actor id, see constants.SHAPES).

docs/simulator.md ("Shapes") lists every spelling of shape "b"; opaque entries (`unreadable_every`)
are served as an encrypted-looking blob.
"""

from __future__ import annotations

import base64
from typing import Any

from smrweb.simulator.world.constants import (
    ACTOR_ID_ONLY,
    B_ENTRY_ROLE,
    B_METER,
    B_PARTICIPANT_ROLE,
    B_PROVIDER,
    B_UNIT,
    MODEL_PRICE,
)
from smrweb.simulator.world.money import pico_to_cents, pico_to_usd, pico_to_usd_text
from smrweb.simulator.world.state import Actor, SimRun
from smrweb.simulator.world.wireformat import hex_digest, iso, stable_uuid


class UsageMixin:
    """Writes usage entries and serves them (the `*_wire` methods: call under `World.lock`)."""

    def _inference(
        self, run: SimRun, actor: Actor, in_tok: int, out_tok: int, tools: list[str], duration_ms: int
    ) -> None:
        price_in, price_out = MODEL_PRICE[actor.model]
        self._entry(
            run,
            meter_kind="inference",
            actor=actor,
            model=actor.model,
            turn_index=actor.turns,
            input_tokens=in_tok,
            output_tokens=out_tok,
            cost=in_tok * price_in + out_tok * price_out,
            tool_calls=tools,
            duration_ms=duration_ms,
            quantity=in_tok + out_tok,
            quantity_unit="tokens",
        )
        actor.turns += 1

    def _entry(
        self,
        run: SimRun,
        *,
        meter_kind: str,
        actor: Actor,
        model,
        turn_index,
        input_tokens: int,
        output_tokens: int,
        cost: int,
        tool_calls: list[str],
        duration_ms: int,
        quantity: int,
        quantity_unit: str,
    ) -> None:
        now = self._stamp()
        n = len(run.entries)
        run.entries.append(
            {
                "entry_id": stable_uuid("entry", run.run_id, n),
                "created_at": iso(now),
                "meter_kind": meter_kind,
                "actor_id": actor.actor_id,
                "actor_role": actor.role,
                "parent_actor_id": actor.parent_actor_id,
                "model": model,
                "turn_index": turn_index,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cost_pico_usd": cost,
                "tool_calls": list(tool_calls),
                "duration_ms": duration_ms,
                "quantity": quantity,
                "quantity_unit": quantity_unit,
            }
        )
        run.pico_by_kind[meter_kind] = run.pico_by_kind.get(meter_kind, 0) + cost
        run.quantity_by_kind[meter_kind] = run.quantity_by_kind.get(meter_kind, 0) + quantity
        run.events_by_kind[meter_kind] = run.events_by_kind.get(meter_kind, 0) + 1
        run.updated_at = now
        # running sums
        inference = meter_kind == "inference"
        run.input_tokens += input_tokens
        run.output_tokens += output_tokens
        run.tool_calls += len(tool_calls)
        if inference:
            row = run.tokens_by_model.setdefault(model, {"input_tokens": 0, "output_tokens": 0, "calls": 0})
            row["input_tokens"] += input_tokens
            row["output_tokens"] += output_tokens
            row["calls"] += 1
        role = run.by_role.setdefault(
            actor.role, {"cost_pico_usd": 0, "input_tokens": 0, "output_tokens": 0, "turns": 0, "events": 0}
        )
        role["cost_pico_usd"] += cost
        role["input_tokens"] += input_tokens
        role["output_tokens"] += output_tokens
        role["turns"] += 1 if inference else 0
        role["events"] += 1
        actor.pico += cost
        actor.events += 1
        actor.input_tokens += input_tokens
        actor.output_tokens += output_tokens
        actor.pico_by_kind[meter_kind] = actor.pico_by_kind.get(meter_kind, 0) + cost
        if model:
            actor.pico_by_model[model] = actor.pico_by_model.get(model, 0) + cost
        actor.latest_at = iso(now)
        if inference:
            run.inference_count += 1
            if self.unreadable_every and run.inference_count % self.unreadable_every == 0:
                run.unreadable.add(n)
                sums = run.unreadable_sums
                sums["entries"] += 1
                sums["input_tokens"] += input_tokens
                sums["output_tokens"] += output_tokens
                sums["pico_usd"] += cost

    # ------------------------------------------------------------------ wire shapes (call under lock)
    def entries_wire(self, run: SimRun) -> list[dict[str, Any]]:
        """The usage entries as served (in the run's shape; opaque where unreadable). Entries never
        change, so each is rendered once and kept."""
        cache = run.wire_cache
        for n in range(len(cache), len(run.entries)):
            entry = run.entries[n]
            if n in run.unreadable:
                cache.append(_opaque_entry(run, n))
            elif run.shape == "b":
                cache.append(_entry_b(entry))
            elif run.shape in ACTOR_ID_ONLY:  # the actor by id only: its role is told elsewhere, or not
                cache.append({k: v for k, v in entry.items() if k not in ("actor_role", "parent_actor_id")})
            else:
                cache.append(entry)
        return list(cache)

    def usage_wire(self, run: SimRun) -> dict[str, Any]:
        total = sum(run.pico_by_kind.values())
        cents = pico_to_cents(total)
        usd = pico_to_usd(total)
        in_tok, out_tok = run.input_tokens, run.output_tokens
        inference_events = run.events_by_kind.get("inference", 0)
        sandbox_events = run.events_by_kind.get("sandbox_seconds", 0)
        sandbox_seconds = run.quantity_by_kind.get("sandbox_seconds", 0)
        worker_turns = sum(a.turns for a in run.actors[1:])
        if run.shape == "b":
            return {
                "run_id": run.run_id,
                "project_id": run.project_id,
                "cost": {
                    "total_cents": cents,
                    "charged_cents": cents,
                    "internal_cost_cents": cents,
                    "total_usd": usd,
                    "charged_usd": usd,
                    "internal_cost_usd": usd,
                },
                "totals": {
                    "prompt_tokens": in_tok,
                    "completion_tokens": out_tok,
                    "llm_calls": inference_events,
                    "sandbox_sessions": sandbox_events,
                    "sandbox_seconds_billed": sandbox_seconds,
                    "tool_invocations": run.tool_calls,
                    "lead_turns": run.orchestrator.turns,
                    "subagent_turns": worker_turns,
                    "line_items": len(run.entries),
                },
                "breakdown": {
                    "meters": {
                        B_METER[kind]: {
                            "cost_usd": pico_to_usd_text(pico),
                            "cost_cents": pico_to_cents(pico),
                            "units": run.quantity_by_kind.get(kind, 0),
                            "unit": B_UNIT[_UNITS[kind]],
                            "line_items": run.events_by_kind.get(kind, 0),
                        }
                        for kind, pico in sorted(run.pico_by_kind.items())
                    },
                    "roles": {
                        B_ENTRY_ROLE[role]: {
                            "cost_usd": pico_to_usd_text(row["cost_pico_usd"]),
                            "prompt_tokens": row["input_tokens"],
                            "completion_tokens": row["output_tokens"],
                            "llm_calls": row["turns"],
                            "line_items": row["events"],
                        }
                        for role, row in run.by_role.items()
                    },
                },
                "entries": self.entries_wire(run),
                "rows": [],
                "total_cost_cents": cents,
                "total_charged_cents": cents,
                "total_internal_cost_cents": cents,
                "total_cost_usd": usd,
                "total_charged_usd": usd,
                "total_internal_cost_usd": usd,
            }
        tokens = {
            "sessions_seen": sum(1 for a in run.actors if a.turns),
            "totals": {"input_tokens": in_tok, "output_tokens": out_tok, "total_tokens": in_tok + out_tok},
            "by_model": {model: dict(row) for model, row in run.tokens_by_model.items()},
        }
        by_role = {role: dict(row) for role, row in run.by_role.items()}
        cost = {
            "total_cents": cents,
            "charged_cents": cents,
            "internal_cost_cents": cents,
            "total_pico_usd": total,
            "charged_pico_usd": total,
            "internal_cost_pico_usd": total,
            "total_usd": usd,
            "charged_usd": usd,
            "internal_cost_usd": usd,
        }
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "cost": cost,
            "totals": {
                "input_tokens": in_tok,
                "output_tokens": out_tok,
                "total_tokens": in_tok + out_tok,
                "inference_events": inference_events,
                "sandbox_events": sandbox_events,
                "sandbox_seconds": sandbox_seconds,
                "tool_calls": run.tool_calls,
                "orchestrator_turns": run.orchestrator.turns,
                "worker_turns": worker_turns,
                "entries": len(run.entries),
            },
            "tokens": tokens,
            "token_usage": tokens,
            "breakdown": {"by_meter": self._by_meter(run), "by_actor_role": by_role},
            "entries": self.entries_wire(run),
            "rows": [],
            "total_cost_cents": cents,
            "total_charged_cents": cents,
            "total_internal_cost_cents": cents,
            "total_cost_pico_usd": total,
            "total_charged_pico_usd": total,
            "total_internal_cost_pico_usd": total,
            "total_cost_usd": usd,
            "total_charged_usd": usd,
            "total_internal_cost_usd": usd,
        }

    def _by_meter(self, run: SimRun) -> list[dict[str, Any]]:
        if run.shape == "b":
            return [
                {
                    "meter_kind": B_METER[kind],
                    "billed_amount_cents": pico_to_cents(pico),
                    "billed_amount_usd": pico_to_usd(pico),
                    "quantity": run.quantity_by_kind.get(kind, 0),
                    "quantity_unit": B_UNIT[_UNITS[kind]],
                    "event_count": run.events_by_kind.get(kind, 0),
                }
                for kind, pico in sorted(run.pico_by_kind.items())
            ]
        return [
            {
                "meter_kind": kind,
                "billed_amount_cents": pico_to_cents(pico),
                "billed_amount_pico_usd": pico,
                "billed_amount_usd": pico_to_usd(pico),
                "quantity": run.quantity_by_kind.get(kind, 0),
                "quantity_unit": _UNITS[kind],
                "event_count": run.events_by_kind.get(kind, 0),
            }
            for kind, pico in sorted(run.pico_by_kind.items())
        ]

    def cost_summary_wire(self, run: SimRun) -> dict[str, Any]:
        total = sum(run.pico_by_kind.values())
        if run.shape == "b":
            return {
                "run_id": run.run_id,
                "project_id": run.project_id,
                "total_cents": pico_to_cents(total),
                "total_usd": pico_to_usd(total),
                "recording_status": "complete",
                "missing_meters": [],
                "by_meter": self._by_meter(run),
            }
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "total_cents": pico_to_cents(total),
            "total_pico_usd": total,
            "total_usd": pico_to_usd(total),
            "recording_status": "complete",
            "missing_meters": [],
            "by_meter": self._by_meter(run),
        }

    def actor_usage_wire(self, run: SimRun) -> dict[str, Any]:
        rows = []
        b = run.shape == "b"
        for actor in run.actors:
            if not actor.events:
                continue
            cents = pico_to_cents(actor.pico)
            by_kind = actor.pico_by_kind
            if b:
                by_provider = {B_PROVIDER[k]: pico_to_cents(v) for k, v in sorted(by_kind.items())}
                by_source_type = {B_METER[k]: pico_to_cents(v) for k, v in sorted(by_kind.items())}
                token_usage = {
                    "prompt_tokens": actor.input_tokens,
                    "completion_tokens": actor.output_tokens,
                    "total_tokens": actor.input_tokens + actor.output_tokens,
                }
                role = B_PARTICIPANT_ROLE[actor.role]
            else:
                by_provider = {
                    "openai": pico_to_cents(by_kind.get("inference", 0)),
                    "sandbox": pico_to_cents(by_kind.get("sandbox_seconds", 0)),
                }
                by_source_type = {k: pico_to_cents(v) for k, v in sorted(by_kind.items())}
                token_usage = {"input_tokens": actor.input_tokens, "output_tokens": actor.output_tokens}
                role = actor.role
            typed = run.shape != "d"  # shape "d": per-actor usage states no role at all
            rows.append(
                {
                    "actor_id": actor.actor_id,
                    "org_id": self.org_id,
                    "project_id": run.project_id,
                    "run_id": run.run_id,
                    "task_id": None,
                    "task_key": None,
                    "worker_id": actor.actor_id if typed and actor.role == "worker" else None,
                    "participant_role": role if typed else None,
                    "nominal_amount_cents": cents,
                    "billed_amount_cents": cents,
                    "internal_cost_cents": cents,
                    "event_count": actor.events,
                    "latest_usage_at": actor.latest_at,
                    "by_provider": by_provider,
                    "by_source_type": by_source_type,
                    "by_source_subtype": {},
                    "by_model": {k: pico_to_cents(v) for k, v in sorted(actor.pico_by_model.items())},
                    "token_usage": token_usage,
                }
            )
        return {
            "org_id": self.org_id,
            "project_id": run.project_id,
            "run_id": run.run_id,
            "count": len(rows),
            "actors": rows,
        }


_UNITS = {"inference": "tokens", "sandbox_seconds": "seconds"}


def _entry_b(e: dict[str, Any]) -> dict[str, Any]:
    """A usage entry in shape "b" (docs/simulator.md, "Shapes")."""
    out: dict[str, Any] = {
        "id": e["entry_id"],
        "recorded_at": e["created_at"],
        "meter": B_METER[e["meter_kind"]],
        "actor": {
            "id": e["actor_id"],
            "role": B_ENTRY_ROLE[e["actor_role"]],
            "parent_id": e["parent_actor_id"],
        },
    }
    if e["meter_kind"] == "inference":
        out["model_name"] = e["model"]
        out["step"] = e["turn_index"]
        out["tokens"] = {"input": e["input_tokens"], "output": e["output_tokens"]}
    out["cost_usd"] = pico_to_usd_text(e["cost_pico_usd"])
    out["tool_calls"] = [{"name": name} for name in e["tool_calls"]]
    out["latency_ms"] = e["duration_ms"]
    out["units"] = e["quantity"]
    out["unit"] = B_UNIT[e["quantity_unit"]]
    return out


def _opaque_entry(run: SimRun, n: int) -> dict[str, Any]:
    """An entry no reader can understand: an encrypted-looking blob, nothing else."""
    blob = bytes.fromhex(hex_digest("opaque", run.run_id, n) + hex_digest("opaque-2", run.run_id, n))
    return {"opaque": base64.b64encode(blob).decode()}
