"""Compare's "any metric against spend" card in the browser: drawn, switched to another axis and metric
without a reload (the URL follows: shareable), the same URL opened afresh draws the same; screenshots at
1440 light and 390 dark."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.api.test_compare_series import climb
from tests.browser.test_screenshots import page_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_card_switches_axis_and_metric_in_place_and_the_url_holds_them(
    browser, live_server, alice, project, screenshot_dir
):
    for i in range(4):
        climb(project, f"arm-{'ab'[i % 2]}-{i}", turns=60 + 20 * i, cost=0.004 * (i + 1), seed=i, scores=6)
    runs = "&".join(f"runs=arm-{'ab'[i % 2]}-{i}" for i in range(4))
    with page_at(browser, live_server, alice, 1440, "light") as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"/projects/hill/compare/?{runs}")
        card = page.locator("#compare-series")
        chart = card.locator("[data-plot=compare-series-data]")
        expect(chart).to_have_attribute("data-plot-draws", "1")
        assert card.locator(".scatterlayer .trace").count() == 8  # four runs: dots and best so far
        page.select_option("#series-x", "turns")
        page.wait_for_url("**x=turns**")
        expect(card.locator(".xtitle")).to_contain_text("turns")
        page.select_option("#series-metric", "loss")
        page.wait_for_url("**metric=loss**")
        expect(card.locator(".xtitle")).to_contain_text("turns")
        expect(card.locator(".ytitle")).to_contain_text("loss")
        shared = page.url
        card.scroll_into_view_if_needed()
        card.screenshot(path=str(screenshot_dir / "compare-series-1440-light.png"))
        assert not errors, errors
    with page_at(browser, live_server, alice, 390, "dark") as page:
        page.goto(shared)
        card = page.locator("#compare-series")
        expect(card.locator("[data-plot=compare-series-data]")).to_have_attribute("data-plot-draws", "1")
        assert page.locator("#series-metric").input_value() == "loss"
        assert page.locator("#series-x").input_value() == "turns"
        card.scroll_into_view_if_needed()
        card.screenshot(path=str(screenshot_dir / "compare-series-390-dark.png"))


def test_arms_at_1440_and_390(browser, live_server, alice, project, screenshot_dir):
    from tests.api.test_compare_arms import arm_run

    runs = []
    arms = {"sonnet": (0.8, 0.01, 0), "gpt-5": (0.8, 0.01, 50), "haiku": (0.3, 0.004, 40)}
    for arm, (level, cost, seed) in arms.items():
        for i in range(5):
            runs.append(
                arm_run(project, f"{arm}-{i}", level=level, cost=cost, seed=seed + i, tags={"model": arm})
            )
    query = "&".join(f"runs={r.external_id}" for r in runs) + "&group=tag:model"
    errors: list[str] = []
    for width, scheme in ((1440, "light"), (390, "dark")):
        with page_at(browser, live_server, alice, width, scheme) as page:
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"/projects/hill/compare/?{query}")
            card = page.locator("#compare-series")
            expect(card.locator("[data-plot=compare-arms-data]")).to_have_attribute("data-plot-draws", "1")
            assert page.locator("#series-group").input_value() == "tag:model"
            expect(card.locator("#arms-table tbody tr")).to_have_count(3)
            said = card.locator("#arm-differences").inner_text()
            assert "cannot be told apart" in said and "ahead of haiku" in said, said
            card.scroll_into_view_if_needed()
            card.screenshot(path=str(screenshot_dir / f"compare-arms-{width}-{scheme}.png"))
            assert not errors, errors
