"""OTLP/HTTP trace ingestion at /v1/traces, driven by the real opentelemetry-sdk and OTLP/HTTP exporter
against a live server: GenAI spans become agent turns, exactly once, with the spend invariant; every
error answer is checked to the byte; the docs' example is run as written."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
import zlib
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from django.db.models import Sum
from django.test import Client
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from smrweb.sources import otlp
from smrweb.tracking import pricing
from smrweb.tracking.errors import InvalidEvents
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AgentTurn, Run

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z in ns: spans get explicit times, so turns are predictable
UNPRICED = (
    "No price for model(s) mystery-model (the price table: SMRWEB_MODEL_PRICES or the admin's model prices): "
    "their turns are recorded as unpriced."
)


def at(seconds: float) -> int:
    return T0 + int(seconds * 10**9)


def derived_turn(seconds: float) -> int:
    return at(seconds) // 1_000_000 % 2**31


def emit(tracer, name, start, end, attributes=None, parent=None):
    """A finished span with explicit times; returns it, so children can name it as parent."""
    ctx = trace.set_span_in_context(parent) if parent is not None else None
    span = tracer.start_span(name, context=ctx, start_time=at(start), attributes=attributes or {})
    span.end(end_time=at(end))
    return span


def chat(model, tokens_in, tokens_out, **extra):
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": tokens_in,
        "gen_ai.usage.output_tokens": tokens_out,
        **extra,
    }


def agent(name):
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}


def tool(name, **extra):
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **extra}


def record_agent(tracer):
    """One trace: the planner (root agent) thinks, calls tools, spawns a coder, which thinks twice."""
    planner = tracer.start_span("invoke_agent planner", start_time=at(0), attributes=agent("planner"))
    # priced from the table by prefix: gpt-4o-2024-08-06 → gpt-4o ($2.50 / $10 per 1M)
    emit(
        tracer,
        "chat gpt-4o",
        1,
        3,
        chat("gpt-4o", 1000, 200, **{"gen_ai.response.model": "gpt-4o-2024-08-06"}),
        parent=planner,
    )
    # the usual shape: the tool span is the chat's sibling under the agent → joins the latest earlier turn
    emit(
        tracer,
        "execute_tool search",
        3.5,
        4,
        tool("search", **{"gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": '{"q": "bfs"}'}),
        parent=planner,
    )
    second = tracer.start_span(
        "chat claude",
        context=trace.set_span_in_context(planner),
        start_time=at(5),
        attributes=chat("claude-sonnet-4-20250514", 500, 100, **{"smrweb.turn": 7}),
    )
    emit(tracer, "execute_tool run_tests", 5.5, 6, tool("run_tests"), parent=second)  # a child of its turn
    second.end(end_time=at(6.5))
    coder = tracer.start_span(
        "invoke_agent coder",
        context=trace.set_span_in_context(planner),
        start_time=at(7),
        attributes=agent("coder"),
    )
    emit(tracer, "chat local", 8, 9, chat("local-llm", 300, 50, **{"gen_ai.usage.cost": 0.25}), parent=coder)
    emit(tracer, "chat mystery", 10, 10.25, chat("mystery-model", 10, 10), parent=coder)
    emit(
        tracer,
        "chat review",
        11,
        12,
        chat("gpt-4o-mini", 100, 10, **{"smrweb.turn_kind": "driver_inference", "smrweb.cost_usd": 0.01}),
        parent=coder,
    )
    emit(tracer, "GET /api", 11.5, 11.6, {"http.request.method": "GET"}, parent=coder)  # not GenAI: ignored
    coder.end(end_time=at(13))
    planner.end(end_time=at(14))


def turns_of(run: Run) -> dict[str, dict]:
    return {
        t.event_id: {
            "turn": t.turn,
            "actor": t.actor,
            "parent": t.parent_actor,
            "kind": t.kind,
            "model": t.model,
            "in": t.tokens_in,
            "out": t.tokens_out,
            "usd": t.cost_usd,
            "tools": t.tool_calls,
            "ms": t.duration_ms,
        }
        for t in AgentTurn.objects.filter(run=run)
    }


def assert_spend_invariant(run: Run) -> None:
    run.refresh_from_db()
    sums = AgentTurn.objects.filter(run=run).aggregate(
        usd=Sum("cost_usd"), i=Sum("tokens_in"), o=Sum("tokens_out")
    )
    assert run.cost_usd == run.driver_cost_usd + run.child_cost_usd == sums["usd"]
    assert run.tokens_in == run.driver_tokens_in + run.child_tokens_in == sums["i"]
    assert run.tokens_out == run.driver_tokens_out + run.child_tokens_out == sums["o"]


def in_memory_spans(resource_attrs: dict, record=record_agent):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource_attrs))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    record(provider.get_tracer("agent"))
    return exporter.get_finished_spans()


def span_hex(span) -> str:
    return format(span.context.span_id, "016x")


def post(url, body: bytes, token: str | None, content_type="application/x-protobuf", **headers):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(
        f"{url}/v1/traces", content=body, headers={"Content-Type": content_type, **headers}, timeout=30
    )


def otlp_json(spans) -> bytes:
    """The OTLP JSON encoding of spans: protobuf's JSON mapping with trace and span ids in hex."""
    tree = json_format.MessageToDict(encode_spans(spans))

    def hexify(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId"):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hexify(value)
        elif isinstance(node, list):
            for item in node:
                hexify(item)

    hexify(tree)
    return json.dumps(tree).encode()


# --- the real SDK exporting to a live server ---------------------------------------------------


def test_sdk_export_becomes_turns_exactly_once(live_server, project, token):
    endpoint = f"{live_server.url}/v1/traces"
    kept = InMemorySpanExporter()
    batch = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {token}"})
    )
    named = TracerProvider(resource=Resource.create({"service.name": "agent", "smrweb.run_id": "otel-run-1"}))
    anonymous = TracerProvider(
        resource=Resource.create({"service.name": "helper"})
    )  # no run id: the trace id
    for provider in (named, anonymous):
        provider.add_span_processor(batch)  # one processor: both resources travel in the same requests
        provider.add_span_processor(SimpleSpanProcessor(kept))
    record_agent(named.get_tracer("agent"))
    emit(anonymous.get_tracer("helper"), "chat", 20, 21, chat("gpt-4.1-mini", 1_000_000, 500_000))
    assert batch.force_flush(10_000)

    spans = kept.get_finished_spans()
    by_name = {s.name: s for s in spans}
    helper_trace = format(by_name["chat"].context.trace_id, "032x")
    assert set(Run.objects.filter(project=project).values_list("external_id", flat=True)) == {
        "otel-run-1",
        helper_trace,
    }
    run = Run.objects.get(project=project, external_id="otel-run-1")
    usd = Decimal
    expected = {
        f"otel:{span_hex(by_name['chat gpt-4o'])}": {
            "turn": derived_turn(1),
            "actor": "planner",
            "parent": "",
            "kind": "driver_inference",
            "model": "gpt-4o-2024-08-06",
            "in": 1000,
            "out": 200,
            "usd": usd("0.004500"),
            "ms": 2000,
            "tools": [{"name": "search", "id": "call_1", "arguments": '{"q": "bfs"}'}],
        },
        f"otel:{span_hex(by_name['chat claude'])}": {
            "turn": 7,
            "actor": "planner",
            "parent": "",
            "kind": "driver_inference",
            "model": "claude-sonnet-4-20250514",
            "in": 500,
            "out": 100,
            "usd": usd("0.003000"),
            "ms": 1500,
            "tools": [{"name": "run_tests"}],
        },
        f"otel:{span_hex(by_name['chat local'])}": {
            "turn": derived_turn(8),
            "actor": "coder",
            "parent": "planner",
            "kind": "child_work",
            "model": "local-llm",
            "in": 300,
            "out": 50,
            "usd": usd("0.250000"),
            "ms": 1000,
            "tools": [],
        },
        f"otel:{span_hex(by_name['chat mystery'])}": {
            "turn": derived_turn(10),
            "actor": "coder",
            "parent": "planner",
            "kind": "child_work",
            "model": "mystery-model",
            "in": 10,
            "out": 10,
            "usd": usd("0"),
            "ms": 250,
            "tools": [],
        },
        f"otel:{span_hex(by_name['chat review'])}": {
            "turn": derived_turn(11),
            "actor": "coder",
            "parent": "planner",
            "kind": "driver_inference",
            "model": "gpt-4o-mini",
            "in": 100,
            "out": 10,
            "usd": usd("0.010000"),
            "ms": 1000,
            "tools": [],
        },
    }
    assert turns_of(run) == expected
    run.refresh_from_db()
    assert (run.turn_count, run.tokens_in, run.tokens_out) == (5, 1910, 370)
    assert (run.driver_cost_usd, run.child_cost_usd, run.cost_usd) == (
        usd("0.0175"),
        usd("0.25"),
        usd("0.2675"),
    )
    assert_spend_invariant(run)
    helper = Run.objects.get(project=project, external_id=helper_trace)
    assert turns_of(helper) == {
        f"otel:{span_hex(by_name['chat'])}": {
            "turn": derived_turn(20),
            "actor": "driver",
            "parent": "",
            "kind": "driver_inference",
            "model": "gpt-4.1-mini",
            "in": 1_000_000,
            "out": 500_000,
            "usd": usd("1.2"),
            "ms": 1000,
            "tools": [],
        }
    }  # 0.40 + 0.5 × 1.60

    # The same spans again, twice, through a fresh exporter: all duplicates, nothing changes.
    before = (
        list(AgentTurn.objects.order_by("id").values()),
        list(
            Run.objects.order_by("id").values(
                "external_id", "turn_count", "cost_usd", "tokens_in", "tokens_out"
            )
        ),
    )
    again = OTLPSpanExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {token}"})
    assert again.export(spans) == SpanExportResult.SUCCESS
    assert again.export(spans) == SpanExportResult.SUCCESS
    after = (
        list(AgentTurn.objects.order_by("id").values()),
        list(
            Run.objects.order_by("id").values(
                "external_id", "turn_count", "cost_usd", "tokens_in", "tokens_out"
            )
        ),
    )
    assert after == before
    # What the exporter was told: only the unpriced model, nothing refused.
    answer = post(live_server.url, encode_spans(spans).SerializeToString(), token)
    assert (answer.status_code, answer.headers["Content-Type"]) == (200, "application/x-protobuf")
    response = ExportTraceServiceResponse.FromString(answer.content)
    assert (response.partial_success.rejected_spans, response.partial_success.error_message) == (0, UNPRICED)
    named.shutdown()
    anonymous.shutdown()


