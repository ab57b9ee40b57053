"""The project page with 10 chosen columns against the page as it is without them (issue 38's goal: within
1.5x), measured in one run.

A fresh data dir (SQLite, or a throwaway PostgreSQL database with --postgres) and the embedded Redis the
pages use as their cache, as `make serve` runs them. Seeded through the write path: 200 runs of one project,
each with 20–60 agent turns (driver and child), 3–8 scores, 200 points of two metric keys, four params and
two tags. Then, in this process with Django's test Client signed in as a member, alternating, median of N
rounds: the project page (default order) and the same page with 10 columns (two params, a tag, three metric
columns, four spend parts) sorted by a metric column — warm (nothing new), first view after one new turn in
one run, and a full render with nothing kept (the cache cleared before each).

    .venv/bin/python bench/columns.py               # 200 runs
    .venv/bin/python bench/columns.py --runs 50     # a quicker look
    .venv/bin/python bench/columns.py --append      # also append a dated section to docs/benchmarks.md
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: its shared modules
from inprocess import arguments, commit, report, world  # noqa: E402 - starts Django: before any model

# isort: split

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from pages import db_version, machine  # noqa: E402 - bench/ is put on the path above

from smrweb.tracking import events as ev  # noqa: E402
from smrweb.tracking import services  # noqa: E402
from smrweb.tracking.models import Role  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MODELS = ("sonnet", "gpt-5", "haiku", "gemini", "llama")
COLUMNS = [
    *("param:lr", "param:optimizer", "tag:model"),
    *("metric:val_loss", "metric:val_loss:min", "metric:accuracy:max"),
    *("spend:driver_usd", "spend:child_usd", "spend:tokens", "spend:failed_calls"),
]


def seed(project, admin, runs: int, rng: random.Random) -> list[str]:
    names = []
    for n in range(runs):
        name = f"run-{n:03d}"
        turns, events = rng.randint(20, 60), [{"type": "state", "state": "running", "ts": T0.isoformat()}]
        for i in range(turns):
            events.append(
                {
                    "id": f"t{i}",
                    "type": "agent.turn",
                    "turn": i,
                    "ts": (T0 + timedelta(seconds=10 * i + 1)).isoformat(),
                    "tokens_in": rng.randint(500, 2000),
                    "tokens_out": rng.randint(50, 300),
                    "cost_usd": round(0.002 * rng.uniform(0.5, 1.5), 6),
                    **({"actor": "worker", "parent_actor": "driver"} if i % 3 == 0 else {}),
                }
            )
        for k in range(rng.randint(3, 8)):
            ts = T0 + timedelta(seconds=rng.uniform(0, 10 * turns))
            events.append({"id": f"s{k}", "type": "score", "score": rng.random(), "ts": ts.isoformat()})
        for key in ("val_loss", "accuracy"):
            for step in range(200):
                events.append({"type": "metric", "key": key, "step": step, "value": rng.random()})
        services.ingest_events(project, name, ev.parse_events(json.dumps(events)))
        run = project.runs.get(external_id=name)
        params = [
            ("lr", str(rng.choice([0.1, 0.03, 0.01, 0.003]))),
            ("optimizer", rng.choice(["adam", "sgd"])),
        ]
        params += [("batch", str(rng.choice([32, 64]))), ("seed", str(n))]
        services.log_params(run, params, by=admin)
        services.set_tag(run, key="model", value=MODELS[n % len(MODELS)], by=admin)
        services.set_tag(run, key="kickoff", value=f"k{n % 3}", by=admin)
        names.append(name)
    return names


def timed(client: Client, url: str, params=None) -> float:
    t0 = time.perf_counter()
    answer = client.get(url, params or {})
    elapsed = (time.perf_counter() - t0) * 1000
    assert answer.status_code == 200, (url, answer.status_code, answer.content[:500])
    return elapsed


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    with world():
        user = get_user_model().objects.create_user("bench", "bench@example.test", "x")
        project = services.create_project(slug="cols", name="cols", scenario=services.generic_scenario())
        services.add_member(project, user, role=Role.ADMIN)
        started = time.perf_counter()
        names = seed(project, user, args.runs, random.Random(args.seed))
        print(f"seeded {args.runs} runs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        client = Client()
        client.force_login(user)
        page = f"/projects/{project.slug}/"
        plain: dict = {}
        wide = {"col": COLUMNS, "sort": "-col:metric:val_loss"}
        kinds = {"plain": plain, "wide": wide}
        for query in kinds.values():
            timed(client, page, query)  # warm
        rows: dict[str, list[float]] = {f"{k}{s}": [] for k in kinds for s in ("", "+", "0")}
        for i in range(args.repeat):
            for kind, query in kinds.items():
                cache.clear()
                rows[kind + "0"].append(timed(client, page, query))  # nothing kept
                rows[kind].append(timed(client, page, query))  # warm: all of it kept just now
                turn = {"id": f"late{kind}{i}", "type": "agent.turn", "turn": 10_000 + i, "cost_usd": 0.01}
                name = names[(7 * i) % len(names)]
                services.ingest_events(project, name, ev.parse_events(json.dumps([turn])))
                rows[kind + "+"].append(timed(client, page, query))
        med = {k: statistics.median(v) for k, v in rows.items()}
        ratio = {s: med["wide" + s] / med["plain" + s] for s in ("", "+", "0")}
        lines = [
            f"## The project page with 10 chosen columns ({datetime.now(UTC):%Y-%m-%d}, {connection.vendor})",
            "",
            f"Machine: {machine(db_version())}. Commit {commit()}. "
            f"`python bench/columns.py --runs {args.runs} --repeat {args.repeat}`: {args.runs} runs (20–60 "
            "turns, 3–8 scores, 200 points of two metric keys, four params, two tags each), in-process, "
            f"median of {args.repeat} rounds, alternating. Columns: {', '.join(f'`{c}`' for c in COLUMNS)}, "
            "sorted by `-col:metric:val_loss`.",
            "",
            "| page | warm ms | after one new turn ms | nothing kept ms |",
            "| --- | ---: | ---: | ---: |",
            f"| project page | {med['plain']:.0f} | {med['plain+']:.0f} | {med['plain0']:.0f} |",
            f"| with 10 columns | {med['wide']:.0f} | {med['wide+']:.0f} | {med['wide0']:.0f} |",
            f"| ratio | {ratio['']:.2f}× | {ratio['+']:.2f}× | {ratio['0']:.2f}× |",
            "",
            "- Goal: the page with 10 extra columns within 1.5× of the page: "
            + ("**met**." if max(ratio.values()) <= 1.5 else "**not met**."),
        ]
        report("\n".join(lines), append=args.append)


if __name__ == "__main__":
    main()
