"""OTLP traces → agent turns: decode an `ExportTraceServiceRequest`, map its GenAI spans (the OTel GenAI
semantic conventions and OpenInference's, side by side) to `agent.turn` events of the ingest contract and
apply them with `services.ingest_events`.

Pure functions apart from `ingest_request`, which calls the one write path; the HTTP view
(`smrweb.api.otlp`) authenticates, decodes (`api/otlp_wire.py`) and answers. docs/integrations.md (section
"OpenTelemetry
GenAI traces") documents every rule below; keep the two in step.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from smrweb.core import turn_bodies
from smrweb.sources.apply import apply_events, describe
from smrweb.tracking import events as ev
from smrweb.tracking import pricing, services
from smrweb.tracking.errors import TrackingError

# Where instrumentations put the token totals: OTel GenAI, then OpenInference.
INPUT_TOKEN_ATTRIBUTES = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_TOKEN_ATTRIBUTES = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
# Where instrumentations put the parts of input and output tokens billed at other prices: the OTel GenAI
# semantic conventions (current, then earlier spellings) and OpenInference's.
TOKEN_PART_ATTRIBUTES = {
    "tokens_cached_in": (
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_read_input_tokens",
        "gen_ai.usage.input_tokens.cached",
        "llm.token_count.prompt_details.cache_read",
    ),
    "tokens_cache_write": (
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_creation_input_tokens",
        "gen_ai.usage.input_tokens.cache_write",
        "llm.token_count.prompt_details.cache_write",
    ),
    "tokens_reasoning": (
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.usage.output_tokens.reasoning",
        "llm.token_count.completion_details.reasoning",
    ),
}


# Operations that shape the agent tree or call tools; they are never turns of their own.
STRUCTURAL_OPERATIONS = {"invoke_agent", "create_agent", "execute_tool"}

# OpenInference's `openinference.span.kind` (Arize Phoenix; the LlamaIndex, LangChain, DSPy, CrewAI …
# instrumentations): model calls are turns as GenAI `chat` spans are, TOOL spans are tool calls as
# `execute_tool` ones, AGENT spans name actors as `invoke_agent` ones. CHAIN spans (every runnable of a
# framework) are structure that names no actor unless it carries `agent.name`; the rest are ignored.
OPENINFERENCE_TURN_KINDS = {"LLM", "EMBEDDING"}
OPENINFERENCE_AGENT_KINDS = {"AGENT"}

# Where the two conventions put the model, a stated cost and a tool call's fields; the first found wins.
MODEL_ATTRIBUTES = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "embedding.model_name")
COST_ATTRIBUTES = ("smrweb.cost_usd", "gen_ai.usage.cost", "llm.cost.total")
TOOL_NAME_ATTRIBUTES = ("gen_ai.tool.name", "tool.name")
TOOL_ID_ATTRIBUTES = ("gen_ai.tool.call.id", "tool_call.id", "tool.id")
TOOL_ARGUMENTS_ATTRIBUTES = ("gen_ai.tool.call.arguments", "input.value")  # not tool.parameters: a schema


TURN_KINDS = ("driver_inference", "child_work")


TURN_MODULUS = 2**31  # a derived turn number is the start in milliseconds modulo this (fits the column)


MAX_START_NANOS = int(ev.TS_MAX.timestamp()) * 1_000_000_000


MAX_MESSAGE_PROBLEMS = 5  # problems spelled out in partial_success.error_message; the rest are counted


def _value(any_value) -> Any:
    """An OTLP AnyValue as plain Python."""
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    if which == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, which)


def _attributes(key_values) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in key_values}


def _integer(value: Any) -> Any:
    """Token counts and turn numbers: whole floats and digit strings become ints; anything else is
    passed on for the contract to refuse with its own message."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,20}", value.strip()):
        return int(value)
    return value


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    end: int
    attrs: dict[str, Any]
    run_id: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, attributes)
    failed: bool = False  # the span's status is ERROR
    status_message: str = ""

    @property
    def operation(self) -> str:
        op = self.attrs.get("gen_ai.operation.name")
        return op if isinstance(op, str) else ""

    @property
    def openinference_kind(self) -> str:
        kind = self.attrs.get("openinference.span.kind")
        return kind.upper() if isinstance(kind, str) else ""

    @property
    def is_genai(self) -> bool:
        return bool(self.operation) or any(
            key in self.attrs for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
        )

    @property
    def is_turn(self) -> bool:
        if "smrweb.turn_kind" in self.attrs:  # an explicit opt-in, whatever the operation
            return True
        if self.openinference_kind:
            return self.openinference_kind in OPENINFERENCE_TURN_KINDS
        return self.is_genai and self.operation not in STRUCTURAL_OPERATIONS

    @property
    def is_tool(self) -> bool:
        return self.operation == "execute_tool" or self.openinference_kind == "TOOL"

    @property
    def is_agent(self) -> bool:
        """A span that names an actor for the spans below it."""
        return (
            self.operation == "invoke_agent"
            or self.openinference_kind in OPENINFERENCE_AGENT_KINDS
            or "smrweb.actor" in self.attrs
            or (self.openinference_kind == "CHAIN" and isinstance(self.attrs.get("agent.name"), str))
        )

    @property
    def agent_name(self) -> str | None:
        for key in ("smrweb.actor", "gen_ai.agent.name", "agent.name"):
            name = self.attrs.get(key)
            if isinstance(name, str) and name:
                return name
        if self.openinference_kind in OPENINFERENCE_AGENT_KINDS and self.name:
            return self.name  # OpenInference names an agent span after its agent (CrewAI, smolagents …)
        return None


