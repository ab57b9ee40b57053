"""The spend guards in a browser: the Settings card previews the rule over the project's history before it
is saved, then saves it; the run page's Spend guard card says what the rule would do; at 1440 and 390 px
(screenshots in screenshots/)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.tracking.models import Project
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width, height", [(1440, 1000), (390, 844)])
def test_the_settings_card_previews_then_saves_and_the_run_page_says_it(
    page, sign_in, alice, project, screenshot_dir, width, height
):
    push(project, "r1", state("running"), score(0.5, ts="2026-01-01T00:00:30Z"))
    push(project, "r1", *[turn(n, cost_usd=0.5, ts=f"2026-01-01T00:{n:02d}:00Z") for n in range(1, 9)])
    push(
        project,
        "r2",
        state("running"),
        *[turn(n, cost_usd=0.1, ts=f"2026-01-01T01:{n:02d}:00Z") for n in range(1, 4)],
    )
    page.set_viewport_size({"width": width, "height": height})
    sign_in(alice)
    page.goto("/projects/hill/settings/#spend-guards")
    card = page.locator("#spend-guards")
    card.get_by_label("USD since the best score").fill("2")
    card.get_by_role("button", name="Preview over the history").click()
    dry = page.locator("[data-spend-dry-run]")
    expect(dry.locator("[data-dry-act='r1:5']")).to_be_visible()
    expect(dry).to_contain_text("would have acted 1 time on 1 of the 2 runs read")
    dry.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / f"spend-guard-preview-{width}.png", full_page=True)
    assert Project.objects.get(pk=project.pk).spend_stop_usd is None  # previewed, not saved
    page.locator("#spend-guards").get_by_label("Spend-aware stop").select_option("pause")
    page.locator("#spend-guards").get_by_role("button", name="Save spend guards").click()
    expect(page.get_by_text("Spend guards saved.")).to_be_visible()
    assert Project.objects.get(pk=project.pk).spend_stop == "pause"
    page.goto("/projects/hill/runs/r1/")
    outlook = page.locator("#run-spend-guard")
    expect(outlook).to_contain_text("This rule acts on this run now")
    expect(outlook.locator("[data-outlook-act='5']")).to_be_visible()
    outlook.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / f"spend-guard-run-{width}.png", full_page=False)
