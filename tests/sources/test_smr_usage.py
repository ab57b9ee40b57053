"""The tolerant reading of SMR usage (sources/smr_usage.py): entries in several spellings become the same
turns, what cannot be read is counted with an example, totals come from the typed aggregates (parsed by
the real SDK), and reconciliation names each channel the turns do not account for."""

from __future__ import annotations

from decimal import Decimal

import pytest
from managed_research.models.canonical_usage import SmrRunUsage
from managed_research.models.run_diagnostics import SmrRunActorUsage, SmrRunCostSummary

from smrweb.sources.smr_usage import read_entries, read_spend, reconcile
from smrweb.tracking.models import Run

# One orchestrator turn and one worker turn, each written the ways different deployments could write it.
SPELLINGS = {
    "flat-pico": [
        {
            "entry_id": "e1",
            "meter_kind": "inference",
            "created_at": "2026-11-20T10:00:00Z",
            "actor_id": "o",
            "actor_role": "orchestrator",
            "input_tokens": 1000,
            "output_tokens": 200,
            "cost_pico_usd": 3_250_000_000_000,
            "model": "gpt-5.4",
            "turn_index": 0,
            "tool_calls": ["shell"],
            "duration_ms": 900,
        },
        {
            "entry_id": "e2",
            "meter_kind": "inference",
            "created_at": "2026-11-20T10:00:01Z",
            "actor_id": "w",
            "actor_role": "worker",
            "parent_actor_id": "o",
            "input_tokens": 500,
            "output_tokens": 100,
            "cost_pico_usd": 325_000_000_000,
            "model": "gpt-5.4-mini",
            "turn_index": 0,
            "tool_calls": [],
        },
    ],
    "nested-usd-string": [
        {
            "id": "e1",
            "meter": "inference_tokens",
            "recorded_at": "2026-11-20T10:00:00+00:00",
            "actor": {"id": "o", "role": "driver"},
            "tokens": {"input": 1000, "output": 200},
            "cost_usd": "3.25",
            "model_id": "gpt-5.4",
            "turn": 0,
            "tools": [{"name": "shell"}],
            "latency_ms": 900,
        },
        {
            "id": "e2",
            "meter": "inference_tokens",
            "recorded_at": "2026-11-20T10:00:01+00:00",
            "actor": {"id": "w", "role": "subagent", "parent_id": "o"},
            "tokens": {"input": 500, "output": 100},
            "cost_usd": "0.325",
            "model_id": "gpt-5.4-mini",
            "turn": 0,
            "tools": [],
        },
    ],
    "prompt-completion-cents-epoch": [
        {
            "usage_id": "e1",
            "kind": "llm",
            "timestamp": 1795168800,
            "participant_id": "o",
            "role": "lead",
            "prompt_tokens": 1000,
            "completion_tokens": 200,
            "cost": {"cents": 325},
            "model_name": "gpt-5.4",
            "step": 0,
            "tool_calls": 1,
            "duration_seconds": 0.9,
        },
        {
            "usage_id": "e2",
            "kind": "llm",
            "timestamp": 1795168801000,
            "participant_id": "w",
            "role": "worker",
            "parent_id": "o",
            "prompt_tokens": 500,
            "completion_tokens": 100,
            "cost": {"cents": 32.5},
            "model_name": "gpt-5.4-mini",
            "step": 0,
        },
    ],
}


@pytest.mark.parametrize("shape", sorted(SPELLINGS))
def test_each_spelling_reads_as_the_same_two_turns(shape):
    reading = read_entries(SPELLINGS[shape])
    assert reading.unreadable == 0 and reading.other_meters == 0
    driver, child = reading.turns
    assert (driver["kind"], driver["tokens_in"], driver["tokens_out"]) == ("driver_inference", 1000, 200)
    assert (child["kind"], child["tokens_in"], child["tokens_out"], child["parent_actor"]) == (
        "child_work",
        500,
        100,
        "o",
    )
    assert Decimal(str(driver["cost_usd"])) == Decimal("3.25") and Decimal(str(child["cost_usd"])) == Decimal(
        "0.325"
    )
    assert driver["id"] == "usage:e1" and driver["ts"].startswith("2026-11-20T10:00:00")
    assert driver["model"] == "gpt-5.4" and driver["tool_calls"] and driver["duration_ms"] == 900


