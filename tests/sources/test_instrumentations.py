"""The two GenAI instrumentation conventions as their users run them: the real `openai` client
instrumented by the real, unchanged `openinference-instrumentation-openai` (Arize Phoenix's
OpenInference) or `opentelemetry-instrumentation-openai-v2` (OTel GenAI), or both loaded by the
zero-code `opentelemetry-instrument`, in an agent process configured by OTEL_* variables only, against a
local OpenAI-compatible stub and smrweb's live /v1/traces. Each becomes the same turns, tool calls,
actor tree, prices and failed calls (docs/integrations.md, "OpenTelemetry GenAI traces")."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.db.models import Sum

from smrweb.tracking.models import AgentTurn, Run
from tests.sources.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = Path(__file__).with_name("instrumented_agent.py")
BIN = Path(sys.executable).parent
MILLION = Decimal(1_000_000)


def run_agent(live_server, token: str, run_id: str, mode: str, stub: OpenAIStub, *, zero_code=False) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "OPENAI_", "DJANGO_", "SMRWEB_"))
    }
    env.update(
        OTEL_SERVICE_NAME="climber",
        OTEL_RESOURCE_ATTRIBUTES=f"smrweb.run_id={run_id},deployment.environment=test",
        OTEL_EXPORTER_OTLP_ENDPOINT=live_server.url,  # the exporter adds /v1/traces
        OTEL_EXPORTER_OTLP_HEADERS=f"Authorization=Bearer%20{token}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OPENAI_BASE_URL=stub.url,
        OPENAI_API_KEY="sk-test",
    )
    command = [sys.executable, str(AGENT), mode]
    if zero_code:
        command = [str(BIN / "opentelemetry-instrument"), *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def turns(run: Run) -> list[AgentTurn]:
    return list(AgentTurn.objects.filter(run=run).order_by("ts"))


def gpt_4o_mini(tokens_in: int, tokens_out: int, cached: int = 0) -> Decimal:
    """gpt-4o-mini's list price by hand (USD per 1M: input 0.15, cached input 0.075, output 0.60)."""
    usd = (
        Decimal("0.15") * (tokens_in - cached) + Decimal("0.075") * cached + Decimal("0.60") * tokens_out
    ) / MILLION
    return usd.quantize(Decimal("0.000001"))


def assert_climb(run: Run, *, cached: int, reasoning: int) -> None:
    """The climb step of instrumented_agent.py, whichever convention carried it."""
    got = turns(run)
    assert [(t.actor, t.parent_actor, t.kind) for t in got] == [
        ("orchestrator", "", "driver_inference"),
        ("orchestrator", "", "driver_inference"),
        ("worker", "orchestrator", "child_work"),
        ("worker", "orchestrator", "child_work"),
        ("worker", "orchestrator", "child_work"),
    ]
    plan, tool_turn, work, review, refused = got
    for turn in (plan, tool_turn, work):
        assert turn.model == "gpt-4o-mini-2024-07-18"  # the response's dated snapshot, priced as gpt-4o-mini
        assert (turn.tokens_in, turn.tokens_out) == (1200, 300)
        assert (turn.tokens_cached_in, turn.tokens_reasoning) == (cached, reasoning)
        assert turn.cost_origin == "computed"
        assert turn.cost_usd == gpt_4o_mini(1200, 300, cached)
        assert not turn.failed
    assert [call["name"] for call in tool_turn.tool_calls] == ["lookup_score"]
    assert plan.tool_calls == [] and work.tool_calls == []
    assert (review.model, review.cost_origin, review.cost_usd) == ("house-llm-7b", "unpriced", 0)
    assert refused.failed and refused.http_status == 429
    assert refused.error.endswith("RateLimitError")
    assert "Rate limit reached" in refused.error_message
    assert refused.model == "gpt-4o-mini-429" or refused.model == ""  # the request's model, where recorded
    run.refresh_from_db()
    assert (run.turn_count, run.failed_turns, run.unpriced_turns) == (5, 1, 1)
    assert run.unpriced_models == {"house-llm-7b": 1}
    sums = AgentTurn.objects.filter(run=run).aggregate(usd=Sum("cost_usd"))
    assert (
        run.cost_usd
        == run.driver_cost_usd + run.child_cost_usd
        == sums["usd"]
        == 3 * gpt_4o_mini(1200, 300, cached)
    )


def test_openinference_openai_instrumentation(live_server, project, token):
    with OpenAIStub() as stub:
        run_agent(live_server, token, "oi-run", "openinference", stub)
    assert len(stub.calls) == 5
    run = Run.objects.get(project=project, external_id="oi-run")
    # OpenInference records cached-input and reasoning tokens (llm.token_count.*_details.*).
    assert_climb(run, cached=1000, reasoning=200)
    tool_turn = turns(run)[1]
    assert tool_turn.tool_calls[0]["name"] == "lookup_score"
    assert '"r1"' in tool_turn.tool_calls[0]["arguments"]  # the TOOL span's input


def test_opentelemetry_genai_openai_instrumentation(live_server, project, token):
    with OpenAIStub() as stub:
        run_agent(live_server, token, "genai-run", "genai", stub)
    run = Run.objects.get(project=project, external_id="genai-run")
    # opentelemetry-instrumentation-openai-v2 records the totals only.
    assert_climb(run, cached=0, reasoning=0)
    call = turns(run)[1].tool_calls[0]
    assert call == {"name": "lookup_score", "id": "call_2", "arguments": '{"run": "r1"}'}


def test_both_instrumentations_loaded_by_opentelemetry_instrument_count_each_call_once(
    live_server, project, token
):
    """`opentelemetry-instrument` loads every installed instrumentation: each call is then two nested
    spans, one per convention. It is still one turn (the inner span, the call on the wire)."""
    with OpenAIStub() as stub:
        run_agent(live_server, token, "auto-run", "auto", stub, zero_code=True)
    assert len(stub.calls) == 5
    run = Run.objects.get(project=project, external_id="auto-run")
    got = turns(run)
    assert len(got) == 5
    assert [t.actor for t in got] == ["orchestrator"] * 2 + ["worker"] * 3
    run.refresh_from_db()
    assert (run.failed_turns, run.unpriced_turns) == (1, 1)
    assert [call["name"] for call in got[1].tool_calls] == ["lookup_score"]