@dataclass
class Mapped:
    """What one export request maps to: per run, the turn events (each with its span id)."""

    runs: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (span id, why)
    unpriced: dict[str, str] = field(default_factory=dict)  # span id → its model, which has no price
    ignored: int = 0  # spans that are not turns and carry nothing for one (not rejected)
    tool_calls: int = 0


def _spans(request: ExportTraceServiceRequest) -> Iterable[_Span]:
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        resource_run = resource.get("smrweb.run_id")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = _attributes(span.attributes)
                run = attrs.get("smrweb.run_id", resource_run)
                trace_id = span.trace_id.hex()
                yield _Span(
                    trace_id=trace_id,
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    name=span.name,
                    start=span.start_time_unix_nano,
                    end=span.end_time_unix_nano,
                    attrs=attrs,
                    run_id=run if isinstance(run, str) and run else trace_id,
                    events=[(e.name, _attributes(e.attributes)) for e in span.events],
                    failed=span.status.code == Status.STATUS_CODE_ERROR,
                    status_message=span.status.message,
                )


def map_request(request: ExportTraceServiceRequest, prices: pricing.PriceTable) -> Mapped:
    """Every GenAI turn span of the request as an agent.turn event dict, grouped by run. Spans are
    related through their parent ids within the request (span ids are looked up per trace)."""
    out = Mapped()
    spans = list(_spans(request))
    by_id = {(s.trace_id, s.span_id): s for s in spans}

    def parent(span: _Span) -> _Span | None:
        return by_id.get((span.trace_id, span.parent_id)) if span.parent_id else None

    def ancestors(span: _Span) -> Iterable[_Span]:
        seen = {span.span_id}
        node = parent(span)
        while node is not None and node.span_id not in seen:  # a malformed loop ends the walk
            seen.add(node.span_id)
            yield node
            node = parent(node)

    def agent_chain(span: _Span) -> list[str]:
        """Agent names from the span up to the root, nearest first, without repeats in a row."""
        chain: list[str] = []
        for node in (span, *ancestors(span)):
            name = node.agent_name if (node is span or node.is_agent) else None
            if name and (not chain or chain[-1] != name):
                chain.append(name)
        return chain

    turns: dict[tuple[str, str], dict[str, Any]] = {}  # (trace, span) → event
    turn_spans: list[_Span] = []
    tools: list[_Span] = []
    for span in spans:
        if span.is_turn:
            problem = _span_problem(span)
            if problem:
                out.rejected.append((span.span_id or "(none)", problem))
                continue
            turn_spans.append(span)
        elif span.is_tool:
            tools.append(span)
        else:
            out.ignored += 1
    turn_spans = _without_wrappers(turn_spans, ancestors, out)

    for span in turn_spans:
        chain = agent_chain(span)
        actor = chain[0] if chain else "driver"
        parent_actor = span.attrs.get("smrweb.parent_actor") or (chain[1] if len(chain) > 1 else None)
        kind = span.attrs.get("smrweb.turn_kind")
        if kind is None:
            kind = "child_work" if parent_actor else "driver_inference"
        counts = pricing.fold_parts(
            {
                "tokens_in": _integer(_first_attr(span.attrs, INPUT_TOKEN_ATTRIBUTES, 0)),
                "tokens_out": _integer(_first_attr(span.attrs, OUTPUT_TOKEN_ATTRIBUTES, 0)),
                **{
                    name: _integer(_first_attr(span.attrs, keys, 0))
                    for name, keys in TOKEN_PART_ATTRIBUTES.items()
                },
            }
        )
        tokens_in, tokens_out = counts.pop("tokens_in"), counts.pop("tokens_out")
        model = _first_attr(span.attrs, MODEL_ATTRIBUTES, "")
        cost = _first_attr(span.attrs, COST_ATTRIBUTES, None)
        start = datetime.fromtimestamp(span.start // 1_000_000_000, UTC).replace(
            microsecond=span.start % 1_000_000_000 // 1000
        )
        if cost is None and _unpriced(prices, model, tokens_in, tokens_out, start):
            out.unpriced[span.span_id] = str(model) or "(no model)"
        event = {
            "type": "agent.turn",
            "id": f"otel:{span.span_id}",
            "ts": start.isoformat(),
            "turn": _integer(span.attrs["smrweb.turn"]) if "smrweb.turn" in span.attrs else None,
            "actor": actor,
            "parent_actor": parent_actor,
            "kind": kind,
            "model": model,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            **{name: value for name, value in counts.items() if value},
            "cost_usd": _number(cost),
            "tool_calls": _requested_tools(span.attrs),
            "duration_ms": (span.end - span.start) // 1_000_000 if span.end else None,
        }
        event.update(_failure(span))
        prompt, response = span_bodies(span.attrs, span.events)
        if prompt:
            event["prompt"] = prompt
        if response:
            event["response"] = response
        turns[(span.trace_id, span.span_id)] = event
        out.runs.setdefault(span.run_id, []).append((span.span_id, event))

    _number_turns(turn_spans, turns)
    _attach_tools(tools, turn_spans, turns, parent, ancestors, agent_chain, out)
    return out


