"""Reading what an SMR backend says a run spent, whatever the deployment calls its fields.

The spec types the aggregates (`usage.cost`, `usage.totals` as a dict of ints, `cost_summary`, per-actor
usage) but leaves a usage entry's fields free-form, and the keys inside the typed dicts too. So:

- a run's totals come from the aggregates (`SourceSpend`), read through lists of plausible spellings;
- entries feed the per-turn timeline (`read_entries`): what is recognised becomes an `agent.turn`
  event, another meter is set aside, and whatever cannot be read is counted with one example — never
  silently dropped, so the run page and source health can say that the turns do not cover the source;
- `reconcile` compares the turns with the aggregates per channel.

Pure functions over plain data: no Django, no HTTP.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from smrweb.sources.failures import failure_of
from smrweb.tracking import pricing

PICO = Decimal(10) ** 12
MICRO = Decimal("0.000001")

# --- spellings --------------------------------------------------------------------------------------
ID_KEYS = ("entry_id", "id", "usage_id", "usage_entry_id", "event_id", "record_id", "uuid")
KIND_KEYS = ("meter_kind", "meter", "kind", "usage_kind", "usage_type", "type", "category", "source_type")
TIME_KEYS = (
    "created_at",
    "recorded_at",
    "occurred_at",
    "timestamp",
    "ts",
    "time",
    "at",
    "event_time",
    "started_at",
    "ended_at",
)
TOKENS_IN_KEYS = (
    "input_tokens",
    "prompt_tokens",
    "tokens_in",
    "in_tokens",
    "input_token_count",
    "prompt_token_count",
    "input",
    "prompt",
)
TOKENS_OUT_KEYS = (
    "output_tokens",
    "completion_tokens",
    "tokens_out",
    "out_tokens",
    "output_token_count",
    "completion_token_count",
    "output",
    "completion",
)
TOKEN_NESTS = ("tokens", "usage", "token_usage", "token_counts")
ACTOR_KEYS = ("actor_id", "participant_id", "agent_id", "worker_id", "actor")
ROLE_KEYS = ("actor_role", "participant_role", "role", "agent_role")
PARENT_KEYS = ("parent_actor_id", "parent_id", "parent_actor", "parent_participant_id")
TURN_KEYS = ("turn_index", "turn", "turn_number", "step", "step_index", "iteration")
MODEL_KEYS = ("model", "model_id", "model_name", "resolved_model")
TOOL_KEYS = ("tool_calls", "tools", "tool_names", "tool_uses")
DURATION_MS_KEYS = ("duration_ms", "latency_ms", "elapsed_ms")
DURATION_S_KEYS = ("duration_seconds", "duration_s", "latency_seconds", "elapsed_seconds")
# Money, by unit: (keys, how many of that unit make one USD).
COST_UNITS: tuple[tuple[tuple[str, ...], Decimal], ...] = (
    (("cost_pico_usd", "pico_usd", "amount_pico_usd", "billed_amount_pico_usd", "billed_pico_usd"), PICO),
    (("cost_micro_usd", "micro_usd", "amount_micro_usd", "cost_microdollars"), Decimal(10) ** 6),
    (("cost_cents", "cents", "amount_cents", "billed_amount_cents", "billed_cents"), Decimal(100)),
    (("cost_usd", "usd", "amount_usd", "billed_amount_usd", "billed_usd", "cost", "price_usd"), Decimal(1)),
)
COST_NESTS = ("cost", "billing", "price", "amount")

INFERENCE_KINDS = frozenset(
    {
        "inference",
        "inference_tokens",
        "llm",
        "llm_inference",
        "llm_tokens",
        "model_inference",
        "tokens",
        "completion",
        "completions",
        "chat",
        "chat_completion",
        "generation",
        "model_call",
        "llm_call",
        "inference_call",
    }
)
DRIVER_ROLES = frozenset(
    {
        "orchestrator",
        "driver",
        "lead",
        "main",
        "root",
        "coordinator",
        "planner",
        "manager",
        "primary",
        "supervisor",
    }
)


def _norm(value: Any) -> str:
    return str(value).strip().lower().replace("-", "_").replace(" ", "_").replace(".", "_")


def is_inference_kind(kind: Any) -> bool:
    k = _norm(kind)
    return (
        k in INFERENCE_KINDS or k.startswith(("inference", "llm_")) or k.endswith(("_inference", "_tokens"))
    )


def is_driver_role(role: Any) -> bool:
    return _norm(role) in DRIVER_ROLES


# A turn's side. "role_unknown": no source states the actor's role; never guessed as driver.
DRIVER, CHILD, UNKNOWN = "driver_inference", "child_work", "role_unknown"
WORKER_ROLE = "worker"  # what an actor typed only by its `worker_id` is called


def side_of(role: Any) -> str:
    """The side a stated role puts an actor's turns on (UNKNOWN when no role is stated)."""
    if role is None or not str(role).strip():
        return UNKNOWN
    return DRIVER if is_driver_role(role) else CHILD


