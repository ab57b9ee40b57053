"""core.prepared: a rows query compiled once gives what the ORM's query gives, for any ids, in any thread,
on SQLite and PostgreSQL; a query it cannot prepare is refused when first run, not run wrong."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from smrweb.core.prepared import Prepared
from smrweb.tracking.models import AgentTurn, Run
from smrweb.tracking.queries import markers
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
    prepared = Prepared(advance, int, int)
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
    prepared = Prepared(advance, int, int)
    built = []
    counting = Prepared(lambda *ids: built.append(ids) or advance(*ids), int, int)
    for _ in range(3):
        with CaptureQueriesContext(connection) as seen:
            assert counting.rows(run.pk, 0) == prepared.rows(run.pk, 0)
        assert len(seen) == 2  # the two `rows` calls: nothing else read
    assert len(built) == 1


@pytest.mark.django_db
def test_ids_that_are_not_the_querys_parameters_are_refused(project):
    run = seeded(project)[0]
    ignores_mark = Prepared(lambda run_id, mark: advance(run_id, 0), int, int)
    with pytest.raises(ValueError, match="not every value"):
        ignores_mark.rows(run.pk, 5)
    prepared = Prepared(advance, int, int)
    for bad in ((run.pk,), (run.pk, "5"), (run.pk, 5.0), (run.pk, None)):
        with pytest.raises(TypeError):
            prepared.rows(*bad)


@pytest.mark.django_db(transaction=True)
def test_compiled_in_one_thread_it_runs_in_another_on_that_threads_connection(project):
    runs = seeded(project)
    prepared = Prepared(advance, int, int)
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


def changed_since(project_id: int, since):
    """The project poll's query: runs changed since a moment, with their submissions markers."""
    changed = Run.objects.filter(project_id=project_id, updated__gt=since).order_by("id")
    return markers.with_submission_markers(changed).defer("source_cursor", "metrics_downsampled")


def state(run: Run) -> dict:
    """What a run read by the query holds: its columns read, its deferred ones, its markers."""
    fields = {
        f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields if f.attname in run.__dict__
    }
    return {**fields, "deferred": run.get_deferred_fields(), "marker": markers.marker_of(run)}


@pytest.mark.django_db
def test_its_instances_are_the_orms_with_their_annotations_for_every_moment(project):
    runs = seeded(project)
    push(project, "a", [{"type": "score", "score": 0.5, "harness_id": "h"}])
    prepared = Prepared(changed_since, int, datetime)
    moments = sorted(Run.objects.filter(project=project).values_list("updated", flat=True))
    for since in (moments[0] - timedelta(days=1), moments[0], moments[-1], moments[-1] + timedelta(days=1)):
        expected = [state(r) for r in changed_since(project.pk, since)]
        got = prepared.instances(project.pk, since)
        assert [state(r) for r in got] == expected, since
        assert all(isinstance(r, Run) and r._state.db == "default" and not r._state.adding for r in got)
    assert len(prepared.instances(project.pk, moments[0] - timedelta(days=1))) == len(runs)
    assert markers.marker_of(prepared.instances(project.pk, moments[0] - timedelta(days=1))[0])[0] == 1
    # A moment in another zone is the same moment.
    other = moments[0].astimezone(timezone.get_fixed_timezone(-300)) - timedelta(seconds=1)
    assert [r.pk for r in prepared.instances(project.pk, other)] == [
        r.pk for r in changed_since(project.pk, other)
    ]


@pytest.mark.django_db
def test_instances_of_a_query_with_related_rows_and_values_of_the_wrong_kind_are_refused(project):
    seeded(project)
    joined = Prepared(
        lambda project_id: Run.objects.filter(project_id=project_id).select_related("project"), int
    )
    with pytest.raises(ValueError, match="own columns"):
        joined.instances(project.pk)
    with pytest.raises(TypeError):
        Prepared(changed_since, int, datetime).instances(project.pk, "2026-01-01")
    with pytest.raises(TypeError):
        Prepared(changed_since, int, str)