# --- prompt and response bodies -------------------------------------------------------------------
# Where instrumentations put message content, by semantic-conventions version (only when content capture
# is on, e.g. OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true); the first found wins.
_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
# Flattened, indexed messages: OpenLLMetry (`gen_ai.prompt.0.role`) and OpenInference
# (`llm.input_messages.0.message.role`): (prefix, role key, content key).
_INDEXED_PROMPT = (
    ("gen_ai.prompt", "role", "content"),
    ("llm.input_messages", "message.role", "message.content"),
)
_INDEXED_RESPONSE = (
    ("gen_ai.completion", "role", "content"),
    ("llm.output_messages", "message.role", "message.content"),
)


def _indexed(attrs: dict[str, Any], specs: tuple[tuple[str, str, str], ...], role: str) -> list | None:
    """Messages flattened into `<prefix>.<i>.<role key>` / `<prefix>.<i>.<content key>` attributes."""
    for prefix, role_key, content_key in specs:
        found: dict[int, dict[str, Any]] = {}
        for key, value in attrs.items():
            if not key.startswith(prefix + "."):
                continue
            index, _, rest = key[len(prefix) + 1 :].partition(".")
            if index.isdigit() and rest in (role_key, content_key):
                found.setdefault(int(index), {})["role" if rest == role_key else "content"] = value
        if found:
            return turn_bodies.to_messages([found[i] for i in sorted(found)], role)
    return None


