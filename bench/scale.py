"""Ten times the work at the same speed: every page and poll of a 1x world against a 10x world, in one run.

One database holds two projects seeded by bench/pages.py's own pieces (runs, scores and turns through
`services.ingest_events` with its `Turns` and `Hill` makers; metric points bulk-inserted unless
--ingest-metrics): the 1x world, `scale-1x`, has --runs runs (default 200) with scores, turns and metric
points each, and one run with --turns agent turns (default 10,000); the 10x world, `scale-10x`, has
--factor times as many of both (2,000 runs, a 100,000-turn run). A quarter of each project's scores are
marked verified (a bench-only shortcut, as the backdating of last progress is: no validator runs) so the
verified-only leaderboard and best-so-far have something to show.

Each page is then requested in the 1x and the 10x world alternately (Django's test Client in this process,
server time only, signed in as an admin member): one warm-up each, N timed pairs, then one request each
under CaptureQueriesContext (queries, SQL time) and one under tracemalloc (the peak memory of that
request). Pages: the project page (and a sorted, later page of its runs table), its poll as a full
partial and unchanged (204), the run page of the long run and its poll, every polled element found on
those pages (as a full partial and unchanged, paired between the worlds by URL name and order), and
Compare of --compare runs (default 20) against --factor times as many.

Targets (issue 21): at 10x each page takes at most 1.5x the 1x time, with equal query counts, every
chart figure (json_script block) at most 100 KB and the peak memory bounded (at most 1.5x); absolute:
the 10x project page and run page at most 150 ms median, Compare at 10x at most 500 ms.

    .venv/bin/python bench/scale.py                      # 200 / 2,000 runs, 10,000 / 100,000 turns
    .venv/bin/python bench/scale.py --quick              # 20 / 200 runs, 1,000 / 10,000 turns
    .venv/bin/python bench/scale.py --keep               # keep the data dir ...
    .venv/bin/python bench/scale.py --reuse DIR          # ... and measure it again without seeding
    .venv/bin/python bench/scale.py --append             # also append a dated section to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pages import (  # noqa: E402
    ROOT,
    Config,
    Target,
    chart_payload,
    command_line,
    cpu_snapshot,
    dashboard_name,
    db_version,
    django_setup,
    machine,
    others_busy,
    scan_page,
    seed_finish,
    seed_long_run,
    seed_runs,
    seed_setup,
)
from pages import fetch as pages_fetch  # noqa: E402 (bench/ is put on the path above)

MARKER = "scale-bench.json"  # in a kept data dir: what was seeded, for --reuse
FIGURE_KB = 100
RATIO = 1.5
ABSOLUTE_MS = {"project page": 150, "run page": 150, "compare": 500}  # at 10x


# --- seeding ----------------------------------------------------------------------------------------


def seed_world(slug: str, cfg: Config, user, scenario, rng, now, log) -> dict:
    from smrweb.tracking import services
    from smrweb.tracking.models import Submission

    t0 = time.perf_counter()
    project = services.create_project(slug, name=f"Scale: {cfg.runs:,} runs", scenario=scenario, by=user)
    log(f"seeding {slug}: {cfg.runs:,} runs, a {cfg.long_turns:,}-turn run")
    seeded = seed_runs(project, cfg, rng, now, log)
    long_id = f"agent-{cfg.long_turns}-turns"
    long_s = seed_long_run(project, long_id, cfg, rng, now, user)
    # A quarter of the scores verified (bench shortcut: no validator runs; run summaries do not depend on
    # it), so the verified-only leaderboard, best so far and chart frontier are not empty.
    verified = Submission.objects.filter(project=project, id__in=_every_fourth(project)).update(
        status="verified"
    )
    return {
        "slug": slug,
        "config": cfg.__dict__,
        "runs": seeded["ids"],
        "long_run": long_id,
        "ends": {k: v.isoformat() for k, v in seeded["ends"].items()},
        "verified": verified,
        "timings": {
            "runs_s": round(seeded["runs_s"], 1),
            "metric_points": seeded["metric_points"],
            "long_run_s": round(long_s, 1),
            "total_s": round(time.perf_counter() - t0, 1),
        },
    }


def _every_fourth(project):
    from django.db.models import F
    from django.db.models.functions import Mod

    from smrweb.tracking.models import Submission

    return Submission.objects.filter(project=project).annotate(m=Mod(F("id"), 4)).filter(m=0).values("id")


def seed(args, log) -> dict:
    from datetime import datetime

    from django.utils import timezone

    from smrweb.tracking.models import Project

    rng = random.Random(args.seed)
    now = timezone.now()
    user, scenario = seed_setup("scale-admin", "scale-hill")
    worlds = {}
    for name, factor in (("1x", 1), (f"{args.factor}x", args.factor)):
        cfg = Config(
            runs=args.runs * factor,
            points=args.points,
            keys=2,
            turns_per_run=args.turns_per_run,
            long_turns=args.turns * factor,
            other_projects=0,
            bulk_metrics=not args.ingest_metrics,
            seed=args.seed,
        )
        worlds[name] = seed_world(f"scale-{name}", cfg, user, scenario, rng, now, log)
    stalled = seed_finish(
        [
            (
                Project.objects.get(slug=w["slug"]),
                {k: datetime.fromisoformat(v) for k, v in w["ends"].items()},
            )
            for w in worlds.values()
        ],
        user,
    )
    for w in worlds.values():
        w.pop("ends")
        w["stalled"] = sum(1 for r in stalled if r.project.slug == w["slug"])
    return {"user": user.username, "factor": args.factor, "compare": args.compare, "worlds": worlds}


# --- measuring --------------------------------------------------------------------------------------


@dataclass
class Side:
    url: str = ""
    status: str = ""
    times_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    queries: int | None = None
    sql_ms: float | None = None
    response_bytes: int = 0
    figure_bytes: int = 0  # the largest json_script block
    figure_id: str = ""
    points: int = 0
    peak_bytes: int = 0
    body: bytes = b""
    error: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_ms) if self.cpu_ms else None


@dataclass
class Pair:
    label: str
    kind: str  # "project page", "run page", "compare" or "" (what absolute target applies)
    small: Side
    large: Side
    checks: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.small.median and self.large.median:
            return self.large.median / self.small.median
        return None

    @property
    def cpu_ratio(self) -> float | None:
        if self.small.cpu_median and self.large.cpu_median:
            return self.large.cpu_median / self.small.cpu_median
        return None

    @property
    def passed(self) -> bool:
        return all(ok for _, ok in self.checks)


def timed_one(client, target: Target):
    start, cpu = time.perf_counter(), time.thread_time()
    response, body, _ = pages_fetch(client, target)
    return response, body, (time.perf_counter() - start) * 1000, (time.thread_time() - cpu) * 1000


def measure_pair(
    client, label: str, kind: str, small: Target, large: Target, repeat: int, warmup: int, cold: bool = False
) -> Pair:
    """Both worlds' requests alternately (so load from other processes falls on both alike), then each
    once for queries and once under tracemalloc. `cold`: the cache is emptied before every request (what
    the pages keep there — a run's turn aggregates, a person's clock — is computed again)."""
    import traceback

    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def fetch(client, target):
        if cold:
            cache.clear()
        return pages_fetch(client, target)

    def _one(client, target):
        if cold:
            cache.clear()
        return timed_one(client, target)

    pair = Pair(label, kind, Side(url=small.url), Side(url=large.url))
    sides = ((small, pair.small), (large, pair.large))
    try:
        for target, _ in sides:
            for _ in range(max(1, warmup)):
                fetch(client, target)
        for i in range(repeat):
            for target, side in sides if i % 2 == 0 else sides[::-1]:
                response, body, ms, cpu = _one(client, target)
                side.times_ms.append(ms)
                side.cpu_ms.append(cpu)
                side.status = str(response.status_code)
        for target, side in sides:
            # What the page keeps is kept under a version with a 30-second tick: read the page once more
            # right before counting, so both worlds are counted in the same (kept) state.
            fetch(client, target)
            sql = [0.0]

            def timed(execute, sql_text, params, many, context, sql=sql):
                start = time.perf_counter()
                try:
                    return execute(sql_text, params, many, context)
                finally:
                    sql[0] += time.perf_counter() - start

            with connection.execute_wrapper(timed), CaptureQueriesContext(connection) as captured:
                response, body, _ = fetch(client, target)
            side.queries, side.sql_ms = len(captured), sql[0] * 1000
            side.status = str(response.status_code)
            side.body, side.response_bytes = body, len(body)
            payload = chart_payload(body)
            side.figure_bytes, side.figure_id = payload.largest
            side.points = payload.points
            tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                fetch(client, target)
                side.peak_bytes = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    except Exception:  # noqa: BLE001 - a server error: report it with its traceback
        pair.large.error = traceback.format_exc()
    judge(pair)
    return pair


def judge(pair: Pair) -> None:
    s, g = pair.small, pair.large
    if s.error or g.error:
        pair.checks.append(("answers", False))
        return
    pair.checks.append((f"time ≤ {RATIO}×", pair.ratio is not None and pair.ratio <= RATIO))
    pair.checks.append(("equal queries", s.queries == g.queries))
    pair.checks.append((f"figures ≤ {FIGURE_KB} KB", max(s.figure_bytes, g.figure_bytes) <= FIGURE_KB * 1024))
    pair.checks.append((f"memory ≤ {RATIO}×", g.peak_bytes <= RATIO * max(s.peak_bytes, 1)))
    if pair.kind in ABSOLUTE_MS:
        limit = ABSOLUTE_MS[pair.kind]
        pair.checks.append((f"≤ {limit} ms", g.median is not None and g.median <= limit))


def targets(info: dict) -> list[tuple[str, str, Target, Target, bool]]:
    """(label, kind, 1x target, 10x target, cold) of the named pages."""
    small, large = info["worlds"].values()
    n_small, n_large = info["compare"], info["compare"] * info["factor"]

    def both(name, kwargs_of, query_of=lambda w: [], htmx=False, headers=None):
        return tuple(
            Target(name, name, kwargs_of(w), query_of(w), htmx=htmx, headers=dict(headers or {}))
            for w in (small, large)
        )

    project = lambda w: {"slug": w["slug"]}  # noqa: E731
    run = lambda w: {"slug": w["slug"], "run_id": w["long_run"]}  # noqa: E731

    def compare_of(headers=None):
        return tuple(
            Target(
                "compare-runs",
                "compare-runs",
                project(w),
                [("runs", r) for r in w["runs"][:n]],
                headers=dict(headers or {}),
            )
            for w, n in ((small, n_small), (large, n_large))
        )

    compare = compare_of()
    rows = [
        ("project page", "project page", *both("project-detail", project), False),
        (
            "project page, sorted by spend, page 3",
            "",
            *both("project-detail", project, lambda w: [("sort", "-spend"), ("page", "3")]),
            False,
        ),
        ("project page, htmx poll (full partial)", "", *both("project-detail", project, htmx=True), False),
        ("run page of the long run", "run page", *both("run-detail", run), False),
        ("run page, htmx poll (full partial)", "", *both("run-detail", run, htmx=True), False),
        (f"compare {n_small} / {n_large} runs", "compare", *compare, False),
        # A hard reload renders the comparison again from the series kept per run: what a new baseline or a
        # dropped run costs (the render kept for the page as it was does not apply).
        (
            f"compare {n_small} / {n_large} runs, re-rendered (series kept)",
            "compare",
            *compare_of({"Cache-Control": "no-cache"}),
            False,
        ),
        ("project page, cold", "project page", *both("project-detail", project), True),
        ("run page of the long run, cold", "run page", *both("run-detail", run), True),
        (f"compare {n_small} / {n_large} runs, cold", "compare", *compare, True),
    ]
    for _, _, a, b, _ in rows:
        a.resolve(), b.resolve()
    return rows


def polls_of(pair: Pair) -> list[tuple[str, tuple, tuple]]:
    """The polled elements of both worlds' page, paired by URL name and order."""
    found = []
    for side in (pair.small, pair.large):
        seen: dict[str, int] = {}
        out = {}
        for url, headers in scan_page(side.body, side.url).polls:
            name = dashboard_name(url) or "?"
            seen[name] = seen.get(name, 0) + 1
            out[(name, seen[name])] = (url, headers)
        found.append(out)
    return [
        (key[0] + (f" #{key[1]}" if key[1] > 1 else ""), found[0][key], found[1][key])
        for key in found[0]
        if key in found[1]
    ]


