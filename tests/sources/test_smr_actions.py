"""Stopping a run from the dashboard goes through a real worker to the simulator, audited; source
health and the SMR fields show on the pages; keys never appear in a page or an API answer."""

from __future__ import annotations

import httpx
import pytest

from smrweb.sources import sync
from smrweb.tracking.models import AuditEvent, Run, SourceHealth
from tests.conftest import wait_for
from tests.sources.smr_project import smr_project_on

pytestmark = pytest.mark.django_db(transaction=True)

API_KEY, SMR_PROJECT = "action-key", "smr-actions"


@pytest.fixture
def simulator(start_sim):
    return start_sim(api_key=API_KEY, project_ids=[SMR_PROJECT], runs=4, tick=0.1, seed=5, warmup=25)


@pytest.fixture
def smr_project(alice, bob, victor, simulator):
    return smr_project_on(
        simulator,
        slug="smr-act",
        key="act",
        api_key=API_KEY,
        smr_project=SMR_PROJECT,
        alice=alice,
        bob=bob,
        victor=victor,
    )


def live_run(project) -> Run:
    return Run.objects.filter(project=project, state="running").first()


@pytest.mark.integration
def test_a_reviewer_stops_a_live_run_through_the_worker_and_the_stop_is_audited(
    client, bob, smr_project, simulator, celery_worker
):
    run = live_run(smr_project)
    client.force_login(bob)
    response = client.post(f"/projects/smr-act/runs/{run.external_id}/stop")
    assert response.status_code == 302
    assert AuditEvent.objects.filter(verb="run.stop_requested", object_id=str(run.pk), actor=bob).exists()

    wait_for(lambda: AuditEvent.objects.filter(verb="run.stopped", object_id=str(run.pk)).exists())
    world = httpx.get(f"{simulator.url}/_sim/state").json()
    [truth] = [r for r in world["projects"][SMR_PROJECT]["runs"] if r["run_id"] == run.external_id]
    assert truth["state"] == "stopped" and len(truth["control_intents"]) == 1
    wait_for(lambda: Run.objects.get(pk=run.pk).state == "stopped")  # the re-sync brought it in


def test_a_viewer_cannot_stop_a_run(client, victor, smr_project):
    run = live_run(smr_project)
    client.force_login(victor)
    assert client.post(f"/projects/smr-act/runs/{run.external_id}/stop").status_code == 403
    assert not AuditEvent.objects.filter(verb="run.stop_requested").exists()


def test_stopping_a_finished_run_is_refused_with_a_message(client, alice, smr_project):
    run = live_run(smr_project)
    Run.objects.filter(pk=run.pk).update(state="done")
    client.force_login(alice)
    page = client.post(f"/projects/smr-act/runs/{run.external_id}/stop", follow=True).content.decode()
    assert "already done" in page
    assert not AuditEvent.objects.filter(verb="run.stop_requested").exists()


def test_project_page_shows_source_health_with_the_last_error(client, alice, smr_project, simulator):
    client.force_login(alice)
    body = client.get("/projects/smr-act/").content.decode()
    assert 'id="source-health"' in body and "last sync" in body
    simulator.set_faults("5xx=1.0")
    sync.sync_project(smr_project, owner="test")
    health = SourceHealth.objects.get(project=smr_project)
    assert health.consecutive_failures == 1 and health.last_error_kind == "server_error"
    body = " ".join(client.get("/projects/smr-act/").content.decode().split())  # whitespace as shown
    assert "1 failure in a row" in body and "server_error" in body


def test_run_page_shows_phase_billed_total_and_other_meters(client, alice, smr_project):
    run = Run.objects.filter(project=smr_project).exclude(source_total_usd=None).first()
    client.force_login(alice)
    body = client.get(f"/projects/smr-act/runs/{run.external_id}/").content.decode()
    assert "spend (billed)" in body and "other meters" in body and "source checked" in body


def test_the_smr_key_is_never_shown_in_pages_or_api_answers(client, alice, smr_project):
    client.force_login(alice)
    pages = [
        client.get(u).content.decode()
        for u in ("/", "/projects/smr-act/", "/api/v1/projects/", "/api/v1/projects/smr-act/")
    ]
    assert all(API_KEY not in p for p in pages)
    assert API_KEY not in str(smr_project.source_settings)  # sealed at rest
    assert "api_key_sealed" not in "".join(pages)


def test_stop_with_the_queue_unreachable_says_so_instead_of_failing(client, bob, smr_project, monkeypatch):
    from kombu.exceptions import OperationalError

    from smrweb import tasks

    def down(*args):
        raise OperationalError("Error 111 connecting to redis")

    monkeypatch.setattr(tasks.stop_run, "delay_on_commit", down)
    run = live_run(smr_project)
    client.force_login(bob)
    response = client.post(f"/projects/smr-act/runs/{run.external_id}/stop", follow=True)
    assert response.status_code == 200
    assert "the stop was not sent" in response.content.decode()
    assert Run.objects.get(pk=run.pk).state == "running"