def test_other_meters_are_set_aside_and_the_unreadable_counted_with_an_example():
    entries = [
        *SPELLINGS["flat-pico"],
        {
            "entry_id": "s1",
            "meter_kind": "sandbox_seconds",
            "created_at": "2026-11-20T10:00:02Z",
            "cost_pico_usd": 10,
        },
        {"opaque": "eyJ0b2tlbnMiOjEyMzR9"},  # nothing to read: no kind, time, tokens or cost
        {"entry_id": "e9", "meter_kind": "inference", "input_tokens": 5},  # no time
        "not even an object",
    ]
    reading = read_entries(entries)
    assert len(reading.turns) == 2 and reading.other_meters == 1 and reading.unreadable == 3
    assert "opaque" in reading.example


# Failed calls as different deployments could write them: each is a failed turn, none unreadable.
FAILED_ENTRIES = [
    (
        {"status": "error", "error": "RateLimitError", "http_status": 429, "error_message": "slow down"},
        ("RateLimitError", 429, "slow down"),
    ),
    (
        {"outcome": "failed", "error": {"type": "AuthenticationError", "message": "bad key", "status": 401}},
        ("AuthenticationError", 401, "bad key"),
    ),
    (
        {"error_code": "model_loading", "status_code": 503, "fix_hint": "retry in 30 s"},
        ("model_loading", 503, "retry in 30 s"),
    ),
    ({"status": 500, "message": "upstream exploded"}, ("500", 500, "upstream exploded")),
    ({"status": "timeout"}, ("timeout", None, "")),
]


@pytest.mark.parametrize(("fields", "expected"), FAILED_ENTRIES)
def test_failed_calls_in_usage_entries_are_failed_turns_even_without_tokens(fields, expected):
    entry = {"entry_id": "f1", "meter_kind": "inference", "created_at": "2026-11-20T10:00:00Z", **fields}
    reading = read_entries([entry])
    assert reading.unreadable == 0 and len(reading.turns) == 1
    turn = reading.turns[0]
    assert (turn["status"], turn["error"], turn.get("http_status"), turn.get("error_message", "")) == (
        "error",
        *expected,
    )
    # A call that went through says nothing of failure.
    assert "status" not in read_entries(SPELLINGS["flat-pico"]).turns[0]


def test_an_entry_without_an_id_gets_a_stable_one_from_its_content():
    row = {
        "meter_kind": "inference",
        "created_at": "2026-11-20T10:00:00Z",
        "input_tokens": 3,
        "output_tokens": 1,
    }
    first, again = read_entries([dict(row)]).turns[0]["id"], read_entries([dict(row)]).turns[0]["id"]
    assert first == again and first.startswith("usage:h")
    assert read_entries([{**row, "input_tokens": 4}]).turns[0]["id"] != first


def typed(usage: dict | None = None, summary: dict | None = None, actors: list[dict] | None = None):
    """The three aggregates as the real SDK parses them (so their shapes are the SDK's)."""
    u = SmrRunUsage.from_wire(
        {
            "run_id": "r",
            "project_id": "p",
            "cost": {"total_cents": 430, "charged_cents": 430, "internal_cost_cents": 430},
            "totals": {},
            **(usage or {}),
        }
    )
    s = SmrRunCostSummary.from_wire({"run_id": "r", **(summary or {})})
    a = (
        None
        if actors is None
        else SmrRunActorUsage.from_wire(
            {
                "org_id": "o",
                "project_id": "p",
                "run_id": "r",
                "actors": [{"org_id": "o", "project_id": "p", "run_id": "r", **row} for row in actors],
            }
        )
    )
    return u, s, a


