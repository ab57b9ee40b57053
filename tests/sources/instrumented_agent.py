"""An agent as its authors would instrument it, run by tests/sources/test_instrumentations.py in its own
process: the real `openai` client, one of the real OpenAI instrumentations, spans exported by the real
OTLP/HTTP exporter, which takes its endpoint, headers and resource from the OTEL_* variables alone (the
client's base URL from OPENAI_BASE_URL). Nothing here names smrweb.

    python instrumented_agent.py openinference   # Arize's openinference-instrumentation-openai
    python instrumented_agent.py genai           # opentelemetry-instrumentation-openai-v2
    opentelemetry-instrument python instrumented_agent.py auto   # zero-code: every installed one

The climb step: the orchestrator asks the model twice (the second answer asks for the tool
`lookup_score`, which it runs), then hands over to a worker agent, whose calls are one answer, one of a
model no price table knows (`house-llm-7b`) and one refused with 429.
"""

from __future__ import annotations

import contextlib
import sys

import openai
from opentelemetry import trace

TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup_score", "parameters": {"type": "object", "properties": {}}},
    }
]


def ask(client: openai.OpenAI, model: str, text: str, **extra):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], **extra)


def climb(agent_span, tool_span) -> None:
    client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    with agent_span("orchestrator"):
        ask(client, "gpt-4o-mini", "plan the next step")
        answer = ask(client, "gpt-4o-mini", "use a tool", tools=TOOLS)
        for call in answer.choices[0].message.tool_calls or []:
            tool_span(call.function.name, call.id, call.function.arguments)
        with agent_span("worker"):
            ask(client, "gpt-4o-mini", "try the change")
            ask(client, "house-llm-7b", "review the change")
            with contextlib.suppress(openai.RateLimitError):
                ask(client, "gpt-4o-mini-429", "once more")


def genai_spans(tracer):
    """Agent and tool spans as the OTel GenAI semantic conventions spell them."""

    @contextlib.contextmanager
    def agent_span(name):
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes):
            yield

    def tool_span(name, call_id, arguments):
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": arguments,
        }
        with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
            pass

    return agent_span, tool_span


def openinference_spans(tracer):
    """Agent and tool spans with OpenInference's own tracer (`@tracer.tool`, span kind `agent`)."""

    def agent_span(name):
        return tracer.start_as_current_span(name, openinference_span_kind="agent")

    def tool_span(name, call_id, arguments):
        @tracer.tool(name=name)
        def run_tool(run: str) -> float:
            return 0.91

        run_tool("r1")

    return agent_span, tool_span


def main(mode: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if mode == "auto":  # opentelemetry-instrument set up the provider and instrumented openai already
        climb(*genai_spans(trace.get_tracer("agent")))
        return
    if mode == "openinference":
        from openinference.instrumentation import TracerProvider
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
    provider = TracerProvider(resource=Resource.create())  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_*
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("agent")
    spans = openinference_spans(tracer) if mode == "openinference" else genai_spans(tracer)
    climb(*spans)
    provider.shutdown()  # flush what the batch processor holds


if __name__ == "__main__":
    main(sys.argv[1])
