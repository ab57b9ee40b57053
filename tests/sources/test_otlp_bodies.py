"""Prompt and response bodies from OpenTelemetry GenAI spans, exported by the real SDK exporter to a live
server: span events (gen_ai.user.message, gen_ai.choice, …), the ≥ 1.37 attributes
(gen_ai.input.messages / gen_ai.output.messages), the deprecated gen_ai.content.prompt events and
gen_ai.prompt / completion attributes (OpenLLMetry's indexed ones too); stored only when the project
captures bodies."""

from __future__ import annotations

import json

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, TurnBody
from tests.sources.test_otlp import at, chat

pytestmark = pytest.mark.django_db(transaction=True)


def record(tracer) -> None:
    """Five chat spans, each carrying content the way one generation of instrumentation does."""
    # Span events of semantic conventions 1.27–1.36 (role events, then the choice).
    span = tracer.start_span(
        "chat events", start_time=at(1), attributes=chat("gpt-4o", 100, 10, **{"smrweb.turn": 1})
    )
    span.add_event("gen_ai.system.message", {"content": "You improve optimizer.py."}, timestamp=at(1))
    span.add_event("gen_ai.user.message", {"content": "Score 3.41 <script>x()</script>"}, timestamp=at(1))
    span.add_event(
        "gen_ai.choice",
        {
            "index": 0,
            "finish_reason": "stop",
            "message": json.dumps({"role": "assistant", "content": "Lower lr."}),
        },
        timestamp=at(2),
    )
    span.end(end_time=at(2))
    # Semantic conventions ≥ 1.37: JSON attributes of messages made of parts.
    parts = {
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}], "finish_reason": "stop"}]
        ),
        "smrweb.turn": 2,
    }
    tracer.start_span("chat parts", start_time=at(3), attributes=chat("gpt-4o", 5, 1, **parts)).end(
        end_time=at(4)
    )
    # Deprecated (1.26): content events holding gen_ai.prompt / gen_ai.completion.
    old = tracer.start_span(
        "chat old", start_time=at(5), attributes=chat("gpt-4o", 5, 1, **{"smrweb.turn": 3})
    )
    old.add_event(
        "gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([{"role": "user", "content": "old q"}])}
    )
    old.add_event("gen_ai.content.completion", {"gen_ai.completion": "old a\x00nul"})
    old.end(end_time=at(6))
    # OpenLLMetry: indexed attributes.
    indexed = {
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "indexed q",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "indexed a",
        "smrweb.turn": 4,
    }
    tracer.start_span("chat indexed", start_time=at(7), attributes=chat("gpt-4o", 5, 1, **indexed)).end(
        end_time=at(8)
    )
    # No content captured (the instrumentation's default): a turn without a body.
    tracer.start_span(
        "chat bare", start_time=at(9), attributes=chat("gpt-4o", 5, 1, **{"smrweb.turn": 5})
    ).end(end_time=at(10))


def export(live_server, token, run_id: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "agent", "smrweb.run_id": run_id}))
    batch = BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint=f"{live_server.url}/v1/traces", headers={"Authorization": f"Bearer {token}"}
        )
    )
    provider.add_span_processor(batch)
    record(provider.get_tracer("agent"))
    assert batch.force_flush(10_000)
    provider.shutdown()


def test_sdk_exported_message_content_becomes_turn_bodies(live_server, project, token, alice):
    services.update_project(project, by=alice, capture_turn_bodies=True)
    export(live_server, token, "otel-bodies")
    assert AgentTurn.objects.filter(run__external_id="otel-bodies").count() == 5
    bodies = {b.turn.turn: (b.prompt, b.response) for b in TurnBody.objects.select_related("turn")}
    assert bodies == {
        1: (
            "[system]\nYou improve optimizer.py.\n\n[user]\nScore 3.41 <script>x()</script>",
            '[assistant]\nLower lr.\nfinish_reason: "stop"',
        ),
        2: ("[system]\nBe brief.\n\n[user]\nHi", '[assistant]\nHello\nfinish_reason: "stop"'),
        3: ("[user]\nold q", "old a\ufffdnul"),  # a NUL is replaced, never a reason to refuse the turn
        4: ("[user]\nindexed q", "[assistant]\nindexed a"),
    }


def test_with_capture_off_the_spans_become_turns_and_no_body_is_stored(live_server, project, token):
    export(live_server, token, "otel-private")
    assert AgentTurn.objects.filter(run__external_id="otel-private").count() == 5
    assert not TurnBody.objects.exists()