def test_gzip_and_deflate_exports(live_server, project, token):
    spans = in_memory_spans({"smrweb.run_id": "gz"})
    exporter = OTLPSpanExporter(
        endpoint=f"{live_server.url}/v1/traces",
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip,
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    run = Run.objects.get(project=project, external_id="gz")
    assert run.turn_count == 5 and run.cost_usd == Decimal("0.2675")
    assert_spend_invariant(run)
    # By hand: a gzip body and a deflate body of the same spans are duplicates of what is there.
    body = encode_spans(spans).SerializeToString()
    for encoded, name in ((gzip.compress(body), "gzip"), (zlib.compress(body), "deflate")):
        answer = post(live_server.url, encoded, token, **{"Content-Encoding": name})
        assert answer.status_code == 200, answer.content
    run.refresh_from_db()
    assert run.turn_count == 5 and AgentTurn.objects.filter(run=run).count() == 5


def test_json_encoding(live_server, project, token):
    spans = in_memory_spans({"smrweb.run_id": "js"})
    body = otlp_json(spans)
    assert re.search(rb'"spanId": "[0-9a-f]{16}"', body)  # hex ids, as OTLP JSON has them
    answer = post(live_server.url, body, token, "application/json")
    assert (answer.status_code, answer.headers["Content-Type"]) == (200, "application/json")
    assert answer.json() == {"partialSuccess": {"errorMessage": UNPRICED}}  # rejectedSpans 0 is omitted
    run = Run.objects.get(project=project, external_id="js")
    rows = turns_of(run)
    assert len(rows) == 5 and run.cost_usd == Decimal("0.2675")
    by_name = {s.name: s for s in spans}
    assert rows[f"otel:{span_hex(by_name['chat local'])}"]["parent"] == "planner"
    assert rows[f"otel:{span_hex(by_name['chat gpt-4o'])}"]["tools"][0]["name"] == "search"
    # The same spans as protobuf, and the JSON again: duplicates of the span ids already stored.
    assert post(live_server.url, encode_spans(spans).SerializeToString(), token).status_code == 200
    assert post(live_server.url, body, token, "application/json; charset=utf-8").status_code == 200
    assert turns_of(run) == rows
    assert_spend_invariant(run)


# --- refusals, answered per the OTLP/HTTP spec ---------------------------------------------------


def status_of(answer) -> tuple[int, str]:
    if answer.headers["Content-Type"] == "application/json":
        body = answer.json()
        assert set(body) == {"code", "message"}
        return body["code"], body["message"]
    status = Status.FromString(answer.content)
    return status.code, status.message


def test_refusals(live_server, project, token, settings):
    url = live_server.url
    body = encode_spans(in_memory_spans({"smrweb.run_id": "refused"})).SerializeToString()

    answer = post(url, body, None)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == 'Bearer realm="smrweb"'
    assert status_of(answer) == (16, "Send Authorization: Bearer <project token>.")
    answer = post(url, body, "smr_not-a-token")
    assert answer.status_code == 401 and answer.headers["Content-Type"] == "application/x-protobuf"
    assert status_of(answer) == (16, "Invalid or revoked token.")
    answer = post(url, b"{}", "smr_not-a-token", "application/json")
    assert (answer.status_code, answer.json()) == (401, {"code": 16, "message": "Invalid or revoked token."})

    answer = post(url, b"\xff\xff\xff\xff", token)
    assert answer.status_code == 400
    assert status_of(answer) == (
        3,
        (
            "The body is not a protobuf ExportTraceServiceRequest: Error parsing message with type "
            "'opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest': Wire format was corrupt"
        ),
    )
    answer = post(url, b"{not json", token, "application/json")
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "code": 3,
            "message": "The body is not JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        },
    )
    answer = post(url, b'{"resourceSpans": 5}', token, "application/json")
    assert answer.status_code == 400 and answer.json()["message"].startswith(
        "The body is not an OTLP JSON ExportTraceServiceRequest: Failed to parse resourceSpans field"
    )
    answer = post(url, b"[]", token, "application/json")
    assert (answer.status_code, answer.json()["message"]) == (
        400,
        "The body is not an OTLP JSON ExportTraceServiceRequest: expected an object.",
    )
    answer = post(url, body[:-3] + b"xyz", token, **{"Content-Encoding": "gzip"})
    assert answer.status_code == 400
    assert status_of(answer) == (
        3,
        ("The body is not valid gzip data: Error -3 while decompressing data: incorrect header check."),
    )

    answer = post(url, body, token, "text/plain")
    assert (answer.status_code, answer.json()) == (
        415,
        {
            "code": 3,
            "message": "Unsupported Content-Type 'text/plain': send application/x-protobuf or "
            "application/json.",
        },
    )
    answer = post(url, body, token, **{"Content-Encoding": "br"})
    assert answer.status_code == 415
    assert status_of(answer) == (3, "Unsupported Content-Encoding 'br': send gzip, deflate or none.")

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    answer = post(url, b"\x00" * (100 * 1024), token)
    assert answer.status_code == 413
    assert status_of(answer) == (8, "The request body is over 65536 bytes; export smaller batches.")
    bomb = gzip.compress(b"\x00" * (1024 * 1024))  # about 1 KB that inflates to 1 MB
    assert len(bomb) < 64 * 1024
    answer = post(url, bomb, token, "application/json", **{"Content-Encoding": "gzip"})
    assert (answer.status_code, answer.json()) == (
        413,
        {"code": 8, "message": "The decompressed body is over 65536 bytes; export smaller batches."},
    )

    assert not Run.objects.exists()  # nothing of any refused request was written
    # An empty export is fine and writes nothing.
    answer = post(url, b"", token)
    assert (answer.status_code, answer.content) == (200, b"")
    assert not Run.objects.exists()


