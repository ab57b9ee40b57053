"""A metric point always names an existing run, on both databases: SQLite by its foreign key, PostgreSQL
by the statement-level triggers of migration 0019 (one check per statement instead of one per point at
commit). Points of a missing run are refused, a run with points cannot be deleted under them, and the
write path's own deletions (points first, under the run's lock) still work."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import MetricPoint, Run

POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
TS = datetime(2026, 1, 1, tzinfo=UTC)


def ingest(project, n: int, run: str = "r1") -> services.IngestResult:
    batch = [{"type": "metric", "id": f"m{i}", "key": "loss", "value": i / 3, "step": i} for i in range(n)]
    return services.ingest_events(project, run, ev.parse_events(json.dumps(batch)))


def missing_run_id() -> int:
    return (Run.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1000


@pytest.mark.django_db(transaction=True)
def test_a_point_of_a_missing_run_is_refused(project):
    ingest(project, 3)
    with pytest.raises(IntegrityError), transaction.atomic():
        MetricPoint.objects.create(
            run_id=missing_run_id(), key="loss", step=0, value=1.0, ts=TS, event_id="x"
        )
    with pytest.raises(IntegrityError), transaction.atomic():  # one bad row among good ones: all refused
        run = Run.objects.get()
        MetricPoint.objects.bulk_create(
            [
                MetricPoint(run=run, key="loss", step=10, value=1.0, ts=TS, event_id="ok"),
                MetricPoint(run_id=missing_run_id(), key="loss", step=0, value=1.0, ts=TS, event_id="y"),
            ]
        )
    assert MetricPoint.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_point_moved_to_a_missing_run_is_refused(project):
    ingest(project, 2)
    with pytest.raises(IntegrityError), transaction.atomic():
        MetricPoint.objects.filter(event_id="m0").update(run_id=missing_run_id())
    assert set(MetricPoint.objects.values_list("run__external_id", flat=True)) == {"r1"}


@pytest.mark.django_db(transaction=True)
def test_a_run_with_points_cannot_be_deleted_under_them(project):
    ingest(project, 5)
    run = Run.objects.get()
    table = connection.ops.quote_name(Run._meta.db_table)
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE id = %s", [run.pk])
    assert Run.objects.filter(pk=run.pk).exists() and MetricPoint.objects.filter(run=run).count() == 5


@pytest.mark.django_db(transaction=True)
def test_deleting_a_run_the_ordinary_ways_takes_its_points(project, alice):
    ingest(project, 5, run="a")
    ingest(project, 5, run="b")
    Run.objects.get(external_id="a").delete()  # Django's collector: the points first
    assert list(MetricPoint.objects.values_list("run__external_id", flat=True).distinct()) == ["b"]
    run = Run.objects.get(external_id="b")
    services.delete_event_rows(MetricPoint.objects.filter(run=run))
    Run.objects.filter(pk=run.pk).delete()
    assert not MetricPoint.objects.exists() and not Run.objects.exists()


@pytest.mark.skipif(not POSTGRES, reason="the shape of PostgreSQL's check")
@pytest.mark.django_db
def test_postgres_checks_the_run_once_per_statement_not_per_point():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname, tgconstraint <> 0 FROM pg_trigger "
            "WHERE tgrelid = 'tracking_metricpoint'::regclass"
        )
        triggers = dict(cursor.fetchall())
        cursor.execute(
            "SELECT count(*) FROM pg_constraint "
            "WHERE conrelid = 'tracking_metricpoint'::regclass AND contype = 'f'"
        )
        (foreign_keys,) = cursor.fetchone()
    # No built-in (per-row, constraint) trigger on the point table: only the two statement triggers.
    assert foreign_keys == 0
    assert triggers == {"smrweb_metricpoint_run_insert": False, "smrweb_metricpoint_run_update": False}


@pytest.mark.skipif(not POSTGRES, reason="SQLite writers queue on one lock: no interleaving to test")
@pytest.mark.django_db(transaction=True)
def test_an_ingest_racing_the_deletion_of_its_run_never_leaves_points_behind(project):
    """The deleter holds the run (points deleted, run deleted, not committed yet) while an ingest into
    the same run waits on it; whichever way it ends, no point is left without its run."""
    ingest(project, 5)
    run = Run.objects.get()
    deleting = threading.Event()
    outcome: list[object] = []

    def writer() -> None:
        try:
            deleting.wait(timeout=30)
            outcome.append(ingest(project, 10).accepted)
        except BaseException as exc:  # noqa: BLE001 (inspected below)
            outcome.append(exc)
        finally:
            close_old_connections()
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    with transaction.atomic():
        Run.objects.select_for_update().get(pk=run.pk)
        MetricPoint.objects.filter(run=run)._raw_delete(MetricPoint.objects.db)
        Run.objects.filter(pk=run.pk).delete()
        deleting.set()
        thread.join(timeout=2)  # the writer is blocked on the run's row lock meanwhile
        assert thread.is_alive()
    thread.join(timeout=60)
    assert not thread.is_alive()
    orphans = MetricPoint.objects.exclude(run_id__in=Run.objects.values("pk")).count()
    assert orphans == 0
    # The writer either failed on the vanished run or, finding none, created it afresh with its points.
    if isinstance(outcome[0], BaseException):
        assert not MetricPoint.objects.exists()
    else:
        assert outcome == [10] and MetricPoint.objects.filter(run__external_id="r1").count() == 10
