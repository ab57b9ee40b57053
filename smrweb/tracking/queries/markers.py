"""What changed in a run, cheaply: per kind of row, a few values that change whenever a row of that kind is
added, changed or removed. The run page's live cards compare them (dashboard/live.py) instead of rendering
to find out.

One query whatever the run's size: each value is a scalar subquery that an index answers by seeking
(the latest turn by the (run, ts) index, a metric key's latest point by (run, key, step)) or a small
table's aggregate (checkpoints, state changes, tags…); the run's own summary columns (turn and score
counts, spend) are on the run row the caller already holds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Count, DateTimeField, IntegerField, Max, QuerySet
from django.db.models.expressions import RawSQL

from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    Checkpoint,
    Experiment,
    LoopFinding,
    MetricPoint,
    Rollback,
    Run,
    RunControl,
    RunSnooze,
    RunTag,
    RuntimeMessage,
    StateChange,
    Submission,
)
from smrweb.tracking.queries.timeline import burning_since


@dataclass(frozen=True)
class RunMarkers:
    turn_last: int | None  # the newest turn by (ts, id): with run.turn_count, any new or removed turn
    submission_last: int | None
    submissions_updated: object  # the latest `updated` of the run's submissions (status, review, exclusion)
    artifacts: tuple  # (count, highest id)
    checkpoints: tuple
    message_last: int | None  # the highest message seq
    state_changes: tuple
    experiments: tuple  # (count, latest updated)
    rollbacks: tuple
    loops: tuple
    tags: tuple
    children: tuple  # runs started from this one: (count, highest id)
    snoozed_until: object  # the snooze in force, if any
    rollbacks_open: int  # requested or dispatched: the page keeps polling while one is
    controls: tuple  # steering requests: (count, latest updated)
    metric: tuple  # of `metric_key`: (count, latest step, latest id), () without a key
    burning: bool  # a turn inside the burn window ends at `now` (queries.timeline.burning_since)


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def run_markers(run: Run, now: datetime, metric_key: str | None = None) -> RunMarkers:
    """The markers of `run` (and of one metric key) in one query."""
    t = _table
    key = connection.ops.quote_name("key")
    latest = "ORDER BY step DESC, id DESC LIMIT 1"  # the (run, key, step) index, read from its end
    parts = [
        f"(SELECT id FROM {t(AgentTurn)} WHERE run_id = %s ORDER BY ts DESC, id DESC LIMIT 1)",
        f"(SELECT MAX(id) FROM {t(Submission)} WHERE run_id = %s)",
        f"(SELECT MAX(updated) FROM {t(Submission)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(Artifact)} WHERE run_id = %s)",
        f"(SELECT MAX(id) FROM {t(Artifact)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(Checkpoint)} WHERE run_id = %s)",
        f"(SELECT MAX(id) FROM {t(Checkpoint)} WHERE run_id = %s)",
        f"(SELECT MAX(seq) FROM {t(RuntimeMessage)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(StateChange)} WHERE run_id = %s)",
        f"(SELECT MAX(id) FROM {t(StateChange)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(Experiment)} WHERE run_id = %s)",
        f"(SELECT MAX(updated) FROM {t(Experiment)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(Rollback)} WHERE run_id = %s)",
        f"(SELECT MAX(updated) FROM {t(Rollback)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(LoopFinding)} WHERE run_id = %s)",
        f"(SELECT MAX(updated) FROM {t(LoopFinding)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(RunTag)} WHERE run_id = %s)",
        f"(SELECT MAX(updated) FROM {t(RunTag)} WHERE run_id = %s)",
        f"(SELECT COUNT(*) FROM {t(Run)} WHERE parent_id = %s)",
        f"(SELECT MAX(id) FROM {t(Run)} WHERE parent_id = %s)",
        f"(SELECT COUNT(*) FROM {t(RunControl)} WHERE run_id = %s)",
        f"(SELECT MAX(updated) FROM {t(RunControl)} WHERE run_id = %s)",
    ]
    params: list = [run.pk] * len(parts)
    parts += [
        f"(SELECT until FROM {t(RunSnooze)} WHERE run_id = %s AND until > %s)",
        f"(SELECT COUNT(*) FROM {t(Rollback)} WHERE run_id = %s AND status IN (%s, %s))",
        # The (run, ts) index from its end: is the newest turn inside the burn window?
        f"(SELECT COUNT(*) FROM (SELECT 1 FROM {t(AgentTurn)} WHERE run_id = %s AND ts >= %s LIMIT 1) b)",
    ]
    adapt = connection.ops.adapt_datetimefield_value
    params += [run.pk, adapt(now), run.pk, *Rollback.OPEN, run.pk, adapt(burning_since(now))]
    if metric_key is not None:
        parts += [
            f"(SELECT COUNT(*) FROM {t(MetricPoint)} WHERE run_id = %s AND {key} = %s)",
            f"(SELECT step FROM {t(MetricPoint)} WHERE run_id = %s AND {key} = %s {latest})",
            f"(SELECT id FROM {t(MetricPoint)} WHERE run_id = %s AND {key} = %s {latest})",
        ]
        params += [run.pk, metric_key] * 3
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    # Timestamps are compared, never shown: whatever type the backend returns is kept as it is.
    return RunMarkers(
        turn_last=row[0],
        submission_last=row[1],
        submissions_updated=row[2],
        artifacts=(row[3], row[4]),
        checkpoints=(row[5], row[6]),
        message_last=row[7],
        state_changes=(row[8], row[9]),
        experiments=(row[10], row[11]),
        rollbacks=(row[12], row[13]),
        loops=(row[14], row[15]),
        tags=(row[16], row[17]),
        children=(row[18], row[19]),
        controls=(row[20], row[21]),
        snoozed_until=row[22],
        rollbacks_open=row[23],
        burning=bool(row[24]),
        metric=tuple(row[25:28]) if metric_key is not None else (),
    )


def submission_markers(run_ids: list[int]) -> dict[int, tuple]:
    """Per run: (count, highest id, latest `updated`) of its submissions, one grouped query from the (run, …)
    index: a new score, a status change, an exclusion or a deletion moves one of them, a new turn none.
    Runs without submissions are left out (their marker is `NO_SUBMISSIONS`)."""
    rows = (
        Submission.objects.filter(run_id__in=run_ids)
        .order_by()
        .values("run_id")
        .annotate(n=Count("id"), top=Max("id"), last=Max("updated"))
        .values_list("run_id", "n", "top", "last")
    )
    return {run_id: (n, top, last) for run_id, n, top, last in rows}


NO_SUBMISSIONS = (0, None, None)


def with_submission_markers(runs: QuerySet) -> QuerySet:
    """`runs`, each read with its `submission_markers` entry (`marker_of`): three subqueries on the same
    index per run, in the runs' own query — for a few runs (a poll's changed rows), not a page of them."""
    return runs.annotate(**_submission_marker_columns())


@functools.cache
def _submission_marker_columns() -> dict[str, RawSQL]:
    """The three subqueries, as SQL: compiling them as ORM subqueries was most of the Python a poll's
    changed-runs query cost (~0.5 ms a poll). Their output fields convert what the backend returns as the
    ORM's aggregates in `submission_markers` do (the two must be equal)."""
    run_id = f"{_table(Run)}.{connection.ops.quote_name(Run._meta.pk.column)}"  # the outer query's run
    of_run = f"FROM {_table(Submission)} WHERE run_id = {run_id}"
    return {
        "submissions_n": RawSQL(f"SELECT COUNT(*) {of_run}", (), output_field=IntegerField()),
        "submissions_top": RawSQL(f"SELECT MAX(id) {of_run}", (), output_field=IntegerField()),
        "submissions_last": RawSQL(f"SELECT MAX(updated) {of_run}", (), output_field=DateTimeField()),
    }


def marker_of(run) -> tuple:
    """A run's submissions marker as `submission_markers` gives it, from `with_submission_markers`."""
    return (
        (run.submissions_n, run.submissions_top, run.submissions_last)
        if run.submissions_n
        else NO_SUBMISSIONS
    )
