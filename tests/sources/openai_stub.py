"""A local OpenAI-compatible server for the instrumentation tests: `POST /v1/chat/completions` answers
as api.openai.com does (usage with cached and reasoning token details, tool calls), so the real `openai`
client and its real instrumentations run unchanged against it. The request decides the answer:

- model `…-429` → 429 `rate_limit_exceeded`, model `…-401` → 401 `invalid_api_key` (failed calls);
- a user message containing "use a tool" → an assistant message asking for the tool `lookup_score`;
- otherwise a text answer. Token counts are fixed per call (USAGE) so a test can add them up.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 300,
    "total_tokens": 1500,
    "prompt_tokens_details": {"cached_tokens": 1000, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 200, "audio_tokens": 0},
}
ERRORS = {
    "429": ("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
    "401": ("Incorrect API key provided", "invalid_request_error", "invalid_api_key"),
}
# The dated snapshot the stub answers with for a model: the response model differs from the request's,
# as OpenAI's does, so a test sees which of the two a mapping reads.
SNAPSHOTS = {"gpt-4o-mini": "gpt-4o-mini-2024-07-18", "gpt-4o": "gpt-4o-2024-08-06"}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet: the tests read the server's `calls`
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        self.server.calls.append((self.path, request))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._answer(
                404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}}
            )
            return
        model = str(request.get("model", ""))
        code = model.rsplit("-", 1)[-1]
        if code in ERRORS:
            message, kind, error_code = ERRORS[code]
            self._answer(
                int(code), {"error": {"message": message, "type": kind, "param": None, "code": error_code}}
            )
            return
        last = (request.get("messages") or [{}])[-1]
        wants_tool = "use a tool" in str(last.get("content", "")) and request.get("tools")
        if wants_tool:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{len(self.server.calls)}",
                        "type": "function",
                        "function": {"name": "lookup_score", "arguments": '{"run": "r1"}'},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "The score is 0.91."}
            finish = "stop"
        self._answer(
            200,
            {
                "id": f"chatcmpl-{len(self.server.calls)}",
                "object": "chat.completion",
                "created": 1_767_225_600,
                "model": SNAPSHOTS.get(model, model),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": USAGE,
                "system_fingerprint": "fp_stub",
            },
        )


class OpenAIStub:
    """Serves on 127.0.0.1 (a free port) in a thread; `url` is the client's base URL (…/v1)."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.calls = []
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    @property
    def calls(self) -> list[tuple[str, dict]]:
        return self.server.calls

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
