"""What one SMR sync cycle costs, against the simulator (issue 13, docs/benchmarks.md).

1. Per run length: one live run of 100, 1,000 and 10,000 turns; each cycle the world moves one tick
   (~2.5 new turns and a sandbox meter, about what 10 s of a live agent run brings) and one sync runs.
   Reports requests and
   response bytes per cycle (the simulator's own counts), mean and worst over the cycles: the goal is
   flat within 2x from 100 to 10,000 turns (the usage list, one answer with every entry, is read only
   when the cost changed and then at most SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE entries per cycle on average).
2. Per worker: N live runs (all started at once); each cycle the world moves one tick and the sync a
   Celery worker runs (`sync_project`) brings all N up to date on one thread; reports the cycle time and
   the live runs one worker keeps current per 10 s cycle (goal: >= 1,000). Here the simulated backend
   runs in a process of its own, as a real one does, so the time is the worker's.

3. Across workers (`--workers 1 2`, issue 34): N live runs in one project synced by that many real
   Celery workers (bench/poll_worker.py, on the polling lane only) on a fresh PostgreSQL database
   (`--postgres`); each cycle the project's task is queued as beat does and the cycle ends when every run
   was polled. Reports live runs kept current per 10 s (changing: the world moved one tick; unchanged:
   it did not), each worker's CPU and database time, statements and transactions per run sync, and
   requests per run per cycle. `--code DIR` runs the workers on another checkout (the code before).

A fresh data dir and SQLite database (or `--postgres`); the simulator in this process, advanced by hand.

    .venv/bin/python bench/smr_poll.py --turns 100 1000 10000 --runs 200 1000
    .venv/bin/python bench/smr_poll.py --turns --runs --workers 1 2 --worker-runs 200 --cycles 2 --postgres
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["SMRWEB_DATA_DIR"] = tempfile.mkdtemp(prefix="smrweb-smrbench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")
os.environ.pop("DATABASE_URL", None)
os.environ.pop("REDIS_URL", None)  # the embedded Redis of this data dir (workers share it)
if "--postgres" in sys.argv:  # a fresh database on the local PostgreSQL (scripts/local-postgres.sh)
    import psycopg
    from ingest_vs_mlflow import local_postgres

    _url = local_postgres() or sys.exit("no local PostgreSQL")
    _name = f"smrweb_pollbench_{os.getpid()}"
    with psycopg.connect(_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as _conn:
        _conn.execute(f'CREATE DATABASE "{_name}"')
    os.environ["DATABASE_URL"] = _url.rsplit("/", 1)[0] + "/" + _name
os.environ["SMRWEB_CELERY_QUEUE"] = f"smrweb-pollbench-{os.getpid()}"
# The simulated SMR backend listens on loopback, which outbound calls refuse unless allowed (as `make demo`
# does).
os.environ.setdefault("SMRWEB_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")

import django  # noqa: E402
import httpx  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from smrweb.simulator.server import start_simulator  # noqa: E402
from smrweb.simulator.world import World  # noqa: E402
from smrweb.sources import sync  # noqa: E402
from smrweb.tracking import services  # noqa: E402


def _turns(run) -> int:
    return sum(actor.turns for actor in run.actors)


def one_live_run(turns: int, cycles: int) -> dict:
    world = World(seed=4, project_ids=[f"len-{turns}"], runs=1, stagger_ticks=0)
    run = next(iter(world.runs.values()))
    run.run_ticks = 10**9  # it never ends
    while _turns(run) < turns:
        world.tick(25)
    sim = start_simulator(api_key="bench", world=world, auto_tick=False)
    try:
        project = services.create_project(
            f"len-{turns}",
            source="smr",
            smr_project_id=f"len-{turns}",
            smr_backend_base=sim.url,
            smr_api_key="bench",
        )
        sync.sync_project(project, owner="bench")  # the whole history once
        # Enough cycles to include at least one re-read of the whole usage list at this length.
        cycles = max(cycles, int(len(run.entries) / settings.SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE) + 10)
        requests, sizes, times, by_route = [], [], [], {}
        for _ in range(cycles):
            world.tick(1)
            sim.stats.reset()
            start = time.perf_counter()
            report = sync.sync_project(project, owner="bench")
            times.append(time.perf_counter() - start)
            assert not report.error, report.error
            stats = sim.stats.snapshot()
            requests.append(stats["total_requests"])
            sizes.append(stats["total_bytes"])
            for route, size in stats["bytes"].items():
                by_route[route] = by_route.get(route, 0) + size
        return {
            "turns": turns,
            "cycles": cycles,
            "requests_per_cycle_mean": round(statistics.mean(requests), 2),
            "requests_per_cycle_max": max(requests),
            "bytes_per_cycle_mean": int(statistics.mean(sizes)),
            "bytes_per_cycle_max": max(sizes),
            "cycle_seconds_median": round(statistics.median(times), 4),
            "bytes_per_cycle_by_route": {
                k.split(" ", 1)[1]: v // cycles for k, v in sorted(by_route.items())
            },
        }
    finally:
        sim.stop()


class RemoteBackend:
    """The simulated SMR backend in a process of its own, as a real backend is: the sync's wall time is
    then the worker's own (HTTP, JSON, database), not shared with the simulator's JSON work under one GIL.
    Advanced and read through the simulator's /_sim/ control API."""

    def __init__(self, world: World):
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=self._serve, args=(world, child), daemon=True)
        self.process.start()
        self.url = parent.recv()
        self.http = httpx.Client(base_url=self.url, timeout=120)

    @staticmethod
    def _serve(world: World, pipe) -> None:
        sim = start_simulator(api_key="bench", world=world, auto_tick=False)
        pipe.send(sim.url)
        threading.Event().wait()  # serve until the parent ends this process

    def tick(self, n: int = 1) -> None:
        self.http.post("/_sim/tick", params={"n": n}).raise_for_status()

    def reset_stats(self) -> None:
        self.http.post("/_sim/stats/reset").raise_for_status()

    def stats(self) -> dict:
        return self.http.get("/_sim/stats").json()

    def stop(self) -> None:
        self.http.close()
        self.process.kill()
        self.process.join()


