"""Issue 36, item 5: what a server process keeps in memory of a live run between polls (core.localcache):
its turn aggregates, advanced by the turns that arrive, the timeline's bars, its score side and the burn
window's turns advanced with them, and how the write path's "forget" reaches every process (the shared
cache's stamp). What is shown from them equals what is computed from scratch (the burn: what SQL sums), on
SQLite and PostgreSQL."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from smrweb.core import cachekeys, localcache
from smrweb.tracking.models import AgentTurn, Run
from smrweb.tracking.queries import timeline, turn_memo
from smrweb.tracking.services.rollups import rebuild_turn_rollups
from smrweb.tracking.services.runs import attribute_turns
from tests.dashboard.test_scale import T0, push, turn_events


def score_event(value: float, ts) -> dict:
    return {"type": "score", "score": value, "harness_id": "bench-v1", "ts": ts.isoformat()}


pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(days=30)


def load(run: Run) -> Run:
    return Run.objects.select_related("project__scenario").get(pk=run.pk)


def shown(tl: timeline.Timeline) -> tuple:
    bars = (tl.start, tl.end, tl.bin_width, tl.bins, tl.cumulative, tl.turn_total)
    return (*bars, tl.scores, tl.score_turns, tl.frontier, tl.score_total)


def burn_in_sql(run: Run) -> tuple:
    """The burn rates as one SQL sum over the window up to the newest turn (what burn_forecast read before
    it kept the window's turns)."""
    newest = run.turns.order_by("-ts", "-id").values_list("ts", flat=True).first()
    window = min(timeline.BURN_WINDOW, max(newest - run.started_at, timedelta(minutes=1)))
    sums = AgentTurn.objects.filter(run=run, ts__gt=newest - window, ts__lte=newest).aggregate(
        usd=Sum("cost_usd"), tin=Sum("tokens_in"), tout=Sum("tokens_out")
    )
    hours = Decimal(window.total_seconds()) / 3600
    return newest, window, sums["usd"] / hours, int((sums["tin"] + sums["tout"]) / float(hours))


def from_scratch(run: Run) -> timeline.Timeline:
    """The timeline as a process that kept nothing reads it, leaving what this process and the shared cache
    keep as they were (the next read goes on from them)."""
    kept, keys = (
        dict(localcache._KEPT),
        [cachekeys.turn_aggregates(run.pk), cachekeys.turn_aggregates_stamp(run.pk)],
    )
    shared = cache.get_many(keys)
    localcache.clear()
    cache.delete_many(keys)
    try:
        return timeline.run_timeline(load(run), now=NOW)
    finally:
        localcache.clear()
        localcache._KEPT.update(kept)
        cache.delete_many(keys)
        cache.set_many(shared)


def test_turns_arriving_one_by_one_advance_the_kept_memo_and_bars_to_what_a_fresh_read_shows(project):
    push(project, "r", turn_events(400))
    scores = [(0.2, 100), (0.5, 250), (0.4, 380)]  # (score, minute): later turns may be back-dated before one
    push(project, "r", [score_event(v, T0 + timedelta(minutes=m)) for v, m in scores])
    run = Run.objects.get(project=project, external_id="r")
    timeline.run_timeline(load(run), now=NOW, scores_version="v")
    timeline.burn_forecast(load(run), now=burn_in_sql(run)[0])  # its window's turns read once, then kept
    stamp = cache.get(cachekeys.turn_aggregates_stamp(run.pk))
    counted = 0  # the steps whose new turns were all after the last score: no query for the score side
    rng = random.Random(36)
    n = 400
    for step in range(25):
        # The newest turn, or one back-dated into an earlier bar (a slow child's report).
        k = rng.choice([1, 1, 2, 3])
        events = turn_events(k, start=n, rng=rng)
        for e in events:
            if rng.random() < 0.3:
                e["ts"] = (T0 + timedelta(minutes=rng.uniform(0, 399))).isoformat()
        push(project, "r", events)
        n += k
        run = load(run)
        with CaptureQueriesContext(connection) as read:
            tl = timeline.run_timeline(run, now=NOW, scores_version="v")
        assert run._turn_memo.recent is not None and run._turn_memo.recent[0] == run.turn_count - k, step
        edges, count, _ = localcache.get(("timeline-bars", run.pk))
        assert count == run.turn_count  # the bars were advanced with the memo, not merged again
        assert cache.get(cachekeys.turn_aggregates_stamp(run.pk)) == stamp  # nothing computed afresh
        assert shown(tl) == shown(from_scratch(run)), step
        if all(e["ts"] > (T0 + timedelta(minutes=380)).isoformat() for e in events):
            counted += 1
            assert len(read) == 1, step  # the turns since (the memo's); the score side counted none
        # The burn at the newest turn: its window's turns kept and advanced (no query), as SQL sums them.
        newest, window, usd_rate, token_rate = burn_in_sql(run)
        with CaptureQueriesContext(connection) as read:
            burn = timeline.burn_forecast(run, now=newest + timedelta(minutes=1))
        assert (burn.as_of, burn.window, burn.usd_per_hour, burn.tokens_per_hour) == (
            newest,
            window,
            usd_rate,
            token_rate,
        ), step
        assert len(read) == 0, read.captured_queries
        assert localcache.get(("recent-turns", run.pk, timeline.BURN_WINDOW))[1] == n
    assert counted >= 5  # steps that took the no-query path (the rest were back-dated before a score)
    assert sum(b.count for b in tl.bins) == n and sum(b.cost_usd for b in tl.bins) == load(run).cost_usd


def test_a_forgotten_memo_is_not_taken_up_from_a_process_copy(project):
    """Costs that change without changing the totals (a repricing): the write path forgets the aggregates,
    which forgets the stamp in the shared cache, so a process's copy (here: this test's) is not used again.
    Without the forget the copy is what is read: that is what the stamp is for."""
    push(project, "r", turn_events(50))
    run = Run.objects.get(project=project, external_id="r")
    before = sum(b.cost_usd for b in timeline.run_timeline(load(run), now=NOW).bins)
    assert localcache.get(("turn-memo", run.pk, cache.get(cachekeys.turn_aggregates_stamp(run.pk))))
    AgentTurn.objects.filter(run=run).update(cost_usd=Decimal("0.5"))
    rebuild_turn_rollups([run.pk])  # as the repricing does, in its transaction
    assert sum(b.cost_usd for b in timeline.run_timeline(load(run), now=NOW).bins) == before  # the copy
    timeline.forget_turn_aggregates(run)
    assert cache.get(cachekeys.turn_aggregates_stamp(run.pk)) is None
    assert sum(b.cost_usd for b in timeline.run_timeline(load(run), now=NOW).bins) == Decimal("25.0")


def test_advancing_a_memo_leaves_the_one_it_came_from_as_it_was(project):
    """Threads of a process read a kept memo while another advances it: advancing makes a new one."""
    push(project, "r", turn_events(30))
    run = load(Run.objects.get(project=project, external_id="r"))
    memo = timeline.computed_turn_memo(run)
    buckets, actors, totals = {k: list(v) for k, v in memo.buckets.items()}, dict(memo.actors), memo.totals()
    last = max(memo.buckets)  # a bucket the new turn adds to
    ts = timeline.EPOCH + timedelta(seconds=memo.width * last[0])
    rows = [(memo.hwm + 1, ts, last[1], 10, 5, Decimal("0.01"), "driver", "", "m")]
    advanced = memo.advanced(rows)
    assert advanced is not memo and advanced.totals() == (totals[0] + 1, totals[1] + 10, totals[2] + 5)
    assert advanced.buckets[last][0] == buckets[last][0] + 1
    assert memo.buckets == buckets and memo.actors == actors and memo.totals() == totals
    assert advanced.recent == (memo.count, memo.width, memo.hwm, rows) and memo.advanced([]) is memo


def newest_in_sql(run: Run, n: int) -> list:
    """The turns table's first page as its query reads it."""
    rows = run.turns.order_by("-ts", "-id").values_list(*turn_memo.TurnRow._fields)[:n]
    return [turn_memo.TurnRow(*row) for row in rows]


def test_the_turns_tables_first_page_is_advanced_by_the_new_turns_to_what_its_query_reads(project):
    """The run page's newest turns (a poll after a turn) are kept in this process and advanced by the turns
    the run's aggregates were advanced by — newest, back-dated among the page's, tied on time, or older than
    the whole page — without a query of their own; a turn moved to another side (or priced) forgets the
    aggregates, and the page is read again."""
    push(project, "r", turn_events(60))
    run = load(Run.objects.get(project=project, external_id="r"))
    turn_memo.keep_newest_turns(run, 25, newest_in_sql(run, 25))
    assert turn_memo.newest_turns(run, 25) is None  # the aggregates not read by this request: nothing kept
    timeline.run_timeline(run, now=NOW)  # as a poll's other cards read them
    assert turn_memo.newest_turns(run, 25) is None  # nothing kept yet: the page reads them
    turn_memo.keep_newest_turns(run, 25, newest_in_sql(run, 25))
    rng, n = random.Random(58), 60
    for step in range(30):
        k = rng.choice([1, 1, 2, 4])
        events = turn_events(k, start=n, rng=rng)
        for e in events:
            where = rng.random()
            if where < 0.2:  # back-dated among the page's turns
                e["ts"] = (T0 + timedelta(minutes=rng.uniform(n - 20, n))).isoformat()
            elif where < 0.3:  # older than the whole page: not on it
                e["ts"] = (T0 + timedelta(minutes=rng.uniform(0, 10))).isoformat()
            elif where < 0.4:  # at the same time as the newest turn: the higher id first
                e["ts"] = newest_in_sql(load(run), 1)[0].ts.isoformat()
        push(project, "r", events)
        n += k
        run = load(run)
        timeline.run_timeline(run, now=NOW)  # the aggregates advanced by the new turns, as a poll's timeline
        with CaptureQueriesContext(connection) as read:
            newest = turn_memo.newest_turns(run, 25)
        assert newest == newest_in_sql(run, 25), step
        assert len(read) == 0, read.captured_queries
    attribute_turns(run, {"worker-0": "driver_inference"})  # turns changed in place
    run = load(run)
    timeline.run_timeline(run, now=NOW)
    assert turn_memo.newest_turns(run, 25) is None
    turn_memo.keep_newest_turns(run, 25, newest_in_sql(run, 25))
    push(project, "r", turn_events(1, start=n))
    run = load(run)
    timeline.run_timeline(run, now=NOW)
    assert turn_memo.newest_turns(run, 25) == newest_in_sql(run, 25)
    assert {t.kind for t in turn_memo.newest_turns(run, 25) if t.actor == "worker-0"} == {"driver_inference"}
