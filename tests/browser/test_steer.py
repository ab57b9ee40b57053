"""Steering in a real browser: what is typed into the Steer card survives the page's polls; Send answers
with the request in the list and an empty box; the source's report turns it `confirmed` and the message
shows under Runtime messages without a reload; Pause becomes "Pausing…", then Resume once the run is
paused."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Project, RunControl
from smrweb.tracking.services import dispatched
from tests.browser.conftest import push, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 8_000  # the page and the card's status part poll every 3 s


@pytest.fixture
def steerable(project, monkeypatch):
    from smrweb import tasks

    monkeypatch.setattr(
        tasks.dispatch_control, "delay_on_commit", lambda pk: None
    )  # no worker: the test answers
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="https://harness.example/hook")
    push(project, "live-1", state("running"), turn(0))
    return project


def test_steer_a_run_from_its_page(page, sign_in, bob, steerable, screenshot_dir):
    sign_in(bob)
    page.goto("/projects/hill/runs/live-1/")
    box = page.locator("#id_steer_body")
    box.fill("Try cosine decay; keep the batch size at 64.")
    push(steerable, "live-1", turn(1))  # the page's poll swaps #run-live meanwhile
    expect(page.locator("[data-turns-range]")).to_contain_text("latest 2 of 2", timeout=LIVE_WAIT_MS)
    page.wait_for_timeout(3_500)
    expect(box).to_have_value("Try cosine decay; keep the batch size at 64.")

    page.get_by_role("button", name="Send message").click()
    control = page.locator("[data-control-kind=message]")
    expect(control).to_have_attribute("data-control-status", "requested")
    expect(control).to_contain_text("Try cosine decay; keep the batch size at 64.")
    expect(page.locator("#id_steer_body")).to_have_value("")
    expect(page.locator("#run-steer [role=status]")).to_contain_text("on its way to the run's source")

    sent = RunControl.objects.get()
    dispatched.start_attempt(RunControl, sent.pk)
    services.control_accepted(sent.pk, detail="attempt 1: the webhook answered HTTP 202")
    push(steerable, "live-1", {"type": "message", "id": sent.idempotency_key, "body": sent.body})
    expect(control).to_have_attribute("data-control-status", "confirmed", timeout=LIVE_WAIT_MS)
    expect(page.locator("#run-live")).to_contain_text(
        "Try cosine decay; keep the batch size", timeout=LIVE_WAIT_MS
    )
    page.screenshot(path=str(screenshot_dir / "steer-confirmed.png"), full_page=True)

    page.get_by_role("button", name="Pause run").click()
    expect(page.locator("[data-steer-pending=pause]")).to_be_disabled()
    pause = RunControl.objects.get(kind="pause")
    dispatched.start_attempt(RunControl, pause.pk)
    services.control_accepted(pause.pk, detail="attempt 1: the webhook answered HTTP 202")
    push(steerable, "live-1", {**state("paused"), "id": "paused-1"})
    expect(page.get_by_role("button", name="Resume run")).to_be_visible(timeout=LIVE_WAIT_MS)
    expect(page.locator("[data-control-kind=pause]")).to_have_attribute("data-control-status", "confirmed")
