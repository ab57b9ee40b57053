"""The price table (issue 37 item 1): one table for every way in, usage types, aliases, effective dates,
overrides from SMRWEB_MODEL_PRICES and the admin, the cost's origin on every turn, unpriced turns counted."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from smrweb.sources import jsonl
from smrweb.sources.smr_usage import read_entries
from smrweb.tracking import pricing
from smrweb.tracking.models import AgentTurn, ModelPrice, Run, RunDaySpend
from tests.factories import push

JUNE_1 = datetime(2025, 6, 1, 12, tzinfo=UTC)
JUNE_20 = datetime(2025, 6, 20, 12, tzinfo=UTC)
TABLE = pricing.configured_table()


def cost(model: str, at: datetime = JUNE_20, **usage) -> Decimal | None:
    return TABLE.cost(model, pricing.Usage(**usage), at)


# --- the table's rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "gpt-4o",
        "GPT-4o",
        "openai/gpt-4o",
        "gpt-4o-2024-08-06",
        "openrouter/openai/gpt-4o-2024-08-06",
        "chatgpt-4o-latest",  # an alias
    ],
)
def test_names_a_source_sends_find_the_models_price(name):
    assert TABLE.model_for(name) == "gpt-4o"
    assert cost(name, tokens_in=1_000_000, tokens_out=100_000) == Decimal("3.500000")


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("anthropic/claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"),  # Bedrock
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"),  # Bedrock cross-region
        ("claude-sonnet-4@20250514", "claude-sonnet-4"),  # Vertex
        ("claude-sonnet-4-0", "claude-sonnet-4"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ],
)
def test_provider_prefixes_snapshots_and_aliases(name, model):
    assert TABLE.model_for(name) == model


@pytest.mark.parametrize("name", ["o3-pro", "gpt-4o-audio-preview", "gpt-4", "llama-3-70b", "", "  "])
def test_a_model_that_only_resembles_one_in_the_table_is_unpriced(name):
    # o3-pro costs ten times o3: pricing it by its prefix would be wrong, not approximate.
    assert TABLE.model_for(name) is None
    assert cost(name, tokens_in=10, tokens_out=10) is None


def test_a_turn_is_priced_by_the_price_valid_at_its_time():
    usage = {"tokens_in": 1_000_000, "tokens_out": 1_000_000}
    assert cost("o3", JUNE_1, **usage) == Decimal("50.000000")  # $10 + $40 before the cut of 2025-06-10
    assert cost("o3", JUNE_20, **usage) == Decimal("10.000000")  # $2 + $8 from that day
    assert cost("o3", datetime(2025, 6, 10, 0, 0, tzinfo=UTC), **usage) == Decimal("10.000000")
    # A model whose only price starts on a day: a turn before it has no price.
    table = TABLE.merged({"new-model": [pricing.Price(Decimal(1), Decimal(2), since=date(2025, 6, 15))]}, {})
    assert table.cost("new-model", pricing.Usage(1_000_000, 0), JUNE_1) is None
    assert table.cost("new-model", pricing.Usage(1_000_000, 0), JUNE_20) == Decimal("1.000000")


def test_each_usage_type_has_its_price_and_falls_back_as_providers_bill():
    # claude-sonnet-4: input 3, output 15, cache read 0.30, cache write 3.75; reasoning billed as output.
    got = cost(
        "claude-sonnet-4",
        tokens_in=1_000_000,
        cached_in=400_000,
        cache_write=100_000,
        tokens_out=200_000,
        reasoning=50_000,
    )
    # 500k plain input × 3 + 400k × 0.30 + 100k × 3.75 + 150k plain output × 15 + 50k reasoning × 15
    assert got == Decimal("1.500000") + Decimal("0.120000") + Decimal("0.375000") + Decimal("3.000000")
    # gpt-4o has no cache-write price: written tokens cost input; its own reasoning price when one is set.
    assert cost("gpt-4o", tokens_in=1_000_000, cache_write=1_000_000) == Decimal("2.500000")
    table = TABLE.merged({"r1": [pricing.Price(Decimal(1), Decimal(4), reasoning=Decimal(2))]}, {})
    assert table.cost("r1", pricing.Usage(0, 1_000_000, reasoning=500_000), JUNE_20) == Decimal("3.000000")
    # Rounded half to even at the micro-dollar, as the column keeps it.
    assert cost("gpt-4o-mini", tokens_in=3) == Decimal("0.000000")
    assert cost("gpt-4o-mini", tokens_in=10) == Decimal("0.000002")


def test_settings_prices_add_and_override_by_model_and_day():
    prices, aliases = pricing.parse_prices(
        {
            "gpt-4o": {"input": 1, "output": 2},  # replaces the default (same model, no day)
            "O3": [{"input": 5, "output": 5, "since": "2025-06-15"}],  # adds a third price of o3
            "house-model": {"input": 0.5, "output": 1, "cached_input": 0.05, "aliases": ["house"]},
        }
    )
    table = TABLE.merged(prices, aliases)
    usage = pricing.Usage(1_000_000, 1_000_000)
    assert table.cost("gpt-4o", usage, JUNE_20) == Decimal("3.000000")
    assert table.cost("o3", usage, JUNE_1) == Decimal("50.000000")
    assert table.cost("o3", usage, datetime(2025, 6, 12, tzinfo=UTC)) == Decimal("10.000000")
    assert table.cost("o3", usage, JUNE_20) == Decimal("10.000000")
    assert table.cost("acme/house", pricing.Usage(1_000_000, 0, cached_in=1_000_000), JUNE_20) == Decimal(
        "0.050000"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ([], "expected a JSON object"),
        ({"m": {"input": 1}}, "m: missing output"),
        ({"m": {"input": -1, "output": 1}}, "m.input: must be at least 0"),
        ({"m": {"input": "x", "output": 1}}, "m.input: expected a number"),
        ({"m": {"input": True, "output": 1}}, "m.input: expected a number"),
        ({"m": {"input": 1, "output": 1, "cached": 1}}, "m: unknown key(s) cached"),
        ({"m": {"input": 1, "output": 1, "since": "June"}}, "m.since: expected a date"),
        ({"m": [{"input": 1, "output": 1}, {"input": 2, "output": 2}]}, "m: two prices from the same day"),
        ({"m": {"input": 1, "output": 1, "aliases": "x"}}, "m.aliases: expected a list"),
        ({"m": []}, "m: no price"),
    ],
)
def test_a_bad_setting_says_what_is_wrong(setting, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pricing.parse_prices(setting)


# --- every way in ---------------------------------------------------------------------------------------


def turn(n: int, **fields) -> dict:
    return {"type": "agent.turn", "turn": n, "ts": "2026-03-01T12:00:00Z", **fields}


@pytest.mark.django_db
def test_rest_turns_priced_reported_and_unpriced(project):
    push(
        project,
        "r1",
        turn(0, model="gpt-4o", tokens_in=1_000_000, tokens_out=100_000),  # computed: $3.50
        turn(1, model="gpt-4o", tokens_in=1_000_000, tokens_out=100_000, cost_usd=1.25),  # reported
        turn(2, model="house-llm", tokens_in=5_000, tokens_out=500),  # no price: unpriced
        turn(3, model="house-llm", tokens_in=7, tokens_out=0),
        turn(4, model="mystery", tokens_in=1, tokens_out=1),
        turn(5, model="mystery"),  # no tokens and no cost: free as reported, not "unpriced"
        # cached and reasoning parts at their own prices: 600k × 1.25 + 400k × 0.125 ... (gpt-5)
        turn(
            6,
            model="gpt-5",
            tokens_in=1_000_000,
            tokens_cached_in=400_000,
            tokens_out=100_000,
            tokens_reasoning=60_000,
        ),
    )
    run = Run.objects.get(external_id="r1")
    got = {t.turn: (t.cost_usd, t.cost_origin) for t in AgentTurn.objects.filter(run=run)}
    assert got == {
        0: (Decimal("3.500000"), "computed"),
        1: (Decimal("1.250000"), "reported"),
        2: (Decimal(0), "unpriced"),
        3: (Decimal(0), "unpriced"),
        4: (Decimal(0), "unpriced"),
        5: (Decimal(0), "reported"),
        # 600k × 1.25 + 400k × 0.125 + 100k × 10 (reasoning at the output price)
        6: (Decimal("0.750000") + Decimal("0.050000") + Decimal("1.000000"), "computed"),
    }
    assert run.cost_usd == Decimal("3.500000") + Decimal("1.250000") + Decimal("1.800000")
    assert (run.unpriced_turns, run.unpriced_models) == (3, {"house-llm": 2, "mystery": 1})
    t6 = AgentTurn.objects.get(run=run, turn=6)
    assert (t6.tokens_cached_in, t6.tokens_cache_write, t6.tokens_reasoning) == (400_000, 0, 60_000)
    # The days of spend (the project's spend figures) count the computed costs.
    assert RunDaySpend.objects.get(run=run).cost_usd == run.cost_usd


def test_parts_and_their_totals_follow_one_rule():
    """The contract's check and the adapters' folding read the same table (pricing.PARTS_OF_TOTAL)."""
    over = {"tokens_in": 10, "tokens_cached_in": 8, "tokens_cache_write": 5}
    assert pricing.part_over_total("tokens_cached_in", over) == ""
    assert pricing.part_over_total("tokens_cache_write", over) == (
        "tokens_cached_in + tokens_cache_write (13) is more than tokens_in (10): they are parts of it."
    )
    assert pricing.part_over_total("tokens_reasoning", {"tokens_out": 3, "tokens_reasoning": 4}) == (
        "tokens_reasoning (4) is more than tokens_out (3): it is a part of it."
    )
    assert pricing.part_over_total("tokens_reasoning", {"tokens_reasoning": 4}) == ""  # no total: no rule
    assert pricing.fold_parts(over)["tokens_in"] == 23  # a source that counted the cache apart
    assert pricing.fold_parts({"tokens_out": 3, "tokens_reasoning": 2}) == {
        "tokens_out": 3,
        "tokens_reasoning": 2,
    }


@pytest.mark.django_db
def test_rest_refuses_parts_larger_than_their_totals_with_field_detail(api, project):
    url = f"/api/v1/projects/{project.slug}/runs/r2/events"
    body = [
        turn(0, tokens_in=10, tokens_cached_in=8, tokens_cache_write=5),
        turn(1, tokens_out=10, tokens_reasoning=11),
    ]
    answer = api.post(url, data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 400, answer.content
    errors = answer.json()["errors"]
    assert {(e["index"], e["field"]) for e in errors} == {(0, "tokens_cache_write"), (1, "tokens_reasoning")}
    assert "more than tokens_in (10)" in json.dumps(errors)
    assert not Run.objects.filter(external_id="r2").exists()  # nothing half-written


@pytest.mark.django_db
def test_run_api_and_turns_api_say_what_is_unpriced(api, project):
    push(
        project,
        "r3",
        turn(0, model="house-llm", tokens_in=10, tokens_out=1),
        turn(1, model="gpt-4o", tokens_in=10),
    )
    spend = api.get(f"/api/v1/projects/{project.slug}/runs/r3").json()["spend"]
    assert (spend["unpriced_turns"], spend["unpriced_models"]) == (1, {"house-llm": 1})
    turns = api.get(f"/api/v1/projects/{project.slug}/runs/r3/turns").json()
    rows = turns["results"] if isinstance(turns, dict) else turns
    assert sorted((t["model"], t["cost_origin"]) for t in rows) == [
        ("gpt-4o", "computed"),
        ("house-llm", "unpriced"),
    ]
    assert all({"tokens_cached_in", "tokens_cache_write", "tokens_reasoning"} <= set(t) for t in rows)


@pytest.mark.django_db
def test_jsonl_usage_log_lines_read_cached_and_reasoning_tokens(project, tmp_path):
    lines = [
        # OpenAI's usage shape: cached tokens and reasoning tokens in the *_details objects
        {
            "e": "llm_call",
            "agent_id": "planner",
            "provider": "openai",
            "model": "gpt-4.1",
            "ts": "2026-03-01T12:00:00Z",
            "usage": {
                "prompt_tokens": 1_000_000,
                "completion_tokens": 100_000,
                "prompt_tokens_details": {"cached_tokens": 500_000},
                "completion_tokens_details": {"reasoning_tokens": 20_000},
            },
        },
        # Anthropic's shape: input_tokens leave the cache out (parts larger than the total are added to it)
        {
            "e": "llm_call",
            "agent_id": "planner",
            "provider": "anthropic",
            "model": "claude-sonnet-4-20250514",
            "ts": "2026-03-01T12:00:01Z",
            "usage": {
                "input_tokens": 100,
                "output_tokens": 1_000,
                "cache_read_input_tokens": 1_000_000,
                "cache_creation_input_tokens": 200,
            },
        },
        {"e": "llm_call", "agent_id": "planner", "model": "house-llm", "input_tokens": 5, "output_tokens": 5},
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    jsonl.import_file(path, project, "jl-1")
    got = {
        t.turn: (
            t.tokens_in,
            t.tokens_cached_in,
            t.tokens_cache_write,
            t.tokens_out,
            t.tokens_reasoning,
            t.cost_usd,
            t.cost_origin,
        )
        for t in AgentTurn.objects.filter(run__external_id="jl-1")
    }
    assert got == {
        # 500k × 2 + 500k × 0.50 + 100k × 8
        0: (1_000_000, 500_000, 0, 100_000, 20_000, Decimal("2.050000"), "computed"),
        # 100 × 3 + 1M × 0.30 + 200 × 3.75 + 1,000 × 15 (per 1M)
        1: (1_000_300, 1_000_000, 200, 1_000, 0, Decimal("0.316050"), "computed"),
        2: (5, 0, 0, 5, 0, Decimal(0), "unpriced"),
    }
    assert Run.objects.get(external_id="jl-1").unpriced_models == {"house-llm": 1}


@pytest.mark.django_db
def test_smr_usage_entries_without_cost_are_priced_and_their_parts_read(project):
    reading = read_entries(
        [
            {
                "ts": "2026-03-01T12:00:00Z",
                "actor": "orchestrator",
                "role": "orchestrator",
                "model": "gpt-4o",
                "input_tokens": 1_000_000,
                "output_tokens": 0,
                "cached_input_tokens": 1_000_000,
            },
            {
                "ts": "2026-03-01T12:00:01Z",
                "actor": "orchestrator",
                "role": "orchestrator",
                "model": "gpt-4o",
                "input_tokens": 10,
                "output_tokens": 10,
                "cost_usd": 0.5,
            },
            {"ts": "2026-03-01T12:00:02Z", "actor": "w", "model": "house-llm", "input_tokens": 3},
        ]
    )
    assert len(reading.turns) == 3
    for i, t in enumerate(reading.turns):
        t["turn"] = i
    push(project, "smr-1", *reading.turns)
    got = sorted(
        (t.model, t.tokens_cached_in, t.cost_usd, t.cost_origin)
        for t in AgentTurn.objects.filter(run__external_id="smr-1")
    )
    assert got == [
        ("gpt-4o", 0, Decimal("0.500000"), "reported"),
        ("gpt-4o", 1_000_000, Decimal("1.250000"), "computed"),
        ("house-llm", 0, Decimal(0), "unpriced"),
    ]


def _otlp_request(*spans_attrs: dict) -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"smrweb.run_id": "otel-p"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    start = 1_772_366_400 * 10**9  # 2026-03-01T12:00:00Z
    for i, attrs in enumerate(spans_attrs):
        span = tracer.start_span(f"chat {i}", start_time=start + i * 10**9, attributes=attrs)
        span.end(end_time=start + i * 10**9 + 5 * 10**8)
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


@pytest.mark.django_db
def test_otlp_genai_and_openinference_token_parts(project, token):
    body = _otlp_request(
        {  # OTel GenAI: the cache parts included in input_tokens
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "claude-sonnet-4",
            "gen_ai.usage.input_tokens": 1_000_000,
            "gen_ai.usage.output_tokens": 0,
            "gen_ai.usage.cache_read.input_tokens": 600_000,
            "gen_ai.usage.cache_creation.input_tokens": 400_000,
            "smrweb.turn": 1,
        },
        {  # reasoning tokens
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "o4-mini",
            "gen_ai.usage.input_tokens": 0,
            "gen_ai.usage.output_tokens": 1_000_000,
            "gen_ai.usage.reasoning.output_tokens": 900_000,
            "smrweb.turn": 2,
        },
        {  # no price for its model: unpriced, and the exporter is told
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "house-llm",
            "gen_ai.usage.input_tokens": 5,
            "gen_ai.usage.output_tokens": 5,
            "smrweb.turn": 3,
        },
    )
    answer = Client().post(
        "/v1/traces", data=body, content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert answer.status_code == 200, answer.content
    assert b"house-llm" in answer.content and b"unpriced" in answer.content
    got = {
        t.turn: (t.tokens_cached_in, t.tokens_cache_write, t.tokens_reasoning, t.cost_usd, t.cost_origin)
        for t in AgentTurn.objects.filter(run__external_id="otel-p")
    }
    assert got == {
        1: (600_000, 400_000, 0, Decimal("0.180000") + Decimal("1.500000"), "computed"),
        2: (0, 0, 900_000, Decimal("4.400000"), "computed"),
        3: (0, 0, 0, Decimal(0), "unpriced"),
    }


# --- overrides, repricing, the pages ----------------------------------------------------------------------


@pytest.mark.django_db
def test_settings_override_prices_new_turns(project, settings):
    settings.SMRWEB_MODEL_PRICES = {"house-llm": {"input": 1, "output": 2, "aliases": ["house"]}}
    push(project, "r4", turn(0, model="acme/house", tokens_in=1_000_000, tokens_out=1_000_000))
    assert AgentTurn.objects.get(run__external_id="r4").cost_usd == Decimal("3.000000")


@pytest.mark.django_db
def test_admin_prices_win_and_reprice_turns_prices_what_was_unpriced(project, client, django_user_model):
    push(
        project,
        "r5",
        turn(0, model="house-llm", tokens_in=1_000_000, tokens_out=0, ts="2026-02-01T00:00:00Z"),
        turn(1, model="house-llm", tokens_in=1_000_000, tokens_out=0, ts="2026-03-05T00:00:00Z"),
        turn(2, model="other-llm", tokens_in=1, tokens_out=1),
        turn(3, model="gpt-4o", tokens_in=1_000_000, tokens_out=0),
    )
    run = Run.objects.get(external_id="r5")
    assert (run.unpriced_turns, run.cost_usd) == (3, Decimal("2.500000"))
    # An admin adds house-llm (a new price from March on) and overrides gpt-4o, through the admin page.
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    for fields in (
        {"model": "House-LLM", "since": "", "input": "1", "output": "2"},
        {"model": "house-llm", "since": "2026-03-01", "input": "4", "output": "8"},
        {"model": "gpt-4o", "since": "", "input": "9", "output": "9"},
    ):
        answer = client.post("/admin/tracking/modelprice/add/", fields)
        assert answer.status_code == 302, answer.content.decode()[:2000]
    assert ModelPrice.objects.filter(model="house-llm").count() == 2  # the name kept in lower case
    call_command("reprice_turns")
    run.refresh_from_db()
    got = {t.turn: (t.cost_usd, t.cost_origin) for t in AgentTurn.objects.filter(run=run)}
    assert got == {
        0: (Decimal("1.000000"), "computed"),  # February: the price since always
        1: (Decimal("4.000000"), "computed"),  # March: the new price
        2: (Decimal(0), "unpriced"),
        3: (Decimal("2.500000"), "computed"),  # already priced: not touched by repricing
    }
    assert (run.unpriced_turns, run.unpriced_models) == (1, {"other-llm": 1})
    assert run.cost_usd == Decimal("7.500000") == sum(d.cost_usd for d in RunDaySpend.objects.filter(run=run))
    # New turns are priced with the admin's prices at once.
    push(project, "r5", turn(4, model="gpt-4o", tokens_in=1_000_000, tokens_out=0))
    assert AgentTurn.objects.get(run=run, turn=4).cost_usd == Decimal("9.000000")
    # A bad price is a form error, not a 500.
    answer = client.post("/admin/tracking/modelprice/add/", {"model": "x", "input": "-1", "output": "1"})
    assert answer.status_code == 200 and b"errorlist" in answer.content


@pytest.mark.django_db
def test_the_run_page_and_project_table_name_unpriced_turns(project, client_alice):
    push(
        project,
        "r6",
        turn(0, model="house-llm", tokens_in=10, tokens_out=1),
        turn(1, model="gpt-4o", tokens_in=10),
    )
    page = client_alice.get(f"/projects/{project.slug}/runs/r6/").content.decode()
    assert 'data-stat="unpriced"' in page and "1 turn unpriced" in page and "house-llm (1)" in page
    table = client_alice.get(f"/projects/{project.slug}/").content.decode()
    assert 'data-unpriced="1"' in table and "+1 unpriced" in table
    push(project, "r7", turn(0, model="gpt-4o", tokens_in=10))
    assert (
        "unpriced"
        not in client_alice.get(f"/projects/{project.slug}/runs/r7/")
        .content.decode()
        .split('id="run-stats"')[1]
        .split("</div>\n  </div>")[0]
    )


@pytest.mark.django_db(transaction=True)
def test_the_migration_marks_stored_zero_cost_turns_with_tokens_unpriced():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("tracking", "0029_project_figures")], [("tracking", "0030_turn_pricing")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Scenario, Project = old.get_model("tracking", "Scenario"), old.get_model("tracking", "Project")
    OldRun, OldTurn = old.get_model("tracking", "Run"), old.get_model("tracking", "AgentTurn")
    scenario = Scenario.objects.create(key="s", name="s")
    project = Project.objects.create(slug="p", name="p", scenario=scenario)
    run = OldRun.objects.create(project=project, external_id="r")
    at = datetime(2026, 3, 1, tzinfo=UTC)
    for n, (model, tokens, usd) in enumerate(
        [("house", 10, "0"), ("house", 5, "0"), ("gpt-4o", 10, "0.1"), ("idle", 0, "0")]
    ):
        OldTurn.objects.create(
            run=run, event_id=str(n), turn=n, model=model, tokens_in=tokens, cost_usd=usd, ts=at
        )
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    NewRun, NewTurn = new.get_model("tracking", "Run"), new.get_model("tracking", "AgentTurn")
    origins = dict(NewTurn.objects.values_list("turn", "cost_origin"))
    assert origins == {0: "unpriced", 1: "unpriced", 2: "reported", 3: "reported"}
    stored = NewRun.objects.get(pk=run.pk)
    assert (stored.unpriced_turns, stored.unpriced_models) == (2, {"house": 2})
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_one_price_table():
    """Prices live in tracking/pricing.py only: no adapter keeps a table of its own (the OTLP adapter did)."""
    from pathlib import Path

    import smrweb

    root = Path(smrweb.__file__).parent
    tables = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"^[^#\n]*\"(?:input|output)\":\s*\d", path.read_text(), re.M)
        or "MODEL_PRICES: dict" in path.read_text()
    ]
    assert tables == ["tracking/pricing.py"]