def record_with_bad_spans(tracer):
    root = tracer.start_span("invoke_agent planner", start_time=at(0), attributes=agent("planner"))
    emit(tracer, "good", 1, 2, chat("gpt-4o", 1000, 0), parent=root)
    emit(tracer, "negative", 2, 3, chat("gpt-4o", -5, 10), parent=root)
    emit(tracer, "bad kind", 3, 4, chat("gpt-4o", 1, 1, **{"smrweb.turn_kind": "boss"}), parent=root)
    emit(tracer, "bad run", 4, 5, chat("gpt-4o", 1, 1, **{"smrweb.run_id": "no spaces/here"}), parent=root)
    emit(tracer, "backwards", 6, 5, chat("gpt-4o", 1, 1), parent=root)
    emit(tracer, "other run", 7, 8, chat("gpt-4o", 0, 1000, **{"smrweb.run_id": "partial-2"}), parent=root)
    root.end(end_time=at(9))


def test_partial_success(live_server, project, token):
    spans = in_memory_spans({"smrweb.run_id": "partial"}, record=record_with_bad_spans)
    ids = {s.name: span_hex(s) for s in spans}
    body = encode_spans(spans).SerializeToString()
    answer = post(live_server.url, body, token)
    assert answer.status_code == 200
    response = ExportTraceServiceResponse.FromString(answer.content)
    assert response.partial_success.rejected_spans == 4
    assert response.partial_success.error_message == (
        f"4 span(s) refused: span {ids['bad kind']}: smrweb.turn_kind must be driver_inference or "
        f"child_work, "
        f"not 'boss'.; span {ids['bad run']}: Run id 'no spaces/here' (smrweb.run_id) is not 1 to 200 of "
        f"A-Z a-z 0-9 . _ : @ + = ~ -, starting with a letter, digit or underscore.; span {ids['negative']}: "
        f"tokens_in: Input should be greater than or equal to 0; span {ids['backwards']}: "
        f"duration_ms: Input should be greater than or equal to 0."
    )
    run = Run.objects.get(project=project, external_id="partial")
    assert set(turns_of(run)) == {f"otel:{ids['good']}"}
    assert run.cost_usd == Decimal("0.0025")
    other = Run.objects.get(project=project, external_id="partial-2")  # one request, several runs
    assert set(turns_of(other)) == {f"otel:{ids['other run']}"} and other.cost_usd == Decimal("0.01")
    # The JSON answer of the same request: the valid spans are duplicates now, the bad ones refused again.
    answer = post(live_server.url, otlp_json(spans), token, "application/json")
    assert answer.status_code == 200
    assert answer.json()["partialSuccess"]["rejectedSpans"] == "4"  # int64 as a string, per proto3 JSON
    assert AgentTurn.objects.count() == 2
    for r in (run, other):
        assert_spend_invariant(r)


