"""`services.logs`: the one write path of a run's log. Concurrent writers get distinct, gapless seqs;
deleting a run (by hand or by retention) takes its log; an unreadable SMR archive is recorded once;
an archived project takes no lines."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from smrweb.tracking import services
from smrweb.tracking.errors import Archived
from smrweb.tracking.models import LogSource, Run, RunLogBatch, RunLogLine
from smrweb.tracking.services import logs
from tests.tracking.retention_helpers import finished_run


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_get_distinct_gapless_seqs(project):
    run = Run.objects.create(project=project, external_id="busy")
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for b in range(5):
                logs.append_lines(run, f"w{n}-{b}", [f"w{n} b{b} l{i}" for i in range(20)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    seqs = sorted(RunLogLine.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, 401))
    run.refresh_from_db()
    assert run.log_lines == 400
    # Each batch's lines are contiguous, in their order.
    for batch in RunLogBatch.objects.filter(run=run):
        texts = list(
            RunLogLine.objects.filter(run=run, seq__gte=batch.first_seq, seq__lte=batch.last_seq)
            .order_by("seq")
            .values_list("text", flat=True)
        )
        prefix = batch.batch_id.replace("-", " b")
        assert texts == [f"{prefix} l{i}" for i in range(20)]


@pytest.mark.django_db
def test_deleting_a_run_takes_its_log(project, alice):
    run = finished_run(project, "gone")
    logs.append_lines(run, "b1", ["a", "b"])
    keep = finished_run(project, "kept")
    logs.append_lines(keep, "b1", ["c"])
    services.delete_run(run, by=alice, confirm="gone")
    assert list(RunLogLine.objects.values_list("text", flat=True)) == ["c"]
    assert list(RunLogBatch.objects.values_list("run__external_id", flat=True)) == ["kept"]


@pytest.mark.django_db
def test_an_unreadable_archive_is_recorded_once(project):
    run = Run.objects.create(project=project, external_id="smr-run")
    assert logs.record_unreadable_archive(run, "smr:a1", "no location\x00 and no content")
    assert not logs.record_unreadable_archive(run, "smr:a1", "again")
    batch = RunLogBatch.objects.get()
    assert (batch.kept, batch.source, batch.problem) == (0, LogSource.SMR, "no location and no content")
    run.refresh_from_db()
    assert run.log_archives_unreadable == 1
    # A batch id already recorded as unreadable is not read later either.
    assert logs.append_lines(run, "smr:a1", ["late"], source=LogSource.SMR).repeat


@pytest.mark.django_db
def test_an_archived_project_takes_no_lines(project, alice):
    run = finished_run(project, "r")
    services.archive_project(project, by=alice)
    with pytest.raises(Archived):
        logs.append_lines(run, "b", ["x"])
    assert not RunLogLine.objects.exists()
