"""OpenInference spans on /v1/traces, rule by rule (docs/integrations.md, "OpenTelemetry GenAI traces"):
span kinds LLM/EMBEDDING → turns, TOOL → tool calls, AGENT → actors, CHAIN → structure (an actor only
with `agent.name`); `llm.model_name`, `llm.cost.total`, the requested tool calls of a response, nested
model spans of one call counted once. Sent in OTLP JSON (the real instrumentations, in protobuf, are
tests/sources/test_instrumentations.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from smrweb.tracking.models import AgentTurn, Run
from tests.sources.test_otlp import at, emit, in_memory_spans, otlp_json, post, span_hex

pytestmark = pytest.mark.django_db(transaction=True)


def llm(model, prompt, completion, **extra):
    return {
        "openinference.span.kind": "LLM",
        "llm.model_name": model,
        "llm.token_count.prompt": prompt,
        "llm.token_count.completion": completion,
        "llm.token_count.total": prompt + completion,
        **extra,
    }


def kind(name, **extra):
    return {"openinference.span.kind": name, **extra}


def build(tracer):
    def under(parent):
        return trace.set_span_in_context(parent)

    crew = tracer.start_span("Crew.kickoff", start_time=at(0), attributes=kind("CHAIN"))
    runnable = tracer.start_span(
        "RunnableSequence", context=under(crew), start_time=at(0.05), attributes=kind("CHAIN")
    )
    researcher = tracer.start_span(
        "researcher", context=under(runnable), start_time=at(0.1), attributes=kind("AGENT")
    )
    wrapper = tracer.start_span(
        "ChatOpenAI", context=under(researcher), start_time=at(1), attributes=llm("gpt-4o", 1000, 100)
    )
    inner = emit(
        tracer,
        "ChatCompletion",
        1.1,
        2.9,
        llm(
            "gpt-4o-2024-08-06",
            1000,
            100,
            **{
                "llm.token_count.prompt_details.cache_read": 800,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_a",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "search",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"q": "amm"}',
            },
        ),
        parent=wrapper,
    )
    wrapper.end(end_time=at(3))
    emit(
        tracer,
        "search",
        3.1,
        3.5,
        kind(
            "TOOL",
            **{"tool.name": "search", "input.value": '{"q": "amm"}', "tool.parameters": '{"type": "object"}'},
        ),
        parent=researcher,
    )
    asked = emit(
        tracer,
        "ChatCompletion",
        4,
        5,
        llm(
            "gpt-4o-mini",
            100,
            10,
            **{
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_b",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "fetch_leaderboard",
            },
        ),
        parent=researcher,
    )
    embedding = emit(
        tracer,
        "CreateEmbeddings",
        5.1,
        5.2,
        {
            "openinference.span.kind": "EMBEDDING",
            "embedding.model_name": "text-embedding-3-small",
            "llm.token_count.prompt": 5000,
            "llm.token_count.total": 5000,
        },
        parent=researcher,
    )
    researcher.end(end_time=at(9))
    critic = tracer.start_span(
        "critique",
        context=under(crew),
        start_time=at(10),
        attributes=kind("CHAIN", **{"agent.name": "critic"}),
    )
    stated = emit(
        tracer,
        "ChatCompletion",
        10.1,
        11,
        llm("house-llm-7b", 300, 30, **{"llm.cost.total": 0.5}),
        parent=critic,
    )
    failed = tracer.start_span(
        "ChatCompletion",
        context=under(critic),
        start_time=at(12),
        attributes=kind("LLM", **{"llm.model_name": "gpt-4o"}),
    )
    failed.add_event(
        "exception",
        {
            "exception.type": "openai.AuthenticationError",
            "exception.message": "Error code: 401 - Incorrect API key provided",
        },
    )
    failed.set_status(
        Status(StatusCode.ERROR, "AuthenticationError: Error code: 401 - Incorrect API key provided")
    )
    failed.end(end_time=at(12.5))
    critic.end(end_time=at(13))
    runnable.end(end_time=at(13))
    crew.end(end_time=at(14))
    return {
        "inner": inner,
        "wrapper": wrapper,
        "asked": asked,
        "embedding": embedding,
        "stated": stated,
        "failed": failed,
    }


def test_openinference_spans_in_json(live_server, project, token):
    named = {}

    def recorder(tracer):
        named.update(build(tracer))

    spans = in_memory_spans({"smrweb.run_id": "oi"}, record=recorder)
    answer = post(live_server.url, otlp_json(spans), token, "application/json")
    assert answer.status_code == 200, answer.text
    run = Run.objects.get(project=project, external_id="oi")
    by_event = {t.event_id: t for t in AgentTurn.objects.filter(run=run)}
    event = {name: f"otel:{span_hex(span)}" for name, span in named.items()}
    # The framework's LLM span around the client's is the same call: only the inner one is a turn.
    assert event["wrapper"] not in by_event
    assert set(by_event) == {event[k] for k in ("inner", "asked", "embedding", "stated", "failed")}
    inner = by_event[event["inner"]]
    assert (inner.actor, inner.parent_actor, inner.kind) == ("researcher", "", "driver_inference")
    assert (inner.model, inner.tokens_in, inner.tokens_cached_in) == ("gpt-4o-2024-08-06", 1000, 800)
    # gpt-4o: input 2.50, cached 1.25, output 10 per 1M
    assert inner.cost_usd == Decimal("0.0025") and inner.cost_origin == "computed"
    # The TOOL span ran the call: its name and input (not tool.parameters, the tool's schema).
    assert inner.tool_calls == [{"name": "search", "arguments": '{"q": "amm"}'}]
    # No TOOL span for this one: the tool call the response asked for.
    assert by_event[event["asked"]].tool_calls == [{"name": "fetch_leaderboard", "id": "call_b"}]
    embedding = by_event[event["embedding"]]
    assert (embedding.model, embedding.tokens_in, embedding.tokens_out) == ("text-embedding-3-small", 5000, 0)
    # A CHAIN with agent.name is an actor below the chain's nearest agent (none here: a root agent).
    stated = by_event[event["stated"]]
    assert (stated.actor, stated.cost_usd, stated.cost_origin) == ("critic", Decimal("0.5"), "reported")
    failed = by_event[event["failed"]]
    assert failed.failed and failed.http_status == 401 and failed.error == "openai.AuthenticationError"
    # CHAIN spans without agent.name name no actor: the actors are the AGENT span and the named chain.
    assert {t.actor for t in by_event.values()} == {"researcher", "critic"}
    run.refresh_from_db()
    assert run.failed_turns == 1 and run.turn_count == 5