def measure_all(client, info: dict, repeat: int, warmup: int, log, only: str = "") -> list[Pair]:
    pairs: list[Pair] = []
    done: set[str] = set()
    for label, kind, a, b, cold in targets(info):
        if only and only not in label:
            continue
        log(f"measuring {label}")
        pair = measure_pair(client, label, kind, a, b, repeat, warmup, cold)
        pairs.append(pair)
        if a.htmx or cold or kind not in ("project page", "run page"):
            continue
        for name, (url_a, h_a), (url_b, h_b) in polls_of(pair):
            for unchanged in (False, True):
                key = f"{url_a}|{unchanged}"
                if key in done:
                    continue
                done.add(key)
                what = "nothing new (204)" if unchanged else "full partial"
                poll_label = f"{label}: poll `{name}`, {what}"
                log(f"measuring {poll_label}")
                ta, tb = (
                    Target(
                        name,
                        name,
                        url=u,
                        htmx=True,
                        headers=dict(h) if unchanged else {},
                        unchanged_poll=unchanged,
                    )
                    for u, h in ((url_a, h_a), (url_b, h_b))
                )
                pairs.append(measure_pair(client, poll_label, "", ta, tb, repeat, warmup))
    return pairs


def profile(client, info: dict, text: str) -> None:
    """cProfile one request (after a warm-up) of the larger world's page whose label contains `text`:
    the functions by cumulative and by own time, and the SQL with its time."""
    import cProfile
    import pstats

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for label, _, _, target, cold in targets(info):
        if text not in label:
            continue
        pages_fetch(client, target)
        if cold:  # the cold rows are measured with the cache emptied before the request: so is this
            from django.core.cache import cache

            cache.clear()
        profiler = cProfile.Profile()
        with CaptureQueriesContext(connection) as captured:
            profiler.enable()
            start = time.perf_counter()
            response, _, _ = pages_fetch(client, target)
            elapsed = (time.perf_counter() - start) * 1000
            profiler.disable()
        print(f"## {label}: {target.url} -> {response.status_code} in {elapsed:,.1f} ms (profiled)")
        stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
        for q in sorted(captured.captured_queries, key=lambda q: -float(q["time"]))[:15]:
            print(f"{float(q['time']) * 1000:8.1f} ms  {q['sql'][:400]}")
        return
    print(f"no page label contains {text!r}")


