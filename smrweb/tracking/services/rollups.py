"""The runs' turn rollups (`TurnRollup`): the turn aggregates of the run page's timeline and actor tree,
kept in the database so a page after the cache lost them reads one row, not every turn.

`advance_turn_rollup` runs inside ingest's transaction, under the run's lock, after the batch's turns
went in: it folds in just those turns. Whatever disagrees with the run's summary columns (turns inserted
some other way, a rollup missing since before the table existed) is computed again from the rows, in SQL.
`rebuild_turn_rollups` does that on purpose, after turns were deleted or restored.
"""

from __future__ import annotations

from collections.abc import Iterable

from smrweb.tracking.models import AgentTurn, Run, TurnRollup
from smrweb.tracking.queries.timeline import _TurnMemo, computed_turn_memo


def advance_turn_rollup(run: Run, turns: list[AgentTurn], before: tuple[int, int, int]) -> None:
    """Fold `turns`, just inserted, into the run's rollup. `before` is the run's (turn count, tokens in,
    tokens out) before them, which the kept rollup must equal; `run`'s columns are already recomputed."""
    row = TurnRollup.objects.filter(run=run).first()
    memo = _TurnMemo.from_rollup(row) if row is not None else None
    if memo is not None and memo.totals() == before and all(t.pk for t in turns):
        memo.add(
            (t.pk, t.ts, t.kind, t.tokens_in, t.tokens_out, t.cost_usd, t.actor, t.parent_actor, t.model)
            for t in turns
        )
    if memo is None or not memo.matches(run):
        memo = computed_turn_memo(run)
    _save(run, memo, exists=row is not None)


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


def _save(run: Run, memo: _TurnMemo, *, exists: bool) -> None:
    memo.rollup(run).save(force_update=exists, force_insert=not exists)
