"""A live page's poll after one new turn against the same poll with nothing new (issue 36's goal: within
2x), at 1x and 10x, measured in one run.

A fresh data dir (SQLite, or a throwaway PostgreSQL database with --postgres) and the embedded Redis the
pages use as their cache, as `make serve` runs them. Two projects seeded through the write path: 1x is
`--runs` short runs and a live run of `--turns` agent turns (three actors, tool calls, a score, a message,
a checkpoint and a metric point every 100 turns) ending five minutes ago; 10x is `--factor` times both.
Then, in this process with Django's test Client signed in as a member, the worlds alternating, median of
N rounds, each page as the browser polls it (HX-Request, the card versions the page shows):

- the long run's page: its poll with nothing new (204), then one turn ingested and its poll (200: the
  changed cards, parts and rows), the shown versions updated from the answer as the page script does;
- the project page: the same for its runs block (the one run's row).

The SQL queries and cache round trips of each poll are counted on the last round.

    .venv/bin/python bench/polls.py                    # 100 runs + 5,000 turns, and 10x
    .venv/bin/python bench/polls.py --turns 500 --runs 20 --repeat 5   # a quick look
    .venv/bin/python bench/polls.py --append           # also append a dated section to docs/benchmarks.md
"""

from __future__ import annotations

import json
import random
import re
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
from django.test.utils import CaptureQueriesContext  # noqa: E402
from pages import db_version, machine  # noqa: E402 - bench/ is put on the path above

from smrweb.core import softcache  # noqa: E402
from smrweb.dashboard import live  # noqa: E402
from smrweb.tracking import events as ev  # noqa: E402
from smrweb.tracking import services  # noqa: E402
from smrweb.tracking.models import Role  # noqa: E402

ACTORS = ("driver", "worker-1", "worker-2")


def turn(n: int, ts: datetime) -> dict:
    actor = ACTORS[n % 3]
    return {
        "id": f"t{n}",
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        **({"parent_actor": "driver"} if actor != "driver" else {}),
        "tokens_in": 1000 + n % 97,
        "tokens_out": 100 + n % 13,
        "cost_usd": 0.001 * (1 + n % 5),
        "ts": ts.isoformat(),
        "tool_calls": [{"name": "bash", "arguments": {"cmd": f"make {n}"}}],
    }


def push(project, run: str, events: list[dict]) -> None:
    for start in range(0, len(events), 5000):
        services.ingest_events(project, run, ev.parse_events(json.dumps(events[start : start + 5000])))


def seed(project, runs: int, turns: int, rng: random.Random) -> None:
    now = datetime.now(UTC)
    for n in range(runs):
        start = now - timedelta(hours=rng.uniform(12, 200))
        events = [{"type": "state", "state": "done", "ts": (start + timedelta(hours=2)).isoformat()}]
        events += [turn(i, start + timedelta(minutes=i)) for i in range(rng.randint(3, 8))]
        events += [
            {
                "id": f"s{k}",
                "type": "score",
                "score": rng.random(),
                "ts": (start + timedelta(minutes=k)).isoformat(),
            }
            for k in range(rng.randint(1, 4))
        ]
        push(project, f"run-{n:04d}", events)
    start = now - timedelta(hours=10)
    step = (timedelta(hours=10) - timedelta(minutes=5)) / turns
    events = [{"type": "state", "state": "running", "ts": start.isoformat()}]
    for i in range(turns):
        ts = start + step * i
        events.append(turn(i, ts))
        if i % 100 == 0:
            events.append({"id": f"s{i}", "type": "score", "score": i / turns, "ts": ts.isoformat()})
            events.append({"type": "message", "body": f"note {i}", "ts": ts.isoformat()})
            events.append({"type": "checkpoint", "label": f"c{i}", "ts": ts.isoformat()})
            events.append(
                {"type": "metric", "key": "loss", "step": i, "value": 1 / (i + 1), "ts": ts.isoformat()}
            )
    push(project, "long", events)


def cards_of(html: str, into: dict) -> dict:
    """The card versions shown: what the page script sends with its poll (and updates from each answer)."""
    into.update(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    return into


class Counted:
    """The cache's calls, counted (each one a round trip to Redis)."""

    def __init__(self, backend):
        self.backend, self.calls = backend, 0

    def __getattr__(self, name):
        method = getattr(self.backend, name)
        if not callable(method):
            return method

        def counted(*args, **kwargs):
            self.calls += 1
            return method(*args, **kwargs)

        return counted


class Page:
    """One polled page of one world, with the card versions its browser tab shows."""

    def __init__(self, client: Client, url: str):
        self.client, self.url = client, url
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.status_code)
        self.shown = cards_of(answer.content.decode(), {})

    def poll(self, count: bool = False) -> tuple[float, int, int, int]:
        headers = {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(self.shown)}
        counted, backend = Counted(softcache.cache), softcache.cache
        softcache.cache = counted if count else backend
        try:
            with CaptureQueriesContext(connection) as seen:
                t0 = time.perf_counter()
                answer = self.client.get(self.url, headers=headers)
                elapsed = (time.perf_counter() - t0) * 1000
        finally:
            softcache.cache = backend
        assert answer.status_code in (200, 204), (self.url, answer.status_code)
        cards_of(answer.content.decode(), self.shown)
        return elapsed, answer.status_code, len(seen.captured_queries), counted.calls


