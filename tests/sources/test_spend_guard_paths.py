"""The spend guards through the real paths (issue 38 item 4, "Done when"): a push project's harness is a
signed-webhook receiver server the test starts, and gets `smrweb.pause` from a Celery worker that
evaluated the batch pushed through the API; an SMR project polls the simulator, which pauses (or stops)
the run; each acts once per episode, a person's Resume is not paused again until a new best score, and
the day budget pauses every live run of the project once that day."""

from __future__ import annotations

from decimal import Decimal

import pytest

from smrweb import tasks
from smrweb.outbound import dispatch, webhooks
from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, GuardEpisode, Notification, Project, Run, RunControl
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from tests.api.helpers import session_client
from tests.conftest import wait_for
from tests.sources.smr_project import smr_project_on
from tests.sources.test_submission_loop import Receiver

API_KEY, SMR_PROJECT = "guard-key", "smr-guard"


def turns(first: int, last: int, usd: float, hour: int = 0) -> list[dict]:
    return [
        {"type": "agent.turn", "turn": n, "cost_usd": usd, "ts": f"2026-01-01T{hour:02d}:{n:02d}:00Z"}
        for n in range(first, last + 1)
    ]


@pytest.fixture
def harness(project):
    """The project's webhook: a receiver server that checks every signature."""
    receiver = Receiver([], webhooks.webhook_secret(project))
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url=receiver.url)
    yield receiver
    receiver.stop()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_push_run_past_its_spend_since_best_is_paused_by_a_signed_webhook_once_per_episode(
    project, api, alice, harness, celery_worker
):
    services.update_project(project, spend_stop="pause", spend_stop_usd=Decimal("1"))
    start = [
        {"id": "s", "type": "state", "state": "running", "ts": "2026-01-01T00:00:00Z"},
        {"id": "b1", "type": "score", "score": 0.5, "ts": "2026-01-01T00:00:30Z"},
        *turns(1, 3, 0.5),  # $1.50 since the best
    ]
    assert api.post("/api/v1/projects/hill/runs/r1/events", start, format="json").status_code in (
        200,
        201,
        202,
    )
    # The worker evaluates the batch, the guard asks for a pause, the dispatcher signs and sends it.
    wait_for(lambda: len(harness.seen) == 1, timeout=60)
    [pause] = harness.seen
    control = RunControl.objects.get()
    assert pause["valid"] and pause["key"] == f"smrweb-control-{control.pk}"
    assert pause["body"] == {
        "type": "smrweb.pause",
        "control_id": control.pk,
        "project": "hill",
        "run": "r1",
        "requested_by": "smrweb (spend guard)",
        "guard": "spend",
        "requested_at": pause["body"]["requested_at"],
    }
    wait_for(lambda: RunControl.objects.get().status == "accepted")
    run = Run.objects.get(external_id="r1")
    note = Notification.objects.get(kind="guard", recipient=alice)
    assert "$1.50 spent since its best score (the limit is $1.00)" in note.title
    # The harness pauses and says so: confirmed. A person resumes it (a signed smrweb.resume).
    paused = [{"id": "p", "type": "state", "state": "paused", "ts": "2026-01-01T00:04:00Z"}]
    api.post("/api/v1/projects/hill/runs/r1/events", paused, format="json")
    wait_for(lambda: RunControl.objects.get(kind="pause").status == "confirmed")
    resume = session_client(alice).post("/api/v1/projects/hill/runs/r1/resume")
    assert resume.status_code == 202, resume.content
    wait_for(lambda: len(harness.seen) == 2, timeout=60)
    assert (
        harness.seen[1]["body"]["type"] == "smrweb.resume"
        and harness.seen[1]["body"]["requested_by"] == "alice"
    )
    running = [
        {"id": "r", "type": "state", "state": "running", "ts": "2026-01-01T00:05:00Z"},
        *turns(6, 9, 0.5),
    ]
    api.post("/api/v1/projects/hill/runs/r1/events", running, format="json")
    wait_for(lambda: RunControl.objects.get(kind="resume").status == "confirmed")
    # $3.50 since the same best: the guard does not pause what a person resumed in this episode.
    tasks.evaluate_alerts("run", run.pk)
    assert len(harness.seen) == 2 and GuardEpisode.objects.count() == 1
    # A new best score starts a new episode: past $1 again, paused again (once).
    better = [
        {"id": "b2", "type": "score", "score": 0.9, "ts": "2026-01-01T01:00:00Z"},
        *turns(11, 13, 0.5, hour=2),
    ]
    api.post("/api/v1/projects/hill/runs/r1/events", better, format="json")
    wait_for(lambda: len(harness.seen) == 3, timeout=60)
    assert harness.seen[2]["body"]["type"] == "smrweb.pause" and harness.seen[2]["valid"]
    tasks.evaluate_alerts("run", run.pk)  # evaluated again: nothing more
    assert len(harness.seen) == 3 and GuardEpisode.objects.count() == 2
    verbs = list(AuditEvent.objects.filter(verb="run.guard_paused").values_list("actor", "detail__episode"))
    assert [v[0] for v in verbs] == [None, None] and len({v[1] for v in verbs}) == 2


