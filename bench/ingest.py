"""Ingest through the REST API, end to end: a fresh data dir, migrations, gunicorn, one keep-alive
client. Pushes N mixed events (agent turns, metrics, scores) over R runs in batches of B, replays
every batch, and checks through the read API that each event is stored exactly once and that spend
equals the sum of turns. Besides the wall-clock rate it reports the server's CPU time per 1,000 events
of the first push (the gunicorn worker's user + system time): a figure another busy process on the
machine moves much less than the wall clock (bench/side_by_side.py compares it between two commits).
The server has its embedded Redis, as `make serve` (alerts and counters are queued there).

    .venv/bin/python bench/ingest.py --events 10000 --batch 1000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psutil
from load import start_redis

ROOT = Path(__file__).resolve().parent.parent


PRICED_MODEL = "gpt-4o"  # the model of the turns sent without a cost (`--priced-share`): in the price table


def make_events(n: int, runs: int, rng: random.Random, priced_share: float = 0.0) -> dict[str, list[dict]]:
    per_run: dict[str, list[dict]] = {f"bench-{r}": [] for r in range(runs)}
    names = list(per_run)
    for i in range(n):
        run = names[i % runs]
        events = per_run[run]
        k = len(events)
        kind = k % 10
        if kind < 5:
            events.append(
                {"id": f"m{k}", "type": "metric", "key": f"loss/{k % 5}", "value": rng.random(), "step": k}
            )
        elif kind < 9:
            events.append(
                {
                    "id": f"t{k}",
                    "type": "agent.turn",
                    "turn": k,
                    "actor": "driver" if k % 3 else "worker-1",
                    "parent_actor": None if k % 3 else "driver",
                    "model": "m",
                    "tokens_in": rng.randint(1, 9000),
                    "tokens_out": rng.randint(1, 900),
                    "cost_usd": round(rng.random() / 100, 6),
                    "tool_calls": ["read_file"],
                }
            )
            if rng.random() < priced_share:  # no stated cost: the server prices it from its table
                del events[-1]["cost_usd"]
                events[-1]["model"] = PRICED_MODEL
        else:
            events.append({"id": f"s{k}", "type": "score", "score": rng.random(), "harness_id": "bench"})
    return per_run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--priced-share",
        type=float,
        default=0.0,
        help="share of the agent turns sent without a cost (model gpt-4o), for the server to price",
    )
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument(
        "--database-url",
        default="",
        help="a PostgreSQL server (its role may create databases): the bench makes a fresh database on it "
        "and drops it at the end; default: SQLite in a fresh data dir",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds, each on a fresh project; median reported"
    )
    parser.add_argument(
        "--tree", default=str(ROOT), help="the checkout whose code is served (another commit)"
    )
    args = parser.parse_args()
    tree = Path(args.tree).resolve()

    data = Path(tempfile.mkdtemp(prefix="smrweb-bench-"))
    env = {**os.environ, "SMRWEB_DATA_DIR": str(data), "DEBUG": "false"}
    env.pop("DATABASE_URL", None)
    fresh = fresh_database(args.database_url) if args.database_url else None
    if fresh:
        env["DATABASE_URL"] = fresh
    py = sys.executable

    def run(*a):
        return subprocess.run(
            [py, "manage.py", *a], cwd=tree, env=env, check=True, capture_output=True, text=True
        )

    run("migrate", "--noinput")
    redis = start_redis(data)
    web = subprocess.Popen(
        [
            str(Path(py).parent / "gunicorn"),
            "smrweb.wsgi",
            "--bind",
            f"127.0.0.1:{args.port}",
            "--workers",
            "1",
            "--threads",
            "1",
            "--log-level",
            "warning",
        ],
        cwd=tree,
        env=env,
    )
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{base}/api/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rounds = [one_round(args, base, run, psutil.Process(web.pid)) for _ in range(args.repeat)]
        rates = sorted(r["events_per_s"] for r in rounds)
        cpu = sorted(r["server_cpu_ms_per_1k_events"] for r in rounds)
        print(
            json.dumps(
                {
                    "database": "postgresql" if args.database_url else "sqlite",
                    "events": args.events,
                    "batch": args.batch,
                    "runs": args.runs,
                    "median_events_per_s": rates[len(rates) // 2],
                    "median_server_cpu_ms_per_1k_events": cpu[len(cpu) // 2],
                    "rounds": rounds,
                },
                indent=2,
            )
        )
    finally:
        web.terminate()
        web.wait()
        redis.shutdown()
        if fresh:
            drop_database(args.database_url, fresh)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server of `server_url` (so that every run, and every commit measured
    side by side, starts from nothing and migrates its own schema); its URL."""
    import psycopg

    name = f"smrweb_bench_{os.getpid()}_{time.time_ns()}"
    with psycopg.connect(_plain(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


def drop_database(server_url: str, url: str) -> None:
    import psycopg

    with psycopg.connect(_plain(server_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path.lstrip("/")}" WITH (FORCE)')


def _plain(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def server_cpu_seconds(master: psutil.Process) -> float:
    """User + system CPU time of the gunicorn master and its workers so far."""
    return sum(sum(p.cpu_times()[:2]) for p in (master, *master.children(recursive=True)))


def one_round(args, base: str, run, master: psutil.Process) -> dict:
    """Push every batch, replay every batch, and check exactly-once through the read API."""
    slug = f"bench-{time.time_ns()}"  # a fresh project, also when --database-url names a used database
    run("create_project", slug)
    token = run("create_api_token", slug).stdout.strip().splitlines()[-1]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
        per_run = make_events(args.events, args.runs, random.Random(7), args.priced_share)
        batches = [
            (run_id, json.dumps(evs[i : i + args.batch]).encode())
            for run_id, evs in per_run.items()
            for i in range(0, len(evs), args.batch)
        ]

        def push_all() -> tuple[float, int, int, list[float]]:
            accepted = duplicates = 0
            latencies = []
            start = time.perf_counter()
            for run_id, body in batches:
                t = time.perf_counter()
                r = client.post(
                    f"/api/v1/projects/{slug}/runs/{run_id}/events",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                latencies.append(time.perf_counter() - t)
                r.raise_for_status()
                accepted += r.json()["accepted"]
                duplicates += r.json()["duplicates"]
            return time.perf_counter() - start, accepted, duplicates, latencies

        cpu_before = server_cpu_seconds(master)
        first, acc1, dup1, lat = push_all()
        first_cpu = server_cpu_seconds(master) - cpu_before
        second, acc2, dup2, _ = push_all()
        # Check exactly-once through the read API.
        for run_id, evs in per_run.items():
            detail = client.get(f"/api/v1/projects/{slug}/runs/{run_id}").json()
            turns = [e for e in evs if e["type"] == "agent.turn"]
            assert detail["turn_count"] == len(turns), detail
            usd = sum(Decimal(str(e["cost_usd"])) for e in turns if "cost_usd" in e)
            unstated = [e for e in turns if "cost_usd" not in e]
            if unstated:  # priced by the server (a tree before issue 37 records them at 0)
                from smrweb.tracking import pricing

                table = pricing.PriceTable().merged(pricing.DEFAULT_PRICES, pricing.DEFAULT_ALIASES)
                priced = sum(
                    table.cost(
                        PRICED_MODEL, pricing.Usage(e["tokens_in"], e["tokens_out"]), datetime.now(UTC)
                    )
                    for e in unstated
                )
                assert Decimal(detail["spend"]["usd"]) in (usd, usd + priced), (detail["spend"], usd, priced)
                usd = Decimal(detail["spend"]["usd"])
            assert Decimal(detail["spend"]["usd"]) == usd, (detail["spend"], usd)
            assert detail["spend"]["tokens_in"] == sum(e["tokens_in"] for e in turns)
            parts = detail["spend"]["driver_inference"], detail["spend"]["child_work"]
            assert Decimal(parts[0]["usd"]) + Decimal(parts[1]["usd"]) == usd
            metrics = client.get(
                f"/api/v1/projects/{slug}/runs/{run_id}/metrics", params={"key": "loss/0", "points": 10000}
            ).json()
            assert metrics["total_points"] == sum(1 for e in evs if e.get("key") == "loss/0")
        subs = client.get(f"/api/v1/projects/{slug}/submissions", params={"page_size": 1}).json()["count"]
        assert subs == sum(1 for evs in per_run.values() for e in evs if e["type"] == "score")
        assert (acc1, dup1) == (args.events, 0) and (acc2, dup2) == (0, args.events), (acc1, dup1, acc2, dup2)
        return {
            "first_push_s": round(first, 3),
            "events_per_s": round(args.events / first),
            "server_cpu_ms_per_1k_events": round(first_cpu * 1000 / (args.events / 1000), 1),
            "replay_s": round(second, 3),
            "replay_events_per_s": round(args.events / second),
            "batch_latency_median_ms": round(statistics.median(lat) * 1000, 1),
            "batch_latency_max_ms": round(max(lat) * 1000, 1),
            "exactly_once": True,
            "submissions": subs,
        }


if __name__ == "__main__":
    main()
