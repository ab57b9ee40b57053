"""Two writers pushing overlapping batches to one run at the same time: every event stored once, and
the spend invariant holds. Runs on whichever database the suite runs on (SQLite and PostgreSQL in CI)."""

import json
import threading
from decimal import Decimal

import pytest
from django.db import close_old_connections, connection
from django.db.models import Sum

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AgentTurn, MetricPoint, Run

pytestmark = pytest.mark.django_db(transaction=True)


def turn(i: int) -> dict:
    return {
        "id": f"t{i}",
        "type": "agent.turn",
        "turn": i,
        "actor": "driver" if i % 2 else "w1",
        "parent_actor": None if i % 2 else "driver",
        "tokens_in": 100 + i,
        "cost_usd": 0.001 * (i % 7),
    }


def test_concurrent_overlapping_batches_on_one_run_store_each_event_once(project):
    batches = [
        [turn(i) for i in range(start, start + 40)]
        + [{"id": f"m{start}", "type": "metric", "key": "k", "value": 1.0, "step": start}]
        for start in range(0, 200, 20)
    ]  # consecutive batches overlap by half
    errors: list[BaseException] = []
    results: list = []

    def writer(order: list) -> None:
        try:
            for batch in order:
                results.append(services.ingest_events(project, "shared", parse_events(json.dumps(batch))))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [
        threading.Thread(target=writer, args=(batches,)),
        threading.Thread(target=writer, args=(batches[::-1],)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors

    run = Run.objects.get(external_id="shared")
    expected_turns = {e["id"] for b in batches for e in b if e["type"] == "agent.turn"}
    assert AgentTurn.objects.filter(run=run).count() == len(expected_turns) == run.turn_count
    assert MetricPoint.objects.filter(run=run).count() == len(batches)
    total_events = sum(len(b) for b in batches) * 2
    assert sum(r.accepted for r in results) == len(expected_turns) + len(batches)
    assert sum(r.accepted + r.duplicates for r in results) == total_events
    sums = AgentTurn.objects.filter(run=run).aggregate(usd=Sum("cost_usd"), tin=Sum("tokens_in"))
    assert run.cost_usd == sums["usd"] == run.driver_cost_usd + run.child_cost_usd
    assert run.tokens_in == sums["tin"]
    assert run.cost_usd == sum(
        Decimal(str(turn(int(i[1:]))["cost_usd"])).quantize(Decimal("0.000001")) for i in expected_turns
    )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks are PostgreSQL's")
def test_a_launch_from_a_run_being_written_does_not_deadlock_with_its_ingest(project, bob):
    """Found by CI (PostgreSQL): a launch locked its project FOR UPDATE and, at commit, took KEY SHARE on the
    run it starts from (its foreign key); the run's ingest held that run FOR UPDATE and, at its commit, needed
    KEY SHARE on the project for the rows it wrote. Each waited for the other: "deadlock detected", a 500 on
    the launch form. The launch now locks the project FOR NO KEY UPDATE, which KEY SHARE does not wait for."""
    import time
    import uuid

    from django.db import transaction

    from smrweb.tracking.models import KnowledgeEntry, RunLaunch
    from smrweb.tracking.services import launches

    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    services.ingest_events(project, "r1", parse_events(json.dumps([{"type": "state", "state": "running"}])))
    run = Run.objects.get(external_id="r1")
    errors: list[BaseException] = []
    run_locked = threading.Event()

    def ingest_like() -> None:  # holds the run's row lock, then writes a row pointing at the project
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=run.pk)
                run_locked.set()
                time.sleep(1.0)  # the launch locks the project and reaches its commit meanwhile
                KnowledgeEntry.objects.create(project=project, title="written while a launch waits")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def launch() -> None:
        try:
            run_locked.wait(10)
            launches.request_launch(
                project, by=bob, from_run=run, kickoff="go on", idempotency_key=str(uuid.uuid4())
            )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=ingest_like), threading.Thread(target=launch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert RunLaunch.objects.filter(from_run=run).count() == 1
    assert KnowledgeEntry.objects.filter(project=project).count() == 1
