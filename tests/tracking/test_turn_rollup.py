"""The runs' turn rollups (issue 21, the cold run page): what ingest keeps in the database of a run's
turns equals what every row says — turns in several batches, out of time order, one far later (the
buckets grow coarser), a deleted turn, turns that came in some other way, a restore — and a page after
the cache lost its copy reads the rollup row and the turns past its mark, never every turn.

Runs on SQLite and PostgreSQL (DATABASE_URL). Counts and values, not times: bench/scale.py times it."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import backup, services
from smrweb.tracking.models import AgentTurn, Run, TurnRollup
from smrweb.tracking.queries import timeline
from smrweb.tracking.services.rollups import ROLLUP_LAG
from smrweb.tracking.services.runs import recompute_spend
from tests.dashboard.test_scale import T0, push, turn_events
from tests.dashboard.test_scale import same as _same

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(days=30)


def load(run: Run) -> Run:
    return Run.objects.select_related("project__scenario").get(pk=run.pk)


def kept(run: Run) -> timeline.TurnMemo:
    """The rollup as a page reads it: the row, and the turns past its mark (fewer than ROLLUP_LAG)."""
    run = load(run)
    row = TurnRollup.objects.get(run=run)
    assert 0 <= run.turn_count - row.turn_count < ROLLUP_LAG
    memo = timeline.kept_turn_memo(run)
    assert memo is not None  # it agrees with the run's summary columns
    return memo


def from_rows(run: Run) -> timeline.TurnMemo:
    return timeline.computed_turn_memo(load(run))


def agree(a: timeline.TurnMemo, b: timeline.TurnMemo) -> None:
    """The same turns aggregated: totals, span, actors, and buckets once both are as coarse."""
    assert (a.hwm, a.totals(), a.lo, a.hi) == (b.hwm, b.totals(), b.lo, b.hi)
    assert a.actors == b.actors
    width = max(a.width, b.width)
    for memo in (a, b):
        if memo.width != width:
            memo.rebase(width)
    assert a.buckets == b.buckets


def page(run: Run, *, clear: bool = True):
    """The timeline and actor tree as a page after the cache lost them reads them, with its queries."""
    if clear:
        cache.clear()
    run = load(run)
    with CaptureQueriesContext(connection) as queries:
        tl, actors = timeline.run_timeline(run, now=NOW), timeline.actor_tree(run)
    return (tl, actors), [q["sql"] for q in queries.captured_queries]


def turn_reads(sql: list[str]) -> list[str]:
    # Every read of the turns table except the scores' "latest turn before" subquery (one per plotted score).
    return [s for s in sql if '"tracking_agentturn"' in s.split(" FROM ")[1].split(" WHERE ")[0]]


def shuffled(events: list[dict], seed: int) -> list[dict]:
    events = list(events)
    random.Random(seed).shuffle(events)
    return events


def test_several_batches_out_of_order_keep_a_rollup_equal_to_the_rows(project):
    push(project, "r", shuffled(turn_events(300), 1))
    run = Run.objects.get(project=project, external_id="r")
    agree(kept(run), from_rows(run))
    # Earlier turns after later ones, half-minute ones among them, then one three days later: the
    # buckets merge into coarser ones on the way.
    push(project, "r", shuffled(turn_events(200, start=300, minutes=0.5), 2))
    push(project, "r", turn_events(1, start=4400, minutes=1))
    push(project, "r", shuffled(turn_events(50, start=500, minutes=0.01), 3))
    run = load(run)
    rollup = kept(run)
    assert rollup.totals() == (551, run.tokens_in, run.tokens_out) and rollup.count == run.turn_count
    assert rollup.width > timeline._base_width(timedelta(minutes=300))  # it grew coarser
    agree(rollup, from_rows(run))
    # A replayed batch writes nothing and leaves the rollup as it was.
    push(project, "r", turn_events(50, start=500, minutes=0.01))
    agree(kept(run), from_rows(run))


def test_a_page_after_the_cache_was_lost_reads_the_rollup_not_every_turn(project):
    push(project, "r", turn_events(400, minutes=0.3))
    push(project, "r", turn_events(100, start=400, minutes=2))
    run = Run.objects.get(project=project, external_id="r")
    cold, sql = page(run)
    assert len([s for s in sql if '"tracking_turnrollup"' in s]) == 1
    reads = turn_reads(sql)
    assert len(reads) == 1 and ('"id" >' in reads[0] or '"id") >' in reads[0]), (
        reads
    )  # only the turns past the mark (none)
    # What it shows is what the rows say: the same page with no rollup computes it from them.
    TurnRollup.objects.filter(run=run).delete()
    computed, sql = page(run)
    assert len(turn_reads(sql)) == 3  # totals, buckets, actors: every row
    _same(cold, computed)
    assert cold[0].turn_total == 500 and sum(b.count for b in cold[0].bins) == 500
    assert sum(b.cost_usd for b in cold[0].bins) == load(run).cost_usd  # to the micro-dollar
    assert sum(n.turns for n in cold[1]) == 500


def test_the_rollup_row_is_written_every_rollup_lag_turns_and_a_page_folds_in_the_rest(project):
    push(project, "r", turn_events(300))
    run = Run.objects.get(project=project, external_id="r")
    assert TurnRollup.objects.get(run=run).turn_count == 300  # the first batch writes it
    for start in range(300, 300 + ROLLUP_LAG - 1, 85):
        push(project, "r", turn_events(min(85, 300 + ROLLUP_LAG - 1 - start), start=start))
    assert TurnRollup.objects.get(run=run).turn_count == 300  # 255 behind: left as it is
    cold, sql = page(run)
    assert cold[0].turn_total == 300 + ROLLUP_LAG - 1 and len(turn_reads(sql)) == 1
    agree(kept(run), from_rows(run))
    push(project, "r", turn_events(1, start=300 + ROLLUP_LAG - 1))
    row = TurnRollup.objects.get(run=run)
    assert row.turn_count == 300 + ROLLUP_LAG == load(run).turn_count  # 256 behind: written
    agree(timeline.TurnMemo.from_rollup(row), from_rows(run))


def test_a_deleted_turn_rebuilds_the_rollup_from_the_rows(project):
    push(project, "r", turn_events(120))
    run = Run.objects.get(project=project, external_id="r")
    services.delete_event_rows(AgentTurn.objects.filter(run=run, turn__in=[3, 40, 41]))
    run = load(run)
    assert run.turn_count == 117
    agree(kept(run), from_rows(run))
    push(project, "r", turn_events(3, start=120))  # as many turns again: the count alone would match
    agree(kept(run), from_rows(run))
    cold, sql = page(run)
    assert len(turn_reads(sql)) == 1 and cold[0].turn_total == 120
    # Every turn deleted: no rollup left.
    services.delete_event_rows(AgentTurn.objects.filter(run=run))
    assert not TurnRollup.objects.filter(run=run).exists()
    cold, _ = page(run)
    assert cold[0].turn_total == 0 and cold[0].bins == [] and cold[1] == []


def test_turns_written_past_the_write_path_are_folded_in_or_recomputed(project):
    push(project, "r", turn_events(90))
    run = Run.objects.get(project=project, external_id="r")
    # A turn committed after the rollup's mark without advancing it (as another writer would): the read
    # folds it in from the turns past the mark.
    AgentTurn.objects.create(run=run, event_id="x", turn=9999, actor="driver", tokens_in=7, ts=T0)
    run = load(run)
    run.save(update_fields=recompute_spend(run))
    cold, sql = page(run)
    assert cold[0].turn_total == 91 and len(turn_reads(sql)) == 1
    # A rollup that disagrees with the run's summary columns is not believed: computed from the rows.
    TurnRollup.objects.filter(run=run).update(turn_count=5)
    cold, sql = page(run)
    assert cold[0].turn_total == 91 and len(turn_reads(sql)) == 4
    # The next batch finds it wrong too and writes it from the rows.
    push(project, "r", turn_events(9, start=90))
    agree(kept(run), from_rows(run))
    assert kept(run).count == 100


def test_a_rollup_goes_with_its_run_and_a_restore_builds_it_again(project, alice, tmp_path):
    push(project, "r", turn_events(60))
    push(project, "s", turn_events(30, minutes=7))
    run = Run.objects.get(project=project, external_id="r")
    backup.export_project(project, tmp_path / "hill.zip")
    copy = backup.import_project(tmp_path / "hill.zip", slug="hill-copy").project
    for external_id, n in (("r", 60), ("s", 30)):
        restored = Run.objects.get(project=copy, external_id=external_id)
        assert kept(restored).count == n
        agree(kept(restored), from_rows(restored))
        assert kept(restored).hwm == AgentTurn.objects.filter(run=restored).order_by("-id")[0].pk
    Run.objects.filter(pk=run.pk).update(state="done")  # only a finished run can be deleted
    services.delete_run(load(run), by=alice, confirm=run.external_id)
    assert not TurnRollup.objects.filter(run_id=run.pk).exists()


def test_the_rollup_keeps_micro_dollars_exactly(project):
    events = turn_events(40)
    for i, e in enumerate(events):
        e["cost_usd"] = [0.000001, 0.123457, 1.5, 0][i % 4]
    push(project, "r", events[:17])
    push(project, "r", events[17:])
    run = load(Run.objects.get(project=project, external_id="r"))
    rollup = kept(run)
    assert sum(b[3] for b in rollup.buckets.values()) * timeline.MICRO_USD == run.cost_usd
    assert run.cost_usd == Decimal("0.000001") * 10 + Decimal("0.123457") * 10 + Decimal("1.5") * 10
