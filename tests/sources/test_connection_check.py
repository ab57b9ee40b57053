"""The connection check at creation waits out transient answers as a person would (a 429 after its
Retry-After, a 502/503/504, a timeout: a few tries within SMRWEB_SMR_CHECK_PATIENCE), names what went
wrong when it still fails, and keeps "did not answer as SMR does" for answers of the wrong shape.

The backend here is a scripted stub of the one route the check asks (`GET /smr/projects/{pid}/runs`),
not the simulator: its 429 carries only a `Retry-After` header, as a backend other than ours may send."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command

from smrweb.tracking.models import Project
from tests.api.helpers import assert_json_error, session_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


class ScriptedSmr:
    """Answers the runs list from a script of (status, headers, body, delay) and notes when each request
    came; once the script runs out it answers 200 with an empty list."""

    def __init__(self, script: list[tuple[int, dict, object, float]]):
        self.script = list(script)
        self.seen: list[tuple[str, float]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                stub.seen.append((self.path, time.monotonic()))
                status, headers, body, delay = stub.script.pop(0) if stub.script else (200, {}, [], 0)
                time.sleep(delay)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a slow answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def gaps(self) -> list[float]:
        times = [t for _, t in self.seen]
        return [b - a for a, b in zip(times, times[1:], strict=False)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    made = []

    def make(*script):
        made.append(ScriptedSmr(list(script)))
        return made[-1]

    yield make
    for s in made:
        s.close()


def create(backend, slug="checked", *more):
    return call_command(
        "create_project",
        slug,
        "--source",
        "smr",
        "--smr-project-id",
        "p-1",
        "--smr-backend-base",
        backend.url,
        "--smr-api-key-env",
        "SMR_TEST_KEY",
        *more,
    )


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("SMR_TEST_KEY", "sk-test")


RATE_LIMITED = (429, {"Retry-After": "2"}, {"detail": "Too Many Requests"}, 0)


def test_one_429_with_retry_after_is_waited_out_and_the_project_is_created(stub):
    backend = stub(RATE_LIMITED)
    create(backend)
    assert Project.objects.filter(slug="checked").exists()
    assert len(backend.seen) == 2 and backend.seen[0][0].startswith("/smr/projects/p-1/runs")
    assert backend.gaps()[0] >= 1.9  # the header's 2 s, though the body did not say


def test_a_rate_limit_that_outlasts_the_patience_is_named_with_its_retry_after(stub, settings):
    settings.SMRWEB_SMR_CHECK_PATIENCE = 3
    backend = stub(*[RATE_LIMITED] * 5)
    with pytest.raises(CommandError) as refused:
        create(backend)
    message = str(refused.value)
    assert "Rate-limited by SMR" in message and "retry in 2 s" in message, message
    assert "did not answer as SMR does" not in message
    assert len(backend.seen) == 2  # the second wait (2 s) would pass the 3 s patience: it stops there
    assert not Project.objects.filter(slug="checked").exists()


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_passing_gateway_error_is_retried(stub, status):
    backend = stub((status, {}, {"detail": "upstream"}, 0), (status, {}, {"detail": "upstream"}, 0))
    create(backend)
    assert Project.objects.filter(slug="checked").exists() and len(backend.seen) == 3


def test_a_lasting_503_is_named_as_one_through_the_api_as_a_field_error(stub, settings):
    settings.SMRWEB_SMR_CHECK_PATIENCE = 2
    backend = stub(*[(503, {}, {"detail": "maintenance"}, 0)] * 6)
    staff = session_client(UserFactory(username="sam", is_staff=True))
    body = assert_json_error(
        staff.post(
            "/api/v1/projects/",
            {
                "slug": "checked",
                "source": "smr",
                "smr_project_id": "p-1",
                "smr_backend_base": backend.url,
                "smr_api_key": "sk-test",
            },
            format="json",
        ),
        400,
    )
    assert [e["field"] for e in body["errors"]] == ["smr_backend_base"]
    assert "answered 503" in body["message"] and "did not answer as SMR does" not in body["message"], body
    assert len(backend.seen) >= 2 and not Project.objects.filter(slug="checked").exists()


def test_a_500_is_not_retried_and_says_what_it_was(stub):
    backend = stub((500, {}, {"detail": "boom"}, 0))
    with pytest.raises(CommandError, match="answered 500"):
        create(backend)
    assert len(backend.seen) == 1


def test_a_timeout_is_tried_again(stub, settings):
    settings.SMRWEB_SMR_CHECK_PATIENCE = 4  # each try waits at most 2 s
    backend = stub((200, {}, [], 3.0))
    create(backend)
    assert Project.objects.filter(slug="checked").exists() and len(backend.seen) == 2


def test_an_answer_of_the_wrong_shape_is_still_not_smr(stub):
    backend = stub((200, {}, {"runs": "not a list"}, 0))
    with pytest.raises(CommandError, match="did not answer as SMR does"):
        create(backend)
    assert len(backend.seen) == 1


def test_the_poller_takes_a_retry_after_from_the_header_too(stub):
    """The SDK's errors keep no headers: the connector notes them itself, so a backend that says how
    long to wait only in the header is waited on, not hammered on the generic backoff."""
    from django.utils import timezone

    from smrweb.sources import sync
    from smrweb.tracking.models import SourceHealth

    backend = stub(*[(429, {"Retry-After": "240"}, {"detail": "slow down"}, 0)] * 3)
    create(backend, "polled", "--skip-check")
    sync.sync_project(Project.objects.get(slug="polled"), owner="test")
    health = SourceHealth.objects.get(project__slug="polled")
    assert health.last_error_kind == "rate_limited"
    waits = (health.next_attempt_at - timezone.now()).total_seconds()
    assert 230 <= waits <= 240, waits  # the header's 240 s (the generic backoff starts at 5 s)
