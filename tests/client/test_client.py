"""The Python client (`smrweb.client`) against a live server: every method ends up stored, batching,
the flush at exit, retries through a fault-injecting proxy (exactly once whatever was lost), permanent
errors counted and never retried, and the examples of docs/integrations.md#python-client."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

import smrweb.client as smr
from smrweb.client import Client, SmrwebError
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    Checkpoint,
    MetricPoint,
    Run,
    RuntimeMessage,
    StateChange,
    Submission,
)
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DOCS = ROOT / "docs" / "integrations.md"


# --- helpers shared with test_cli.py -----------------------------------------------------------------


def doc_block(marker: str) -> tuple[str, str]:
    """The fenced code block right after `<!-- test: marker -->` in docs/integrations.md: (language, code)."""
    text = DOCS.read_text()
    found = re.search(rf"<!-- test: {re.escape(marker)} -->\s*\n```(\w+)\n(.*?)\n```", text, re.DOTALL)
    assert found, f"no code block marked {marker!r} in {DOCS}"
    return found.group(1), found.group(2)


def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultProxy:
    """An HTTP proxy in front of the live server that applies queued faults to matching requests:

    - "503": answers 503 without forwarding;
    - "429": answers 429 with `Retry-After: 1` without forwarding;
    - "drop": forwards (the server stores the batch), then closes the connection without an answer;
    - "slow": forwards, then answers only after `slow_seconds` (past the client's timeout).

    Requests without a queued fault are forwarded. `seen` lists (monotonic time, method, path, fault)."""

    def __init__(self, upstream: str, slow_seconds: float = 2.0):
        self.upstream = upstream.rstrip("/")
        self.slow_seconds = slow_seconds
        self.faults: list[tuple[str, str]] = []  # (path substring, fault), first match applies once
        self.seen: list[tuple[float, str, str, str]] = []
        self.lock = threading.Lock()
        self.http = httpx.Client(timeout=30)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                proxy.handle(self)

            def do_POST(self):
                proxy.handle(self)

            def do_PATCH(self):
                proxy.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def inject(self, path_part: str, *faults: str) -> None:
        with self.lock:
            self.faults += [(path_part, f) for f in faults]

    def requests_to(self, path_part: str) -> list[tuple[float, str, str, str]]:
        return [s for s in self.seen if path_part in s[2]]

    def _next_fault(self, path: str) -> str:
        with self.lock:
            for i, (part, fault) in enumerate(self.faults):
                if part in path:
                    del self.faults[i]
                    return fault
        return ""

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        fault = self._next_fault(h.path)
        self.seen.append((time.monotonic(), h.command, h.path, fault))
        if fault in ("503", "429"):
            payload = json.dumps({"code": "busy", "message": "injected", "errors": []}).encode()
            h.send_response(int(fault))
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            if fault == "429":
                h.send_header("Retry-After", "1")
            h.end_headers()
            h.wfile.write(payload)
            return
        headers = {
            k: v for k, v in h.headers.items() if k.lower() not in ("host", "content-length", "connection")
        }
        upstream = self.http.request(h.command, self.upstream + h.path, content=body, headers=headers)
        if fault == "drop":
            h.close_connection = True  # the server stored it; the client never hears
            return
        if fault == "slow":
            time.sleep(self.slow_seconds)
        try:
            h.send_response(upstream.status_code)
            for key in ("Content-Type", "Retry-After"):
                if key in upstream.headers:
                    h.send_header(key, upstream.headers[key])
            h.send_header("Content-Length", str(len(upstream.content)))
            h.end_headers()
            h.wfile.write(upstream.content)
        except OSError:  # the client gave up (timeout) and closed the connection
            h.close_connection = True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.http.close()


class CountingTransport(httpx.HTTPTransport):
    """Counts the requests a client makes, per path."""

    def __init__(self):
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)

    def count(self, part: str) -> int:
        return sum(part in p for p in self.paths)


@pytest.fixture
def server(live_server, project, token):
    """(url, token) of the live server, and the project `hill` with its token."""
    return live_server.url, token


@pytest.fixture
def proxy(live_server):
    p = FaultProxy(live_server.url)
    yield p
    p.close()


def run_of(external_id: str) -> Run:
    return Run.objects.get(project__slug="hill", external_id=external_id)


# --- every method ------------------------------------------------------------------------------------


def test_every_method_ends_up_stored(server, tmp_path):
    url, token = server
    submission = tmp_path / "optimizer.py"
    submission.write_text("print('hill')\n")
    log_file = tmp_path / "run.log"
    log_file.write_text("step 1\nstep 2\n")
    with Client(url, token, "hill", "r-all") as client:
        ids = [client.log_metric("loss", v) for v in (0.5, 0.4, 0.3)]  # steps 0, 1, 2
        client.log_metric("loss", 0.1, step=10)
        client.log_metric("acc", 0.9, step=10, ts="2026-01-02T03:04:05Z")
        client.log_turn(
            0, tokens_in=100, tokens_out=20, cost_usd=0.01, model="m1", tool_calls=["bash"], duration_ms=1500
        )
        client.log_turn(0, tokens_in=50, tokens_out=5, cost_usd=0.002, actor="child-1", parent_actor="driver")
        client.set_state("running")
        client.log_message("hello", topic="status")
        client.log_checkpoint("ckpt-1", label="after step 2", commit="abc123")
        score_id = client.log_score(
            0.83,
            artifact=submission,
            artifact_name="submission/optimizer.py",
            metric="accuracy",
            commit="abc123",
            harness_id="h-1",
            experiment="exp-1",
        )
        log_digest = client.upload_artifact(log_file, "logs/run.log", kind="log")
        client.set_state(
            "failed", {"family": "timeout", "detail": "validator timed out", "source": "harness"}
        )
        client.log_event({"type": "metric", "key": "raw", "value": 1.0})

    assert client.failed_events == 0 and client.duplicate_events == 0
    assert client.accepted_events == 13
    assert len(set(ids)) == 3 and all(i.startswith(client.client_id + "-") for i in ids)
    run = run_of("r-all")
    points = MetricPoint.objects.filter(run=run)
    assert sorted(points.filter(key="loss").values_list("step", "value")) == [
        (0, 0.5),
        (1, 0.4),
        (2, 0.3),
        (10, 0.1),
    ]
    assert points.get(key="acc").ts.isoformat() == "2026-01-02T03:04:05+00:00"
    assert points.count() == 6
    assert AgentTurn.objects.filter(run=run).count() == 2
    assert (run.tokens_in, run.tokens_out, str(run.cost_usd)) == (150, 25, "0.012000")
    assert (run.driver_tokens_in, run.child_tokens_in) == (100, 50)
    assert RuntimeMessage.objects.get(run=run).body == "hello"
    assert Checkpoint.objects.get(run=run).external_id == "ckpt-1"
    assert list(StateChange.objects.filter(run=run).order_by("ts").values_list("state", flat=True)) == [
        "running",
        "failed",
    ]
    assert (run.state, run.failure_family, run.failure_detail) == ("failed", "timeout", "validator timed out")
    sub = Submission.objects.get(run=run)
    local = hashlib.sha256(submission.read_bytes()).hexdigest()
    assert (sub.event_id, sub.score, sub.commit, sub.harness_id) == (score_id, 0.83, "abc123", "h-1")
    assert sub.details == {"metric": "accuracy"} and sub.experiment.external_id == "exp-1"
    assert sub.artifact is not None and sub.artifact.blob.sha256 == local
    assert sub.artifact.path == "submission/optimizer.py"
    assert Artifact.objects.get(run=run, path="logs/run.log").blob.sha256 == log_digest
    assert log_digest == hashlib.sha256(log_file.read_bytes()).hexdigest()


def test_bad_values_fail_in_the_caller_not_in_a_batch(server):
    url, token = server
    with Client(url, token, "hill", "r-bad") as client:
        with pytest.raises(ValueError):
            client.log_metric("loss", math.nan)
        with pytest.raises(ValueError):
            client.log_score(math.inf)
        with pytest.raises(ValueError):
            client.log_event({"type": "score", "score": 1.0, "details": {"x": math.nan}})
        with pytest.raises(TypeError):
            client.log_metric("loss", "0.1")
        client.log_metric("loss", 0.1)
    assert client.failed_events == 0
    assert MetricPoint.objects.filter(run=run_of("r-bad")).count() == 1


def test_upload_checks_the_servers_digest(server, tmp_path):
    """The digest the server answers is compared with the local one."""
    url, token = server

    class Tampering(httpx.HTTPTransport):
        def handle_request(self, request):
            response = super().handle_request(request)
            if request.url.path.endswith("/artifacts"):
                response.read()
                body = {**response.json(), "sha256": "0" * 64}
                return httpx.Response(response.status_code, json=body)
            return response

    f = tmp_path / "a.bin"
    f.write_bytes(b"\x00\x01" * 100)
    with (
        Client(url, token, "hill", "r-up", transport=Tampering()) as client,
        pytest.raises(SmrwebError, match="the server stored"),
    ):
        client.upload_artifact(f)


# --- batching ----------------------------------------------------------------------------------------


def test_n_calls_take_at_most_ceil_n_over_batch_requests(server):
    url, token = server
    transport = CountingTransport()
    n, batch = 230, 50
    with Client(
        url,
        token,
        "hill",
        "r-batch",
        batch_size=batch,
        flush_interval=3600,
        transport=transport,
        report_end=False,  # only the points: the block's end report would be one more request
    ) as client:
        for i in range(n):
            client.log_metric("loss", 1.0 / (i + 1), step=i)
        assert client.flush(timeout=30)
    assert transport.count("/events") <= math.ceil(n / batch) == 5
    assert client.requests == transport.count("/events")
    assert MetricPoint.objects.filter(run=run_of("r-batch")).count() == n
    assert client.accepted_events == n


def test_a_batch_goes_after_flush_interval_without_a_flush(server):
    url, token = server
    transport = CountingTransport()
    client = Client(url, token, "hill", "r-interval", flush_interval=0.2, transport=transport)
    try:
        for i in range(3):
            client.log_metric("loss", float(i))
        wait_for(lambda: MetricPoint.objects.filter(run__external_id="r-interval").count() == 3, timeout=10)
        assert transport.count("/events") == 1  # the three in one batch
    finally:
        client.close(timeout=5)


def test_concurrent_threads_lose_nothing(server):
    url, token = server
    with Client(url, token, "hill", "r-threads", batch_size=300, flush_interval=0.05) as client:

        def work(t):
            for i in range(250):
                client.log_metric(f"t{t}", float(i), step=i)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert client.accepted_events == 2000 + 1 and client.failed_events == 0  # the points and the run's end
    assert MetricPoint.objects.filter(run=run_of("r-threads")).count() == 2000
    assert run_of("r-threads").state == "done"


def test_flush_on_exit(server, tmp_path):
    """A script that logs and exits without flush or close: the atexit hook sends everything."""
    url, token = server
    script = tmp_path / "harness.py"
    script.write_text(
        "import sys\n"
        "import smrweb.client as smr\n"
        f"smr.init({url!r}, {token!r}, 'hill', 'r-exit', flush_interval=3600, batch_size=200)\n"
        "for i in range(500):\n"
        "    smr.log_metric('loss', 1.0 / (i + 1), step=i)\n"
        "smr.set_state('done')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
            "PYTHONPATH": str(ROOT),
        },
    )
    assert done.returncode == 0, done.stderr
    run = run_of("r-exit")
    assert MetricPoint.objects.filter(run=run).count() == 500
    assert run.state == "done"


def test_the_client_module_needs_only_httpx_and_the_standard_library(server, tmp_path):
    """smrweb/client.py loaded on its own (as a harness could vendor it): no Django, no Celery, and it works.
    (Importing it as `smrweb.client` also runs the package's __init__, which loads the Celery app.)"""
    url, token = server
    script = tmp_path / "standalone.py"
    script.write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('smrclient', "
        f"{str(ROOT / 'smrweb' / 'client.py')!r})\n"
        "smr = sys.modules['smrclient'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(smr)\n"
        f"smr.init({url!r}, {token!r}, 'hill', 'r-standalone')\n"
        "smr.log_metric('loss', 0.5)\n"
        "assert smr.flush(10)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'celery', 'smrweb', 'pydantic'}))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert MetricPoint.objects.filter(run=run_of("r-standalone")).count() == 1


# --- retries and errors -----------------------------------------------------------------------------


def test_retries_store_every_event_exactly_once(server, proxy):
    """503, 429 (Retry-After: 1), a lost answer after the server stored the batch, a timeout after it
    stored it again: the client retries the same ids and every event is stored once."""
    _, token = server
    proxy.inject("/events", "503", "429", "drop", "slow")
    client = Client(
        proxy.url,
        token,
        "hill",
        "r-retry",
        flush_interval=3600,
        timeout=1.0,
        backoff_base=0.05,
        max_retries=6,
    )
    for i in range(10):
        client.log_metric("loss", float(i))
    client.log_score(0.5, commit="c1")
    client.log_turn(1, tokens_in=10, tokens_out=2, cost_usd=0.5)
    client.set_state("running")
    client.log_message("m")
    assert client.flush(timeout=60)
    client.close()

    seen = proxy.requests_to("/events")
    assert [s[3] for s in seen] == ["503", "429", "drop", "slow", ""]
    assert seen[2][0] - seen[1][0] >= 0.95  # Retry-After honoured
    assert client.requests == 5 and client.failed_events == 0
    # Stored by the "drop" attempt; the "slow" one and the last are duplicates.
    assert (client.accepted_events, client.duplicate_events) == (0, 14)
    run = run_of("r-retry")
    assert MetricPoint.objects.filter(run=run).count() == 10
    assert Submission.objects.filter(run=run).count() == 1
    assert AgentTurn.objects.filter(run=run).count() == 1 and str(run.cost_usd) == "0.500000"
    assert StateChange.objects.filter(run=run).count() == 1
    assert RuntimeMessage.objects.filter(run=run).count() == 1


def test_an_upload_is_retried_and_stored_once(server, proxy, tmp_path):
    _, token = server
    proxy.inject("/artifacts", "503", "drop")
    f = tmp_path / "model.onnx"
    f.write_bytes(os.urandom(4096))
    with Client(proxy.url, token, "hill", "r-upretry", backoff_base=0.05) as client:
        digest = client.upload_artifact(f, "model.onnx", kind="onnx_model")
    assert digest == hashlib.sha256(f.read_bytes()).hexdigest()
    assert [s[3] for s in proxy.requests_to("/artifacts")] == ["503", "drop", ""]
    assert Artifact.objects.filter(run=run_of("r-upretry")).count() == 1


def test_a_400_is_not_retried_and_only_the_refused_event_is_lost(server):
    url, token = server
    transport = CountingTransport()
    # report_end=False: only the events logged here (the block would add the run's end, `done`).
    with Client(
        url, token, "hill", "r-400", flush_interval=3600, transport=transport, report_end=False
    ) as client:
        client.log_metric("loss", 1.0)
        client.set_state("finished")  # not a state: the server refuses that event, by index
        client.log_metric("loss", 2.0)
    # One refused request, one with the two good events; no retry of the refusal.
    assert transport.count("/events") == 2
    assert client.failed_events == 1 and client.accepted_events == 2
    assert "state" in client.last_error
    run = run_of("r-400")
    assert MetricPoint.objects.filter(run=run).count() == 2
    assert not StateChange.objects.filter(run=run).exists()


def test_a_bad_token_fails_the_batch_once(server):
    url, _ = server
    transport = CountingTransport()
    with Client(url, "smr_not-a-token", "hill", "r-401", flush_interval=3600, transport=transport) as client:
        for i in range(5):
            client.log_metric("loss", float(i))
    assert transport.count("/events") == 1  # the five points and the run's end, in one batch
    assert client.failed_events == 5 + 1 and client.accepted_events == 0
    assert "401" in client.last_error
    assert not Run.objects.filter(external_id="r-401").exists()


def test_an_unreachable_server_gives_up_after_max_retries(server):
    _, token = server
    client = Client(
        f"http://127.0.0.1:{closed_port()}",
        token,
        "hill",
        "r-down",
        flush_interval=3600,
        max_retries=2,
        backoff_base=0.01,
    )
    for i in range(4):
        client.log_metric("loss", float(i))
    assert client.flush(timeout=30)
    client.close()
    assert client.requests == 3 and client.failed_events == 4
    assert "ConnectError" in client.last_error


# --- the module-level convenience and the docs -------------------------------------------------------


def test_module_level_init_and_env(server, monkeypatch):
    url, token = server
    monkeypatch.setenv("SMRWEB_URL", url + "/api/v1")  # a trailing /api/v1 is accepted
    monkeypatch.setenv("SMRWEB_TOKEN", token)
    monkeypatch.setenv("SMRWEB_PROJECT", "hill")
    monkeypatch.setenv("SMRWEB_RUN", "r-env")
    try:
        smr.log_metric("loss", 0.5)  # created from the environment on first use
        smr.set_state("running")
        assert smr.flush(timeout=10)
        client = smr.init(run="r-env-2")
        smr.log_metric("loss", 0.25)
        assert smr.flush(timeout=10)
        assert client.accepted_events == 1
    finally:
        smr.close()
    assert MetricPoint.objects.filter(run=run_of("r-env")).count() == 1
    assert run_of("r-env").state == "running"
    assert MetricPoint.objects.filter(run=run_of("r-env-2")).count() == 1


def _run_doc_python(marker: str, server, cwd: Path, run: str) -> subprocess.CompletedProcess:
    url, token = server
    lang, code = doc_block(marker)
    assert lang == "python"
    env = {
        **os.environ,
        "SMRWEB_URL": url,
        "SMRWEB_TOKEN": token,
        "SMRWEB_PROJECT": "hill",
        "SMRWEB_RUN": run,
        "PYTHONPATH": str(ROOT),  # this checkout's client, whatever the installed smrweb points at
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_docs_three_lines(server, tmp_path):
    _run_doc_python("client-three-lines", server, tmp_path, "doc-3")
    assert MetricPoint.objects.filter(run=run_of("doc-3")).count() == 1


def test_docs_full_example(server, tmp_path):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "optimizer.py").write_text("def step(x):\n    return x * 0.9\n")
    _run_doc_python("client-full", server, tmp_path, "doc-full")
    run = run_of("doc-full")
    assert run.state == "done"
    assert AgentTurn.objects.filter(run=run).count() == 3
    assert MetricPoint.objects.filter(run=run, key="loss").count() == 3
    sub = Submission.objects.get(run=run)
    assert sub.artifact is not None
    assert (
        sub.artifact.blob.sha256
        == hashlib.sha256((tmp_path / "submission" / "optimizer.py").read_bytes()).hexdigest()
    )