def test_many_spans_of_one_actor_in_one_millisecond_keep_distinct_turns(live_server, project, token):
    def burst(tracer):
        for i in range(20):  # parallel calls of one actor, all starting in the same millisecond
            emit(tracer, f"chat {i}", 1, 2, chat("gpt-4o", 10, 10))

    spans = in_memory_spans({"smrweb.run_id": "burst"}, record=burst)
    assert post(live_server.url, encode_spans(spans).SerializeToString(), token).status_code == 200
    turns = sorted(AgentTurn.objects.filter(run__external_id="burst").values_list("turn", flat=True))
    assert turns == [derived_turn(1) + i for i in range(20)]


# --- the docs' example, run as written -------------------------------------------------------------


def docs_example() -> str:
    text = (ROOT / "docs" / "integrations.md").read_text()
    found = re.search(r"<!-- example: otel -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert found, "docs/integrations.md lost its OTel example block"
    return found.group(1)


def test_docs_example_runs_against_the_server(live_server, project, token):
    env = {**os.environ, "SMRWEB_URL": live_server.url, "SMRWEB_TOKEN": token}
    done = subprocess.run(
        [sys.executable, "-c", docs_example()],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    run = Run.objects.get(project=project, external_id="otel-demo-1")
    turns = {t.actor: t for t in AgentTurn.objects.filter(run=run)}
    assert set(turns) == {"planner", "coder"}
    planner, coder = turns["planner"], turns["coder"]
    assert (planner.kind, planner.parent_actor, planner.cost_usd) == (
        "driver_inference",
        "",
        Decimal("0.006"),
    )
    assert planner.tool_calls == [{"name": "run_tests", "arguments": '{"path": "tests/"}'}]
    assert (coder.kind, coder.parent_actor, coder.cost_usd) == ("child_work", "planner", Decimal("0.0051"))
    run.refresh_from_db()
    assert (run.driver_cost_usd, run.child_cost_usd, run.cost_usd) == (
        Decimal("0.006"),
        Decimal("0.0051"),
        Decimal("0.0111"),
    )
    assert_spend_invariant(run)


# --- whatever the attributes, never a server error -------------------------------------------------

KEYS = [
    "gen_ai.operation.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.agent.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.cost",
    "gen_ai.tool.name",
    "gen_ai.tool.call.arguments",
    "smrweb.turn",
    "smrweb.turn_kind",
    "smrweb.run_id",
    "smrweb.actor",
    "smrweb.parent_actor",
    "smrweb.cost_usd",
]
scalars = st.one_of(
    st.sampled_from(
        ["chat", "invoke_agent", "execute_tool", "embeddings", "driver_inference", "child_work", "gpt-4o"]
    ),
    st.text(max_size=5),
    st.text(min_size=190, max_size=210),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.binary(max_size=4),
)


def any_value(value) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(any_value(v) for v in value)
        return out
    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(KeyValue(key=k, value=any_value(v)) for k, v in value.items())
        return out
    return AnyValue(string_value=value)


values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)
# Well-formed GenAI attributes (so turns, tool calls and actor trees do get written), often with one
# arbitrary attribute on top, or arbitrary attributes only.
sane = st.fixed_dictionaries(
    {
        "gen_ai.operation.name": st.sampled_from(
            ["chat", "chat", "invoke_agent", "execute_tool", "text_completion"]
        ),
    },
    optional={
        "gen_ai.agent.name": st.sampled_from(["planner", "coder", "critic"]),
        "gen_ai.request.model": st.sampled_from(["gpt-4o", "claude-sonnet-4-x", "unknown-model", ""]),
        "gen_ai.usage.input_tokens": st.integers(0, 10**6),
        "gen_ai.usage.output_tokens": st.integers(0, 10**6),
        "gen_ai.usage.cost": st.floats(0, 5),
        "smrweb.turn": st.integers(0, 5),
        "smrweb.turn_kind": st.sampled_from(["driver_inference", "child_work"]),
        "gen_ai.tool.name": st.sampled_from(["search", "run_tests"]),
        "smrweb.run_id": st.sampled_from(["fuzz-a", "fuzz-b"]),
    },
)
attributes = st.one_of(
    sane,
    st.tuples(sane, st.sampled_from(KEYS), values).map(lambda t: {**t[0], t[1]: t[2]}),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=6),
)
starts = st.one_of(st.integers(T0, T0 + 10**10), st.integers(T0, T0 + 10**10), st.integers(0, 2**64 - 1))
lengths = st.one_of(
    st.integers(0, 10**10), st.integers(0, 10**10), st.integers(-(2**64), 2**64)
)  # end − start
span_specs = st.lists(st.tuples(st.integers(0, 6), starts, lengths, attributes), min_size=1, max_size=7)


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=span_specs, resource_run=st.one_of(st.none(), values))
def test_arbitrary_attributes_never_fail_the_server(project, token, specs, resource_run):
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    if resource_run is not None:
        resource_spans.resource.attributes.add(key="smrweb.run_id", value=any_value(resource_run))
    spans = resource_spans.scope_spans.add().spans
    for i, (parent, start, length, attrs) in enumerate(specs):
        span = spans.add(
            trace_id=b"\x01" * 16,
            span_id=(i + 1).to_bytes(8, "big"),
            name=f"s{i}",
            start_time_unix_nano=start,
            end_time_unix_nano=min(max(start + length, 0), 2**64 - 1),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        )
        span.attributes.extend(KeyValue(key=k, value=any_value(v)) for k, v in attrs.items())
    mapped = otlp.map_request(request, pricing.configured_table())
    for items in mapped.runs.values():
        for span, event in items:  # each turn is the contract's, or refused with a reason
            assert event["id"] == f"otel:{span}"
            try:
                parse_events(json.dumps([event]))
            except InvalidEvents as exc:
                assert exc.errors and all(e.message for e in exc.errors)
    client = Client()
    answer = client.post(
        "/v1/traces",
        data=request.SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 200, answer.content
    for run in Run.objects.all():
        assert_spend_invariant(run)
