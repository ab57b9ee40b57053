"""SMRWEB_LOG_FORMAT=json: one JSON object per line, with the request (or task) id, project and run, from
the web app, a real Celery worker and a real beat. The default console format stays a readable line."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import re
import sys
import uuid

import pytest
from django.conf import settings

from smrweb.core import logcontext
from tests.conftest import _start, _stop, _wait_for_line, wait_for

FIELDS = {"time", "level", "logger", "message", "request_id", "project", "run"}


def handler_from_settings(fmt: str) -> tuple[logging.Handler, io.StringIO]:
    """A handler built from settings.LOGGING's own formatter and filter definitions."""
    configurator = logging.config.DictConfigurator(settings.LOGGING)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(configurator.configure_formatter(dict(settings.LOGGING["formatters"][fmt])))
    handler.addFilter(configurator.configure_filter(dict(settings.LOGGING["filters"]["context"])))
    return handler, stream


@pytest.fixture
def captured():
    def capture(fmt: str):
        handler, stream = handler_from_settings(fmt)
        logger = logging.getLogger("django.request")
        logger.addHandler(handler)
        handlers.append((logger, handler))
        return stream

    handlers: list = []
    yield capture
    for logger, handler in handlers:
        logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_request_logs_json_with_its_request_id_project_and_run(client_alice, captured):
    stream = captured("json")
    response = client_alice.get("/projects/hill/runs/no-such-run/", HTTP_X_REQUEST_ID="edge-7f3a.1")
    assert response.status_code == 404
    assert response["X-Request-ID"] == "edge-7f3a.1"  # the proxy's id, echoed
    lines = stream.getvalue().splitlines()
    assert lines, "django.request logs a 404"
    record = json.loads(lines[-1])
    assert FIELDS <= set(record)
    assert record["level"] == "WARNING" and record["logger"] == "django.request"
    assert "Not Found" in record["message"]
    assert (record["request_id"], record["project"], record["run"]) == ("edge-7f3a.1", "hill", "no-such-run")
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", record["time"])


@pytest.mark.django_db
def test_a_request_id_that_is_not_a_plain_token_is_replaced(client_alice, captured):
    stream = captured("json")
    response = client_alice.get("/projects/hill/runs/x/", HTTP_X_REQUEST_ID='a"b\\n{"level": "forged"}')
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])
    record = json.loads(stream.getvalue().splitlines()[-1])
    assert record["request_id"] == response["X-Request-ID"] and record["level"] == "WARNING"
    # Two requests, two ids; outside a request the context is empty again.
    assert client_alice.get("/projects/hill/runs/y/")["X-Request-ID"] != response["X-Request-ID"]
    assert logcontext.current() == {}


@pytest.mark.django_db
def test_the_console_format_stays_one_readable_line(client_alice, captured):
    stream = captured("console")
    client_alice.get("/projects/hill/runs/no-such-run/")
    line = stream.getvalue().splitlines()[-1]
    assert re.fullmatch(r"\S+ \S+ WARNING django\.request: Not Found: /projects/hill/runs/no-such-run/", line)


def json_lines(text: str) -> list[dict]:
    """Every line of a process's log, each of which must be one JSON object with the fields."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)  # fails the test on any line that is not JSON
        assert FIELDS <= set(record), line
        records.append(record)
    return records


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_worker_and_beat_log_json_lines_and_a_task_line_carries_the_task_id(redis_server, tmp_path):
    from smrweb.celery import app

    queue = f"smrweb-logs-{uuid.uuid4().hex[:8]}"
    env = {"SMRWEB_LOG_FORMAT": "json", "SMRWEB_CELERY_QUEUE": queue, "SMRWEB_OPS_COUNTERS": "false"}
    worker_log, beat_log = tmp_path / "worker.log", tmp_path / "beat.log"
    # The logs are stderr; stdout has what Celery prints rather than logs (banners, "Warm shutdown").
    worker = _start(
        [sys.executable, "-m", "celery", "--quiet", "-A", "smrweb", "worker", "--loglevel", "INFO",
         "--pool", "solo", "-n", f"{queue}@localhost", "--without-gossip", "--without-mingle"],
        worker_log,
        env,
        stdout=tmp_path / "worker.out",
    )  # fmt: skip
    beat = _start(
        [sys.executable, "-m", "celery", "--quiet", "-A", "smrweb", "beat", "--loglevel", "INFO",
         "--schedule", str(tmp_path / "beat-schedule")],
        beat_log,
        env,
        stdout=tmp_path / "beat.out",
    )  # fmt: skip
    try:
        _wait_for_line(worker, worker_log, "ready.")
        _wait_for_line(beat, beat_log, "beat: Starting")
        task_id = app.send_task("smrweb.sources.tasks.flag_stalled_runs", queue=f"{queue}.polling").id
        wait_for(lambda: f"[{task_id}] succeeded" in worker_log.read_text(), timeout=60)
    finally:
        _stop(worker)
        _stop(beat)
        redis_server.delete(queue, *(key for key in redis_server.scan_iter(f"{queue}.*")))
    worker_records = json_lines(worker_log.read_text())
    beat_records = json_lines(beat_log.read_text())
    done = [r for r in worker_records if f"[{task_id}] succeeded" in r["message"]]
    assert len(done) == 1 and done[0]["request_id"] == task_id
    assert any(r["logger"].startswith("celery.beat") for r in beat_records)
    assert any(r["message"].endswith("ready.") and r["request_id"] == "" for r in worker_records)


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_gunicorn_writes_json_lines_and_its_access_line_names_the_request_id(tmp_path):
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    errors, access = tmp_path / "gunicorn.err", tmp_path / "gunicorn.out"
    gunicorn = _start(
        [sys.executable, "-m", "gunicorn", "smrweb.wsgi", "--config", "python:smrweb.gunicorn_conf",
         "--bind", f"127.0.0.1:{port}", "--workers", "1", "--access-logfile", "-"],
        errors,
        {"SMRWEB_LOG_FORMAT": "json", "SMRWEB_OPS_COUNTERS": "false"},
        stdout=access,
    )  # fmt: skip
    try:
        _wait_for_line(gunicorn, errors, "Booting worker")
        (answer,) = wait_for(
            lambda: _get(httpx, f"http://127.0.0.1:{port}/api/v1/health", "probe-42"), timeout=30
        )
        assert answer.headers["X-Request-ID"] == "probe-42"
        wait_for(lambda: "probe-42" in access.read_text(), timeout=10)
    finally:
        _stop(gunicorn)
    started = json_lines(errors.read_text())
    assert any(r["logger"] == "gunicorn.error" and "Listening at" in r["message"] for r in started)
    lines = [r for r in json_lines(access.read_text()) if "probe-42" in r["message"]]
    assert lines, "the access log names the request id"
    line = lines[-1]
    assert line["logger"] == "gunicorn.access" and '"GET /api/v1/health HTTP/1.1" 200' in line["message"]


def _get(httpx, url: str, request_id: str):
    """[the response] once the server answers (a list: wait_for wants something truthy)."""
    try:
        return [httpx.get(url, headers={"X-Request-ID": request_id}, timeout=5)]
    except httpx.TransportError:
        return None
