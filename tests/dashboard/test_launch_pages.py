"""The "Start the next run" pages: the form prefilled from the run (profile, budget, the carry-forward
block as an editable kickoff), one launch per sent form however often it is sent, errors next to their
fields, the status page that polls until the new run appears; the buttons on the project, run and
knowledge pages for reviewers only; lineage on the run and compare pages."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from html import unescape

import pytest

from smrweb.tracking import queries, services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run, RunLaunch
from smrweb.tracking.services import knowledge, launches

pytestmark = pytest.mark.django_db

NEW = "/projects/hill/launches/new"


def ingest(project, run_id, *events):
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))


@pytest.fixture
def hooked(project, bob):
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    ingest(project, "r1", {"type": "score", "score": 0.7}, {"type": "state", "state": "done"})
    services.update_run_settings(
        project,
        "r1",
        budget_usd=Decimal("2.5"),
        budget_tokens=900_000,
        requested_profile="codex_gpt_5_4_medium",
    )
    knowledge.add_entry(project, by=bob, kind="failed_approach", title="Wide MLP", body="overfit")
    return project


def field(page: str, name: str) -> str:
    tag = re.search(rf'<(?:input|textarea)[^>]*name="{name}"[^>]*>(?:(.*?)</textarea>)?', page, re.S)
    assert tag, name
    if tag.group(0).startswith("<textarea"):
        return unescape(tag.group(1))
    value = re.search(r'value="([^"]*)"', tag.group(0))
    return unescape(value.group(1)) if value else ""


def form_of(client, query="?from=r1") -> dict:
    page = client.get(NEW + query).content.decode()
    names = (
        "idempotency_key",
        "from_run",
        "carry_forward",
        "text",
        "model_profile",
        "budget_usd",
        "budget_tokens",
    )
    return {name: field(page, name) for name in names}


def test_the_form_is_prefilled_from_the_run_and_the_carry_forward_block(client, bob, hooked):
    client.force_login(bob)
    response = client.get(NEW + "?from=r1&n=5")
    page = response.content.decode()
    assert response.status_code == 200 and "started from" in page and "Generic (maximize score)" in page
    data = form_of(client, "?from=r1&n=5")
    assert re.fullmatch(r"[0-9a-f-]{36}", data["idempotency_key"]) and data["from_run"] == "r1"
    assert (data["model_profile"], data["budget_usd"], data["budget_tokens"]) == (
        "codex_gpt_5_4_medium",
        "2.500000",
        "900000",
    )
    assert data["carry_forward"].strip() == queries.launch_defaults(hooked, n=5).carry_forward.strip()
    assert "Wide MLP" in data["carry_forward"] and data["text"] == ""
    assert 'name="git_commit"' not in page  # push project: no commit to choose
    # Each view of the form carries a key of its own.
    assert form_of(client)["idempotency_key"] != data["idempotency_key"]


def test_sending_the_form_twice_makes_one_launch_and_lands_on_its_status(
    client, bob, hooked, queued_launches
):
    client.force_login(bob)
    data = {**form_of(client), "text": "Halve the learning rate."}
    first = client.post(NEW, data)
    launch = RunLaunch.objects.get()
    assert first.status_code == 302 and first["Location"] == f"/projects/hill/launches/{launch.pk}/"
    second = client.post(NEW, data, follow=True)
    assert "already sent" in second.content.decode() and RunLaunch.objects.count() == 1
    assert queued_launches == [launch.pk]
    assert launch.kickoff.endswith("\n\nHalve the learning rate.") and launch.kickoff.startswith(
        "## Carry-forward"
    )
    assert launch.from_run.external_id == "r1" and launch.budget_usd == Decimal("2.5")

    status = client.get(f"/projects/hill/launches/{launch.pk}/").content.decode()
    assert "requested" in status and 'hx-trigger="every 3s' in status and "Halve the learning rate." in status


def test_bad_fields_come_back_with_their_errors_and_nothing_is_written(client, bob, hooked, queued_launches):
    client.force_login(bob)
    data = {**form_of(client), "text": "Mine.", "budget_usd": "-3", "budget_tokens": "lots"}
    response = client.post(NEW, data)
    page = response.content.decode()
    assert response.status_code == 400 and "A budget must be a positive" in page
    assert RunLaunch.objects.count() == 0 and queued_launches == []
    assert field(page, "text") == data["text"]  # what the person wrote is kept for the next try
    data = {**form_of(client), "carry_forward": "", "text": ""}
    page = client.post(NEW, data).content.decode()
    assert "The kickoff message is empty" in page
    tampered = client.post(NEW, {**form_of(client), "idempotency_key": "no"}).content.decode()
    assert "An idempotency key is 8 to 100" in tampered
    assert RunLaunch.objects.count() == 0


def test_a_project_that_cannot_start_runs_says_why_and_refuses(client, bob, project, queued_launches):
    client.force_login(bob)
    page = client.get(NEW).content.decode()
    assert "no webhook URL" in page and "disabled" in page
    response = client.post(NEW, {"idempotency_key": "a-key-123456789", "text": "go"})
    assert response.status_code == 400 and not RunLaunch.objects.exists()


def test_viewers_see_no_buttons_and_cannot_open_the_form(client, victor, bob, hooked):
    client.force_login(victor)
    assert client.get(NEW).status_code == 403
    for url in ("/projects/hill/", "/projects/hill/runs/r1/", "/projects/hill/knowledge/"):
        assert "data-launch-link" not in client.get(url).content.decode(), url
    client.force_login(bob)
    project_page = client.get("/projects/hill/").content.decode()
    assert f'href="{NEW}" data-launch-link>Start the next run' in project_page
    assert (
        f'href="{NEW}?from=r1" data-launch-link>Start another like this'
        in client.get("/projects/hill/runs/r1/").content.decode()
    )
    knowledge_page = unescape(client.get("/projects/hill/knowledge/").content.decode())
    assert f'href="{NEW}?from=r1&n=3" data-launch-link>Start the next run with this' in knowledge_page


def test_lineage_shows_on_both_run_pages_on_compare_and_the_status_page_links_the_run(
    client, bob, victor, hooked
):
    launch, _ = launches.request_launch(
        hooked,
        by=bob,
        from_run=Run.objects.get(external_id="r1"),
        kickoff="go",
        idempotency_key="k-123456789",
    )
    ingest(hooked, "r1-next-1", {"type": "state", "state": "running"}, {"type": "score", "score": 0.8})
    client.force_login(victor)
    child = client.get("/projects/hill/runs/r1-next-1/").content.decode()
    assert re.search(r'started from <a href="/projects/hill/runs/r1/"', child)
    parent = client.get("/projects/hill/runs/r1/").content.decode()
    assert "next run" in parent and 'href="/projects/hill/runs/r1-next-1/"' in parent
    compare = client.get("/projects/hill/compare/?runs=r1&runs=r1-next-1").content.decode()
    assert 'data-parent="r1"' in compare
    status = client.get(f"/projects/hill/launches/{launch.pk}/").content.decode()
    assert "confirmed" in status and 'data-new-run="r1-next-1"' in status and "0.8" in status
    # Polling goes on while the new run is live, and stops once it ended.
    assert 'hx-trigger="every 3s' in status
    ingest(hooked, "r1-next-1", {"type": "state", "state": "done"})
    assert 'hx-trigger="every 3s' not in client.get(f"/projects/hill/launches/{launch.pk}/").content.decode()
    assert client.get(f"/projects/hill/launches/{launch.pk + 1}/").status_code == 404