@pytest.mark.django_db
def test_a_push_project_that_chose_stop_sends_the_signed_stop_with_the_numbers(project, harness):
    services.update_project(project, spend_stop="stop", spend_stop_turns=3)
    run = Run.objects.get(pk=_push(project, "r1", [{"type": "state", "state": "running"}, *turns(1, 4, 0.1)]))
    result = alert_evaluation.evaluate_run(run.pk)
    [(run_id, reason)] = result.stops
    tasks.stop_run(run_id, reason)  # the stop task as the worker runs it (it queues the re-sync there)
    [stop] = harness.seen
    assert stop["valid"] and stop["key"] == f"smrweb-stop-{run.pk}"
    assert stop["body"]["type"] == "smrweb.stop"
    assert stop["body"]["reason"] == "spend guard: 4 turns since it started (no score yet) (the limit is 3)"
    assert AuditEvent.objects.filter(verb="run.stopped", object_id=str(run.pk)).exists()
    assert alert_evaluation.evaluate_run(run.pk).stops == []  # once


@pytest.mark.django_db
def test_the_day_budget_pauses_every_live_push_run_through_the_receiver(project, alice, harness):
    services.update_project(project, day_budget_usd=Decimal("1"), day_zone="UTC")
    from django.utils import timezone

    now = timezone.now().replace(microsecond=0)
    stamp = now.isoformat().replace("+00:00", "Z")
    a = _push(project, "a", [{"type": "state", "state": "running"}])
    b = _push(project, "b", [{"type": "state", "state": "running"}])
    _push(project, "c", [{"type": "state", "state": "done"}])
    spend = [{"type": "agent.turn", "turn": 1, "cost_usd": 1.2, "ts": stamp}]
    result = alert_evaluation.evaluate_run(_push(project, "a", spend))
    assert len(result.controls) == 2
    for control_id in result.controls:
        assert dispatch.dispatch_control(control_id).outcome == "accepted"
    assert sorted(s["body"]["run"] for s in harness.seen) == ["a", "b"]
    assert {s["body"]["type"] for s in harness.seen} == {"smrweb.pause"}
    assert {s["body"]["guard"] for s in harness.seen} == {"day"} and all(s["valid"] for s in harness.seen)
    note = Notification.objects.get(kind="guard", recipient=alice)
    assert "day budget reached, 2 live runs paused" in note.title and "$1.20 today" in note.body
    assert alert_evaluation.evaluate_run(b).controls == []  # once that day
    del a


def _push(project, run_id: str, events: list[dict]) -> int:
    import json

    from smrweb.tracking.events import parse_events

    services.ingest_events(project, run_id, parse_events(json.dumps(events)))
    return Run.objects.get(project=project, external_id=run_id).pk


# --- SMR: the simulator ---------------------------------------------------------------------------------


