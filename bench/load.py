"""A bounded load test on loopback: a few ingest clients and a few dashboard pollers at once, for a
fixed time, against one smrweb server — then every event counted.

Ingest clients push mixed batches (metric points, agent turns, a score, a message) with client ids
to their own runs, and every fifth request re-sends an earlier batch (a retry: all duplicates).
Pollers, signed in as a project member, poll what an open browser polls: the overview, the project
page and a run page as htmx partials, each carrying the version it last saw (so unchanged polls
answer 204, as in a browser). Afterwards the API is asked how much it holds, per run: points per
key, turns, scores, messages — each must equal what was sent once, no more, no less.

Reports per endpoint: requests, errors, p50 / p99 / max latency. "Errors" are transport failures
and any status other than the expected ones (2xx; 204 for unchanged polls).

    .venv/bin/python bench/load.py                    # gunicorn (2 workers x 4 threads), SQLite, 60 s
    .venv/bin/python bench/load.py --seconds 20 --postgres   # the same on the local PostgreSQL
    .venv/bin/python bench/load.py --append           # also append a dated section to docs/benchmarks.md

`tests/test_load.py` runs the same driver for a few seconds against the test server (no timings
asserted there, only zero errors and exact counts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.compile(r'"X-Smrweb-Version": "([0-9a-f]+)"')


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, name: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.latencies[name].append(seconds)
            if error:
                self.errors[name].append(error)

    def error_count(self) -> int:
        return sum(len(v) for v in self.errors.values())


@dataclass
class Sent:
    """What one ingest client sent once (its replays are not counted here)."""

    points: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    turns: int = 0
    scores: int = 0
    messages: int = 0
    requests: int = 0
    replays: int = 0


def batch(client_no: int, seq: int, points: int, turns: int) -> tuple[list[dict], Sent]:
    base = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq * 10)
    sent = Sent()
    events: list[dict] = []
    for i in range(points):
        key = ("loss", "accuracy", "lr")[i % 3]
        events.append(
            {
                "type": "metric",
                "id": f"c{client_no}-b{seq}-m{i}",
                "key": key,
                "value": (seq * points + i) / 7,
                "step": seq * points + i,
                "ts": (base + timedelta(milliseconds=i)).isoformat(),
            }
        )
        sent.points[key] += 1
    for t in range(turns):
        events.append(
            {
                "type": "agent.turn",
                "id": f"c{client_no}-b{seq}-t{t}",
                "turn": seq * turns + t,
                "actor": "driver" if t % 2 else "worker-1",
                "parent_actor": None if t % 2 else "driver",
                "tokens_in": 1000 + t,
                "tokens_out": 50,
                "cost_usd": 0.0004,
                "ts": (base + timedelta(seconds=1, milliseconds=t)).isoformat(),
                "tool_calls": [{"name": "bash", "arguments": {"cmd": "make test"}}],
            }
        )
    events.append(
        {
            "type": "score",
            "id": f"c{client_no}-b{seq}-s",
            "score": 0.5 + seq / 1e4,
            "ts": (base + timedelta(seconds=2)).isoformat(),
        }
    )
    events.append(
        {
            "type": "message",
            "id": f"c{client_no}-b{seq}-msg",
            "body": f"batch {seq} done",
            "ts": (base + timedelta(seconds=3)).isoformat(),
        }
    )
    sent.turns, sent.scores, sent.messages = turns, 1, 1
    return events, sent


def ingest_client(
    base: str,
    token: str,
    project: str,
    client_no: int,
    deadline: float,
    stats: Stats,
    totals: dict[str, Sent],
    points: int,
    turns: int,
) -> None:
    run = f"load-{client_no}"
    mine = Sent()
    bodies: list[bytes] = []
    url = f"/api/v1/projects/{project}/runs/{run}/events"
    with httpx.Client(
        base_url=base,
        timeout=60,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    ) as http:
        seq = 0
        while time.monotonic() < deadline:
            replay = bodies and mine.requests % 5 == 4
            if replay:
                body = bodies[(mine.requests * 7) % len(bodies)]
            else:
                events, sent = batch(client_no, seq, points, turns)
                body = json.dumps(events).encode()
            start = time.perf_counter()
            try:
                r = http.post(url, content=body)
                error = None if r.status_code == 200 else f"{r.status_code}: {r.text[:200]}"
                if error is None and replay and r.json()["accepted"] != 0:
                    error = f"a replay was accepted again: {r.json()}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            stats.record("ingest (replay)" if replay else "ingest", time.perf_counter() - start, error)
            mine.requests += 1
            if replay:
                mine.replays += 1
            elif error is None:
                # Only a batch the server answered 200 counts as sent; a failed one was all-or-nothing.
                bodies.append(body)
                for key, n in sent.points.items():
                    mine.points[key] += n
                mine.turns += sent.turns
                mine.scores += sent.scores
                mine.messages += sent.messages
                seq += 1
            else:
                seq += 1  # its ids are never reused: a half-written batch would show in the counts
    totals[run] = mine


def login(base: str, username: str, password: str) -> httpx.Client:
    http = httpx.Client(base_url=base, timeout=60, follow_redirects=False)
    page = http.get("/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    r = http.post(
        "/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
        headers={"Referer": f"{base}/login/"},
    )
    if r.status_code != 302:
        raise RuntimeError(f"login failed: {r.status_code} {r.text[:300]}")
    return http


def poller(
    base: str,
    username: str,
    password: str,
    project: str,
    runs: list[str],
    poller_no: int,
    deadline: float,
    stats: Stats,
) -> None:
    http = login(base, username, password)
    versions: dict[str, str] = {}
    targets = [
        ("overview poll", "/"),
        ("project poll", f"/projects/{project}/"),
        *[("run poll", f"/projects/{project}/runs/{r}/") for r in runs],
    ]
    i = poller_no
    try:
        while time.monotonic() < deadline:
            name, url = targets[i % len(targets)]
            i += 1
            headers = {"HX-Request": "true"}
            if url in versions:
                headers["X-Smrweb-Version"] = versions[url]
            start = time.perf_counter()
            try:
                r = http.get(url, headers=headers)
                error = None if r.status_code in (200, 204) else f"{r.status_code}: {r.text[:200]}"
                if r.status_code == 200 and (m := VERSION.search(r.text)):
                    versions[url] = m.group(1)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            stats.record(name, time.perf_counter() - start, error)
            time.sleep(0.05)  # a browser polls every few seconds; a few pollers at 20/s is plenty
    finally:
        http.close()


def count_stored(base: str, token: str, project: str, totals: dict[str, Sent]) -> list[str]:
    """Every run's stored counts against what was sent once; returns the mismatches."""
    problems = []
    with httpx.Client(base_url=base, timeout=120, headers={"Authorization": f"Bearer {token}"}) as http:
        for run, sent in totals.items():
            info = http.get(f"/api/v1/projects/{project}/runs/{run}").json()
            rows = http.get(f"/api/v1/projects/{project}/runs/{run}/turns", params={"page_size": 1}).json()
            for what, got, want in (
                ("turns (summary)", info.get("turn_count"), sent.turns),
                ("turn rows", rows.get("count"), sent.turns),
                ("scores", info.get("score_count"), sent.scores),
            ):
                if got != want:
                    problems.append(f"{run}: {got} {what} stored, {want} sent")
            for key, n in sent.points.items():
                got = http.get(
                    f"/api/v1/projects/{project}/runs/{run}/metrics", params={"key": key, "points": 10}
                ).json()
                if got.get("total_points") != n:
                    problems.append(f"{run}/{key}: {got.get('total_points')} points stored, {n} sent")
    return problems