def _role_row(item: Any, default_role: str = "") -> tuple[str, str]:
    if not isinstance(item, dict):
        return "", ""
    actor = _first(item, ("actor_id", "id", "participant_id", "worker_id"))
    role = _first(item, ("participant_role", "role", "actor_role"))
    if role is None and item.get("worker_id"):
        role = WORKER_ROLE
    return (str(actor)[:200] if actor is not None else ""), str(role or default_role)[:100]


def roles_from_actor_usage(actor_usage) -> dict[str, str]:
    """Actor id -> role as per-actor usage types it (`participant_role`, else `worker_id` = a worker)."""
    roles: dict[str, str] = {}
    for actor in getattr(actor_usage, "actors", None) or []:
        role = actor.participant_role or (WORKER_ROLE if actor.worker_id else "")
        if actor.actor_id and role:
            roles[str(actor.actor_id)[:200]] = str(role)[:100]
    return roles


def roles_from_run(row: dict) -> dict[str, str]:
    """Actor id -> role as the run itself lists its actors (`actors[]`, `roles.workers[]`, and a role's
    own `actor_id` in `roles`)."""
    roles: dict[str, str] = {}
    bindings = row.get("roles") if isinstance(row.get("roles"), dict) else {}
    for name, spec in bindings.items():
        if isinstance(spec, dict) and spec.get("actor_id"):
            roles[str(spec["actor_id"])[:200]] = str(name)[:100]
    workers = bindings.get("workers") if isinstance(bindings.get("workers"), list) else []
    for item in workers:
        actor, role = _role_row(item, WORKER_ROLE)
        if actor:
            roles[actor] = role
    for item in row.get("actors") if isinstance(row.get("actors"), list) else []:
        actor, role = _role_row(item)
        if actor and role:
            roles[actor] = role
    return roles


# An `actor_type` that names a role (others, "session" or "agent", say what the actor runs in, not its side).
CHILD_ROLES = frozenset({"worker", "subagent", "sub_agent", "child", "helper", "reviewer"})


def roles_from_poll_summary(items) -> dict[str, str]:
    """Actor id -> role from poll-summary's `actors.items`: `participant_role`, else an `actor_type`
    that is a role word (orchestrator, worker …)."""
    roles: dict[str, str] = {}
    for item in items or []:
        role = getattr(item, "participant_role", None)
        kind = getattr(item, "actor_type", None)
        if not role and kind and (is_driver_role(kind) or _norm(kind) in CHILD_ROLES):
            role = kind
        if getattr(item, "actor_id", None) and role:
            roles[str(item.actor_id)[:200]] = str(role)[:100]
    return roles


