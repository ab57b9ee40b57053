"""core.prepared: a rows query compiled once gives what the ORM's query gives, for any ids, in any thread,
on SQLite and PostgreSQL; a query it cannot prepare is refused when first run, not run wrong."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from smrweb.core.prepared import Prepared
from smrweb.tracking.models import AgentTurn, Run
from smrweb.tracking.queries.timeline_scores import turns_past
from smrweb.tracking.queries.turn_memo import ADVANCE_FIELDS
from tests.dashboard.test_scale import push, turn_events


def advance(run_id: int, mark: int):
    return turns_past(run_id, mark).order_by("id").values_list(*ADVANCE_FIELDS)


def seeded(project) -> list[Run]:
    """Two runs of priced turns with tool calls (a datetime, a decimal and JSON to convert per row)."""
    push(project, "a", turn_events(30))
    push(project, "b", turn_events(12, start=100))
    return list(Run.objects.filter(project=project).order_by("external_id"))


@pytest.mark.django_db
def test_its_rows_are_the_orms_for_every_run_and_mark(project):
    runs = seeded(project)
    prepared = Prepared(advance, 2)
    for run in runs:
        ids = list(AgentTurn.objects.filter(run=run).order_by("id").values_list("id", flat=True))
        for mark in (0, ids[0], ids[len(ids) // 2], ids[-1], ids[-1] + 1000):
            expected = list(advance(run.pk, mark))
            got = prepared.rows(run.pk, mark)
            assert got == expected, (run.external_id, mark)
            assert all(type(a) is type(b) for row, want in zip(got, expected) for a, b in zip(row, want))
    assert prepared.rows(runs[0].pk, 0)  # the stand-ins were replaced: a run's turns, not none
    assert {row[0] for row in prepared.rows(runs[1].pk, 0)} == set(runs[1].turns.values_list("id", flat=True))


@pytest.mark.django_db
def test_it_compiles_once_and_runs_one_query_each_time(project):
    run = seeded(project)[0]
    prepared = Prepared(advance, 2)
    built = []
    counting = Prepared(lambda *ids: built.append(ids) or advance(*ids), 2)
    for _ in range(3):
        with CaptureQueriesContext(connection) as seen:
            assert counting.rows(run.pk, 0) == prepared.rows(run.pk, 0)
        assert len(seen) == 2  # the two `rows` calls: nothing else read
    assert len(built) == 1


@pytest.mark.django_db
def test_ids_that_are_not_the_querys_parameters_are_refused(project):
    run = seeded(project)[0]
    ignores_mark = Prepared(lambda run_id, mark: advance(run_id, 0), 2)
    with pytest.raises(ValueError, match="not every id"):
        ignores_mark.rows(run.pk, 5)
    prepared = Prepared(advance, 2)
    for bad in ((run.pk,), (run.pk, "5"), (run.pk, 5.0), (run.pk, None)):
        with pytest.raises(TypeError):
            prepared.rows(*bad)


@pytest.mark.django_db(transaction=True)
def test_compiled_in_one_thread_it_runs_in_another_on_that_threads_connection(project):
    runs = seeded(project)
    prepared = Prepared(advance, 2)
    assert prepared.rows(runs[0].pk, 0)  # compiled here
    found: dict = {}

    def other() -> None:
        try:
            found["rows"] = prepared.rows(runs[1].pk, 0)
            found["expected"] = list(advance(runs[1].pk, 0))
        finally:
            connections.close_all()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert found["rows"] == found["expected"] and len(found["rows"]) == 12
