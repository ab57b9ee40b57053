"""Ten times the data, the same work (issue 21): the project page, the run page and Compare, and their
polls, make the same number of queries in a world ten times larger (runs, turns, runs compared), warm
(what the pages keep in the cache) and cold; their chart figures stay under 100 KB; and what the run
page keeps of a run's turns, brought up to date with the turns since, always equals a fresh read.

Counts and sizes, not times: bench/scale.py measures the times."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
import time_machine
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.dashboard.views.compare import ROWS_FIRST
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AgentTurn, Run, Submission, SubmissionStatus, TurnRollup
from smrweb.tracking.queries import compare, progress, timeline
from tests.factories import admin_project

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
HX = {"HX-Request": "true"}
FIGURE_LIMIT = 100 * 1024


def push(project, run_id: str, events: list[dict]) -> None:
    for i in range(0, len(events), 4000):
        services.ingest_events(project, run_id, parse_events(json.dumps(events[i : i + 4000])))


def turn_events(n: int, *, start: int = 0, minutes: float = 1.0, rng=None) -> list[dict]:
    """n turns a minute apart (by default): the driver and two workers (child work), tool calls."""
    rng = rng or random.Random(n)
    events = []
    for i in range(start, start + n):
        actor, parent = ("driver", "") if i % 3 == 0 else (f"worker-{i % 2}", "driver")
        events.append(
            {
                "type": "agent.turn",
                "id": f"t{i}",
                "turn": i,
                "actor": actor,
                **({"parent_actor": parent} if parent else {}),
                "model": "gpt-5.4-mini",
                "tokens_in": rng.randint(100, 20_000),
                "tokens_out": rng.randint(10, 2000),
                "cost_usd": round(rng.uniform(0.0001, 0.05), 6),
                "tool_calls": [{"name": "shell", "arguments": {"cmd": f"make {i}"}}],
                "ts": (T0 + timedelta(minutes=i * minutes)).isoformat(),
            }
        )
    return events


def score_events(n: int, *, every: float = 10.0, start: int = 0) -> list[dict]:
    return [
        {
            "type": "score",
            "id": f"s{i}",
            "score": round(0.2 + 0.7 * (i / max(n, 1)) + 0.05 * ((i * 7919) % 11) / 11, 6),
            "ts": (T0 + timedelta(minutes=i * every + 0.5)).isoformat(),
        }
        for i in range(start, start + n)
    ]


def world(slug: str, alice, *, runs: int, long_turns: int, long_scores: int):
    """A project of `runs` runs (4 turns, 6 scores, finished) and one live run of `long_turns` turns;
    a quarter of the scores verified (a test shortcut: no validator runs, the runs are touched as the
    write path would)."""
    project = admin_project(slug, name=slug, by=alice)
    for r in range(runs):
        push(
            project,
            f"run-{r:03d}",
            turn_events(4, start=r, minutes=3)
            + score_events(6, start=r)
            + [{"type": "state", "state": "done", "ts": (T0 + timedelta(hours=30)).isoformat()}],
        )
    # The long run's turns span the 19 hours until the frozen "now": its bins are all in use.
    spacing = 19 * 60 / long_turns
    push(
        project,
        "long",
        turn_events(long_turns, minutes=spacing)
        + score_events(long_scores, every=spacing * long_turns / long_scores),
    )
    ids = Submission.objects.filter(project=project).order_by("pk").values_list("pk", flat=True)[::4]
    Submission.objects.filter(pk__in=list(ids)).update(status=SubmissionStatus.VERIFIED)
    Run.objects.filter(project=project).update(updated=datetime.now(UTC))
    return project


@pytest.fixture
def frozen():
    # Poll versions carry a 30-second tick: keep it from turning between two requests of a test.
    with time_machine.travel(T0 + timedelta(hours=20), tick=False):
        yield


@pytest.fixture
def worlds(alice, frozen):
    small = world("small", alice, runs=3, long_turns=60, long_scores=6)
    large = world("large", alice, runs=30, long_turns=600, long_scores=60)
    return small, large


def count(client, url: str, headers: dict | None = None) -> tuple[int, bytes]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, headers=headers or {})
    assert response.status_code == 200, (url, response.status_code)
    return len(queries.captured_queries), response.content


def compare_url(project, n: int) -> str:
    ids = [f"run-{r:03d}" for r in range(n - 1)] + ["long"]
    return f"/projects/{project.slug}/compare/?" + urlencode([("runs", rid) for rid in ids])


PAGES = {
    # name: (url of a world, headers)
    "project page": (lambda p: f"/projects/{p.slug}/", {}),
    "project poll": (lambda p: f"/projects/{p.slug}/", HX),
    "project chart": (lambda p: f"/projects/{p.slug}/chart/", HX),
    "project page, sorted, page 2": (lambda p: f"/projects/{p.slug}/?sort=-spend&page=2", {}),
    "project page, every submission": (lambda p: f"/projects/{p.slug}/?board=all&unverified=1", {}),
    "run page": (lambda p: f"/projects/{p.slug}/runs/long/", {}),
    "run poll": (lambda p: f"/projects/{p.slug}/runs/long/", HX),
}
COLD = {name: PAGES[name] for name in ("project page", "run page")}  # and Compare


def figures(body: bytes) -> dict[str, int]:
    return {
        m.group(1).decode(): len(m.group(2))
        for m in re.finditer(rb'<script id="([^"]+)" type="application/json">(.*?)</script>', body, re.S)
    }


def figure(body: bytes, element_id: str) -> dict:
    found = re.search(rf'id="{element_id}" type="application/json">(.*?)</script>'.encode(), body, re.S)
    return json.loads(found.group(1))


def test_ten_times_the_data_same_queries_and_figures_under_100_kb(worlds, client_alice):
    small, large = worlds
    differences = {}
    for cold in (False, True):
        for name, (url_of, headers) in PAGES.items() if not cold else COLD.items():
            counts = []
            for project in (small, large):
                client_alice.get(url_of(project), headers=headers)  # what the page keeps, kept
                if cold:
                    cache.clear()
                counts.append(count(client_alice, url_of(project), headers)[0])
            if counts[0] != counts[1]:
                differences[(name, cold)] = counts
        counts = []
        for project, n in ((small, 2), (large, 20)):  # Compare of ten times as many runs
            if cold:
                cache.clear()
            counts.append(count(client_alice, compare_url(project, n))[0])
        if counts[0] != counts[1]:
            differences[("compare", cold)] = counts
    assert not differences, differences

    # The figures at their fullest: a bar per bin of both kinds on the long run, more scores than are
    # plotted; twelve runs' lines on the project chart; thirty runs compared.
    push(large, "long", score_events(700, every=19 * 60 / 700, start=100))
    _, body = count(client_alice, f"/projects/{large.slug}/runs/long/")
    assert figures(body)["run-timeline-data"] <= FIGURE_LIMIT, figures(body)
    fig = figure(body, "run-timeline-data")
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert len(bars) == 4 and all(len(t["x"]) > timeline.MAX_BINS // 2 for t in bars)
    assert timeline.MAX_SCORE_POINTS // 2 < len(fig["data"][0]["x"]) <= timeline.MAX_SCORE_POINTS * 3 // 2
    _, body = count(client_alice, f"/projects/{large.slug}/")
    assert 0 < figures(body)["project-chart-data"] <= FIGURE_LIMIT
    chart = figure(body, "project-chart-data")
    assert len(chart["data"]) == 12 + 1  # the twelve best runs and their best so far
    _, body = count(client_alice, compare_url(large, 20))
    assert all(0 < size <= FIGURE_LIMIT for size in figures(body).values())


def test_compare_of_two_hundred_runs_ships_figures_under_100_kb(client_alice, project):
    """200 runs with 20 scores and 10 turns each (rows made in bulk: the figures' shape is what counts)."""
    rng = random.Random(5)
    runs = Run.objects.bulk_create(
        Run(project=project, external_id=f"bulk-{i:03d}-{'x' * 12}", started_at=T0, last_progress_at=T0)
        for i in range(compare.MAX_RUNS)
    )
    subs, turns = [], []
    for run in runs:
        best = None
        for k in range(20):
            value = round(rng.random(), 6)
            best = value if best is None else max(best, value)
            ts = T0 + timedelta(minutes=7 * k + rng.random())
            subs.append(Submission(project=project, run=run, event_id=f"s{k}", score=value, ts=ts))
        for k in range(10):
            ts = T0 + timedelta(minutes=14 * k + rng.random())
            turns.append(AgentTurn(run=run, event_id=f"t{k}", turn=k, cost_usd=Decimal("0.012345"), ts=ts))
        run.best_score, run.latest_score, run.score_count, run.turn_count = best, value, 20, 10
        run.cost_usd = run.driver_cost_usd = Decimal("0.012345") * 10
    Submission.objects.bulk_create(subs)
    AgentTurn.objects.bulk_create(turns)
    Run.objects.bulk_update(
        runs, ["best_score", "latest_score", "score_count", "turn_count", "cost_usd", "driver_cost_usd"]
    )
    url = f"/projects/{project.slug}/compare/?" + urlencode([("runs", r.external_id) for r in runs])
    response = client_alice.get(url)
    assert response.status_code == 200
    sizes = figures(response.content)
    assert set(sizes) == {"compare-score-data", "compare-spend-data", "compare-turns-data"}
    assert all(size <= FIGURE_LIMIT for size in sizes.values()), sizes
    score = json.loads(
        re.search(rb'id="compare-score-data" type="application/json">(.*?)</script>', response.content).group(
            1
        )
    )
    assert len(score["data"]) == 2 * compare.MAX_RUNS  # every run drawn: its scores and its best so far
    # Each row's buttons name the run; the selection is sent once, by the form they submit.
    assert response.content.count(b'name="runs" value="bulk-') == compare.MAX_RUNS  # the form
    # The page's tables hold their first rows (what the page costs does not grow with the runs compared);
    # the other 180 rows of each come in one request once scrolled to.
    assert response.content.count(b'<tr data-run="bulk-') == ROWS_FIRST
    assert len(response.content) - sum(sizes.values()) < 150_000  # all but the figures: 117 KB (was ~480 KB)
    later = client_alice.get(url, headers={"HX-Request": "true", "X-Smrweb-Only": "side-rows"}).content
    assert later.count(b'<tr data-run="bulk-') == compare.MAX_RUNS - ROWS_FIRST
    # The picker comes once scrolled to: the compared runs first, ticked, in the comparison's order.
    assert b'id="pick" hx-get=' in response.content
    picker = client_alice.get(url, headers={"HX-Request": "true", "X-Smrweb-Only": "pick"}).content.decode()
    ticked = re.findall(r'name="runs" value="(bulk-[^"]+)" checked', picker)
    assert ticked == [run.external_id for run in runs] and "<html" not in picker


# --- the kept turn aggregates -----------------------------------------------------------------------


def fresh(run: Run):
    """Computed from every row: neither the cache's aggregates nor the run's rollup row."""
    timeline.forget_turn_aggregates(run)
    TurnRollup.objects.filter(run=run).delete()
    run = Run.objects.select_related("project__scenario").get(pk=run.pk)
    return timeline.run_timeline(run, now=T0 + timedelta(days=2)), timeline.actor_tree(run)


def kept(run: Run):
    run = Run.objects.select_related("project__scenario").get(pk=run.pk)  # the cache, not this object
    return timeline.run_timeline(run, now=T0 + timedelta(days=2)), timeline.actor_tree(run)


def same(a, b) -> None:
    (tl_a, actors_a), (tl_b, actors_b) = a, b
    assert tl_a.turn_total == tl_b.turn_total and tl_a.bin_width == tl_b.bin_width
    assert tl_a.bins == tl_b.bins and tl_a.cumulative == tl_b.cumulative
    assert [
        (n.actor, n.depth, n.turns, n.tokens_in, n.cost_usd, n.first_ts, n.last_ts) for n in actors_a
    ] == [(n.actor, n.depth, n.turns, n.tokens_in, n.cost_usd, n.first_ts, n.last_ts) for n in actors_b]


def test_kept_turn_aggregates_brought_up_to_date_equal_a_fresh_read(project):
    push(project, "r", turn_events(300))
    run = Run.objects.get(project=project, external_id="r")
    first = fresh(run)
    assert sum(b.count for b in first[0].bins) == 300
    assert sum(b.cost_usd for b in first[0].bins) == run.cost_usd  # to the micro-dollar
    # More turns, some earlier than the last one, one far later (the run's buckets grow coarser).
    push(project, "r", turn_events(200, start=300, minutes=0.5) + turn_events(1, start=9000, minutes=60))
    with CaptureQueriesContext(connection) as queries:
        later = kept(run)
    reads = [q["sql"] for q in queries.captured_queries if "tracking_agentturn" in q["sql"]]
    assert len(reads) == 1 and (
        '"id" >' in reads[0] or '"id") >' in reads[0]
    )  # the turns since: the rest was kept
    same(later, fresh(run))
    assert later[0].turn_total == 501 and sum(b.count for b in later[0].bins) == 501
    assert sum(n.turns for n in later[1]) == 501


def test_a_deleted_turn_is_noticed_and_the_aggregates_read_again(project):
    push(project, "r", turn_events(120))
    run = Run.objects.get(project=project, external_id="r")
    fresh(run)
    services.delete_event_rows(AgentTurn.objects.filter(run=run, turn__in=[3, 40, 41]))
    push(project, "r", turn_events(3, start=120))  # as many turns again: the count alone would match
    later = kept(run)
    assert later[0].turn_total == 120
    same(later, fresh(run))


def test_no_progress_reading_from_the_kept_aggregates_equals_the_sql_reading(project):
    push(project, "r", turn_events(400) + score_events(12, every=7))
    push(
        project,
        "r",
        [{"type": "score", "id": "top", "score": 5.0, "ts": (T0 + timedelta(minutes=77.3)).isoformat()}],
    )
    run = Run.objects.select_related("project__scenario").get(project=project, external_id="r")
    assert progress.progress_since_best(run, kept=True) == progress.progress_since_best(run)
    assert progress.progress_since_best(run).turns == 400 - 78  # turns 78..399 come after 77.3 minutes


def test_a_bar_lists_exactly_the_turns_it_counts(client_alice, project):
    push(project, "r", turn_events(500, minutes=0.37))
    run = Run.objects.select_related("project__scenario").get(project=project, external_id="r")
    tl = timeline.run_timeline(run, now=T0 + timedelta(days=1))
    for b in tl.bins[:: max(1, len(tl.bins) // 12)]:
        index = (b.start - tl.start) // tl.bin_width
        kind = {"driver_inference": "d", "child_work": "c"}[b.kind]
        body = client_alice.get(
            f"/projects/{project.slug}/runs/r/turns/",
            {"origin": tl.start.isoformat(), "width_us": tl.bin_width_us, "bin": index, "kind": kind},
        ).content.decode()
        assert f"{b.count} turn" in body and body.count("data-turn-detail") == min(b.count, 50)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_run_with_many_scores_is_thinned_in_sql_with_an_exact_frontier(project, direction):
    project.scenario.direction = direction
    project.scenario.save()
    rng = random.Random(3)
    values = [
        round(rng.gauss(0, 1) + (i / 400 if direction == "maximize" else -i / 400), 6) for i in range(1300)
    ]
    push(
        project,
        "r",
        [
            {"type": "score", "id": f"s{i}", "score": v, "ts": (T0 + timedelta(seconds=30 * i)).isoformat()}
            for i, v in enumerate(values)
        ],
    )
    run = Run.objects.select_related("project__scenario").get(project=project, external_id="r")
    with CaptureQueriesContext(connection) as queries:
        tl = timeline.run_timeline(run, now=T0 + timedelta(days=1))
    expected, best = [], None
    for i, v in enumerate(values):
        if best is None or (v > best if direction == "maximize" else v < best):
            best = v
            expected.append((T0 + timedelta(seconds=30 * i), v))
    assert tl.frontier == expected  # every record, from all 1,300 scores
    # Every 8th (the power of two that brings 1,300 under 300), every record and the last.
    records = {i for i, v in enumerate(values) if (T0 + timedelta(seconds=30 * i), v) in expected}
    picked = sorted({i for i in range(1300) if i % 8 == 0} | records | {1299})
    assert tl.score_total == 1300
    assert tl.scores == [(T0 + timedelta(seconds=30 * i), values[i]) for i in picked]
    reads = [q["sql"] for q in queries.captured_queries if "tracking_submission" in q["sql"]]
    assert len(reads) == 2  # the thinned scores with their records, and the plotted scores' turns

    # A new score keeps what was picked (the chart of a live page gets a patch that appends): only the
    # old last, not every 8th, makes way.
    push(
        project,
        "r",
        [
            {
                "type": "score",
                "id": "s1300",
                "score": values[-1],
                "ts": (T0 + timedelta(seconds=30 * 1300)).isoformat(),
            }
        ],
    )
    run.refresh_from_db()
    after = timeline.run_timeline(run, now=T0 + timedelta(days=1)).scores
    kept = tl.scores[:-1] if 1299 % 8 and 1299 not in records else tl.scores
    assert after[: len(kept)] == kept and after[-1] == (T0 + timedelta(seconds=30 * 1300), values[-1])
