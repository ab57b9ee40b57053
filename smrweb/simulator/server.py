"""The simulator's HTTP face: the SMR paths the connector calls, a `/_sim/` control API, and faults.

Stdlib only (`http.server.ThreadingHTTPServer`); no Django. `start_simulator(...)` runs it in a
background thread and returns a handle (`.url`, `.world`, `.stats`, `.faults`, `.stop()`).
"""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from smrweb.simulator.faults import FaultConfig, FaultInjector, truncate, wrong_shape
from smrweb.simulator.world import DEFAULT_METRICS, DEFAULT_PROJECT_ID, Conflict, NotFound, World, parse_iso

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
DEFAULT_API_KEY = "smr-sim-key"
ACTIVE_RUNS_CAP = 200  # GET .../runs/active answers at most this many (newest first), with no cursor


class HttpError(Exception):
    def __init__(self, status: int, detail: Any):
        super().__init__(str(detail))
        self.status = status
        self.detail = detail


@dataclass
class Response:
    status: int = 200
    payload: Any = None
    raw: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Ctx:
    world: World
    method: str
    path: str
    params: dict[str, str]
    query: dict[str, list[str]]
    body: Any

    def q(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def q_int(self, name: str, default: int, lo: int, hi: int) -> int:
        raw = self.q(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise _validation(name, "int_parsing", "Input should be a valid integer, unable to parse string "
                              "as an integer", raw) from None
        if value < lo:
            raise _validation(name, "greater_than_equal", f"Input should be greater than or equal to {lo}", raw)
        if value > hi:
            raise _validation(name, "less_than_equal", f"Input should be less than or equal to {hi}", raw)
        return value

    def q_datetime(self, name: str) -> datetime | None:
        raw = self.q(name)
        if not raw:
            return None
        try:
            return parse_iso(raw)
        except ValueError:
            raise _validation(name, "datetime_from_date_parsing", "Input should be a valid datetime", raw) from None


def _validation(name: str, type_: str, msg: str, value: Any) -> HttpError:
    """FastAPI's 422 shape (spec HTTPValidationError)."""
    return HttpError(422, [{"type": type_, "loc": ["query", name], "msg": msg, "input": value}])


# ---------------------------------------------------------------------- handlers (all under world.lock)
def _project(ctx: Ctx) -> str:
    pid = ctx.params["project_id"]
    if pid not in ctx.world.runs_by_project:
        raise HttpError(404, "Project not found")
    return pid


def _run(ctx: Ctx):
    pid = ctx.params.get("project_id")
    if pid is not None:
        _project(ctx)
    return ctx.world.get_run(ctx.params["run_id"], pid)


def h_projects(ctx: Ctx) -> Response:
    limit = ctx.q_int("limit", 100, 1, 500)
    return Response(payload=[ctx.world.project_wire(pid) for pid in ctx.world.project_ids][:limit])


def h_runs(ctx: Ctx, *, active_only: bool = False) -> Response:
    pid = _project(ctx)
    limit = ctx.q_int("limit", 50, 1, 200)
    states = {s.strip() for s in (ctx.q("state") or "").split(",") if s.strip()} or None
    after = None
    cursor = (ctx.q("cursor") or "").strip()
    if cursor and not active_only:
        after = _parse_cursor(ctx.world, pid, cursor)
    runs = ctx.world.list_runs(
        pid,
        states=None if active_only else states,
        active_only=active_only,
        created_after=None if active_only else ctx.q_datetime("created_after"),
        created_before=None if active_only else ctx.q_datetime("created_before"),
        after=after,
        limit=ACTIVE_RUNS_CAP if active_only else limit,
    )
    return Response(payload=[ctx.world.run_wire(r) for r in runs])


def _parse_cursor(world: World, pid: str, cursor: str) -> tuple[datetime, str]:
    """Accepted forms (as the spec says): '<created_at_iso>', '<created_at_iso>|<run_id>', '<run_id>'."""
    if "|" in cursor:
        ts, _, rid = cursor.partition("|")
        try:
            return parse_iso(ts), rid.strip()
        except ValueError:
            raise _validation("cursor", "value_error", "Invalid cursor", cursor) from None
    try:
        return parse_iso(cursor), ""  # runs created strictly before that time
    except ValueError:
        pass
    run = world.runs.get(cursor)
    if run is None or not run.exists or run.project_id != pid:
        raise _validation("cursor", "value_error", "Invalid cursor: unknown run id", cursor)
    return run.created_at, run.run_id


def h_run(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.run_wire(_run(ctx)))


def h_usage(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.usage_wire(_run(ctx)))


def h_cost_summary(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.cost_summary_wire(_run(ctx)))


def h_actors_usage(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.actor_usage_wire(_run(ctx)))


def h_manifest(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.manifest_wire(_run(ctx)))


def h_artifact(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.artifact_wire(ctx.params["artifact_id"]))


def h_artifact_content(ctx: Ctx) -> Response:
    disposition = ctx.q("disposition") or "inline"
    if disposition not in ("inline", "attachment"):
        raise _validation("disposition", "string_pattern_mismatch",
                          "String should match pattern '^(inline|attachment)$'", disposition)
    _, artifact, content = ctx.world.artifact(ctx.params["artifact_id"])
    filename = artifact["path"].rsplit("/", 1)[-1]
    return Response(raw=content, content_type=artifact["content_type"],
                    headers={"Content-Disposition": f'{disposition}; filename="{filename}"',
                             "ETag": f'"{artifact["digest"].split(":", 1)[1]}"'})


def h_checkpoints(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.checkpoints_wire(_run(ctx)))


def h_checkpoint(ctx: Ctx) -> Response:
    cid = ctx.params["checkpoint_id"]
    for checkpoint in ctx.world.checkpoints_wire(_run(ctx)):
        if cid in (checkpoint["checkpoint_id"], checkpoint["artifact_id"]):
            return Response(payload=checkpoint)
    raise HttpError(404, "Checkpoint not found")


def h_messages(ctx: Ctx) -> Response:
    run = _run(ctx)
    limit = ctx.q_int("limit", 200, 1, 1000)
    targets = [t for t in ctx.query.get("viewer_target", []) if t.strip()]
    return Response(payload=ctx.world.messages_wire(run, status=ctx.q("status"), viewer_targets=targets,
                                                    limit=limit))


def h_experiments(ctx: Ctx) -> Response:
    pid = _project(ctx)
    limit = ctx.q_int("limit", 100, 1, 500)
    return Response(payload=ctx.world.experiments_wire(pid, run_id=ctx.q("run_id") or None, limit=limit))


def h_experiment(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.experiment_wire(_project(ctx), ctx.params["experiment_id"]))


def h_experiment_results(ctx: Ctx) -> Response:
    pid = _project(ctx)
    limit = ctx.q_int("limit", 100, 1, 500)
    ctx.q_int("taskset_seed", 0, -(2**63), 2**63)  # validated like the real API, otherwise unused
    taskset = ctx.q("taskset_id")
    rows = ctx.world.results_wire(pid, experiment_id=ctx.q("experiment_id") or None, metric=ctx.q("metric") or None,
                                  comparison_cohort_key=ctx.q("comparison_cohort_key") or None,
                                  truth_status=ctx.q("truth_status") or None, limit=limit)
    return Response(payload=[] if taskset else rows)  # no result of the simulator belongs to a task set


def h_experiment_result_list(ctx: Ctx) -> Response:
    """`GET /smr/projects/{pid}/experiments/{eid}/results?limit=`: one experiment's results, newest first."""
    pid = _project(ctx)
    ctx.world.experiment_wire(pid, ctx.params["experiment_id"])  # 404 for an unknown experiment
    limit = ctx.q_int("limit", 100, 1, 500)
    return Response(payload=ctx.world.results_wire(pid, experiment_id=ctx.params["experiment_id"], metric=None,
                                                   comparison_cohort_key=None, truth_status=None, limit=limit))


def h_stop(ctx: Ctx) -> Response:
    if ctx.params.get("project_id") is not None:
        _project(ctx)
    try:
        return Response(payload=ctx.world.stop(ctx.params["run_id"], ctx.params.get("project_id")))
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None


def h_restore(ctx: Ctx) -> Response:
    if ctx.params.get("project_id") is not None:
        _project(ctx)
    body = ctx.body if isinstance(ctx.body, dict) else {}
    mode = body.get("mode") or "in_place"
    if mode not in ("in_place", "branch"):
        raise HttpError(422, [{"type": "literal_error", "loc": ["body", "mode"],
                               "msg": "Input should be 'in_place' or 'branch'", "input": mode}])
    if not any(body.get(k) for k in ("checkpoint_id", "checkpoint_record_id", "checkpoint_uri")):
        raise HttpError(422, [{"type": "value_error", "loc": ["body"], "input": body,
                               "msg": "Value error, one of checkpoint_id, checkpoint_record_id or "
                                      "checkpoint_uri is required"}])
    try:
        return Response(payload=ctx.world.restore(ctx.params["run_id"], ctx.params.get("project_id"), body))
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None


def _preview_run(ctx: Ctx) -> Any:
    """What a malformed answer to a POST is built from: the run as it is (the action is not applied)."""
    return ctx.world.run_wire(_run(ctx))


P = "/smr/projects/{project_id}"
R = "/smr/runs/{run_id}"
PR = P + "/runs/{run_id}"


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # the spec's path template
    name: str  # what fault scopes match against
    handler: Callable[[Ctx], Response]
    preview: Callable[[Ctx], Any] | None = None  # for POST routes: the body a malformed answer corrupts

    @property
    def regex(self) -> re.Pattern:
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(self.template))
        return re.compile(f"^{pattern}$")

    @property
    def key(self) -> str:
        return f"{self.method} {self.template}"


ROUTES: tuple[Route, ...] = (
    Route("GET", "/smr/projects", "projects", h_projects),
    Route("GET", P + "/runs", "runs", h_runs),
    Route("GET", P + "/runs/active", "runs_active", lambda c: h_runs(c, active_only=True)),
    Route("GET", PR, "run", h_run),
    Route("GET", R, "run", h_run),
    Route("GET", R + "/usage", "usage", h_usage),
    Route("GET", R + "/spend", "usage", h_usage),
    Route("GET", R + "/cost_summary", "cost_summary", h_cost_summary),
    Route("GET", PR + "/actors/usage", "actors_usage", h_actors_usage),
    Route("GET", R + "/actors/usage", "actors_usage", h_actors_usage),
    Route("GET", PR + "/artifacts/manifest", "manifest", h_manifest),
    Route("GET", R + "/artifacts/manifest", "manifest", h_manifest),
    Route("GET", "/smr/artifacts/{artifact_id}", "artifact", h_artifact),
    Route("GET", "/smr/artifacts/{artifact_id}/content", "artifact_content", h_artifact_content),
    Route("GET", PR + "/checkpoints", "checkpoints", h_checkpoints),
    Route("GET", R + "/checkpoints", "checkpoints", h_checkpoints),
    Route("GET", PR + "/checkpoints/{checkpoint_id}", "checkpoint", h_checkpoint),
    Route("GET", R + "/checkpoints/{checkpoint_id}", "checkpoint", h_checkpoint),
    Route("GET", PR + "/runtime/messages", "messages", h_messages),
    Route("GET", R + "/runtime/messages", "messages", h_messages),
    Route("GET", P + "/experiments", "experiments", h_experiments),
    Route("GET", P + "/experiments/{experiment_id}", "experiment", h_experiment),
    Route("GET", P + "/experiment-results", "experiment_results", h_experiment_results),
    Route("GET", P + "/experiments/{experiment_id}/results", "experiment_result_list", h_experiment_result_list),
    Route("POST", PR + "/stop", "stop", h_stop, _preview_run),
    Route("POST", R + "/stop", "stop", h_stop, _preview_run),
    Route("POST", PR + "/restore", "restore", h_restore, _preview_run),
    Route("POST", R + "/restore", "restore", h_restore, _preview_run),
)
_COMPILED = [(route, route.regex) for route in ROUTES]


def match_route(method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
    """(route, path params, whether the path exists for some other method)."""
    other = False
    for route, regex in _COMPILED:
        m = regex.match(path)
        if m:
            if route.method == method:
                return route, m.groupdict(), False
            other = True
    return None, {}, other


# ---------------------------------------------------------------------- stats
class Stats:
    """Request counts by route, faults by kind, and artifact content requests by artifact id."""

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests: dict[str, int] = defaultdict(int)
            self.faults: dict[str, int] = defaultdict(int)
            self.faults_by_route: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            self.content_requests: dict[str, int] = defaultdict(int)
            self.content_served: dict[str, int] = defaultdict(int)
            self.bytes: dict[str, int] = defaultdict(int)  # response body bytes by route
            self.unauthorized = 0
            self.unmatched = 0

    def count(self, route: Route, params: dict[str, str]) -> None:
        with self._lock:
            self.requests[route.key] += 1
            if route.name == "artifact_content":
                self.content_requests[params["artifact_id"]] += 1

    def fault(self, route: Route, kind: str) -> None:
        with self._lock:
            self.faults[kind] += 1
            self.faults_by_route[route.key][kind] += 1

    def sent(self, route_key: str, size: int) -> None:
        with self._lock:
            self.bytes[route_key] += size

    def served(self, artifact_id: str) -> None:
        with self._lock:
            self.content_served[artifact_id] += 1

    def bump(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "total_requests": sum(self.requests.values()),
                "faults": dict(self.faults),
                "faults_by_route": {k: dict(v) for k, v in self.faults_by_route.items()},
                "content_requests": dict(self.content_requests),
                "content_served": dict(self.content_served),
                "bytes": dict(self.bytes),
                "total_bytes": sum(self.bytes.values()),
                "unauthorized": self.unauthorized,
                "unmatched": self.unmatched,
            }


# ---------------------------------------------------------------------- HTTP
class SimulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, *, world: World, api_key: str, faults: FaultInjector, stats: Stats,
                 verbose: bool = False):
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
            self._json(422, {"detail": [{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error",
                                         "input": raw_body.decode("utf-8", "replace")}]})
            return
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
            self._json(429, {"detail": {"error_code": "rate_limited", "message": "Too many requests (simulated)",
                                        "retry_after_seconds": n, "retryable": True}},
                       {"Retry-After": str(n)})
            return
        if kind == "5xx":
            status = rng.choice((500, 502, 503))
            self._json(status, {"failure_class": "simulated_upstream_failure",
                                "message": f"Simulated server error ({status})",
                                "remediation": "Retry with backoff.",
                                "cause": [{"type": "SimulatedFault", "module": "smrweb.simulator",
                                           "message": "fault injection"}]})
            return
        if kind == "denial":
            self._json(config.denial_status, {"detail": {
                "error_code": "smr_limit_exceeded",
                "message": "Managed research request limit exceeded for this organization (simulated).",
                "limit_kind": "requests_per_minute",
                "retryable": True,
                "retry_after_seconds": config.retry_after,
            }})
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
                content = (b"<html><head><title>Service Unavailable</title></head>"
                           b"<body>simulated: not the artifact</body></html>")
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
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                                  self.server.api_key.encode())

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
            self._json(200 if applied == n else 409, {"applied": applied, "ticks": world.ticks,
                                                       "frozen": world.frozen})
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