def _answers(statuses: list[int]) -> str:
    """E.g. "30×204" or "29×204, 1×200" (a clock step passed: the timeline's end moved)."""
    return ", ".join(f"{statuses.count(s)}×{s}" for s in sorted(set(statuses), reverse=True))


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--gap", type=float, default=0.2, help="seconds between a round's requests")
    args = parser.parse_args()
    with world():
        user = get_user_model().objects.create_user("bench", "bench@example.test", "x")
        worlds = {}
        for name, scale in (("1x", 1), ("10x", args.factor)):
            project = services.create_project(
                slug=f"w{name}", name=name, scenario=services.generic_scenario()
            )
            services.add_member(project, user, role=Role.ADMIN)
            started = time.perf_counter()
            seed(project, args.runs * scale, args.turns * scale, random.Random(scale))
            print(f"{name}: seeded in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            worlds[name] = project
        client = Client()
        client.force_login(user)
        pages = {
            (name, kind): Page(client, url)
            for name, project in worlds.items()
            for kind, url in (
                ("run", f"/projects/{project.slug}/runs/long/"),
                ("project", f"/projects/{project.slug}/"),
            )
        }
        samples: dict[tuple, list[float]] = {(*key, state): [] for key in pages for state in ("same", "turn")}
        counts: dict[tuple, tuple[int, int]] = {}
        late = {name: args.turns * (args.factor if name == "10x" else 1) for name in worlds}
        answers: dict[tuple, list[int]] = {key: [] for key in samples}
        for i in range(args.repeat):
            last = i == args.repeat - 1
            for name, project in worlds.items():
                push(project, "long", [turn(late[name], datetime.now(UTC))])
                late[name] += 1
                # After one turn each page's poll, then (a viewer's next poll) each one's with nothing new.
                for state in ("turn", "same"):
                    for kind in ("run", "project"):
                        time.sleep(args.gap)
                        ms, status, queries, calls = pages[(name, kind)].poll(count=last)
                        samples[(name, kind, state)].append(ms)
                        answers[(name, kind, state)].append(status)
                        counts[(name, kind, state)] = (queries, calls)
        med = {key: statistics.median(v) for key, v in samples.items()}
        lines = [
            f"## A live page's poll after one new turn ({datetime.now(UTC):%Y-%m-%d}, {connection.vendor})",
            "",
            f"Machine: {machine(db_version())}. Commit {commit()}. `python bench/polls.py --runs {args.runs} "
            f"--turns {args.turns} --factor {args.factor} --repeat {args.repeat}`: 1x is {args.runs} runs "
            f"and a live run of {args.turns:,} turns, 10x {args.runs * args.factor} runs and "
            f"{args.turns * args.factor:,} turns; in-process (Django's test client, the embedded Redis as "
            f"the cache), worlds alternating, median of {args.repeat} rounds; queries and cache round trips "
            "of the last round.",
            "",
            "| page's poll | world | nothing new ms | after one turn ms | ratio | queries (same / turn) "
            "| cache round trips (same / turn) | answers (same / turn) |",
            "| --- | --- | ---: | ---: | ---: | --- | --- | --- |",
        ]
        ratios = []
        for kind, title in (("run", "long run page (cards)"), ("project", "project page (runs block)")):
            for name in worlds:
                same, after = med[(name, kind, "same")], med[(name, kind, "turn")]
                ratios.append(after / same)
                (q0, c0), (q1, c1) = counts[(name, kind, "same")], counts[(name, kind, "turn")]
                cells = [title, name, f"{same:.1f}", f"{after:.1f}", f"{after / same:.2f}×"]
                said = " / ".join(_answers(answers[(name, kind, state)]) for state in ("same", "turn"))
                lines.append("| " + " | ".join([*cells, f"{q0} / {q1}", f"{c0} / {c1}", said]) + " |")
        for kind in ("run", "project"):
            over = med[("10x", kind, "turn")] / med[("1x", kind, "turn")]
            lines.append(f"| {kind} page after one turn, 10x over 1x | | | | {over:.2f}× | | | |")
        lines += [
            "",
            "- Goal: a poll after one new turn within 2× of an unchanged (204) poll at both sizes: "
            + ("**met**." if max(ratios) <= 2 else f"**not met** (worst {max(ratios):.2f}×)."),
        ]
        report("\n".join(lines), append=args.append)


if __name__ == "__main__":
    main()