def run_load(
    base: str,
    token: str,
    project: str,
    username: str,
    password: str,
    *,
    seconds: float,
    ingest_clients: int = 3,
    pollers: int = 2,
    points: int = 300,
    turns: int = 10,
) -> dict:
    stats = Stats()
    totals: dict[str, Sent] = {}
    runs = [f"load-{i}" for i in range(ingest_clients)]
    with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
        for run in runs:  # the runs exist (and are live) before pollers ask for their pages
            http.post(
                f"/api/v1/projects/{project}/runs/{run}/events",
                json=[{"type": "state", "id": "start", "state": "running"}],
            ).raise_for_status()

    def guarded(name: str, target, *args) -> threading.Thread:
        def body() -> None:
            try:
                target(*args)
            except Exception as exc:  # a client that died is an error of the run, not a silent gap
                stats.record(name, 0.0, f"client crashed: {type(exc).__name__}: {exc}")

        return threading.Thread(target=body, daemon=True)

    deadline = time.monotonic() + seconds
    threads = [
        guarded("ingest", ingest_client, base, token, project, i, deadline, stats, totals, points, turns)
        for i in range(ingest_clients)
    ]
    threads += [
        guarded("poller", poller, base, username, password, project, runs, i, deadline, stats)
        for i in range(pollers)
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 180)
    elapsed = time.monotonic() - started
    problems = count_stored(base, token, project, totals)
    return {"stats": stats, "totals": totals, "problems": problems, "elapsed": elapsed}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report(result: dict) -> list[str]:
    stats: Stats = result["stats"]
    lines = [
        "| endpoint | requests | errors | p50 ms | p99 ms | max ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in sorted(stats.latencies):
        lat = [x * 1000 for x in stats.latencies[name]]
        lines.append(
            f"| {name} | {len(lat):,} | {len(stats.errors.get(name, []))} | {statistics.median(lat):,.1f} | "
            f"{percentile(lat, 0.99):,.1f} | {max(lat):,.1f} |"
        )
    totals: dict[str, Sent] = result["totals"]
    points = sum(sum(s.points.values()) for s in totals.values())
    turns = sum(s.turns for s in totals.values())
    replays = sum(s.replays for s in totals.values())
    lines += [
        "",
        f"Accepted once: {points:,} metric points, {turns:,} agent turns, "
        f"{sum(s.scores for s in totals.values()):,} scores and {sum(s.messages for s in totals.values()):,} "
        f"messages in {result['elapsed']:.0f} s ({points / result['elapsed']:,.0f} points/s while polled); "
        f"{replays:,} replayed batches, all answered as duplicates. Stored counts checked per run and key: "
        + ("**all equal**." if not result["problems"] else f"**{len(result['problems'])} mismatches**."),
    ]
    return lines


# --- the standalone benchmark: its own gunicorn on a fresh data dir -------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ingest-clients", type=int, default=3)
    parser.add_argument("--pollers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument(
        "--postgres", action="store_true", help="on the local PostgreSQL (scripts/local-postgres.sh)"
    )
    parser.add_argument("--append", action="store_true", help="append a dated section to docs/benchmarks.md")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from ingest_vs_mlflow import free_port, local_postgres, stop, wait_http
    from pages import command_line, machine

    workdir = Path(tempfile.mkdtemp(prefix="smrweb-load-"))
    env = {
        **os.environ,
        "SMRWEB_DATA_DIR": str(workdir / "data"),
        "DEBUG": "false",
        "DJANGO_SUPERUSER_PASSWORD": "load-test-pass-9",
    }
    env.pop("DATABASE_URL", None)
    pg_name = None
    if args.postgres:
        import psycopg

        url = local_postgres()
        if url is None:
            sys.exit("no local PostgreSQL")
        pg_name = f"smrweb_load_{os.getpid()}"
        admin = url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        env["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + pg_name

    def manage(*a: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *a], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        ).stdout

    try:
        manage("migrate", "--noinput")
        manage("createsuperuser", "--noinput", "--username", "loader", "--email", "loader@example.com")
        manage("create_project", "load")
        token = manage("create_api_token", "load").strip().splitlines()[-1]
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "smrweb.wsgi",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(args.workers),
                "--threads",
                str(args.threads),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
        )
        try:
            wait_http(f"{base}/api/v1/health", server)
            result = run_load(
                base,
                token,
                "load",
                "loader",
                env["DJANGO_SUPERUSER_PASSWORD"],
                seconds=args.seconds,
                ingest_clients=args.ingest_clients,
                pollers=args.pollers,
            )
        finally:
            stop(server)
    finally:
        if pg_name:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
        shutil.rmtree(workdir, ignore_errors=True)

    db = "PostgreSQL (local)" if args.postgres else "SQLite (WAL)"
    text = "\n".join(
        [
            f"## Load held: ingest and dashboard polling at once ({date.today().isoformat()}, {db})",
            "",
            f"Machine: {machine(db)}.",
            f"Command: `{command_line()}`: gunicorn with {args.workers} workers × {args.threads} threads on "
            f"loopback; "
            f"{args.ingest_clients} ingest clients (batches of 300 metric points, 10 agent turns, a score "
            f"and a "
            f"message, each with ids; every fifth request a replay of an earlier batch) and {args.pollers} "
            f"signed-in "
            f"pollers (overview, project page and run pages as htmx polls carrying their version, 20 "
            f"polls/s each) "
            f"for {args.seconds:.0f} s.",
            "",
            *report(result),
            "",
        ]
    )
    print(text)
    for name, errors in result["stats"].errors.items():
        print(f"{name}: {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    for problem in result["problems"]:
        print(problem, file=sys.stderr)
    if args.append:
        with open(ROOT / "docs" / "benchmarks.md", "a") as f:
            f.write("\n" + text)
    if result["problems"] or result["stats"].error_count():
        sys.exit(1)


if __name__ == "__main__":
    main()