# ---------------------------------------------------------------------- in-process handle
@dataclass
class SimulatorHandle:
    server: SimulatorServer
    world: World
    faults: FaultInjector
    stats: Stats
    api_key: str
    _threads: list[threading.Thread] = field(default_factory=list)
    _ticker_stop: threading.Event = field(default_factory=threading.Event)

    @property
    def host(self) -> str:
        return self.server.server_address[0]

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        host = self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def project_id(self) -> str:
        return self.world.project_ids[0]

    def set_faults(self, spec: FaultConfig | str) -> FaultConfig:
        return self.faults.set(spec)

    def stop(self) -> None:
        """Stop ticking and serving; the world stays readable (and can be served again)."""
        self._ticker_stop.set()
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_simulator(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str = DEFAULT_API_KEY,
    project_ids: list[str] | tuple[str, ...] | str | None = None,
    runs: int = 6,
    tick: float = 1.0,
    seed: int = 0,
    faults: FaultConfig | str | None = None,
    warmup: int = 0,
    auto_tick: bool = True,
    world: World | None = None,
    start_time: datetime | None = None,
    verbose: bool = False,
    shapes: list[str] | tuple[str, ...] | str = ("a",),
    unreadable_every: int = 0,
    metrics: list | tuple = DEFAULT_METRICS,
    worker_downgrades: bool = False,
) -> SimulatorHandle:
    """Serve a simulated SMR backend from a background thread.

    `tick` is both the virtual time one tick stands for and, with `auto_tick`, the wall-clock period
    of the ticker thread (`tick <= 0` or `auto_tick=False`: the world moves only through `world.tick()`
    or `POST /_sim/tick`). `warmup` ticks are applied before serving, with the start time moved back
    so that virtual time matches the wall clock. Pass an existing `world` to serve it again (e.g. on
    the same port after `stop()`, to simulate a backend restart or a refused connection meanwhile).
    `shapes`, `unreadable_every`, `metrics` and `worker_downgrades` are passed to `World` (see there).
    """
    if world is None:
        if isinstance(project_ids, str):
            project_ids = [p.strip() for p in project_ids.split(",") if p.strip()]
        tick_seconds = tick if tick > 0 else 1.0
        if start_time is None:
            start_time = datetime.now(UTC) - timedelta(seconds=warmup * tick_seconds)
        world = World(seed=seed, project_ids=project_ids or [DEFAULT_PROJECT_ID], runs=runs,
                      tick_seconds=tick_seconds, start_time=start_time, shapes=shapes,
                      unreadable_every=unreadable_every, metrics=metrics, worker_downgrades=worker_downgrades)
        world.tick(warmup)
    injector = faults if isinstance(faults, FaultInjector) else FaultInjector(faults, seed=seed)
    stats = Stats()
    server = SimulatorServer((host, port), world=world, api_key=api_key, faults=injector, stats=stats,
                             verbose=verbose)
    handle = SimulatorHandle(server=server, world=world, faults=injector, stats=stats, api_key=api_key)
    serve = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                             name="smr-simulator-http", daemon=True)
    serve.start()
    handle._threads.append(serve)
    if auto_tick and tick > 0:
        def ticker():
            while not handle._ticker_stop.wait(tick):
                world.tick()

        ticking = threading.Thread(target=ticker, name="smr-simulator-ticker", daemon=True)
        ticking.start()
        handle._threads.append(ticking)
    return handle