def span_bodies(attrs: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> tuple[Any, Any]:
    """A GenAI span's prompt and response as contract bodies (messages or text), or None each."""
    prompt = turn_bodies.to_messages(attrs.get("gen_ai.input.messages"), "user")
    if prompt is not None and attrs.get("gen_ai.system_instructions") is not None:
        system = {"role": "system", "content": turn_bodies.parsed(attrs["gen_ai.system_instructions"])}
        prompt = [system, *(prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}])]
    response = turn_bodies.to_messages(attrs.get("gen_ai.output.messages"), "assistant")
    from_events: list[dict[str, Any]] = []
    choices: list[dict[str, Any]] = []
    for name, event_attrs in events:
        body = event_attrs.get("gen_ai.event.content", event_attrs.get("content", event_attrs.get("message")))
        if name in _ROLE_EVENTS:
            extra = {k: event_attrs[k] for k in ("tool_calls", "id") if k in event_attrs}
            message = turn_bodies.to_message(
                body if isinstance(turn_bodies.parsed(body), dict) else {"content": body}, _ROLE_EVENTS[name]
            )
            if message is not None:
                from_events.append({**extra, **message})
        elif name == "gen_ai.choice":
            message = turn_bodies.to_message(
                event_attrs.get("gen_ai.event.content", event_attrs), "assistant"
            )
            if message is not None:
                choices.append(message)
        elif name == "gen_ai.content.prompt" and prompt is None:
            prompt = turn_bodies.to_messages(event_attrs.get("gen_ai.prompt"), "user")
        elif name == "gen_ai.content.completion" and response is None:
            response = turn_bodies.to_messages(event_attrs.get("gen_ai.completion"), "assistant")
    if prompt is None:
        prompt = from_events or turn_bodies.to_messages(attrs.get("gen_ai.prompt"), "user")
    if response is None:
        response = choices or turn_bodies.to_messages(attrs.get("gen_ai.completion"), "assistant")
    if prompt is None:
        prompt = _indexed(attrs, _INDEXED_PROMPT, "user")
    if response is None:
        response = _indexed(attrs, _INDEXED_RESPONSE, "assistant")
    return turn_bodies.clean(prompt), turn_bodies.clean(response)


def _span_problem(span: _Span) -> str:
    """Why a turn span cannot be mapped at all (its fields are checked later by the contract)."""
    if len(span.span_id) != 16 or span.span_id == "0" * 16:
        return "The span has no valid 8-byte span id."
    if not span.start:
        return "The span has no start time."
    if span.start >= MAX_START_NANOS:
        return "The span starts after 9999-01-01."
    if not services.RUN_ID_RE.match(span.run_id):
        return (
            f"Run id {span.run_id[:100]!r} (smrweb.run_id) is not 1 to 200 of A-Z a-z 0-9 . _ : @ + = ~ -, "
            "starting with a letter, digit or underscore."
        )
    kind = span.attrs.get("smrweb.turn_kind")
    if kind is not None and kind not in TURN_KINDS:
        return f"smrweb.turn_kind must be driver_inference or child_work, not {kind!r}."
    return ""


def _failure(span: _Span) -> dict[str, Any]:
    """A failed call's fields, from a span whose status is ERROR (as Langfuse reads it): the error's class
    from `error.type` or the recorded exception's `exception.type`, its message from the status or the
    exception, the HTTP status from `http.response.status_code`, else from an OpenAI-style message
    ("Error code: 429 - …", which both OpenAI instrumentations record); {} for a span that did not fail."""
    if not span.failed:
        return {}
    exception = next((attrs for name, attrs in span.events if name == "exception"), {})
    error = str(span.attrs.get("error.type") or exception.get("exception.type") or "error")
    error = CLASS_REPR.sub(r"\1", error)  # "<class 'openai.RateLimitError'>" → openai.RateLimitError
    message = span.status_message or exception.get("exception.message") or ""
    http_status = _integer(span.attrs.get("http.response.status_code", span.attrs.get("http.status_code")))
    if http_status is None and (code := HTTP_STATUS_IN_MESSAGE.search(str(message))):
        http_status = int(code.group(1))
    out: dict[str, Any] = {"status": "error", "error": str(error)[:200], "error_message": str(message)}
    if isinstance(http_status, int) and 100 <= http_status <= 599:
        out["http_status"] = http_status
    return out