# --- report -----------------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}"


def _kb(n: int) -> str:
    return f"{n / 1024:,.1f}"


def table(pairs: list[Pair], factor: int) -> str:
    rows = [
        f"| page | 1x ms | {factor}x ms | ratio | CPU ms 1x / {factor}x | CPU ratio | queries 1x / {factor}x "
        f"| response KB 1x / {factor}x | largest figure KB 1x / {factor}x | peak MiB 1x / {factor}x "
        "| result |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in pairs:
        s, g = p.small, p.large
        if s.error or g.error:
            rows.append(f"| {p.label} | – | – | – | – | – | – | – | – | – | **error** |")
            continue
        failed = [name for name, ok in p.checks if not ok]
        status = f"{s.status}" if s.status == g.status else f"{s.status} / {g.status}"
        label = p.label if status in p.label else f"{p.label} ({status})"
        rows.append(
            f"| {label} | {_ms(s.median)} | **{_ms(g.median)}** "
            f"| {'–' if p.ratio is None else f'{p.ratio:.2f}'} "
            f"| {_ms(s.cpu_median)} / {_ms(g.cpu_median)} "
            f"| {'–' if p.cpu_ratio is None else f'{p.cpu_ratio:.2f}'} "
            f"| {s.queries} / {g.queries} | {_kb(s.response_bytes)} / {_kb(g.response_bytes)} "
            f"| {_kb(s.figure_bytes)} / {_kb(g.figure_bytes)} "
            f"| {s.peak_bytes / 2**20:,.1f} / {g.peak_bytes / 2**20:,.1f} "
            f"| {'pass' if not failed else 'FAIL: ' + ', '.join(failed)} |"
        )
    return "\n".join(rows)


def summary(pairs: list[Pair]) -> str:
    passed = sum(p.passed for p in pairs)
    return f"{passed} of {len(pairs)} pages and polls meet every target."


def section(info: dict, pairs: list[Pair], repeat: int, reused: bool, noise: str) -> str:
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        commit += " (with uncommitted changes)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    factor = info["factor"]
    small, large = info["worlds"].values()
    cs, cl = small["config"], large["config"]
    world = (
        f"`scale-1x`: {cs['runs']:,} runs × {cs['points']:,} metric points, "
        f"{cs['turns_per_run']} agent turns and 20–60 scores each, plus a {cs['long_turns']:,}-turn run; "
        f"`scale-{factor}x`: {cl['runs']:,} runs likewise plus a {cl['long_turns']:,}-turn run "
        f"({small['verified']:,} and {large['verified']:,} scores marked verified). "
        "Runs, scores and turns through `services.ingest_events`; metric points "
        + ("bulk-inserted" if cs["bulk_metrics"] else "too")
        + f"; seeding took {small['timings']['total_s'] + large['timings']['total_s']:,.0f} s."
    )
    return "\n".join(
        [
            f"## Ten times the data: pages at 1x and {factor}x in one run ({date.today().isoformat()})",
            "",
            f"Machine: {machine(db_version())}; other processes kept {noise} busy while measuring. "
            f"Commit {commit}.",
            f"Command: `{command_line()}`: "
            + ("the data dir an earlier `--keep` run seeded" if reused else "a fresh data dir and database")
            + f", one database holding both worlds: {world}",
            f"Each page: one warm-up request per world, then {repeat} timed requests per world, alternating "
            "(Django's test Client in this process: server time only), median shown; CPU ratio: the same "
            "with this thread's CPU time, less sensitive to other processes. Queries and SQL on one more "
            "request each; peak memory of one more request under tracemalloc. Largest figure: the largest "
            '`<script type="application/json">` (json_script) block, where chart figures live. Targets: '
            f"{factor}x ≤ {RATIO}× the 1x time, equal queries, figures ≤ {FIGURE_KB} KB, "
            f"peak memory ≤ {RATIO}×; at 10x the project page and the run page ≤ 150 ms, Compare ≤ 500 ms.",
            "",
            table(pairs, factor),
            "",
            summary(pairs),
            "",
        ]
    )


# --- main -------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, help="runs in the 1x project (default 200; --quick 20)")
    parser.add_argument("--turns", type=int, help="turns of the 1x long run (default 10,000; --quick 1,000)")
    parser.add_argument("--compare", type=int, help="runs compared at 1x (default 20; --quick 5)")
    parser.add_argument("--factor", type=int, default=10, help="how much larger the second world is")
    parser.add_argument("--points", type=int, default=500, help="metric points per run (default 500)")
    parser.add_argument("--turns-per-run", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="20 / 200 runs, 1,000 / 10,000 turns")
    parser.add_argument(
        "--ingest-metrics", action="store_true", help="metric points through ingest_events too"
    )
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per page and world (default 7)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--reuse", metavar="DIR", help="measure a data dir kept by --keep without seeding")
    parser.add_argument("--append", action="store_true", help="append a dated section to the benchmarks doc")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    parser.add_argument("--only", metavar="TEXT", help="measure only the pages whose label contains TEXT")
    parser.add_argument(
        "--profile",
        metavar="TEXT",
        help="instead of measuring: cProfile one request of the 10x page whose label contains TEXT",
    )
    args = parser.parse_args()
    for attr, full, quick in (("runs", 200, 20), ("turns", 10_000, 1000), ("compare", 20, 5)):
        if getattr(args, attr) is None:
            setattr(args, attr, quick if args.quick else full)

    if args.reuse:
        data = Path(args.reuse).resolve()
        if not (data / MARKER).exists():
            parser.error(f"{data} holds no {MARKER}: not a data dir kept by --keep")
        kept = json.loads((data / MARKER).read_text())
    else:
        data = Path(tempfile.mkdtemp(prefix="smrweb-scalebench-"))
    django_setup(data)

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    redis = None
    if settings.EMBEDDED_REDIS:  # the cache the pages use, as `make serve` starts it
        from smrweb.stack.management.commands.runstack import start_embedded_redis

        redis = start_embedded_redis()
    try:
        if args.reuse:
            info, reused = kept, True
            log(f"reusing {data}")
            call_command("migrate", verbosity=0)  # indexes added since the data was seeded
        else:
            log(f"data dir {data}; migrating")
            call_command("migrate", verbosity=0)
            info, reused = seed(args, log), False
            if args.keep:
                (data / MARKER).write_text(json.dumps(info, indent=1))
            connection.close()  # measure on a fresh connection, as --reuse does
        client = Client(raise_request_exception=True)
        client.force_login(get_user_model().objects.get(username=info["user"]))
        if args.profile:
            profile(client, info, args.profile)
            return
        cpu0 = cpu_snapshot()
        pairs = measure_all(client, info, args.repeat, args.warmup, log, args.only or "")
        noise = others_busy(cpu0, cpu_snapshot())
        print(f"\n{machine(db_version())}; other processes kept {noise} busy while measuring\n")
        print(table(pairs, info["factor"]))
        print("\n" + summary(pairs))
        for p in pairs:
            if p.large.error:
                print(f"\n### {p.label}\n```\n{p.large.error}```")
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "info": info,
                        "pairs": [
                            {
                                "label": p.label,
                                "ratio": p.ratio,
                                "cpu_ratio": p.cpu_ratio,
                                "checks": p.checks,
                                **{
                                    name: {k: v for k, v in side.__dict__.items() if k != "body"}
                                    for name, side in (("small", p.small), ("large", p.large))
                                },
                            }
                            for p in pairs
                        ],
                    },
                    indent=1,
                    default=str,
                )
            )
        if args.append:
            docs = Path(args.docs)
            docs.write_text(
                docs.read_text().rstrip("\n") + "\n\n" + section(info, pairs, args.repeat, reused, noise)
            )
            log(f"appended to {docs}")
    finally:
        connection.close()
        if redis is not None:  # the embedded server this run started (it outlives a closed client)
            import signal

            try:
                os.kill(redis.pid, signal.SIGTERM)
            except (OSError, TypeError):
                pass
        if args.keep or args.reuse:
            log(f"kept {data}; measure again with --reuse {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
