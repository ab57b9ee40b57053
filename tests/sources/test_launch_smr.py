"""Starting the next run of an SMR project, through the real managed-research SDK against the simulator:
the backend sees one trigger body with the kickoff as its initial runtime message, the budget as its
limit and the launch's idempotency key; the same key never starts a second run (a double-submitted
form, a redelivered task, a garbled answer retried); the poller brings the new run in, linked to the
run it came from, with the kickoff as its first message, and it climbs."""

from __future__ import annotations

from decimal import Decimal

import pytest

from smrweb.outbound import dispatch
from smrweb.sources import sync
from smrweb.sources.smr import connector_for
from smrweb.tracking import queries
from smrweb.tracking.models import Run, RunLaunch, RuntimeMessage
from smrweb.tracking.services import launches
from tests.conftest import wait_for
from tests.sources.smr_project import smr_project_on

pytestmark = pytest.mark.django_db(transaction=True)

API_KEY, SMR_PROJECT = "launch-key", "smr-launch"
KEY = "0b7c9e4a-5d2f-4c61-9a8e-3f1d2c4b5a69"


@pytest.fixture
def simulator(start_sim):
    # Run 0 climbs for 45+ ticks; after 30 ticks it is running and has scores.
    return start_sim(api_key=API_KEY, project_ids=[SMR_PROJECT], runs=2, seed=5, warmup=30, auto_tick=False)


@pytest.fixture
def smr_project(alice, bob, victor, simulator):
    return smr_project_on(
        simulator,
        slug="smr-launch",
        key="lsim",
        api_key=API_KEY,
        smr_project=SMR_PROJECT,
        alice=alice,
        bob=bob,
        victor=victor,
    )


def first_run(project) -> Run:
    return Run.objects.filter(project=project).order_by("started_at", "id").first()


def new_runs(sim, before: set[str]) -> list[str]:
    with sim.world.lock:
        return [
            r.run_id for r in sim.world.runs_by_project[SMR_PROJECT] if r.exists and r.run_id not in before
        ]


def sim_run_ids(sim) -> set[str]:
    with sim.world.lock:
        return {r.run_id for r in sim.world.runs_by_project[SMR_PROJECT] if r.exists}


def test_the_trigger_body_carries_kickoff_limit_profile_and_key_and_the_new_run_is_linked_and_climbs(
    smr_project, simulator, bob
):
    parent = first_run(smr_project)
    defaults = queries.launch_defaults(smr_project, parent)
    assert defaults.model_profile == "codex_gpt_5_4_medium" and defaults.budget_usd == Decimal("5")
    kickoff = launches.compose_kickoff(defaults.carry_forward, "Halve the learning rate; keep the warmup.")
    before = sim_run_ids(simulator)
    launch, created = launches.request_launch(
        smr_project,
        by=bob,
        from_run=parent,
        kickoff=kickoff,
        model_profile=defaults.model_profile,
        budget_usd="2.5",
        budget_tokens=400_000,
        idempotency_key=KEY,
    )
    assert created and launch.external_run_id == ""  # SMR names the run

    assert dispatch.dispatch_launch(launch.pk).outcome == "accepted"
    [call] = simulator.world.trigger_log
    assert call["project_id"] == SMR_PROJECT
    assert call["body"] == {
        "runbook_preset": "lite",
        "agent_profile": "codex_gpt_5_4_medium",
        "limit": {"max_spend_usd": 2.5, "max_tokens": 400_000},
        "initial_runtime_messages": [{"mode": "queue", "body": kickoff}],
        "idempotency_key": KEY,
    }
    [started] = new_runs(simulator, before)
    launch.refresh_from_db()
    assert launch.status == "accepted" and launch.external_run_id == started and launch.attempts == 1
    assert f"SMR started run {started} (state queued)" in launch.detail

    # A redelivered task acts once: nothing more reaches the backend.
    assert dispatch.dispatch_launch(launch.pk).outcome == "skipped"
    assert len(simulator.world.trigger_log) == 1

    # The poller brings the run in: linked, confirmed, the kickoff its first runtime message.
    sync.sync_project(smr_project, owner="test")
    launch.refresh_from_db()
    run = Run.objects.get(project=smr_project, external_id=started)
    assert launch.status == "confirmed" and launch.run == run and run.parent == parent
    assert RuntimeMessage.objects.filter(run=run).order_by("seq").first().body == kickoff
    assert run.budget_usd == Decimal("2.5") and run.requested_profile == "codex_gpt_5_4_medium"

    # It runs like any other run: over the next ticks it scores, and its best improves on its first.
    for _ in range(4):
        simulator.world.tick(10)
        sync.sync_project(smr_project, owner="test")
    run.refresh_from_db()
    scores = list(run.submissions.order_by("ts").values_list("score", flat=True))
    assert run.state in ("running", "done") and len(scores) >= 3
    assert run.best_score == min(scores) < scores[0]  # val_loss: lower is better, and it got lower