CLASS_REPR = re.compile(r"^<class '([^']{1,200})'>$")
HTTP_STATUS_IN_MESSAGE = re.compile(r"\bError code: (\d{3})\b")


def _first_attr(attrs: dict[str, Any], keys: tuple[str, ...], default: Any) -> Any:
    return next((attrs[k] for k in keys if attrs.get(k) is not None), default)


def _unpriced(prices: pricing.PriceTable, model: Any, tokens_in: Any, tokens_out: Any, at: datetime) -> bool:
    """Tokens used of a model the table has no price for at `at` (the write path will record the turn as
    unpriced; the exporter is told)."""
    if not (isinstance(tokens_in, int) and isinstance(tokens_out, int)) or not (tokens_in or tokens_out):
        return False  # no tokens (nothing to price), or tokens the contract refuses
    return not isinstance(model, str) or prices.price(model, at) is None


def _number_turns(turn_spans: list[_Span], turns: dict) -> None:
    """Turns without smrweb.turn get a number derived from their start: milliseconds since the epoch
    modulo 2^31. It is the same whichever export request carries the span, so a span exported in a
    later batch never takes a number an earlier one used (unless both started in the same
    millisecond of the same actor: inside one request the later one is moved up by one)."""
    taken: dict[str, set[int]] = defaultdict(set)
    pending = []
    for span in turn_spans:
        event = turns[(span.trace_id, span.span_id)]
        if event["turn"] is None:
            pending.append((span.start, span.span_id, event))
        elif isinstance(event["turn"], int):  # anything else is refused by the contract
            taken[event["actor"]].add(event["turn"])
    for start, _, event in sorted(pending, key=lambda item: item[:2]):
        number = start // 1_000_000 % TURN_MODULUS
        while number in taken[event["actor"]]:
            number = (number + 1) % TURN_MODULUS
        taken[event["actor"]].add(number)
        event["turn"] = number


def _attach_tools(tools, turn_spans, turns, parent, ancestors, agent_chain, out: Mapped) -> None:
    """An execute_tool span is a tool call of the turn span it descends from; when it hangs off an
    agent span instead (the usual shape: the model asks, the agent runs the tool), of the latest turn
    of the same agent in the trace that started before it. A tool span with no turn to join is ignored."""
    by_agent: dict[tuple[str, str], list[_Span]] = defaultdict(list)
    for span in turn_spans:
        chain = agent_chain(span)
        by_agent[(span.trace_id, chain[0] if chain else "driver")].append(span)
    for spans in by_agent.values():
        spans.sort(key=lambda s: s.start)
    calls: dict[tuple[str, str], list[tuple[int, dict]]] = defaultdict(list)
    for tool in tools:
        target = next((a for a in ancestors(tool) if (a.trace_id, a.span_id) in turns), None)
        if target is None:
            chain = agent_chain(tool)
            earlier = [
                s
                for s in by_agent.get((tool.trace_id, chain[0] if chain else "driver"), [])
                if s.start <= tool.start
            ]
            target = earlier[-1] if earlier else None
        if target is None:
            out.ignored += 1
            continue
        call: dict[str, Any] = {"name": str(_first_attr(tool.attrs, TOOL_NAME_ATTRIBUTES, "") or tool.name)}
        for keys, name in ((TOOL_ID_ATTRIBUTES, "id"), (TOOL_ARGUMENTS_ATTRIBUTES, "arguments")):
            value = _first_attr(tool.attrs, keys, None)
            if value is not None:
                call[name] = value
        calls[(target.trace_id, target.span_id)].append((tool.start, call))
        out.tool_calls += 1
    for key, items in calls.items():  # the tools that ran replace the ones the response asked for
        turns[key]["tool_calls"] = [call for _, call in sorted(items, key=lambda item: item[0])]