def measure(n_runs: int, cycles: int) -> dict:
    """N runs live at once; each cycle the world moves one tick (what ~10 s of an agent run brings: ~2.5
    turns, a sandbox meter, a scored attempt 40 % of the time) and one sync brings all N up to date."""
    world = World(seed=3, project_ids=[f"bench-{n_runs}"], runs=n_runs, tick_seconds=1.0, stagger_ticks=0)
    for run in world.runs.values():
        run.run_ticks = 10**9  # all stay live while we measure
    world.tick(8)
    backend = RemoteBackend(world)
    try:
        scenario = services.create_scenario(
            key=f"bench-{n_runs}", name="bench", score_metric="val_loss", direction="minimize"
        )
        project = services.create_project(
            f"smr-bench-{n_runs}",
            scenario=scenario,
            source="smr",
            smr_project_id=f"bench-{n_runs}",
            smr_backend_base=backend.url,
            smr_api_key="bench",
        )
        sync.sync_project(project, owner="bench")  # first sync: the whole history so far
        times, requests, live, sizes = [], [], [], []
        for _ in range(cycles):
            backend.tick(1)
            backend.reset_stats()
            start = time.perf_counter()
            report = sync.sync_project(project, owner="bench")
            times.append(time.perf_counter() - start)
            assert not report.error, report.error
            stats = backend.stats()
            live.append(report.synced)
            requests.append(stats["total_requests"] / max(1, report.synced))
            sizes.append(stats["total_bytes"] / max(1, report.synced))
        cycle = statistics.median(times)
        synced = statistics.median(live)
        return {
            "live_runs": n_runs,
            "runs_synced_per_cycle": synced,
            "cycle_seconds_median": round(cycle, 3),
            "live_runs_kept_current_per_10s": int(synced * 10 / cycle),
            "requests_per_run_per_cycle": round(statistics.median(requests), 2),
            "bytes_per_run_per_cycle": int(statistics.median(sizes)),
            "cycles": cycles,
        }
    finally:
        backend.stop()


def _worker_stats(paths: list[Path]) -> dict:
    totals: dict[str, float] = {}
    for path in paths:
        if path.exists():
            for k, v in json.loads(path.read_text()).items():
                totals[k] = totals.get(k, 0) + v
    return totals


def _drain(paths: list[Path]) -> None:
    """Wait until the polling lane is empty and no worker finished a task for half a second (what an
    earlier cycle queued is not counted in the next)."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    lane = f"{os.environ['SMRWEB_CELERY_QUEUE']}.polling"
    last, still = None, 0.0
    while still < 0.5:
        now = (client.llen(lane), _worker_stats(paths).get("tasks"))
        still = still + 0.1 if now == last and now[0] == 0 else 0.0
        last = now
        time.sleep(0.1)


def _wait_current(project, since, n: int, timeout: float = 600) -> float:
    """Seconds until every one of the project's n runs was polled after `since` (a wall-clock time)."""
    from smrweb.tracking.models import Run

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if Run.objects.filter(project=project, last_polled_at__gte=since).count() >= n:
            return time.perf_counter() - start
        time.sleep(0.02)
    raise RuntimeError(f"the runs were not all polled within {timeout} s")