def _first(row: dict, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = row.get(key)
        if value is not None and value != "":
            return value
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() and number >= 0 else None


def _tokens(row: dict, keys: tuple[str, ...]) -> int | None:
    found = _int(_first(row, keys))
    if found is not None:
        return found
    for nest in TOKEN_NESTS:
        inner = row.get(nest)
        if isinstance(inner, dict):
            found = _int(_first(inner, keys))
            if found is not None:
                return found
    return None


def _usd(row: dict) -> Decimal | None:
    """A money amount in USD from whichever unit the row uses (nested one level too)."""
    for keys, per_usd in COST_UNITS:
        for key in keys:
            amount = _decimal(row.get(key)) if not isinstance(row.get(key), dict) else None
            if amount is not None:
                return amount / per_usd
    for nest in COST_NESTS:
        inner = row.get(nest)
        if isinstance(inner, dict):
            amount = _usd_flat(inner)
            if amount is not None:
                return amount
    return None


def _usd_flat(row: dict) -> Decimal | None:
    units = (
        (("pico_usd", "pico", "total_pico_usd"), PICO),
        (("micro_usd", "micro"), Decimal(10) ** 6),
        (("cents", "total_cents"), Decimal(100)),
        (("usd", "total_usd", "value", "amount"), Decimal(1)),
    )
    for keys, per_usd in units:
        amount = _decimal(_first(row, keys))
        if amount is not None:
            return amount / per_usd
    return None


def _when(value: Any) -> datetime | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        seconds = value / 1000 if value > 10**11 else value  # epoch milliseconds or seconds
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _tool_names(value: Any) -> list[str]:
    if isinstance(value, list):
        names = []
        for item in value:
            if isinstance(item, dict):
                names.append(str(_first(item, ("name", "tool", "tool_name", "function", "type")) or "tool"))
            elif item is not None:
                names.append(str(item))
        return names[:1000]
    count = _int(value)
    return ["tool"] * min(count, 1000) if count else []


def _actor(row: dict) -> tuple[str, str, str]:
    """(actor id, role, parent id) from flat or nested spellings."""
    actor, role, parent = _first(row, ACTOR_KEYS), _first(row, ROLE_KEYS), _first(row, PARENT_KEYS)
    if isinstance(actor, dict):
        role = role or _first(actor, ("role", "participant_role", "actor_role", "kind", "type"))
        parent = parent or _first(actor, ("parent_id", "parent_actor_id", "parent"))
        actor = _first(actor, ("id", "actor_id", "participant_id", "name"))
    if isinstance(parent, dict):
        parent = _first(parent, ("id", "actor_id"))
    return (
        (str(actor) if actor is not None else ""),
        (str(role) if role is not None else ""),
        (str(parent) if parent is not None else ""),
    )


# --- entries → turns --------------------------------------------------------------------------------


@dataclass
class EntriesReading:
    """What a run's usage entries said: turns (ingest-contract events), other meters, the unreadable."""

    turns: list[dict] = field(default_factory=list)
    other_meters: int = 0
    unreadable: int = 0
    example: str = ""  # one unreadable entry, shortened, for source health and the run page

    def note_unreadable(self, entry: Any) -> None:
        self.unreadable += 1
        if not self.example:
            text = json.dumps(entry, sort_keys=True, default=str) if isinstance(entry, dict) else repr(entry)
            self.example = text if len(text) <= 300 else text[:297] + "…"


def _entry_id(row: dict) -> str:
    found = _first(row, ID_KEYS)
    if found is not None and not isinstance(found, (dict, list)):
        return str(found)[:150]
    # No id: the entry's own content names it (the same entry polled again is the same turn).
    return (
        "h"
        + hashlib.blake2b(json.dumps(row, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()
    )


def _token_parts(row: dict, tokens_in: int, tokens_out: int) -> dict[str, int]:
    """The entry's tokens with the parts billed at other prices (cached, cache write, reasoning) where it
    names them (`pricing.token_counts`), each within the contract's bounds; a part that is not a count
    is left out (the entry still counts, priced as plain input or output)."""
    counts = pricing.token_counts({"tokens_in": tokens_in, "tokens_out": tokens_out}, row, row.get("usage"))
    return {
        k: min(v, 10**12)
        for k, v in counts.items()
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


def read_entries(entries: list, roles: dict[str, str] | None = None) -> EntriesReading:
    """`roles`: actor id -> role as the source's typed parts state it (per-actor usage, the run's actors,
    poll-summary); an entry is joined to them by its actor id. Only when none of them names the actor
    does the entry's own role, then its parent (a spawned actor is a child), decide; else role unknown."""
    roles = roles or {}
    reading = EntriesReading()
    for row in entries:
        if not isinstance(row, dict):
            reading.note_unreadable(row)
            continue
        kind = _first(row, KIND_KEYS)
        tokens_in, tokens_out = _tokens(row, TOKENS_IN_KEYS), _tokens(row, TOKENS_OUT_KEYS)
        has_tokens = tokens_in is not None or tokens_out is not None
        if kind is not None and not isinstance(kind, (dict, list)) and not is_inference_kind(kind):
            reading.other_meters += 1  # sandbox time and the like: billed through cost_summary, not a turn
            continue
        when = _when(_first(row, TIME_KEYS))
        cost = _usd(row)
        failure = failure_of(row)  # a failed call is a turn even with no tokens and no cost
        if when is None or not (has_tokens or failure or (kind is not None and cost is not None)):
            reading.note_unreadable(row)
            continue
        actor, role, parent = _actor(row)
        typed = roles.get(actor) if actor else None
        side = side_of(typed or role) if (typed or role) else (CHILD if parent else UNKNOWN)
        turn = _int(_first(row, TURN_KEYS))
        duration = _int(_first(row, DURATION_MS_KEYS))
        if duration is None:
            seconds = _decimal(_first(row, DURATION_S_KEYS))
            duration = int(seconds * 1000) if seconds is not None else None
        reading.turns.append(
            {
                "id": f"usage:{_entry_id(row)}",
                "type": "agent.turn",
                "ts": when.isoformat(),
                "turn": min(turn if turn is not None else 0, 2**31 - 1),
                "actor": (actor or {DRIVER: "orchestrator", CHILD: "worker"}.get(side, "unknown"))[:200],
                "parent_actor": parent[:200] or None,
                "kind": side,
                "model": str(_first(row, MODEL_KEYS) or "")[:200],
                **_token_parts(row, tokens_in or 0, tokens_out or 0),
                # No cost on the entry: the write path prices it from the table (or counts it unpriced).
                "cost_usd": None if cost is None else float(cost.quantize(Decimal("0.000000000001"))),
                "tool_calls": _tool_names(_first(row, TOOL_KEYS)),
                "duration_ms": min(duration, 2**31 - 1) if duration is not None else None,
                **failure,
            }
        )
    return reading


# --- aggregates --------------------------------------------------------------------------------------


@dataclass
class Part:
    usd: Decimal | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None

    def as_json(self) -> dict:
        return {
            "usd": None if self.usd is None else str(self.usd.quantize(MICRO)),
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }


@dataclass
class SourceSpend:
    """A run's spend as the source's typed aggregates state it (None: the source did not say)."""

    total_usd: Decimal | None = None  # everything billed, all meters
    total_exact: bool = True  # False when only cents were given (reconcile to the cent)
    inference_usd: Decimal | None = None
    other_usd: Decimal = Decimal(0)
    tokens_in: int | None = None
    tokens_out: int | None = None
    driver: Part | None = None
    child: Part | None = None
    unknown: Part | None = None  # actors whose role no source states (None: every role is known)
    actors: list[dict] = field(default_factory=list)  # per actor: id, role, models used
    # Actor id -> role, from every typed part that states one (per-actor usage, run actors, poll-summary).
    roles: dict[str, str] = field(default_factory=dict)

    def sides(self) -> dict[str, str]:
        """Actor id -> the side of its turns, for every actor a typed source names."""
        named = {str(a["actor"])[:200] for a in self.actors if a.get("actor")} | set(self.roles)
        return {actor: side_of(self.roles.get(actor)) for actor in sorted(named)}

    def sides_fp(self) -> str:
        """A digest of `sides()`: a sync re-attributes a run's earlier turns when it changes."""
        return hashlib.blake2b(repr(sorted(self.sides().items())).encode(), digest_size=8).hexdigest()

    recording: str = ""  # cost_summary.recording_status when not "complete"

    def as_json(self) -> dict:
        return {
            "total_usd": None if self.total_usd is None else str(self.total_usd.quantize(MICRO)),
            "inference_usd": None if self.inference_usd is None else str(self.inference_usd.quantize(MICRO)),
            "other_usd": str(self.other_usd.quantize(MICRO)),
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "driver": self.driver.as_json() if self.driver else None,
            "child": self.child.as_json() if self.child else None,
            "unknown": self.unknown.as_json() if self.unknown else None,
            "recording": self.recording,
            # Each actor's role, to show "worker 1a2b3c4d" where the turns name a bare id.
            "roles": dict(self.roles),
            # Actors the source bills whose role it states nowhere (their turns are "role unknown").
            "roles_unknown": sorted(a for a, side in self.sides().items() if side == UNKNOWN)[:200],
            "sides_fp": self.sides_fp(),
        }


def _cents_or_pico(pico: int, cents: int, usd: float) -> tuple[Decimal | None, bool]:
    if pico:
        return Decimal(pico) / PICO, True
    if cents:
        return Decimal(cents) / 100, False
    if usd:
        return Decimal(str(usd)), False
    return Decimal(0), True


def read_spend(usage, cost_summary, actor_usage, roles: dict[str, str] | None = None) -> SourceSpend:
    """The typed aggregates of `runs.get_usage`, `runs.cost_summary` and `runs.get_actor_usage`
    (any of them may be None when the backend did not answer it). `roles`: actor id -> role from the
    run's other typed parts (its actors list, poll-summary); per-actor usage's own roles win."""
    spend = SourceSpend(roles={**(roles or {}), **roles_from_actor_usage(actor_usage)})
    if cost_summary is not None:
        spend.total_usd, spend.total_exact = _cents_or_pico(
            cost_summary.total_pico_usd, cost_summary.total_cents, cost_summary.total_usd
        )
        if cost_summary.recording_status and cost_summary.recording_status != "complete":
            spend.recording = f"{cost_summary.recording_status}" + (
                f" (missing: {', '.join(cost_summary.missing_meters)})" if cost_summary.missing_meters else ""
            )
        inference, other, seen_inference = Decimal(0), Decimal(0), False
        for meter in cost_summary.by_meter:
            amount, _ = _cents_or_pico(
                meter.billed_amount_pico_usd, meter.billed_amount_cents, meter.billed_amount_usd
            )
            if is_inference_kind(meter.meter_kind):
                inference += amount
                seen_inference = True
            else:
                other += amount
        if cost_summary.by_meter:
            spend.inference_usd = inference if seen_inference else Decimal(0)
            spend.other_usd = other
    if usage is not None:
        if spend.total_usd is None or (
            spend.total_usd == 0 and (usage.cost.total_cents or usage.cost.total_pico_usd)
        ):
            spend.total_usd, spend.total_exact = _cents_or_pico(
                usage.cost.total_pico_usd, usage.cost.total_cents, usage.cost.total_usd
            )
        totals = usage.totals or {}
        nested = usage.tokens.get("totals") if isinstance(usage.tokens.get("totals"), dict) else {}
        spend.tokens_in = _int(_first(totals, TOKENS_IN_KEYS))
        spend.tokens_out = _int(_first(totals, TOKENS_OUT_KEYS))
        if spend.tokens_in is None:
            spend.tokens_in = _int(_first(nested, TOKENS_IN_KEYS))
        if spend.tokens_out is None:
            spend.tokens_out = _int(_first(nested, TOKENS_OUT_KEYS))
    if actor_usage is not None and actor_usage.actors:
        driver, child, unknown = Part(Decimal(0), 0, 0), Part(Decimal(0), 0, 0), Part(Decimal(0), 0, 0)
        parts = {DRIVER: driver, CHILD: child, UNKNOWN: unknown}
        tokens_known = True
        for actor in actor_usage.actors:
            part = parts[side_of(spend.roles.get(str(actor.actor_id)[:200]))]
            inference_cents = [v for k, v in actor.by_source_type.items() if is_inference_kind(k)]
            part.usd += Decimal(sum(inference_cents) if inference_cents else actor.billed_amount_cents) / 100
            t_in, t_out = (
                _int(_first(actor.token_usage, TOKENS_IN_KEYS)),
                _int(_first(actor.token_usage, TOKENS_OUT_KEYS)),
            )
            if t_in is None and t_out is None:
                tokens_known = False
            part.tokens_in += t_in or 0
            part.tokens_out += t_out or 0
            spend.actors.append(
                {
                    "actor": actor.actor_id,
                    "role": spend.roles.get(str(actor.actor_id)[:200], ""),
                    "models": sorted(actor.by_model),
                }
            )
        if not tokens_known:
            for part in parts.values():
                part.tokens_in = part.tokens_out = None
        spend.driver, spend.child = driver, child
        spend.unknown = (
            unknown if any(side_of(spend.roles.get(a)) == UNKNOWN for a in spend.sides()) else None
        )
        if spend.tokens_in is None and tokens_known:
            spend.tokens_in, spend.tokens_out = (
                sum(p.tokens_in for p in parts.values()),
                sum(p.tokens_out for p in parts.values()),
            )
    return spend


# --- reconciliation ----------------------------------------------------------------------------------


def reconcile(spend: SourceSpend, *, turns: dict, turn_count: int, actors: int) -> dict:
    """Per channel, what the source reports that the turns do not account for (negative: the turns
    account for more than the source reports). Only channels that differ beyond rounding are kept.

    `turns` holds the run's turn sums: tokens_in, tokens_out, cost_usd, driver_/child_/unknown_ of each
    (unknown_: turns of actors whose role no source states). Those are also kept as `role_unknown_*`:
    spend that neither side of the driver/child split accounts for."""
    out: dict[str, Any] = {}
    # Each turn's cost is kept to the micro-dollar; cents-only aggregates are rounded per actor or meter.
    slack = MICRO * max(1, turn_count) + (Decimal("0.005") if not spend.total_exact else 0)

    def tokens(name: str, source: int | None, ours: int) -> None:
        if source is not None and source != ours:
            out[name] = source - ours

    def usd(name: str, source: Decimal | None, ours: Decimal, extra: Decimal = Decimal(0)) -> None:
        if source is not None and abs(source - ours) > slack + extra:
            out[name] = str((source - ours).quantize(MICRO))

    tokens("tokens_in", spend.tokens_in, turns["tokens_in"])
    tokens("tokens_out", spend.tokens_out, turns["tokens_out"])
    if spend.inference_usd is not None:
        usd("usd", spend.inference_usd, turns["cost_usd"])
    elif spend.total_usd is not None:
        usd("usd", spend.total_usd - spend.other_usd, turns["cost_usd"])
    per_actor_cents = Decimal("0.005") * max(1, actors)  # actor usage is billed in cents per actor
    for name in ("tokens_in", "tokens_out"):
        if turns.get(f"unknown_{name}"):
            out[f"role_unknown_{name}"] = turns[f"unknown_{name}"]
    if turns.get("unknown_cost_usd"):
        out["role_unknown_usd"] = str(Decimal(turns["unknown_cost_usd"]).quantize(MICRO))
    for side in ("driver", "child", "unknown"):
        part: Part | None = getattr(spend, side)
        if part is None:
            continue
        if side == "unknown" and "unknown_cost_usd" not in turns:
            continue
        usd(f"{side}_usd", part.usd, turns[f"{side}_cost_usd"], per_actor_cents)
        tokens(f"{side}_tokens_in", part.tokens_in, turns[f"{side}_tokens_in"])
        tokens(f"{side}_tokens_out", part.tokens_out, turns[f"{side}_tokens_out"])
    return out
