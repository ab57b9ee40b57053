"""The HTTP layer: the threading server, and the request handler that authenticates, matches a route,
applies the fault the injector decides, and serves the `/_sim/` control API to loopback clients."""

from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from smrweb.simulator.faults import FaultInjector, truncate, wrong_shape
from smrweb.simulator.server.context import Ctx, HttpError, Response
from smrweb.simulator.server.routes import match_route
from smrweb.simulator.server.stats import Stats
from smrweb.simulator.world import NotFound, World

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


class SimulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address,
        *,
        world: World,
        api_key: str,
        faults: FaultInjector,
        stats: Stats,
        verbose: bool = False,
    ):
        super().__init__(address, _Handler)
        self.world = world
        self.api_key = api_key
        self.faults = faults
        self.stats = stats
        self.verbose = verbose
        self.stopping = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: SimulatorServer
    server_version = "smr-simulator/1"

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    # ------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        try:
            parts = urlsplit(self.path)
            path = parts.path
            query = parse_qs(parts.query, keep_blank_values=True)
            length = int(self.headers.get("Content-Length") or 0)
            raw_body = self.rfile.read(length) if length > 0 else b""
            if path == "/_sim" or path.startswith("/_sim/"):
                self._control(method, path, query, raw_body)
            elif path.startswith("/smr/") or path == "/smr":
                self._smr(method, path, query, raw_body)
            else:
                self._json(404, {"detail": "Not Found"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _smr(self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes) -> None:
        server = self.server
        route, params, other_method = match_route(method, path)
        if route is None:
            server.stats.bump("unmatched")
            if other_method:
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})
            return
        if not self._authorized():
            server.stats.bump("unauthorized")
            self._json(401, {"detail": "Invalid or missing API key"}, {"WWW-Authenticate": "Bearer"})
            return
        server.stats.count(route, params)
        self._route_key = route.key
        try:
            body = json.loads(raw_body) if raw_body.strip() else None
        except ValueError:
            self._json(
                422,
                {
                    "detail": [
                        {
                            "type": "json_invalid",
                            "loc": ["body"],
                            "msg": "JSON decode error",
                            "input": raw_body.decode("utf-8", "replace"),
                        }
                    ]
                },
            )
            return
        if method != "GET":
            server.stats.record(route, method, path, body)
        ctx = Ctx(server.world, method, path, params, query, body)
        kind, rng = server.faults.decide(route.name, path)
        config = server.faults.config
        if kind is not None:
            server.stats.fault(route, kind)
        if kind == "drop":
            self.close_connection = True  # closes the socket without a single byte of answer
            return
        if kind == "429":
            n = config.retry_after
            self._json(
                429,
                {
                    "detail": {
                        "error_code": "rate_limited",
                        "message": "Too many requests (simulated)",
                        "retry_after_seconds": n,
                        "retryable": True,
                    }
                },
                {"Retry-After": str(n)},
            )
            return
        if kind == "5xx":
            status = rng.choice((500, 502, 503))
            self._json(
                status,
                {
                    "failure_class": "simulated_upstream_failure",
                    "message": f"Simulated server error ({status})",
                    "remediation": "Retry with backoff.",
                    "cause": [
                        {"type": "SimulatedFault", "module": "smrweb.simulator", "message": "fault injection"}
                    ],
                },
            )
            return
        if kind == "denial":
            self._json(
                config.denial_status,
                {
                    "detail": {
                        "error_code": "smr_limit_exceeded",
                        "message": "Managed research request limit exceeded for this organization "
                        "(simulated).",
                        "limit_kind": "requests_per_minute",
                        "retryable": True,
                        "retry_after_seconds": config.retry_after,
                    }
                },
            )
            return
        if kind == "slow":
            server.stopping.wait(config.slow_seconds)
            if method != "GET":  # the action is not applied: a faulted request has no side effect
                self._json(504, {"detail": "Gateway Timeout (simulated slow upstream; request not applied)"})
                return
        try:
            with server.world.lock:
                if kind in ("truncated", "wrong_shape") and route.preview is not None:
                    response = Response(payload=route.preview(ctx))
                else:
                    response = route.handler(ctx)
        except HttpError as exc:
            self._json(exc.status, {"detail": exc.detail})
            return
        except NotFound as exc:
            self._json(404, {"detail": str(exc)})
            return
        if response.raw is not None:  # artifact bytes
            content = response.raw
            if kind == "truncated":
                content = truncate(content)
            elif kind == "wrong_shape":
                content = (
                    b"<html><head><title>Service Unavailable</title></head>"
                    b"<body>simulated: not the artifact</body></html>"
                )
                response.content_type = "text/html; charset=utf-8"
            if kind is None and response.status == 200:
                # Counted before sending: a client that has the bytes must find them counted (counting
                # after the write raced the client's next look at the stats on a loaded machine).
                server.stats.served(params["artifact_id"])
            self._send(response.status, content, response.content_type, response.headers)
            return
        payload = response.payload
        if kind == "wrong_shape":
            payload = wrong_shape(payload)
        data = _dumps(payload)
        if kind == "truncated":
            data = truncate(data)
        self._send(response.status, data, response.content_type, response.headers)

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.server.api_key.encode()
        )

    def _control(self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes) -> None:
        if self.client_address[0] not in LOOPBACK:
            self._json(403, {"detail": "the control API answers loopback clients only"})
            return
        server = self.server
        world = server.world
        key = (method, path.rstrip("/"))
        if key == ("GET", "/_sim/state"):
            self._json(200, world.state())
        elif key == ("GET", "/_sim/stats"):
            self._json(200, server.stats.snapshot())
        elif key == ("POST", "/_sim/stats/reset"):
            server.stats.reset()
            self._json(200, server.stats.snapshot())
        elif key == ("POST", "/_sim/freeze"):
            world.freeze()
            self._json(200, {"frozen": True, "ticks": world.ticks})
        elif key in (("POST", "/_sim/thaw"), ("POST", "/_sim/unfreeze")):
            world.thaw()
            self._json(200, {"frozen": False, "ticks": world.ticks})
        elif key == ("POST", "/_sim/tick"):
            try:
                n = int((query.get("n") or ["1"])[-1])
            except ValueError:
                self._json(400, {"detail": "n must be an integer"})
                return
            applied = world.tick(n)
            self._json(
                200 if applied == n else 409,
                {"applied": applied, "ticks": world.ticks, "frozen": world.frozen},
            )
        elif key == ("GET", "/_sim/faults"):
            self._json(200, server.faults.config.to_dict())
        elif key == ("POST", "/_sim/faults"):
            try:
                spec = _fault_spec_from_body(raw_body)
                server.faults.set(spec)
            except ValueError as exc:
                self._json(400, {"detail": str(exc)})
                return
            self._json(200, server.faults.config.to_dict())
        elif key == ("GET", "/_sim/health"):
            self._json(200, {"ok": True, "ticks": world.ticks, "frozen": world.frozen})
        else:
            self._json(404, {"detail": "Not Found"})

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, _dumps(payload), "application/json", headers or {})

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str]) -> None:
        route_key = getattr(self, "_route_key", None)
        if route_key is not None:
            self.server.stats.sent(route_key, len(body))
            self._route_key = None
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def _fault_spec_from_body(raw: bytes) -> str:
    text = raw.decode("utf-8").strip()
    if not text:
        return ""
    if text.startswith("{"):
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("spec", ""), str):
            raise ValueError('the body must be {"spec": "..."}')
        return data.get("spec", "")
    return text


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