def measure_workers(n_runs: int, workers: int, cycles: int, code: Path) -> dict:
    """N live runs in one project, synced by `workers` real Celery workers (bench/poll_worker.py running
    the code at `code`) on this database: each cycle the world moves one tick (every run changes) and the
    project's sync task is queued, as beat does; the cycle ends when every run was polled. Then the same
    with the world still (every run unchanged). Reports live runs kept current per 10 s, the workers' CPU
    and database time per run sync, transactions per run sync and requests per run per cycle."""
    import subprocess

    from django.utils import timezone

    from smrweb.tasks import sync_project

    world = World(
        seed=3, project_ids=[f"wk-{n_runs}-{workers}"], runs=n_runs, tick_seconds=1.0, stagger_ticks=0
    )
    for run in world.runs.values():
        run.run_ticks = 10**9
    world.tick(8)
    backend = RemoteBackend(world)
    stats_dir = Path(tempfile.mkdtemp(prefix="smrweb-pollbench-stats-"))
    procs, paths = [], []
    try:
        scenario = services.create_scenario(
            key=f"wk-{n_runs}-{workers}", name="bench", score_metric="val_loss", direction="minimize"
        )
        project = services.create_project(
            f"smr-wk-{n_runs}-{workers}",
            scenario=scenario,
            source="smr",
            smr_project_id=f"wk-{n_runs}-{workers}",
            smr_backend_base=backend.url,
            smr_api_key="bench",
        )
        for i in range(workers):
            paths.append(stats_dir / f"w{i}.json")
            env = {**os.environ, "BENCH_CODE": str(code), "BENCH_STATS": str(paths[-1])}
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(ROOT / "bench" / "poll_worker.py"),
                        "-n",
                        f"w{i}-{os.getpid()}@bench",
                        "-Q",  # the polling lane only, as compose's poller (alerts are another worker's)
                        f"{os.environ['SMRWEB_CELERY_QUEUE']}.polling",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=(stats_dir / f"w{i}.log").open("w"),
                )
            )

        def cycle() -> float:
            since, start = timezone.now(), time.perf_counter()
            sync_project.delay(project.pk)
            while True:  # as beat does: the project is queued again each active interval until done
                try:
                    _wait_current(project, since, n_runs, timeout=settings.SMRWEB_SMR_ACTIVE_INTERVAL)
                    return time.perf_counter() - start
                except RuntimeError:
                    if time.perf_counter() - start > 600:
                        raise
                    sync_project.delay(project.pk)

        cycle()  # the whole history so far (not measured)
        cycle()  # warm: every worker has its connections and imports
        _drain(paths)
        rows = {}
        for label, tick in (("changing", 1), ("unchanged", 0)):
            times, requests = [], []
            before = _worker_stats(paths)
            if os.environ.get("BENCH_SQL_LOG"):
                with open(os.environ["BENCH_SQL_LOG"], "a") as f:
                    f.write(f"=== {label}\n")
            for _ in range(cycles):
                if tick:
                    backend.tick(tick)
                backend.reset_stats()
                times.append(cycle())
                _drain(paths)
                stats = backend.stats()
                requests.append(stats["total_requests"] / n_runs)
            after = _worker_stats(paths)
            syncs = n_runs * cycles
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            cycle_s = statistics.median(times)
            rows[label] = {
                "cycle_seconds_median": round(cycle_s, 3),
                "live_runs_kept_current_per_10s": int(n_runs * 10 / cycle_s),
                "per_worker_per_10s": int(n_runs * 10 / cycle_s / workers),
                "worker_cpu_ms_per_run_sync": round(1000 * delta.get("cpu_seconds", 0) / syncs, 2),
                "db_ms_per_run_sync": round(1000 * delta.get("db_seconds", 0) / syncs, 2),
                "statements_per_run_sync": round(delta.get("statements", 0) / syncs, 1),
                "transactions_per_run_sync": round(
                    (delta.get("commits", 0) + delta.get("autocommit_writes", 0)) / syncs, 2
                ),
                "requests_per_run_per_cycle": round(statistics.median(requests), 2),
            }
        return {"live_runs": n_runs, "workers": workers, "code": str(code), "cycles": cycles, **rows}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        backend.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--length-cycles", type=int, default=20)
    parser.add_argument("--runs", type=int, nargs="*", default=[200, 1000])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="*", default=[], help="real Celery workers (1 2)")
    parser.add_argument("--worker-runs", type=int, default=300, help="live runs for --workers")
    parser.add_argument("--code", type=Path, default=ROOT, help="the smrweb checkout the workers run")
    parser.add_argument("--postgres", action="store_true", help="on a fresh local PostgreSQL database")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    if args.workers:
        from smrweb.stack.management.commands.runstack import start_embedded_redis

        redis = start_embedded_redis()
        try:
            rows = [
                measure_workers(args.worker_runs, w, args.cycles, args.code.resolve()) for w in args.workers
            ]
        finally:
            redis.shutdown(nosave=True)
        print(json.dumps({"database": settings.DATABASES["default"]["ENGINE"], "workers": rows}, indent=2))
        return
    lengths = [one_live_run(n, args.length_cycles) for n in args.turns]
    if lengths:
        base = lengths[0]
        for row in lengths:
            row["bytes_vs_first"] = round(
                row["bytes_per_cycle_mean"] / max(1, base["bytes_per_cycle_mean"]), 2
            )
            row["requests_vs_first"] = round(
                row["requests_per_cycle_mean"] / max(1, base["requests_per_cycle_mean"]), 2
            )
    print(
        json.dumps(
            {"per_run_length": lengths, "per_worker": [measure(n, args.cycles) for n in args.runs]}, indent=2
        )
    )


if __name__ == "__main__":
    main()
