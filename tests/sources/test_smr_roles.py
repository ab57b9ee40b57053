"""Issue 34, item 1: each turn's driver/child side comes from what the source types (per-actor usage's
`participant_role` / `worker_id`, the run's actors list, poll-summary's actors), joined to the usage
entries by actor id; an actor whose role no source states is "role unknown", shown and counted, never
booked as driver; runs synced by older code are re-attributed (`manage.py reattribute_turns`)."""

from __future__ import annotations

from decimal import Decimal

from managed_research.models.run_diagnostics import SmrRunActorUsage
from managed_research.models.run_observability import ActorCollectionSnapshot

from smrweb.sources.smr_usage import (
    read_entries,
    read_spend,
    reconcile,
    roles_from_poll_summary,
    roles_from_run,
)

API_KEY, PID = "roles-key", "roles-proj"


def entry(n: int, actor: str, tokens_in: int, **extra) -> dict:
    """A usage entry that names only the actor id (the spec leaves entries free-form)."""
    return {
        "entry_id": f"e{n}",
        "meter_kind": "inference",
        "created_at": f"2026-11-20T10:00:{n:02d}Z",
        "actor_id": actor,
        "input_tokens": tokens_in,
        "output_tokens": tokens_in // 10,
        "cost_pico_usd": tokens_in * 10**6,
        "turn_index": n,
        **extra,
    }


# The reproduction of the issue: an orchestrator that read 450k tokens, a worker 1.35M, entries by id only.
ENTRIES = [entry(1, "a-orch", 450_000), entry(2, "a-work", 900_000), entry(3, "a-work", 450_000)]


def actor_usage(*rows: dict) -> SmrRunActorUsage:
    base = {"org_id": "o", "project_id": PID, "run_id": "r"}
    return SmrRunActorUsage.from_wire(
        {**base, "count": len(rows), "actors": [{**base, "event_count": 1, **row} for row in rows]}
    )


def kinds(reading) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for turn in reading.turns:
        out.setdefault(turn["actor"], set()).add(turn["kind"])
    return out


def test_per_actor_usage_types_the_role_of_entries_that_name_only_the_actor_id():
    usage = actor_usage(
        {"actor_id": "a-orch", "participant_role": "orchestrator", "token_usage": {"input_tokens": 450_000}},
        {"actor_id": "a-work", "participant_role": "worker", "token_usage": {"input_tokens": 1_350_000}},
    )
    spend = read_spend(None, None, usage)
    reading = read_entries(ENTRIES, spend.roles)
    assert kinds(reading) == {"a-orch": {"driver_inference"}, "a-work": {"child_work"}}
    assert spend.driver.tokens_in == 450_000 and spend.child.tokens_in == 1_350_000 and spend.unknown is None


def test_a_worker_id_alone_types_a_worker():
    usage = actor_usage(
        {"actor_id": "a-orch", "participant_role": "lead"}, {"actor_id": "a-work", "worker_id": "a-work"}
    )
    spend = read_spend(None, None, usage)
    assert spend.roles == {"a-orch": "lead", "a-work": "worker"}
    assert kinds(read_entries(ENTRIES, spend.roles))["a-work"] == {"child_work"}


def test_the_runs_actors_list_types_roles_when_per_actor_usage_does_not():
    row = {
        "run_id": "r",
        "actors": [{"actor_id": "a-orch", "participant_role": "orchestrator"}, {"actor_id": "x"}],
        "roles": {"workers": [{"actor_id": "a-work", "requested_profile_id": "p"}]},
    }
    roles = roles_from_run(row)
    assert roles == {"a-orch": "orchestrator", "a-work": "worker"}  # "x" states no role: not guessed
    usage = actor_usage({"actor_id": "a-orch"}, {"actor_id": "a-work"})  # no role in per-actor usage
    spend = read_spend(None, None, usage, roles)
    assert kinds(read_entries(ENTRIES, spend.roles)) == {
        "a-orch": {"driver_inference"},
        "a-work": {"child_work"},
    }
    assert spend.unknown is None


def test_poll_summary_actors_type_roles():
    items = ActorCollectionSnapshot.from_wire(
        {
            "total_count": 2,
            "items": [
                {"actor_id": "a-orch", "actor_type": "orchestrator", "state": "running"},
                {"actor_id": "a-work", "actor_type": "agent", "participant_role": "worker", "state": "done"},
                {"actor_id": "a-other", "actor_type": "session", "state": "done"},  # no role stated
            ],
        }
    ).items
    roles = roles_from_poll_summary(items)
    assert roles == {"a-orch": "orchestrator", "a-work": "worker"}
    assert kinds(read_entries(ENTRIES, roles)) == {"a-orch": {"driver_inference"}, "a-work": {"child_work"}}


def test_an_actor_no_source_types_is_role_unknown_never_driver_and_reconciliation_counts_it():
    usage = actor_usage(
        {"actor_id": "a-orch", "participant_role": "orchestrator", "token_usage": {"input_tokens": 450_000}},
        {"actor_id": "a-work", "token_usage": {"input_tokens": 1_350_000}},  # no role, no worker_id
    )
    spend = read_spend(None, None, usage)
    reading = read_entries(ENTRIES, spend.roles)
    assert kinds(reading) == {"a-orch": {"driver_inference"}, "a-work": {"role_unknown"}}
    assert spend.driver.tokens_in == 450_000 and spend.child.tokens_in == 0
    assert spend.unknown.tokens_in == 1_350_000
    assert spend.as_json()["roles_unknown"] == ["a-work"]
    sums = {
        "tokens_in": 1_800_000,
        "tokens_out": 180_000,
        "cost_usd": Decimal("1.8"),
        "driver_tokens_in": 450_000,
        "driver_tokens_out": 45_000,
        "driver_cost_usd": Decimal("0.45"),
        "child_tokens_in": 0,
        "child_tokens_out": 0,
        "child_cost_usd": Decimal(0),
        "unknown_tokens_in": 1_350_000,
        "unknown_tokens_out": 135_000,
        "unknown_cost_usd": Decimal("1.35"),
    }
    gap = reconcile(spend, turns=sums, turn_count=3, actors=2)
    assert gap["role_unknown_tokens_in"] == 1_350_000 and gap["role_unknown_usd"] == "1.350000"
    assert "driver_tokens_in" not in gap and "child_tokens_in" not in gap
    # With no typed source at all, an entry without role or parent is unknown too (not driver).
    assert kinds(read_entries(ENTRIES)) == {"a-orch": {"role_unknown"}, "a-work": {"role_unknown"}}
