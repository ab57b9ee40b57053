"""Compare's "any metric against spend" card with arms, against the Compare page itself (issue 38's goal:
200 runs grouped into 5 arms at x = USD within 1.5x of today's page), measured in one run.

A fresh data dir (SQLite, or a throwaway PostgreSQL database with --postgres) and the embedded Redis the
pages use as their cache, as `make serve` runs them. Seeded through the write path: 200 runs of one project,
each with 50–150 agent turns (driver and child), 5–15 scores and 500 points of a metric key, tagged with
one of 5 models. Then, in this process with Django's test Client signed in as a member, alternating, median
of N rounds: the Compare page of the 200 runs (what a viewer loads today), and the card's request that page
makes after it (`X-Smrweb-Only: series`) with `group=tag:model&x=usd`, of the score and of the metric:
warm (nothing new), and first after one new turn in one run. The first view of the card (nothing kept)
is reported once.

    .venv/bin/python bench/arms.py               # 200 runs
    .venv/bin/python bench/arms.py --runs 50     # a quicker look
    .venv/bin/python bench/arms.py --append      # also append a dated section to docs/benchmarks.md
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
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from pages import db_version, machine  # noqa: E402 - bench/ is put on the path above

from smrweb.tracking import events as ev  # noqa: E402
from smrweb.tracking import services  # noqa: E402
from smrweb.tracking.models import Role  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MODELS = ("sonnet", "gpt-5", "haiku", "gemini", "llama")
CARD = {"HX-Request": "true", "X-Smrweb-Only": "series"}


def seed(project, admin, runs: int, rng: random.Random) -> list[str]:
    names = []
    for n in range(runs):
        name, model = f"run-{n:03d}", MODELS[n % len(MODELS)]
        level, cost = 0.3 + 0.1 * (n % len(MODELS)), 0.002 * (1 + n % len(MODELS))
        turns, events = rng.randint(50, 150), [{"type": "state", "state": "running", "ts": T0.isoformat()}]
        for i in range(turns):
            child = i % 3 == 0
            events.append(
                {
                    "id": f"t{i}",
                    "type": "agent.turn",
                    "turn": i,
                    "ts": (T0 + timedelta(seconds=10 * i + 1)).isoformat(),
                    "tokens_in": rng.randint(500, 2000),
                    "tokens_out": rng.randint(50, 300),
                    "cost_usd": round(cost * rng.uniform(0.5, 1.5), 6),
                    **({"actor": "worker", "parent_actor": "driver"} if child else {}),
                }
            )
        for k in range(rng.randint(5, 15)):
            score = level + 0.01 * k + rng.uniform(-0.05, 0.05)
            ts = T0 + timedelta(seconds=rng.uniform(0, 10 * turns))
            events.append({"id": f"s{k}", "type": "score", "score": score, "ts": ts.isoformat()})
        for step in range(500):
            ts = T0 + timedelta(seconds=10 * turns * step / 500)
            events.append(
                {
                    "type": "metric",
                    "key": "val_loss",
                    "step": step,
                    "value": rng.random(),
                    "ts": ts.isoformat(),
                }
            )
        services.ingest_events(project, name, ev.parse_events(json.dumps(events)))
        run = project.runs.get(external_id=name)
        services.set_tag(run, key="model", value=model, by=admin)
        names.append(name)
    return names


def timed(client: Client, url: str, params, headers=None) -> float:
    t0 = time.perf_counter()
    answer = client.get(url, params, headers=headers or {})
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
        project = services.create_project(slug="arms", name="arms", scenario=services.generic_scenario())
        services.add_member(project, user, role=Role.ADMIN)
        started = time.perf_counter()
        names = seed(project, user, args.runs, random.Random(args.seed))
        print(f"seeded {args.runs} runs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        client = Client()
        client.force_login(user)
        page = f"/projects/{project.slug}/compare/"
        base = {"runs": names, "x": "usd", "group": "tag:model"}
        score, metric = {**base}, {**base, "metric": "val_loss"}
        first = {
            "score": timed(client, page, score, CARD),
            "metric": timed(client, page, metric, CARD),
        }
        timed(client, page, {"runs": names})  # warm the page's own kept parts
        rows: dict[str, list[float]] = {
            k: [] for k in ("page", "score", "metric", "page+", "score+", "metric+")
        }
        for i in range(args.repeat):
            rows["page"].append(timed(client, page, {"runs": names}))
            rows["score"].append(timed(client, page, score, CARD))
            rows["metric"].append(timed(client, page, metric, CARD))
            turn = {"id": f"late{i}", "type": "agent.turn", "turn": 10_000 + i, "cost_usd": 0.01}
            services.ingest_events(project, names[i % len(names)], ev.parse_events(json.dumps([turn])))
            rows["page+"].append(timed(client, page, {"runs": names}))
            services.ingest_events(
                project, names[i % len(names)], ev.parse_events(json.dumps([{**turn, "id": f"late{i}b"}]))
            )
            rows["score+"].append(timed(client, page, score, CARD))
            services.ingest_events(
                project, names[i % len(names)], ev.parse_events(json.dumps([{**turn, "id": f"late{i}c"}]))
            )
            rows["metric+"].append(timed(client, page, metric, CARD))
        med = {k: statistics.median(v) for k, v in rows.items()}
        lines = [
            f"## Compare's arms card against the Compare page ({datetime.now(UTC):%Y-%m-%d}, "
            f"{connection.vendor})",
            "",
            f"Machine: {machine(db_version())}. Commit {commit()}. "
            f"`python bench/arms.py --runs {args.runs} "
            f"--repeat {args.repeat}`: {args.runs} runs (50–150 turns, 5–15 scores, 500 points of `val_loss` "
            f"each, tagged with one of {len(MODELS)} models), in-process, median of {args.repeat} rounds, "
            "alternating. The card is the request the Compare page makes after itself (grouped by "
            "`tag:model`, x = USD).",
            "",
            "| request | warm ms | after one new turn ms | vs the page (warm / after a turn) |",
            "| --- | ---: | ---: | ---: |",
            f"| Compare page, {args.runs} runs | {med['page']:.0f} | {med['page+']:.0f} | 1.00× / 1.00× |",
        ]
        for key, label in (("score", "card: score, 5 arms"), ("metric", "card: val_loss, 5 arms")):
            lines.append(
                f"| {label} | {med[key]:.0f} | {med[key + '+']:.0f} | "
                f"{med[key] / med['page']:.2f}× / {med[key + '+'] / med['page+']:.2f}× |"
            )
        lines += [
            "",
            f"- The card's first view, nothing kept: score {first['score']:.0f} ms, val_loss "
            f"{first['metric']:.0f} ms.",
            "- Goal: the arms card within 1.5× of the page: "
            + (
                "**met**."
                if max(
                    med["score"] / med["page"],
                    med["metric"] / med["page"],
                    med["score+"] / med["page+"],
                    med["metric+"] / med["page+"],
                )
                <= 1.5
                else "**not met**."
            ),
        ]
        report("\n".join(lines), append=args.append)


if __name__ == "__main__":
    main()
