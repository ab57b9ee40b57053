"""How many active SMR runs one worker keeps in sync per 10 s cycle, against the simulator.

A fresh data dir and database; the simulator in this process with N live runs ticking; the sync a
Celery worker runs (`sources.sync.sync_project`) called back to back on one thread, exactly as one
worker process would run it. Reports the cycle time with all runs live, runs kept in sync per 10 s
and requests per run per cycle (from the simulator's own request counts).

    .venv/bin/python bench/smr_poll.py --runs 50 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["SMRWEB_DATA_DIR"] = tempfile.mkdtemp(prefix="smrweb-smrbench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")
os.environ.pop("DATABASE_URL", None)

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402

from smrweb.simulator.server import start_simulator  # noqa: E402
from smrweb.simulator.world import World  # noqa: E402
from smrweb.sources import sync  # noqa: E402
from smrweb.tracking import services  # noqa: E402


def measure(n_runs: int, cycles: int) -> dict:
    # All runs start at once (no stagger), so all n are live while we measure.
    world = World(seed=3, project_ids=["bench"], runs=n_runs, tick_seconds=1.0, stagger_ticks=0)
    sim = start_simulator(api_key="bench", world=world, tick=1.0, warmup=8)
    try:
        scenario = services.create_scenario(key=f"bench-{n_runs}", name="bench", score_metric="val_loss",
                                            direction="minimize")
        project = services.create_project(f"smr-bench-{n_runs}", scenario=scenario, source="smr",
                                          smr_project_id="bench", smr_backend_base=sim.url, smr_api_key="bench")
        sync.sync_project(project, owner="bench")  # first sync: the whole history so far
        times, requests, live = [], [], []
        for _ in range(cycles):
            httpx.post(f"{sim.url}/_sim/stats/reset")
            start = time.perf_counter()
            report = sync.sync_project(project, owner="bench")
            times.append(time.perf_counter() - start)
            assert not report.error, report.error
            stats = httpx.get(f"{sim.url}/_sim/stats").json()
            live.append(report.synced)
            requests.append((stats["total_requests"] - 1) / max(1, report.synced))  # minus the run list
        cycle = statistics.median(times)
        synced = statistics.median(live)
        return {"runs_in_world": n_runs, "runs_synced_per_cycle": synced, "cycle_seconds_median": round(cycle, 3),
                "runs_kept_in_sync_per_10s": int(synced * 10 / cycle),
                "requests_per_run_per_cycle": round(statistics.median(requests), 2), "cycles": cycles}
    finally:
        sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(json.dumps([measure(n, args.cycles) for n in args.runs], indent=2))


if __name__ == "__main__":
    main()