# The tool calls a model's response asks for, flattened by OpenInference
# (`llm.output_messages.0.message.tool_calls.1.tool_call.function.name`): a turn's tool calls when no tool
# span ran them (an agent that runs tools without instrumenting them).
_REQUESTED_TOOL = re.compile(
    r"^llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)$"
)


def _requested_tools(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith("llm.output_messages.") and (match := _REQUESTED_TOOL.match(key)):
            field_name = {"id": "id", "function.name": "name", "function.arguments": "arguments"}[match[3]]
            found.setdefault((int(match[1]), int(match[2])), {})[field_name] = value
    return [
        {"name": str(call["name"]), **{k: call[k] for k in ("id", "arguments") if k in call}}
        for _, call in sorted(found.items())
        if call.get("name")
    ]


def _without_wrappers(turn_spans: list[_Span], ancestors, out: Mapped) -> list[_Span]:
    """One model call seen by two instrumentations is two nested turn spans (a framework's LLM span around
    the OpenAI client's, or the OTel GenAI and OpenInference OpenAI instrumentations both installed, as
    `opentelemetry-instrument` loads every one it finds). The innermost is the call on the wire and is
    kept; a turn span with a turn span below it, and no agent span between, is a wrapper: ignored, so the
    call is counted once. Spans marked with `smrweb.turn_kind` are always kept."""
    ids = {(s.trace_id, s.span_id) for s in turn_spans}
    wrappers: set[tuple[str, str]] = set()
    for span in turn_spans:
        for node in ancestors(span):
            if node.is_agent:
                break
            if (node.trace_id, node.span_id) in ids and "smrweb.turn_kind" not in node.attrs:
                wrappers.add((node.trace_id, node.span_id))
    out.ignored += len(wrappers)
    return [s for s in turn_spans if (s.trace_id, s.span_id) not in wrappers]


@dataclass
class Outcome:
    accepted: int = 0
    duplicates: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (span id, why)
    unpriced: set[str] = field(default_factory=set)
    ignored: int = 0
    runs: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """partial_success.error_message: the refused spans (a few spelled out) and unpriced models."""
        parts = []
        if self.rejected:
            shown = "; ".join(f"span {span}: {why}" for span, why in self.rejected[:MAX_MESSAGE_PROBLEMS])
            more = len(self.rejected) - MAX_MESSAGE_PROBLEMS
            parts.append(
                f"{len(self.rejected)} span(s) refused: {shown}" + (f"; and {more} more" if more > 0 else "")
            )
        if self.unpriced:
            names = ", ".join(sorted(self.unpriced))
            parts.append(
                f"No price for model(s) {names} (the price table: SMRWEB_MODEL_PRICES or the admin's model "
                "prices): their turns are recorded as unpriced."
            )
        return " ".join(part if part.endswith(".") else part + "." for part in parts)


def ingest_request(project, request: ExportTraceServiceRequest) -> Outcome:
    """Map the request and apply each run's turns through `services.ingest_events` (one transaction
    per run and at most MAX_EVENTS turns). Replays are duplicates: event ids are `otel:<span id>`."""
    mapped = map_request(request, services.current_prices())
    outcome = Outcome(rejected=list(mapped.rejected), ignored=mapped.ignored)
    for run_id, items in mapped.runs.items():
        try:
            applied = apply_events(project, run_id, items, on_refused="skip", via="otlp")
        except TrackingError as exc:  # the domain refused the run (its id, say): nothing of it was written
            outcome.rejected += [(span, exc.message) for span, _ in items]
            continue
        outcome.rejected += [(span, describe(errors) or "refused") for span, errors in applied.refused]
        outcome.unpriced.update(mapped.unpriced[span] for span in applied.written if span in mapped.unpriced)
        outcome.accepted += applied.accepted
        outcome.duplicates += applied.duplicates
        if applied.written and run_id not in outcome.runs:
            outcome.runs.append(run_id)
    return outcome
