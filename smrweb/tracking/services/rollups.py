"""The runs' turn rollups (`TurnRollup`): the turn aggregates of the run page's timeline and actor tree,
kept in the database so a page after the cache lost them reads one row (and the few turns past its
mark), not every turn.

`advance_turn_rollup` runs inside ingest's transaction, under the run's lock, after the batch's turns
went in. A rollup fewer than `ROLLUP_LAG` turns behind the run is left as it is (two small queries): a
page folds in the turns past its mark, an indexed range of fewer than that. Otherwise it is brought up
to date (the batch's turns as inserted, the older ones past the mark read) and written; one that then
disagrees with the run's summary columns (turns written some other way, a turn committed below the
mark) is computed again from the rows, in SQL.
`rebuild_turn_rollups` does that on purpose, after turns were deleted or restored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from smrweb.tracking.models import AgentTurn, Run, TurnRollup
from smrweb.tracking.queries.turn_memo import TURN_FIELDS, TurnMemo, computed_turn_memo, turns_past

# At most this many turns a run's rollup may lag behind it: what a cold page folds in from the rows,
# against a rollup written every this many turns instead of every batch (~1–3 ms for ~1,000 buckets).
ROLLUP_LAG = 256


def advance_turn_rollup(run: Run, turns: Sequence[AgentTurn] = ()) -> None:
    """Bring the run's rollup up to date if it lags `ROLLUP_LAG` turns or more (or there is none).
    `run`'s summary columns are already recomputed from the rows, this batch's `turns` (just inserted,
    with their ids) included: those are folded in as they are, the older turns past the mark read."""
    kept = TurnRollup.objects.filter(run=run).values_list("turn_count", "hwm").first()
    if kept is not None and run.turn_count - kept[0] < ROLLUP_LAG:
        # Still close enough, if the turns past the mark are the ones it lacks (a count of an indexed
        # range of fewer than ROLLUP_LAG): else it is wrong, and written now.
        if kept[0] + turns_past(run.pk, kept[1]).count() == run.turn_count:
            return
    memo = None
    if kept is not None:
        row = TurnRollup.objects.get(run=run)
        memo = TurnMemo.from_rollup(row)
        fresh = [t.pk for t in turns]
        if fresh and all(fresh) and min(fresh) > row.hwm:
            between = turns_past(run.pk, row.hwm).filter(id__lt=min(fresh))
            memo.add(between.order_by().values_list(*TURN_FIELDS))
            memo.add(
                (t.pk, t.ts, t.kind, t.tokens_in, t.tokens_out, t.cost_usd, t.actor, t.parent_actor, t.model)
                for t in turns
            )
        else:
            memo.add(turns_past(run.pk, row.hwm).order_by().values_list(*TURN_FIELDS))
        if not memo.matches(run):
            memo = None
    _save(run, memo or computed_turn_memo(run), exists=kept is not None)


def rebuild_turn_rollups(run_ids: Iterable[int]) -> int:
    """Compute the rollups of these runs again from their turns (three queries each); a run without
    turns keeps none. Returns how many rollups were written."""
    written = 0
    for run in Run.objects.filter(pk__in=list(run_ids)).order_by("pk"):
        memo = computed_turn_memo(run)
        if memo.count:
            _save(run, memo, exists=TurnRollup.objects.filter(run=run).exists())
            written += 1
        else:
            TurnRollup.objects.filter(run=run).delete()
    return written


def _save(run: Run, memo: TurnMemo, *, exists: bool) -> None:
    memo.rollup(run).save(force_update=exists, force_insert=not exists)
