"""What the retention policy removes from demo-shaped data: a fresh data dir, migrations, then runs
shaped like the demo harness's (stack/harness.py: two projects, 40–150 ticks a run, one point per tick
for each of two metric keys, a driver turn and 0–2 worker turns per tick, a score every 4 ticks, 6 in 9
runs done, 2 failed, 1 stalled), written through `services.ingest_events`, then `apply_retention` as
a dry run and for real one year after they finished, at the project defaults and at a tighter setting.

    .venv/bin/python bench/retention.py --runs 200
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["SMRWEB_DATA_DIR"] = tempfile.mkdtemp(prefix="smrweb-retention-bench-")
os.environ.pop("DATABASE_URL", None)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from smrweb.tracking import events as ev  # noqa: E402
from smrweb.tracking import services  # noqa: E402
from smrweb.tracking.models import MetricPoint, Project, Run  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TICK = timedelta(seconds=1.5)  # the harness's default interval
KEYS = {"demo-dogfight": ["train/loss", "eval/win_rate"], "demo-optimizer": ["val_loss", "tokens_per_s"]}


def demo_run(project: Project, n: int, rng: random.Random, start: datetime) -> datetime:
    """One run shaped like the harness's; returns when it ended."""
    fate = rng.choices(["done", "failed", "stalls"], weights=[6, 2, 1])[0]
    length = rng.randint(40, 90) if rng.random() > 0.2 else rng.randint(110, 150)
    ticks = length // 2 if fate == "failed" else length // 3 if fate == "stalls" else length
    events: list[dict] = []
    turn = 0
    for tick in range(1, ticks + 1):
        ts = (start + tick * TICK).isoformat()
        events.append({"type": "agent.turn", "id": f"t{tick}", "turn": turn, "tokens_in": 900, "ts": ts})
        turn += 1
        for w in range(rng.randint(0, 2)):
            events.append(
                {
                    "type": "agent.turn",
                    "id": f"w{tick}-{w}",
                    "actor": f"worker-{w + 1}",
                    "parent_actor": "driver",
                    "kind": "child_work",
                    "turn": tick,
                    "tokens_in": 400,
                    "ts": ts,
                }
            )
        for key in KEYS[project.slug]:
            events.append({"type": "metric", "key": key, "step": tick, "value": rng.random(), "ts": ts})
        if tick % 4 == 0:
            events.append({"type": "score", "id": f"s{tick}", "score": rng.random(), "ts": ts})
    end = start + (ticks + 1) * TICK
    if fate != "stalls":
        events.append(
            {
                "type": "state",
                "id": "end",
                "state": "done" if fate == "done" else "failed",
                "ts": end.isoformat(),
            }
        )
    else:
        events.append({"type": "state", "id": "end", "state": "abandoned", "ts": end.isoformat()})
    for i in range(0, len(events), 2000):
        services.ingest_events(project, f"run-{n}", ev.parse_events(json.dumps(events[i : i + 2000])))
    return end


def report(label: str, project_reports) -> None:
    points = sum(r.points_removed for r in project_reports)
    series = sum(len(r.series) for r in project_reports)
    runs = sum(len(r.runs_deleted) for r in project_reports)
    print(f"  {label}: {points} metric points from {series} series, {runs} archived runs")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200, help="runs per project")
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    logging.getLogger("smrweb.core.queue").setLevel(logging.ERROR)  # no broker here: alerts not queued
    call_command("migrate", verbosity=0)
    admin = get_user_model().objects.create_superuser("bench", "bench@example.test", "x")
    scenario = services.generic_scenario()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    projects = [services.create_project(slug=slug, name=slug, scenario=scenario, by=admin) for slug in KEYS]
    for project in projects:
        at = T0
        for n in range(args.runs):
            at = demo_run(project, n, rng, at)
    print(
        f"{len(projects)} projects x {args.runs} runs: {Run.objects.count()} runs, "
        f"{MetricPoint.objects.count()} metric points ({time.perf_counter() - started:.0f} s to write)"
    )
    from django.db.models import Count

    longest = max(
        MetricPoint.objects.values("run_id", "key").annotate(n=Count("id")).values_list("n", flat=True)
    )
    print(f"longest series: {longest} points")
    now = max(Run.objects.values_list("finished_at", flat=True)) + timedelta(days=365)
    defaults = Project.objects.get(slug="demo-dogfight")
    print(
        f"defaults: metric days {defaults.retention_metric_days}, "
        f"keep {defaults.retention_keep_points} points, "
        f"archived runs after {defaults.retention_archived_run_days} days"
    )
    dry = [services.apply_retention(p, now=now, dry_run=True) for p in Project.objects.all()]
    report("a year later, defaults, dry run", dry)
    real = [services.apply_retention(p, now=now) for p in Project.objects.all()]
    report("a year later, defaults, real run", real)
    assert [r.as_dict() | {"dry_run": True} for r in real] == [d.as_dict() for d in dry]
    Project.objects.update(retention_keep_points=50)
    before = MetricPoint.objects.count()
    tight = [services.apply_retention(p, now=now) for p in Project.objects.all()]
    report("a year later, keep 50 points per series", tight)
    print(f"  metric points {before} -> {MetricPoint.objects.count()}")


if __name__ == "__main__":
    main()
