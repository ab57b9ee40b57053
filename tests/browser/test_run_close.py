"""A reviewer closes a silent run as abandoned in a real browser: the form opens from the run page's
actions, keeps what is typed across the page's live refresh, asks for confirmation, and the page then
says who closed the run and why."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Run
from tests.browser.conftest import push, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_closes_a_silent_run_from_its_page(page, sign_in, project, bob, tmp_path):
    with time_machine.travel(timezone.now() - project.stall_after - timedelta(minutes=2), tick=False):
        push(project, "r-silent", state("running"), turn(0))
    sign_in(bob)
    page.goto("/projects/hill/runs/r-silent/")
    form = page.locator("details.close-run")
    expect(page.locator("#run-live h1 .badge-running")).to_be_visible()
    form.locator("summary").click()
    reason = form.locator("textarea[name=reason]")
    expect(reason).to_be_visible()
    reason.fill("the harness was OOM-killed at 03:12")
    page.screenshot(path=str(tmp_path / "close-form.png"))
    # Something else changes on the run (its name), so the next poll swaps the page: the open form and
    # the typed reason survive it.
    run = Run.objects.get(external_id="r-silent")
    services.update_run_labels(run, by=bob, display_name="silent one")
    expect(page.locator("#run-live h1")).to_contain_text("silent one", timeout=10_000)
    expect(reason).to_have_value("the harness was OOM-killed at 03:12")
    asked: list[str] = []

    def confirm(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", confirm)
    form.locator("button[type=submit]").click()
    expect(page.locator("[data-abandoned]")).to_contain_text("closed by bob")
    assert asked and asked[0].startswith("Close r-silent as abandoned?")
    expect(page.locator("[data-abandoned-reason]")).to_have_text("the harness was OOM-killed at 03:12")
    expect(page.locator("#run-live h1 .badge-abandoned")).to_have_attribute(
        "title", "Closed by bob: the harness was OOM-killed at 03:12"
    )
    expect(page.get_by_text(re.compile("silent one is closed as abandoned"))).to_be_visible()
    expect(page.locator("details.close-run")).to_have_count(0)
    page.screenshot(path=str(tmp_path / "closed.png"), full_page=False)
    assert Run.objects.get(external_id="r-silent").state == "abandoned"
