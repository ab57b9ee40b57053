"""Dashboard pages at scale: server time, query count, response size and chart payload of every page.

A fresh data dir and database, seeded through the write path: one project with 200 runs, each with
5,000 metric points over 2 keys, 20–60 hill-climbing scores, 50 agent turns (driver and child
actors) and its state changes; one more run in that project with 10,000 agent turns (driver, child
and nested child actors, tool calls, a budget set through `services.update_run_settings`, scores,
messages, checkpoints and artifacts interleaved, and 5,000 metric points); a few small projects so
that the overview has more than one card. A few runs fail, a few are flagged stalled.

Then every dashboard page is requested in this process with Django's test Client (no HTTP server:
this is server time only), signed in as an admin member of the projects (not a superuser): one
warm-up request, N timed requests (min / median / max), then one more request under
CaptureQueriesContext for the query count and the SQL time. Pages: the projects overview, the
project page, the run page of the 10,000-turn run and of a typical run, the compare page with 2 and
with 50 runs, and the htmx polls of the first three (the full partial). Then every polling element
found on those pages (`hx-get` + `hx-trigger="every …"`), twice: as a full partial and as a poll of an
unchanged page (sending the element's `hx-headers`, i.e. the version it shows). Then every other URL
name of `smrweb/dashboard/urls.py`: a URL a measured page links to (or a chart click opens, built as
static/js/smrweb.js builds it), else one with its arguments filled from the seeded data; POST-only
actions and names that cannot be filled are listed as skipped. Nothing here knows element ids or
page layouts. A page answering 501 is reported as not built; a server error with its traceback.

Chart payload: the page's `<script type="application/json" id="…">` elements (json_script output,
where chart figures live): their bytes, and the points in them (the length of `x` — else `y` — of
every trace in every `{"data": [...]}` figure). Server-rendered `<svg>` is counted separately.

    .venv/bin/python bench/pages.py                 # full size: 200 runs x 5,000 points, 10,000 turns
    .venv/bin/python bench/pages.py --quick         # 20 runs x 500 points, 1,000 turns: a sanity run
    .venv/bin/python bench/pages.py --append        # also append a dated section to docs/benchmarks.md
    .venv/bin/python bench/pages.py --keep          # keep the seeded data dir ...
    .venv/bin/python bench/pages.py --reuse DIR     # ... and measure it again without seeding
    .venv/bin/python bench/pages.py --postgres postgres://user@host/postgres   # a throwaway database there
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from itertools import product
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MARKER = "pages-bench.json"  # in a kept data dir: what was seeded, for --reuse
METRIC_KEYS = ["loss", "val_accuracy", "lr", "grad_norm", "throughput"]  # no "/": they may go into URL paths
MAX_BATCH = 5000  # events.MAX_EVENTS


@dataclass
class Config:
    runs: int
    points: int
    keys: int
    turns_per_run: int
    long_turns: int
    other_projects: int
    bulk_metrics: bool
    seed: int


# --- seeding, through the services ----------------------------------------------------------------


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat()


def push(project, run_id: str, events: list[dict]) -> None:
    """Exactly what the REST endpoint does with a batch: JSON bytes -> parse_events -> ingest_events."""
    from smrweb.tracking import services
    from smrweb.tracking.events import parse_events

    for i in range(0, len(events), MAX_BATCH):
        services.ingest_events(project, run_id, parse_events(json.dumps(events[i : i + MAX_BATCH]).encode()))


def spread(start: datetime, end: datetime, n: int) -> list[datetime]:
    step = (end - start) / max(1, n)
    return [start + step * i for i in range(n)]


def metric_events(
    rng: random.Random, keys: int, points: int, start: datetime, end: datetime, prefix: str = "m"
) -> list[dict]:
    """`points` metric points split evenly over `keys` keys, one step per point, timestamps spread."""
    per_key = points // keys
    stamps = spread(start, end, per_key)
    events = []
    for key in METRIC_KEYS[:keys]:
        for i in range(per_key):
            x = i / max(1, per_key - 1)
            if key == "loss":
                value = 2.5 * math.exp(-3 * x) + 0.05 + rng.gauss(0, 0.03)
            elif key == "val_accuracy":
                value = min(1.0, 0.3 + 0.6 * (1 - math.exp(-4 * x)) + rng.gauss(0, 0.01))
            elif key == "lr":
                value = 3e-4 * 0.5 * (1 + math.cos(math.pi * x))
            else:
                value = abs(rng.gauss(1.0, 0.3))
            events.append(
                {
                    "id": f"{prefix}:{key}:{i}",
                    "type": "metric",
                    "key": key,
                    "value": value,
                    "step": i * 10,
                    "ts": iso(stamps[i]),
                }
            )
    return events


def metric_rows(run, events: list[dict]) -> list:
    from smrweb.tracking.models import MetricPoint

    return [
        MetricPoint(
            run=run,
            key=e["key"],
            step=e["step"],
            value=e["value"],
            ts=datetime.fromisoformat(e["ts"]),
            event_id=e["id"],
        )
        for e in events
    ]


class Turns:
    """Agent turns of one run: a driver, its children and (optionally) their children, with (actor,
    turn) unique and tool calls on some turns."""

    TOOLS = ("read_file", "write_file", "run_tests", "grep", "apply_patch", "list_dir", "shell")

    def __init__(self, rng: random.Random, workers: int, nested: bool):
        self.rng = rng
        self.actors: list[tuple[str, str | None, str]] = [("driver", None, "gpt-5.4-medium")]
        for w in range(1, workers + 1):
            self.actors.append((f"worker-{w}", "driver", "gpt-5.4-mini"))
            if nested:
                for s in "ab":
                    self.actors.append((f"worker-{w}/sub-{s}", f"worker-{w}", "gpt-5.4-nano"))
        self.counter: dict[str, int] = {}

    def make(self, ts: datetime) -> dict:
        rng = self.rng
        # The driver takes about a third of the turns; children share the rest.
        actor, parent, model = (
            self.actors[0] if rng.random() < 0.35 else rng.choice(self.actors[1:] or self.actors)
        )
        n = self.counter.get(actor, 0)
        self.counter[actor] = n + 1
        tokens_in, tokens_out = rng.randint(800, 24000), rng.randint(50, 2500)
        event = {
            "id": f"t:{actor}:{n}",
            "type": "agent.turn",
            "turn": n,
            "actor": actor,
            "model": model,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost_usd": round(tokens_in * 1.25e-6 + tokens_out * 1e-5, 6),
            "duration_ms": rng.randint(300, 60000),
            "ts": iso(ts),
        }
        if parent:
            event["parent_actor"] = parent
        if rng.random() < 0.45:
            calls = []
            for _ in range(rng.randint(1, 4)):
                tool = rng.choice(self.TOOLS)
                calls.append(
                    tool
                    if rng.random() < 0.5
                    else {
                        "name": tool,
                        "args": {"path": f"src/mod_{rng.randint(0, 40)}.py"},
                        "ok": rng.random() > 0.1,
                    }
                )
            event["tool_calls"] = calls
        return event


class Hill:
    """Hill-climbing scores in [0, 1]: each attempt near the current level, the level creeping up."""

    def __init__(self, rng: random.Random):
        self.rng, self.level, self.n = rng, rng.uniform(0.15, 0.4), 0

    def make(self, ts: datetime, **extra) -> dict:
        rng = self.rng
        score = min(1.0, max(0.0, self.level + rng.gauss(0, 0.04)))
        self.level = min(0.97, self.level + abs(rng.gauss(0, 0.012)))
        self.n += 1
        return {
            "id": f"s:{self.n}",
            "type": "score",
            "score": round(score, 6),
            "harness_id": "bench-v1",
            "commit": f"{rng.getrandbits(40):010x}",
            "details": {"tests_passed": rng.randint(0, 120)},
            "ts": iso(ts),
            **extra,
        }


def seed_setup(username: str = "bench-admin", scenario_key: str = "bench-hill"):
    """The signed-in admin and the hill-climbing scenario every seeded project uses."""
    from django.contrib.auth import get_user_model

    from smrweb.tracking import services

    user = get_user_model().objects.create_user(username, email="bench@example.com", is_staff=True)
    scenario = services.create_scenario(
        key=scenario_key,
        name="Bench hill climb",
        score_metric="score",
        direction="maximize",
        score_min=0,
        score_max=1,
        harness_id="bench-v1",
    )
    return user, scenario


def seed_runs(project, cfg: Config, rng: random.Random, now: datetime, log) -> dict:
    """`cfg.runs` runs in `project` through the write path: mostly finished, 5 % failed, some live, 3 %
    live but silent (to be flagged stalled), each with its turns, 20–60 scores, state changes and
    `cfg.points` metric points. Returns the ids, each run's last event time and the timings."""
    from smrweb.tracking.models import MetricPoint, Run

    ids = [f"run-{i:03d}" for i in range(cfg.runs)]
    n_failed, n_stalled, n_live = max(1, cfg.runs // 20), max(1, cfg.runs * 3 // 100), max(2, cfg.runs // 7)
    fates = (
        ["failed"] * n_failed
        + ["stalled"] * n_stalled
        + ["live"] * n_live
        + ["done"] * (cfg.runs - n_failed - n_stalled - n_live)
    )
    rng.shuffle(fates)
    ends: dict[str, datetime] = {}

    t0 = time.perf_counter()
    metric_seconds = 0.0
    metric_count = 0
    for i, (run_id, fate) in enumerate(zip(ids, fates)):
        if fate == "live":
            end = now - timedelta(seconds=rng.uniform(5, 300))
            start = end - timedelta(hours=rng.uniform(1, 20))
        elif fate == "stalled":
            end = now - timedelta(hours=rng.uniform(2, 6))
            start = end - timedelta(hours=rng.uniform(1, 8))
        else:
            end = now - timedelta(days=rng.uniform(0.2, 14))
            start = end - timedelta(hours=rng.uniform(1, 12))
        ends[run_id] = end
        events: list[dict] = [{"id": "state:running", "type": "state", "state": "running", "ts": iso(start)}]
        turns, hill = Turns(rng, workers=rng.randint(1, 3), nested=False), Hill(rng)
        n_scores = rng.randint(20, 60)
        events += [turns.make(ts) for ts in spread(start, end, cfg.turns_per_run)]
        events += [hill.make(ts) for ts in spread(start + (end - start) / 10, end, n_scores)]
        if fate == "failed":
            events.append(
                {
                    "id": "state:failed",
                    "type": "state",
                    "state": "failed",
                    "ts": iso(end),
                    "failure": {
                        "family": rng.choice(["oom", "timeout", "harness_error"]),
                        "detail": "worker exited with code 137 while running the test suite",
                        "source": "bench",
                    },
                }
            )
        elif fate == "done":
            events.append({"id": "state:done", "type": "state", "state": "done", "ts": iso(end)})
        push(project, run_id, events)
        mt = time.perf_counter()
        metrics = metric_events(rng, cfg.keys, cfg.points, start, end)
        if cfg.bulk_metrics:
            run = Run.objects.get(project=project, external_id=run_id)
            MetricPoint.objects.bulk_create(metric_rows(run, metrics), batch_size=5000)
        else:
            push(project, run_id, metrics)
        metric_seconds += time.perf_counter() - mt
        metric_count += len(metrics)
        if (i + 1) % max(1, cfg.runs // 10) == 0:
            log(f"  seeded {i + 1}/{cfg.runs} runs ({time.perf_counter() - t0:.0f} s)")
    return {
        "ids": ids,
        "ends": ends,
        "runs_s": time.perf_counter() - t0,
        "metrics_s": metric_seconds,
        "metric_points": metric_count,
    }


def seed_long_run(project, long_id: str, cfg: Config, rng: random.Random, now: datetime, user) -> float:
    """One run with `cfg.long_turns` agent turns (driver, 6 children and their nested children, tool
    calls), a budget set through `services.update_run_settings`, 20 artifacts, and scores, messages,
    checkpoints and phase changes interleaved, plus `cfg.points` metric points. Returns the seconds."""
    from smrweb.tracking import services
    from smrweb.tracking.models import MetricPoint, Run

    t1 = time.perf_counter()
    end = now - timedelta(seconds=20)
    start = end - timedelta(hours=30)
    push(
        project,
        long_id,
        [  # first, so that the run starts when it was queued
            {
                "id": "state:queued",
                "type": "state",
                "state": "queued",
                "ts": iso(start - timedelta(minutes=3)),
            },
            {
                "id": "state:planning",
                "type": "state",
                "state": "planning",
                "ts": iso(start - timedelta(minutes=1)),
            },
        ],
    )
    # A budget about 70 % used by the end (turns average ~$0.029 and ~14k tokens).
    services.update_run_settings(
        project,
        long_id,
        by=user,
        budget_usd=Decimal(cfg.long_turns) / 25,
        budget_tokens=cfg.long_turns * 20_000,
        requested_profile="gpt-5.4-medium",
        actual_profile="gpt-5.4-medium",
        git_branch="bench/long-run",
    )
    for k in range(20):
        services.store_artifact(
            project,
            long_id,
            path=f"solution/v{k:02d}.py",
            kind="python_source",
            content_type="text/x-python",
            content=_bytes_io(f"# attempt {k}\n" + "x = 1\n" * rng.randint(10, 400)),
            by=user,
        )
    turns, hill = Turns(rng, workers=6, nested=True), Hill(rng)
    stamps = spread(start, end, cfg.long_turns)
    events = []
    phases = ["executing", "reviewing"]
    for n, ts in enumerate(stamps):
        events.append(turns.make(ts))
        if n % 40 == 39:
            k = rng.randint(0, 19)
            events.append(hill.make(ts, artifact=f"solution/v{k:02d}.py", experiment=f"exp-{n // 400}"))
        if n % 100 == 50:
            events.append(
                {
                    "id": f"msg:{n}",
                    "type": "message",
                    "topic": "progress",
                    "target": "driver",
                    "mode": "note",
                    "body": f"Turn {n}: trying another idea on the hot loop; "
                    + "details " * rng.randint(3, 60),
                    "ts": iso(ts),
                }
            )
        if n % 250 == 249:
            events.append(
                {
                    "id": f"ckpt:{n}",
                    "type": "checkpoint",
                    "label": f"after turn {n}",
                    "commit": f"{rng.getrandbits(40):010x}",
                    "ts": iso(ts),
                }
            )
        if n % 1000 == 0:
            phase = phases[(n // 1000) % 2]
            events.append({"id": f"state:{phase}:{n}", "type": "state", "state": phase, "ts": iso(ts)})
        if len(events) >= 1000:
            push(project, long_id, events)
            events = []
    push(project, long_id, events)
    long_metrics = metric_events(rng, cfg.keys, cfg.points, start, end)
    if cfg.bulk_metrics:
        MetricPoint.objects.bulk_create(
            metric_rows(Run.objects.get(project=project, external_id=long_id), long_metrics), batch_size=5000
        )
    else:
        push(project, long_id, long_metrics)
    return time.perf_counter() - t1


def seed_other_projects(count: int, scenario, rng: random.Random, now: datetime, user) -> float:
    """`count` small projects of 5 runs each, so that the overview has more than one card."""
    from smrweb.tracking import services

    # Small projects for the overview.
    t2 = time.perf_counter()
    for p in range(count):
        other = services.create_project(f"side-{p}", name=f"Side project {p}", scenario=scenario, by=user)
        for r in range(5):
            s, e = now - timedelta(days=r + 1, hours=3), now - timedelta(days=r + 1)
            turns, hill = Turns(rng, workers=1, nested=False), Hill(rng)
            push(
                other,
                f"run-{r}",
                [turns.make(ts) for ts in spread(s, e, 20)]
                + [hill.make(ts) for ts in spread(s, e, 10)]
                + metric_events(rng, 2, 200, s, e)
                + [{"id": "state:done", "type": "state", "state": "done", "ts": iso(e)}],
            )
    return time.perf_counter() - t2


def backdate(project, ends: dict[str, datetime]) -> None:
    """Ingest sets last_progress_at to the time of arrival; events seeded in one go all "arrived" now.
    Backdate it to each run's last event, as if the events had arrived live (a bench-only shortcut, no
    service writes it), so that the runs table's order and the stall check see realistic ages."""
    from smrweb.tracking.models import Run

    for run_id, end in ends.items():
        Run.objects.filter(project=project, external_id=run_id).update(last_progress_at=end)


def seed_finish(projects_and_ends: list, user) -> list:
    """Backdate every seeded project's runs, set a 1-hour stall threshold, flag the silent runs stalled
    (returned), and ANALYZE on PostgreSQL (autovacuum would have by now)."""
    from django.db import connection

    from smrweb.tracking import services

    for project, ends in projects_and_ends:
        backdate(project, ends)
        services.update_project(project, stall_after=timedelta(hours=1), by=user)
    stalled = services.flag_stalled_runs()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return stalled


def seed(cfg: Config, log) -> dict:
    """Seed everything; returns what the measurements need and how long each part took."""
    from django.utils import timezone

    from smrweb.tracking import services
    from smrweb.tracking.models import Run, RunState

    rng = random.Random(cfg.seed)
    now = timezone.now()
    user, scenario = seed_setup()
    project = services.create_project("bench", name=f"Bench: {cfg.runs} runs", scenario=scenario, by=user)
    services.create_api_token(project, name="bench-harness", by=user)
    t0 = time.perf_counter()
    seeded = seed_runs(project, cfg, rng, now, log)
    ids = seeded["ids"]
    timings: dict[str, float] = {k: seeded[k] for k in ("runs_s", "metrics_s", "metric_points")}
    long_id = f"agent-{cfg.long_turns}-turns"
    timings["long_run_s"] = seed_long_run(project, long_id, cfg, rng, now, user)
    timings["other_projects_s"] = seed_other_projects(cfg.other_projects, scenario, rng, now, user)
    t3 = time.perf_counter()
    stalled = seed_finish([(project, seeded["ends"])], user)
    timings["finish_s"] = time.perf_counter() - t3
    timings["total_s"] = time.perf_counter() - t0

    states = dict(Run.objects.filter(project=project).values_list("external_id", "state"))
    done_ids = [r for r in ids if states[r] == RunState.DONE]
    return {
        "config": cfg.__dict__,
        "user": user.username,
        "project": project.slug,
        "long_run": long_id,
        "typical_run": done_ids[0] if done_ids else ids[0],
        "runs": ids,
        "stalled": sorted(r.external_id for r in stalled),
        "failed": sorted(r for r in ids if states[r] == RunState.FAILED),
        "timings": {k: round(v, 1) if isinstance(v, float) else v for k, v in timings.items()},
    }


def _bytes_io(text: str):
    import io

    return io.BytesIO(text.encode())


# --- measuring ------------------------------------------------------------------------------------


SCRIPT_RE = re.compile(rb"<script\b([^>]*)>(.*?)</script\s*>", re.DOTALL | re.IGNORECASE)
SVG_RE = re.compile(rb"<svg\b.*?</svg\s*>", re.DOTALL | re.IGNORECASE)
ATTR_RE = re.compile(rb"""([\w:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""")
DTYPE_SIZE = {"i1": 1, "u1": 1, "i2": 2, "u2": 2, "i4": 4, "u4": 4, "i8": 8, "u8": 8, "f4": 4, "f8": 8}


def _attrs(raw: bytes) -> dict[str, str]:
    return {
        m.group(1).decode().lower(): (m.group(2) or m.group(3) or m.group(4) or b"").decode()
        for m in ATTR_RE.finditer(raw)
    }


def _trace_points(trace: dict) -> int:
    values = trace.get("x", trace.get("y"))
    if isinstance(values, list):
        return len(values)
    if isinstance(values, dict) and "bdata" in values:  # plotly's typed-array encoding
        shape = values.get("shape")
        if shape:
            return int(str(shape).split(",")[0])
        return len(base64.b64decode(values["bdata"])) // DTYPE_SIZE.get(
            str(values.get("dtype", "f8"))[-2:], 8
        )
    return 0


def _figures(obj, out: list) -> None:
    """Every {"data": [trace, ...]} found in a JSON document (one figure, or figures nested anyhow)."""
    if isinstance(obj, dict):
        data = obj.get("data")
        if isinstance(data, list) and data and all(isinstance(t, dict) for t in data):
            out.append(data)
            return
        if isinstance(data, list) and not data and "layout" in obj:
            out.append([])  # an empty figure
            return
        for value in obj.values():
            _figures(value, out)
    elif isinstance(obj, list):
        for value in obj:
            _figures(value, out)


@dataclass
class Payload:
    blocks: int = 0
    bytes: int = 0
    figures: int = 0
    traces: int = 0
    points: int = 0
    largest: tuple[int, str] = (0, "")
    unparsable: list[str] = field(default_factory=list)
    svg_count: int = 0
    svg_bytes: int = 0


def chart_payload(body: bytes) -> Payload:
    p = Payload()
    for m in SCRIPT_RE.finditer(body):
        attrs = _attrs(m.group(1))
        if attrs.get("type", "").lower() != "application/json":
            continue
        size = len(m.group(0))
        p.blocks += 1
        p.bytes += size
        p.largest = max(p.largest, (size, attrs.get("id", "?")))
        try:
            doc = json.loads(m.group(2))
        except ValueError:
            p.unparsable.append(attrs.get("id", "?"))
            continue
        figures: list = []
        _figures(doc, figures)
        p.figures += len(figures)
        p.traces += sum(len(f) for f in figures)
        p.points += sum(_trace_points(t) for f in figures for t in f)
    for m in SVG_RE.finditer(body):
        p.svg_count += 1
        p.svg_bytes += len(m.group(0))
    return p


@dataclass
class Target:
    label: str
    name: str  # the URL name in the dashboard namespace
    kwargs: dict = field(default_factory=dict)
    query: list[tuple[str, str]] = field(default_factory=list)
    htmx: bool = False
    url: str = ""  # a concrete URL (seen in a page) instead of name + kwargs + query
    headers: dict = field(default_factory=dict)  # a poll's hx-headers (e.g. the version it shows)
    unchanged_poll: bool = False  # a poll of an unchanged page: a 200 means the version moved on; re-read it
    alternatives: list[str] = field(default_factory=list)  # URLs to try when `url` answers 4xx
    short: str = ""  # how rows found through this page name it

    def __post_init__(self):
        self.short = self.short or self.label

    def resolve(self) -> str:
        from django.urls import reverse

        if not self.url:
            self.url = reverse(f"dashboard:{self.name}", kwargs=self.kwargs) + (
                "?" + urlencode(self.query) if self.query else ""
            )
        return self.url


@dataclass
class Result:
    target: Target
    url: str
    status: str  # "200", "204", "not built", "error (500)", …
    times_ms: list[float] = field(default_factory=list)
    queries: int | None = None
    sql_ms: float | None = None
    response_bytes: int = 0
    payload: Payload | None = None
    error: str = ""
    body: bytes = b""


def get(client, target: Target):
    headers = {"HX-Request": "true", **target.headers} if target.htmx else dict(target.headers)
    response = client.get(target.url, headers=headers)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def fetch(client, target: Target):
    """One request, timed. For an unchanged-poll target, a full answer means the page's version moved
    on (a new tick, say): take the new version from it and ask again, at most twice."""
    for _ in range(3):
        start = time.perf_counter()
        response, body = get(client, target)
        elapsed = (time.perf_counter() - start) * 1000
        if not (target.unchanged_poll and response.status_code == 200):
            break
        fresh = next((h for u, h in scan_page(body, target.url).polls if _same(u, target.url)), None)
        if not fresh or fresh == target.headers:
            break
        target.headers = fresh
    return response, body, elapsed


def measure(client, target: Target, repeat: int, warmup: int) -> Result:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    result = Result(target, f"dashboard:{target.name}", "")
    statuses: list[int] = []
    try:
        result.url = target.resolve()
        for _ in range(max(1, warmup)):
            response, body, _ = fetch(client, target)
        if response.status_code == 501:
            result.status = "not built"
            return result
        for _ in range(repeat):
            response, body, elapsed = fetch(client, target)
            result.times_ms.append(elapsed)
            statuses.append(response.status_code)
        sql_seconds = [0.0]

        def timed(execute, sql, params, many, context):
            start = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                sql_seconds[0] += time.perf_counter() - start

        with connection.execute_wrapper(timed), CaptureQueriesContext(connection) as captured:
            response, body, _ = fetch(client, target)
        statuses.append(response.status_code)
    except Exception:  # noqa: BLE001 - a server error: the test Client re-raises the view's exception
        result.status = "error (500)"
        result.error = traceback.format_exc()
        return result
    counts = {code: statuses.count(code) for code in dict.fromkeys(statuses)}
    result.status = ", ".join(f"{c} ×{n}" if len(counts) > 1 else str(c) for c, n in counts.items())
    result.queries = len(captured)
    result.sql_ms = sql_seconds[0] * 1000
    result.response_bytes = len(body)
    result.body = body
    if "html" in response.get("Content-Type", ""):
        result.payload = chart_payload(body)
    return result


# --- what a page links to and polls -----------------------------------------------------------------


@dataclass
class Scan:
    polls: list[tuple[str, dict]] = field(
        default_factory=list
    )  # (hx-get URL, hx-headers) of polling elements
    urls: list[str] = field(default_factory=list)  # same-site URLs in attributes and in json_script data
    clicks: list[str] = field(
        default_factory=list
    )  # chart click-through URLs, built as static/js/smrweb.js does


class _PageParser(HTMLParser):
    def __init__(self, page_url: str):
        super().__init__(convert_charrefs=True)
        self.page_url, self.scan, self.plots = page_url, Scan(), []
        self.click_urls: dict[str, str] = {}
        self.cards: dict[str, str] = {}  # live cards' versions ([data-card][data-version], dashboard/live.py)
        self.inputs: dict[str, tuple[str, str]] = {}  # id -> (name, value), for hx-include
        self.card_polls: list[tuple[int, str]] = []  # (index in scan.polls, its hx-include)

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        for k, v in a.items():
            if (
                (k in ("href", "hx-get") or k.startswith("data-"))
                and v.startswith("/")
                and not v.startswith("//")
            ):
                self.scan.urls.append(v)
        if "hx-get" in a and "every " in a.get("hx-trigger", ""):
            try:
                headers = json.loads(a.get("hx-headers") or "{}")
            except ValueError:
                headers = {}
            if "data-cards-poll" in a:
                self.card_polls.append((len(self.scan.polls), a.get("hx-include", "")))
            self.scan.polls.append(
                (a["hx-get"] or self.page_url, headers if isinstance(headers, dict) else {})
            )
        if "data-card" in a and "data-version" in a:
            self.cards[a["data-card"]] = a["data-version"]
        if a.get("id") and a.get("name"):
            self.inputs[a["id"]] = (a["name"], a.get("value", ""))
        if a.get("data-plot") and (a.get("data-click-url") or a.get("data-click-from")):
            self.plots.append((a["data-plot"], a.get("data-click-url") or a["data-click-from"]))
        if a.get("id") and a.get("data-click-url"):  # a live chart's click URL, on an element of its own
            self.click_urls[a["id"]] = a["data-click-url"]

    def finish(self) -> None:
        """A cards poll sends the version of every card on the page and its hx-include'd inputs, as
        static/js/smrweb.js does."""
        for index, include in self.card_polls:
            url, headers = self.scan.polls[index]
            ids = [i.strip()[1:] for i in include.split(",") if i.strip().startswith("#")]
            extra = [self.inputs[i] for i in ids if i in self.inputs]
            if extra:
                url += ("&" if "?" in url else "?") + urlencode(extra)
            self.scan.polls[index] = (url, {**headers, "X-Smrweb-Cards": urlencode(self.cards)})


def _json_blocks(body: bytes) -> dict[str, object]:
    blocks = {}
    for m in SCRIPT_RE.finditer(body):
        attrs = _attrs(m.group(1))
        if attrs.get("type", "").lower() == "application/json":
            try:
                blocks[attrs.get("id", "")] = json.loads(m.group(2))
            except ValueError:
                pass
    return blocks


def _strings(obj, out: list[str]) -> None:
    if isinstance(obj, str):
        if obj.startswith("/") and not obj.startswith("//"):
            out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings(v, out)


def scan_page(body: bytes, page_url: str) -> Scan:
    parser = _PageParser(page_url)
    try:
        parser.feed(body.decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - a page we cannot read just yields nothing to follow
        return parser.scan
    parser.finish()
    blocks = _json_blocks(body)
    for doc in blocks.values():
        _strings(doc, parser.scan.urls)
    # A bar chart's click: data-click-url + "&bin=<customdata[0]>&kind=<customdata[1]>" (static/js/smrweb.js).
    # Take the bar with the most turns (customdata[2]), the worst case for the partial it opens.
    for plot_id, click_url in parser.plots:
        click_url = parser.click_urls.get(click_url, click_url)  # data-click-from: the element holding it
        figures: list = []
        _figures(blocks.get(plot_id), figures)
        best = None
        for trace in (t for f in figures for t in f):
            for cd in trace.get("customdata") or []:
                if isinstance(cd, list) and len(cd) >= 2:
                    weight = cd[2] if len(cd) > 2 and isinstance(cd[2], (int, float)) else 0
                    if best is None or weight > best[0]:
                        best = (weight, cd)
        if best is not None:
            cd = best[1]
            parser.scan.clicks.append(f"{click_url}&{urlencode({'bin': cd[0], 'kind': cd[1] or ''})}")
    return parser.scan


def _same(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.path, sorted(parse_qsl(pa.query))) == (pb.path, sorted(parse_qsl(pb.query)))


def dashboard_name(url: str) -> str | None:
    from django.urls import Resolver404, resolve

    try:
        match = resolve(urlsplit(url).path)
    except Resolver404:
        return None
    return match.url_name if match.namespace == "dashboard" else None


def url_candidates(param: str, ctx: dict) -> list | None:
    """Values to try for a URL argument of a page no measured page links to, or None when we cannot fill
    it."""
    name = param.lower()
    if name in ("slug", "project", "project_slug"):
        return [ctx["slug"]]
    if name in ("run_id", "run", "external_id", "run_external_id"):
        return [ctx["long_run"]]
    if name in ("key", "metric", "metric_key", "series"):
        return [ctx["metric_key"]]
    if name in ("actor", "actor_id"):
        return ["driver"]
    if name == "seq":
        return ctx["pks"].get("message_seq") or None
    base = re.sub(r"(_id|_pk|pk|id)$", "", name).rstrip("_")
    aliases = {
        "score": "submission",
        "statechange": "state",
        "state_change": "state",
        "msg": "message",
        "runtime_message": "message",
        "ckpt": "checkpoint",
        "attempt": "submission",
    }
    base = aliases.get(base, base)
    values = ctx["pks"].get(base)
    return list(values) if values else None


def discover(
    measured: set[str], seen: dict[str, list[tuple[str, str]]], ctx: dict
) -> tuple[list[Target], list[str]]:
    """Dashboard URL names not measured yet: a URL a measured page links to (or a chart click opens),
    else one with its arguments filled from the seeded data."""
    from django.urls import reverse

    from smrweb.dashboard import urls

    found, skipped = [], []
    for pattern in urls.urlpatterns:
        name = getattr(pattern, "name", None)
        if not name or name in measured:
            continue
        if seen.get(name):
            (first, source), *rest = seen[name]
            found.append(
                Target(
                    f"{source}: `{name}`",
                    name,
                    url=first,
                    alternatives=list(dict.fromkeys(u for u, _ in rest))[:8],
                )
            )
            continue
        params = list(
            getattr(pattern.pattern, "converters", {}) or re.compile(str(pattern.pattern)).groupindex
        )
        options = {p: url_candidates(p, ctx) for p in params}
        missing = [p for p, v in options.items() if v is None]
        if missing:
            skipped.append(
                f"`{name}` ({pattern.pattern}): no page links to it and {', '.join(missing)} cannot be filled"
            )
            continue
        urls_ = [
            reverse(f"dashboard:{name}", kwargs=dict(zip(params, values)))
            for values in product(*(options[p] for p in params))
        ]
        found.append(Target(f"`{name}` (arguments filled in)", name, url=urls_[0], alternatives=urls_[1:]))
    return found, skipped


def measure_discovered(client, target: Target, repeat: int, warmup: int) -> Result:
    """Probe the candidate URLs until one answers other than 4xx (e.g. a partial that needs a query
    parameter the first link lacked), then measure it."""
    for url in [target.url, *target.alternatives]:
        target.url = url
        probe = measure(client, target, 0, 1)
        if not (probe.status.isdigit() and 400 <= int(probe.status) < 500):
            break
    if probe.status == "405" or probe.status == "not built" or probe.error or probe.status.startswith("4"):
        return probe
    return measure(client, target, repeat, warmup)


def context_for_discovery(info: dict) -> dict:
    from smrweb.tracking.models import (
        AgentTurn,
        ApiToken,
        Artifact,
        Checkpoint,
        Experiment,
        Run,
        RuntimeMessage,
        StateChange,
        Submission,
    )

    run = Run.objects.get(project__slug=info["project"], external_id=info["long_run"])

    def latest(qs):
        return qs.order_by("-id").first()

    turn = latest(AgentTurn.objects.filter(run=run))
    message = latest(RuntimeMessage.objects.filter(run=run))
    pks = {
        "turn": [turn.pk, turn.turn] if turn else None,
        "agentturn": [turn.pk] if turn else None,
        "submission": [x.pk for x in [latest(Submission.objects.filter(run=run))] if x] or None,
        "artifact": [x.pk for x in [latest(Artifact.objects.filter(run=run))] if x] or None,
        "checkpoint": [x.pk for x in [latest(Checkpoint.objects.filter(run=run))] if x] or None,
        "message": [message.pk, message.seq] if message else None,
        "message_seq": [message.seq] if message else None,
        "experiment": [x.pk for x in [latest(Experiment.objects.filter(run=run))] if x] or None,
        "state": [x.pk for x in [latest(StateChange.objects.filter(run=run))] if x] or None,
        "token": [x.pk for x in [latest(ApiToken.objects.filter(project=run.project))] if x] or None,
    }
    return {"slug": info["project"], "long_run": info["long_run"], "metric_key": METRIC_KEYS[0], "pks": pks}


def targets_for(info: dict) -> list[Target]:
    slug, long_id, typical = info["project"], info["long_run"], info["typical_run"]
    cfg = info["config"]
    runs = info["runs"]
    n_long = f"{cfg['long_turns']:,}"
    many = min(50, len(runs))
    return [
        Target("projects overview", "project-list", short="overview"),
        Target("projects overview, htmx poll (full partial)", "project-list", htmx=True),
        Target(
            f"project page ({len(runs) + 1} runs)", "project-detail", {"slug": slug}, short="project page"
        ),
        Target("project page, htmx poll (full partial)", "project-detail", {"slug": slug}, htmx=True),
        Target(
            f"run page ({n_long} turns)",
            "run-detail",
            {"slug": slug, "run_id": long_id},
            short=f"{n_long}-turn run page",
        ),
        Target(
            f"run page ({n_long} turns), htmx poll (full partial)",
            "run-detail",
            {"slug": slug, "run_id": long_id},
            htmx=True,
        ),
        Target(
            f"run page (typical finished run: {cfg['turns_per_run']} turns, {cfg['points']:,} points)",
            "run-detail",
            {"slug": slug, "run_id": typical},
            short="typical run page",
        ),
        Target(
            "compare, 2 runs",
            "compare-runs",
            {"slug": slug},
            [("runs", long_id), ("runs", typical)],
            short="compare 2",
        ),
        Target(
            f"compare, {many} runs",
            "compare-runs",
            {"slug": slug},
            [("runs", r) for r in runs[:many]],
            short=f"compare {many}",
        ),
    ]


def measure_all(client, info: dict, repeat: int, warmup: int, log) -> tuple[list[Result], list[str]]:
    """The named pages; then every poll found on them, as a full partial and as a poll of an
    unchanged page (sending the version the page showed); then every other dashboard URL name."""
    results: list[Result] = []
    measured: set[str] = set()
    seen: dict[str, list[tuple[str, str]]] = {}
    polls: list[tuple[str, dict, str]] = []

    def run(target: Target, discovered: bool = False) -> Result:
        log(f"measuring {target.label}")
        result = (measure_discovered if discovered else measure)(client, target, repeat, warmup)
        results.append(result)
        measured.add(target.name)
        if result.status == "200" and not target.htmx and result.body:
            scan = scan_page(result.body, result.url)
            for url in [*scan.clicks, *scan.urls]:  # chart clicks first: they carry every parameter
                name = dashboard_name(url)
                if name:
                    seen.setdefault(name, []).append((url, target.short))
            polls.extend((u, h, target.short) for u, h in scan.polls)
        return result

    explicit = targets_for(info)
    for target in explicit:
        run(target)
    full_partials = [t.url for t in explicit if t.htmx]
    done: list[str] = []
    for url, headers, source in polls:
        if any(_same(url, d) for d in done):
            continue
        done.append(url)
        name = dashboard_name(url) or "?"
        if not any(_same(url, f) for f in full_partials):
            run(Target(f"{source}: poll `{name}` (full partial)", name, url=url, htmx=True))
        run(
            Target(
                f"{source}: poll `{name}`, nothing new",
                name,
                url=url,
                htmx=True,
                headers=dict(headers),
                unchanged_poll=True,
            )
        )
    found, skipped = discover(measured, seen, context_for_discovery(info))
    for target in found:
        result = run(target, discovered=True)
        if result.status == "405":
            results.remove(result)
            skipped.append(f"`{target.name}` ({result.url}): a POST action (GET answers 405)")
    return results, skipped


# --- report ---------------------------------------------------------------------------------------


def kb(n: int | None) -> str:
    return "–" if n is None else f"{n / 1024:,.1f}"


def table(results: list[Result]) -> str:
    head = (
        "| page | status | ms min / median / max | queries | SQL ms | response KB "
        "| json_script blocks | chart KB | figures / traces | chart points | SVG KB |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    rows = [head]
    for r in results:
        if not r.times_ms:
            rows.append(f"| {r.target.label} | {r.status} |" + " – |" * 9)
            continue
        t = f"{min(r.times_ms):,.1f} / **{statistics.median(r.times_ms):,.1f}** / {max(r.times_ms):,.1f}"
        p = r.payload
        rows.append(
            f"| {r.target.label} | {r.status} | {t} | {'–' if r.queries is None else r.queries} "
            f"| {'–' if r.sql_ms is None else f'{r.sql_ms:,.1f}'} | "
            f"{kb(r.response_bytes) if r.times_ms else '–'} "
            f"| {p.blocks if p else '–'} | {kb(p.bytes) if p else '–'} "
            f"| {f'{p.figures} / {p.traces}' if p else '–'} | {f'{p.points:,}' if p else '–'} "
            f"| {kb(p.svg_bytes) if p else '–'} |"
        )
    return "\n".join(rows)


def notes(results: list[Result], skipped: list[str]) -> list[str]:
    out = []
    for r in results:
        if r.payload and r.payload.unparsable:
            out.append(
                f"{r.target.label}: json_script blocks that are not JSON: {', '.join(r.payload.unparsable)}"
            )
        if r.payload and r.payload.largest[0]:
            out.append(
                f"{r.target.label}: largest json_script block `{r.payload.largest[1]}`, "
                f"{kb(r.payload.largest[0])} KB"
            )
    out += [f"skipped {s}" for s in skipped]
    return out


def machine(db_version: str) -> str:
    import django

    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor() or model
    ram = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        ram = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, IndexError, ValueError):
        pass
    return (
        f"{os.cpu_count()}-core {model}{ram}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, Django {django.get_version()}, {db_version}"
    )


def cpu_snapshot(*, children: bool = False) -> tuple[float, float, float] | None:
    """(wall clock, CPU seconds the whole machine was busy, CPU seconds this process used — with its
    finished children when `children`, e.g. servers started for the measurement), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    own = os.times()
    mine = own.user + own.system + (own.children_user + own.children_system if children else 0)
    return time.monotonic(), (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), mine


def others_busy(before, after) -> str:
    """How busy other processes kept the machine between two snapshots: noise in the timings."""
    if not before or not after:
        return "unknown"
    wall = after[0] - before[0]
    others = (after[1] - before[1]) - (after[2] - before[2])
    return f"{max(0.0, others) / (wall * (os.cpu_count() or 1)):.0%} of the CPUs"


def db_version() -> str:
    import sqlite3

    from django.db import connection

    if connection.vendor == "postgresql":
        v = connection.pg_version
        return f"PostgreSQL {v // 10000}.{v % 10000} (SQLite library {sqlite3.sqlite_version}, unused)"
    return f"SQLite {sqlite3.sqlite_version} (WAL)"


def command_line() -> str:
    exe = Path(sys.executable)
    try:
        exe_s = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else exe.name
    except ValueError:
        exe_s = exe.name
    script = Path(sys.argv[0]).resolve()
    script_s = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else sys.argv[0]
    argv = []
    skip = False
    for a in sys.argv[1:]:  # never write a database password into the docs
        if skip:
            argv.append(re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", a))
            skip = False
            continue
        skip = a == "--postgres"
        argv.append(re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", a) if a.startswith("--postgres=") else a)
    return shlex.join([exe_s, script_s, *argv])


def section(
    info: dict, results: list[Result], skipped: list[str], repeat: int, warmup: int, reused: bool, noise: str
) -> str:
    cfg, tm = info["config"], info["timings"]
    seeded = (
        f"one project with {cfg['runs']} runs × {cfg['points']:,} metric points ({cfg['keys']} keys), "
        f"{cfg['turns_per_run']} agent turns and 20–60 scores each "
        f"({len(info['failed'])} failed, {len(info['stalled'])} flagged stalled), "
        f"plus one run with {cfg['long_turns']:,} agent turns (nested child actors, tool calls, budget, "
        f"scores, messages, checkpoints, 20 artifacts, {cfg['points']:,} metric points); "
        f"{cfg['other_projects']} small projects for the overview. Scores, turns and states went through "
        f"`services.ingest_events`; metric points "
        + (
            "were bulk-inserted (`MetricPoint.objects.bulk_create`; they feed no run summary)"
            if cfg["bulk_metrics"]
            else "too"
        )
        + f". Seeding took {tm['total_s']:.0f} s ({tm['metric_points']:,} metric points in "
        f"{tm['metrics_s']:.0f} s)."
    )
    lines = [
        (
            f"## Dashboard pages: {cfg['runs']} runs × {cfg['points']:,} points, a "
            f"{cfg['long_turns']:,}-turn run "
            f"({date.today().isoformat()})"
        ),
        "",
        f"Machine: {machine(db_version())}; other processes kept {noise} busy while measuring.",
        (
            f"Command: `{command_line()}`: "
            + ("the data dir an earlier `--keep` run seeded" if reused else "a fresh data dir and database")
            + f", {seeded}"
        ),
        (
            f"Each page: {warmup} warm-up request, then {repeat} timed requests with Django's test Client in "
            "the same process (server time only: no HTTP server, no network, no browser), signed in as an "
            "admin "
            "member; queries and SQL time counted on one more request (CaptureQueriesContext). Polls found "
            "on a "
            "page are measured twice: as a full partial (no version header) and as a poll of an unchanged "
            "page "
            '(sending the version the page showed). Chart payload: the `<script type="application/json">` '
            "(json_script) elements of the response, and the points in the figures' traces (length of `x`); "
            "SVG KB: server-rendered `<svg>` elements."
        ),
        "",
        table(results),
        "",
    ]
    extra = notes(results, skipped)
    if extra:
        lines += [f"- {n}" for n in extra] + [""]
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------


def throwaway_postgres(url: str) -> tuple[str, str]:
    """Create a fresh database on the server `url` points at; return (its URL, its name)."""
    import psycopg

    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql", "psql", "pgsql") else parts.scheme
    admin_url = urlunsplit((scheme, parts.netloc, parts.path or "/postgres", parts.query, ""))
    name = f"smrweb_pages_bench_{time.time_ns()}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, "")), name


def drop_postgres(url: str, name: str) -> None:
    import psycopg

    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql", "psql", "pgsql") else parts.scheme
    with psycopg.connect(
        urlunsplit((scheme, parts.netloc, parts.path or "/postgres", parts.query, "")), autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def django_setup(data: Path, database_url: str = "") -> None:
    """Django on the data dir `data` (SQLite there, unless `database_url`), DEBUG off, request errors
    not logged (they are reported in the results)."""
    os.environ["SMRWEB_DATA_DIR"] = str(data)
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")
    os.environ.pop("DATABASE_URL", None)
    if database_url:
        os.environ["DATABASE_URL"] = database_url

    import django

    django.setup()
    logging.getLogger("django.request").setLevel(logging.CRITICAL)  # 404/501/500 are reported below


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, help="runs in the big project (default 200; --quick 20)")
    parser.add_argument("--points", type=int, help="metric points per run (default 5000; --quick 500)")
    parser.add_argument(
        "--keys",
        type=int,
        default=2,
        choices=range(1, len(METRIC_KEYS) + 1),
        help="metric keys the points are spread over",
    )
    parser.add_argument("--turns-per-run", type=int, default=50)
    parser.add_argument(
        "--long-turns", type=int, help="agent turns of the long run (default 10000; --quick 1000)"
    )
    parser.add_argument("--other-projects", type=int, default=3, help="small projects for the overview")
    parser.add_argument(
        "--quick", action="store_true", help="20 runs x 500 points, 1,000 turns: a sanity run"
    )
    parser.add_argument(
        "--bulk-metrics",
        action="store_true",
        help="bulk-insert metric points instead of ingest_events (they feed no run summary)",
    )
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per page (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed requests first (default 1)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--postgres", metavar="URL", help="create a throwaway database on this server instead of SQLite"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data dir (and PostgreSQL database)")
    parser.add_argument(
        "--reuse", metavar="DIR", help="measure a data dir kept by --keep without seeding again"
    )
    parser.add_argument("--append", action="store_true", help="append a dated section to the benchmarks doc")
    parser.add_argument(
        "--docs", default=str(ROOT / "docs" / "benchmarks.md"), help="the doc --append writes to"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    args = parser.parse_args()
    full, quick = (200, 5000, 10_000), (20, 500, 1000)
    for attr, f, q in zip(("runs", "points", "long_turns"), full, quick):
        if getattr(args, attr) is None:
            setattr(args, attr, q if args.quick else f)
    if args.points < args.keys:
        parser.error("--points must be at least --keys")

    pg_name = None
    if args.reuse:
        data = Path(args.reuse).resolve()
        marker = data / MARKER
        if not marker.exists():
            parser.error(f"{data} holds no {MARKER}: not a data dir kept by --keep")
        kept = json.loads(marker.read_text())
        database_url = kept.get("database_url") or ""
    else:
        data = Path(tempfile.mkdtemp(prefix="smrweb-pagebench-"))
        database_url = ""
        if args.postgres:
            database_url, pg_name = throwaway_postgres(args.postgres)
    django_setup(data, database_url)

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.urls import get_resolver

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        if args.reuse:
            info, reused = kept["info"], True
            log(f"reusing {data} (seeded {info['timings']['total_s']:.0f} s)")
        else:
            cfg = Config(
                runs=args.runs,
                points=args.points,
                keys=args.keys,
                turns_per_run=args.turns_per_run,
                long_turns=args.long_turns,
                other_projects=args.other_projects,
                bulk_metrics=args.bulk_metrics,
                seed=args.seed,
            )
            log(f"data dir {data} ({connection.vendor}); migrating")
            call_command("migrate", verbosity=0)
            log(
                f"seeding {cfg.runs} runs x {cfg.points:,} points, a {cfg.long_turns:,}-turn run "
                f"({'bulk-inserted' if cfg.bulk_metrics else 'ingested'} metrics)"
            )
            info, reused = seed(cfg, log), False
            log(f"seeded in {info['timings']['total_s']:.0f} s: {json.dumps(info['timings'])}")
            if args.keep:
                (data / MARKER).write_text(json.dumps({"database_url": database_url, "info": info}, indent=1))
            # Measure on a fresh connection (SQLite checkpoints its WAL on close), as --reuse does.
            connection.close()

        try:
            get_resolver().url_patterns  # noqa: B018 - imports every URLconf and view module
        except Exception:  # noqa: BLE001 - whatever breaks the import, report it
            log(
                "The URLconf does not import (a page being edited?); nothing can be measured:\n"
                + traceback.format_exc()
            )
            sys.exit(2)
        client = Client(raise_request_exception=True)
        client.force_login(get_user_model().objects.get(username=info["user"]))
        t, cpu0 = time.perf_counter(), cpu_snapshot()
        results, skipped = measure_all(client, info, args.repeat, args.warmup, log)
        noise = others_busy(cpu0, cpu_snapshot())
        log(f"measured in {time.perf_counter() - t:.0f} s")

        tm = info["timings"]
        print(
            f"\nSeeded {info['config']['runs']} runs x {info['config']['points']:,} metric points + a "
            f"{info['config']['long_turns']:,}-turn run in {tm['total_s']:.0f} s "
            f"(runs {tm['runs_s']:.0f} s, of which metric points {tm['metrics_s']:.0f} s for "
            f"{tm['metric_points']:,} points, "
            f"{'bulk-inserted' if info['config']['bulk_metrics'] else 'through ingest_events'}; "
            f"long run {tm['long_run_s']:.0f} s; small projects {tm['other_projects_s']:.0f} s)"
            + (" [reused]" if reused else "")
            + f"\n{machine(db_version())}; other processes kept "
            f"{noise} busy while measuring\n"
        )
        print(table(results))
        for n in notes(results, skipped):
            print(f"- {n}")
        for r in results:
            if r.error:
                print(f"\n### {r.target.label}: {r.url}\n```\n{r.error}```")
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "info": info,
                        "results": [
                            {
                                "label": r.target.label,
                                "url": r.url,
                                "status": r.status,
                                "times_ms": r.times_ms,
                                "queries": r.queries,
                                "sql_ms": r.sql_ms,
                                "response_bytes": r.response_bytes,
                                "payload": r.payload.__dict__ if r.payload else None,
                                "error": r.error,
                            }
                            for r in results
                        ],
                        "skipped": skipped,
                    },
                    indent=1,
                    default=str,
                )
            )
        if args.append:
            docs = Path(args.docs)
            text = docs.read_text() if docs.exists() else "# Benchmarks\n"
            docs.write_text(
                text.rstrip("\n")
                + "\n\n"
                + section(info, results, skipped, args.repeat, args.warmup, reused, noise)
            )
            log(f"appended to {docs}")
    finally:
        connection.close()
        if args.keep or args.reuse:
            log(
                f"kept {data}"
                + (f" (database {database_url.rsplit('/', 1)[-1]})" if database_url else "")
                + f"; measure again with --reuse {data}"
            )
        else:
            if pg_name:
                drop_postgres(args.postgres, pg_name)
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