def test_the_same_key_starts_one_run_at_the_backend_whoever_sends_it_twice(smr_project, simulator, bob):
    before = sim_run_ids(simulator)
    connector = connector_for(smr_project)
    first = connector.trigger_run(kickoff="hello", idempotency_key=KEY)
    again = connector.trigger_run(kickoff="hello", idempotency_key=KEY)  # the first answer was lost
    other = connector.trigger_run(kickoff="hello", idempotency_key="another-key-123")
    assert first["run_id"] == again["run_id"] != other["run_id"]
    assert sorted(new_runs(simulator, before)) == sorted({first["run_id"], other["run_id"]})
    assert len(simulator.world.trigger_log) == 3


def test_a_garbled_answer_is_retried_with_the_same_key_and_starts_one_run(smr_project, simulator, bob):
    before = sim_run_ids(simulator)
    launch, _ = launches.request_launch(
        smr_project, by=bob, kickoff="go", idempotency_key=KEY, model_profile="codex_gpt_5_4_medium"
    )
    simulator.set_faults("trigger:malformed=1.0")
    attempt = dispatch.dispatch_launch(launch.pk)
    assert attempt.outcome == "retry" and attempt.retry_in > 0
    simulator.set_faults("")
    assert dispatch.dispatch_launch(launch.pk).outcome == "accepted"
    assert len(new_runs(simulator, before)) == 1
    assert {c["body"]["idempotency_key"] for c in simulator.world.trigger_log} == {KEY}
    launch.refresh_from_db()
    assert launch.attempts == 2 and "malformed" in launch.detail and "retrying" in launch.detail


def test_a_profile_the_backend_refuses_fails_at_once_without_retrying(smr_project, simulator, bob):
    launch, _ = launches.request_launch(
        smr_project, by=bob, kickoff="go", idempotency_key=KEY, model_profile="no_such_profile"
    )
    assert dispatch.dispatch_launch(launch.pk).outcome == "failed"
    launch.refresh_from_db()
    assert launch.status == "failed" and launch.attempts == 1 and "422" in launch.detail
    assert Run.objects.filter(project=smr_project).count() == 2  # nothing new


@pytest.mark.integration
def test_a_double_submitted_form_starts_one_run_through_the_worker_and_the_page_links_it(
    client, bob, smr_project, simulator, celery_worker
):
    parent = first_run(smr_project)
    before = sim_run_ids(simulator)
    client.force_login(bob)
    form = client.get(f"/projects/smr-launch/launches/new?from={parent.external_id}")
    assert form.status_code == 200
    page = form.content.decode()
    key = page.split('name="idempotency_key" value="')[1].split('"')[0]
    data = {
        "idempotency_key": key,
        "from_run": parent.external_id,
        "carry_forward": "## Carry-forward: smr-launch",
        "text": "Try a cosine schedule.",
        "model_profile": "codex_gpt_5_4_medium",
        "budget_usd": "3",
        "budget_tokens": "",
    }
    first = client.post("/projects/smr-launch/launches/new", data)
    second = client.post("/projects/smr-launch/launches/new", data, follow=True)
    launch = RunLaunch.objects.get()
    assert first["Location"] == f"/projects/smr-launch/launches/{launch.pk}/"
    assert "already sent" in second.content.decode()

    wait_for(lambda: RunLaunch.objects.get().status == "confirmed", timeout=60)  # the worker synced it
    launch.refresh_from_db()
    assert len(new_runs(simulator, before)) == 1 and len(simulator.world.trigger_log) == 1
    assert launch.run.parent == parent
    assert simulator.world.trigger_log[0]["body"]["initial_runtime_messages"][0]["body"] == (
        "## Carry-forward: smr-launch\n\nTry a cosine schedule."
    )
    body = client.get(f"/projects/smr-launch/launches/{launch.pk}/").content.decode()
    assert "confirmed" in body and launch.run.get_absolute_url() in body
    run_page = client.get(launch.run.get_absolute_url()).content.decode()
    assert "started from" in run_page and parent.get_absolute_url() in run_page
    parent_page = client.get(parent.get_absolute_url()).content.decode()
    assert "next run" in parent_page and launch.run.get_absolute_url() in parent_page