def test_totals_come_from_the_typed_aggregates_whatever_the_keys_inside_them():
    usage, summary, actors = typed(
        {"totals": {"prompt_tokens": 1_800_000, "completion_tokens": 90_000}},
        {
            "total_cents": 430,
            "by_meter": [
                {"meter_kind": "inference_tokens", "billed_amount_cents": 400},
                {"meter_kind": "sandbox_time", "billed_amount_cents": 30},
            ],
        },
        [
            {
                "actor_id": "o",
                "participant_role": "driver",
                "billed_amount_cents": 300,
                "token_usage": {"prompt_tokens": 1_500_000, "completion_tokens": 80_000},
            },
            {
                "actor_id": "w",
                "participant_role": "subagent",
                "billed_amount_cents": 100,
                "token_usage": {"prompt_tokens": 300_000, "completion_tokens": 10_000},
            },
        ],
    )
    spend = read_spend(usage, summary, actors)
    assert spend.total_usd == Decimal("4.30") and not spend.total_exact
    assert (spend.inference_usd, spend.other_usd) == (Decimal("4.00"), Decimal("0.30"))
    assert (spend.tokens_in, spend.tokens_out) == (1_800_000, 90_000)
    assert (spend.driver.usd, spend.child.usd) == (Decimal("3.00"), Decimal("1.00"))
    assert (spend.driver.tokens_in, spend.child.tokens_out) == (1_500_000, 10_000)


def test_pico_totals_win_over_cents_and_tokens_fall_back_to_the_actors():
    usage, summary, actors = typed(
        {},
        {"total_pico_usd": 4_301_234_567_890, "total_cents": 430},
        [
            {
                "actor_id": "o",
                "participant_role": "orchestrator",
                "token_usage": {"input_tokens": 7, "output_tokens": 2},
            }
        ],
    )
    spend = read_spend(usage, summary, actors)
    assert spend.total_usd == Decimal("4.30123456789") and spend.total_exact
    assert (spend.tokens_in, spend.tokens_out) == (7, 2)


ZERO_TURNS = {
    k: 0
    for k in (
        "tokens_in",
        "tokens_out",
        "driver_tokens_in",
        "driver_tokens_out",
        "child_tokens_in",
        "child_tokens_out",
    )
} | {k: Decimal(0) for k in ("cost_usd", "driver_cost_usd", "child_cost_usd")}


def test_reconcile_names_what_no_turn_accounts_for_and_is_empty_when_they_agree():
    usage, summary, actors = typed(
        {"totals": {"input_tokens": 1_800_000, "output_tokens": 90_000}},
        {"total_cents": 430, "by_meter": [{"meter_kind": "inference", "billed_amount_cents": 430}]},
    )
    spend = read_spend(usage, summary, actors)
    gap = reconcile(spend, turns=ZERO_TURNS, turn_count=0, actors=0)
    assert gap == {"tokens_in": 1_800_000, "tokens_out": 90_000, "usd": "4.300000"}
    matching = {**ZERO_TURNS, "tokens_in": 1_800_000, "tokens_out": 90_000, "cost_usd": Decimal("4.299999")}
    assert reconcile(spend, turns=matching, turn_count=10, actors=0) == {}  # within the cents' rounding


def test_a_float_residue_of_the_split_is_no_spend_of_unknown_role():
    """SQLite can hand back a run's cost sums as floats: 0.1 + 0.2 of driver and child work against a cost of
    0.3 leaves -4e-17, which is not "-0.000000" of role-unknown spend (it failed the poller's field check)."""
    run = Run(cost_usd=Decimal("0.3"), driver_cost_usd=Decimal(0.1 + 0.2), child_cost_usd=Decimal(0))
    assert Decimal(0.1 + 0.2) != Decimal("0.3")  # the residue is real
    assert str(run.unknown_cost_usd) == "0.000000" and not run.unknown_cost_usd
    turns = {**ZERO_TURNS, "cost_usd": run.cost_usd, "unknown_cost_usd": run.unknown_cost_usd}
    assert "role_unknown_usd" not in reconcile(
        read_spend(*typed({}, {})[:2], None), turns=turns, turn_count=1, actors=0
    )
    run.driver_cost_usd = Decimal("0.1")  # a real gap still shows, to the micro-dollar
    assert run.unknown_cost_usd == Decimal("0.2")


def test_reconcile_with_pico_totals_is_exact_to_the_micro_dollar_per_turn():
    usage, summary, _ = typed(
        {"totals": {"input_tokens": 10, "output_tokens": 1}},
        {
            "total_pico_usd": 1_000_000_000_000,
            "by_meter": [{"meter_kind": "inference", "billed_amount_pico_usd": 1_000_000_000_000}],
        },
    )
    spend = read_spend(usage, summary, None)
    turns = {**ZERO_TURNS, "tokens_in": 10, "tokens_out": 1, "cost_usd": Decimal("0.99")}
    assert reconcile(spend, turns=turns, turn_count=2, actors=0) == {"usd": "0.010000"}