@pytest.fixture
def simulator(start_sim):
    return start_sim(
        api_key=API_KEY, project_ids=[SMR_PROJECT], runs=2, tick=0.1, seed=5, warmup=10, auto_tick=False
    )


@pytest.fixture
def smr_project(alice, bob, victor, simulator):
    return smr_project_on(
        simulator,
        slug="smr-guard",
        key="guard",
        api_key=API_KEY,
        smr_project=SMR_PROJECT,
        alice=alice,
        bob=bob,
        victor=victor,
    )


def calls(simulator, route: str) -> list[dict]:
    return [c for c in simulator.stats.snapshot()["calls"] if c["route"] == route]


def live_run(project, simulator) -> Run:
    first = simulator.world.runs_by_project[SMR_PROJECT][0]
    assert first.state == "running"
    return Run.objects.get(project=project, external_id=first.run_id)


@pytest.mark.django_db
def test_an_smr_run_is_paused_through_the_simulator_once_and_a_resume_stands(smr_project, simulator, bob):
    run = live_run(smr_project, simulator)
    assert run.turn_count > 0 and run.cost_usd > 0
    services.update_project(smr_project, spend_stop="pause", spend_stop_usd=Decimal("0.000001"))
    [control_id] = alert_evaluation.evaluate_run(run.pk).controls
    assert dispatch.dispatch_control(control_id).outcome == "accepted"
    [pause] = calls(simulator, "pause")
    assert pause["path"] == f"/smr/projects/{SMR_PROJECT}/runs/{run.external_id}/pause"
    sync.sync_project(smr_project, owner="test")
    run.refresh_from_db()
    assert run.state == "paused" and RunControl.objects.get(pk=control_id).status == "confirmed"
    episode = GuardEpisode.objects.get()
    assert episode.action == "pause" and episode.control_id == control_id
    # A person resumes it; the world moves on, with no better score: not paused again.
    resume = services.request_control(run, by=bob, kind="resume")
    assert dispatch.dispatch_control(resume.pk).outcome == "accepted"
    sync.sync_project(smr_project, owner="test")
    run.refresh_from_db()
    assert run.state == "running"
    first_best, paused_again = run.best_score, []
    for _ in range(30):
        simulator.world.tick(1)
        sync.sync_project(smr_project, owner="test")
        run.refresh_from_db()
        if run.is_terminal or run.state == "paused":
            break
        controls = alert_evaluation.evaluate_run(run.pk).controls
        if run.best_score == first_best:  # the same episode: what the person resumed goes on
            assert controls == []
        elif controls:  # a new best score, then spend since it: a new episode, paused again
            paused_again = controls
            break
    assert paused_again, "the simulated run found no better score to start a new episode"
    assert GuardEpisode.objects.count() == 2 and len(paused_again) == 1
    assert dispatch.dispatch_control(paused_again[0]).outcome == "accepted"
    assert len(calls(simulator, "pause")) == GuardEpisode.objects.count()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_smr_project_that_chose_stop_stops_the_run_at_the_simulator(smr_project, simulator, celery_worker):
    run = live_run(smr_project, simulator)
    services.update_project(smr_project, spend_stop="stop", spend_stop_turns=1)
    stops = alert_evaluation.evaluate_run(run.pk).stops
    while not stops:  # right after a new best score: its next turns pass the limit
        simulator.world.tick(1)
        sync.sync_project(smr_project, owner="test")
        stops = alert_evaluation.evaluate_run(run.pk).stops
    [(run_id, reason)] = stops
    assert run_id == run.pk and reason.startswith("spend guard: ") and "turns since its best score" in reason
    tasks.stop_run(run_id, reason)  # the stop task as the worker runs it (it queues the re-sync there)
    [truth] = [
        r for r in simulator.world.state()["projects"][SMR_PROJECT]["runs"] if r["run_id"] == run.external_id
    ]
    assert truth["state"] == "stopped"
    assert AuditEvent.objects.filter(verb="run.stop_requested", detail__guard="spend").count() == 1
    assert alert_evaluation.evaluate_run(run.pk).stops == []
