"""Issue 14 in a real browser: a click on a runs-table header sorts on the server (arrows, URL, paging
and filters kept, no reload); the over-budget filter, badge and count; the run page's over-budget
alert and its paged agent turns and artifacts, swapped in place and kept by the live refresh.
Also screenshots of both pages (screenshots/, gitignored) with the layout checks of test_screenshots."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from tests.browser.conftest import push, score, state, store, turn
from tests.browser.test_screenshots import OVERFLOW_CHECK

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL_WAIT_MS = 10_000


def rows(page):
    return page.locator("#project-live table.runs tr[data-run]")


def run_ids(page) -> list[str]:
    return rows(page).evaluate_all("rows => rows.map(r => r.dataset.run)")


def mark_document(page) -> None:
    page.evaluate("window.__smrwebNoReload = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.__smrwebNoReload === true"), "the page was reloaded"


@pytest.fixture
def table(project):
    """Five runs that differ in turns, spend and score; two over a budget, one within it."""
    specs = [("alpha", 3, 0.9), ("bravo", 1, 0.2), ("charlie", 2, None), ("delta", 5, 0.5), ("echo", 4, 0.3)]
    for run_id, turns, best in specs:
        push(project, run_id, state("running"), *[turn(n, cost_usd=0.4) for n in range(1, turns + 1)])
        if best is not None:
            push(project, run_id, score(best))
    services.update_run_settings(project, "delta", budget_usd=Decimal("1.50"))  # $2.00 spent: 133 %
    services.update_run_settings(project, "echo", budget_tokens=15_000)  # 18,400 tokens: 123 %
    services.update_run_settings(project, "alpha", budget_usd=Decimal("10"))  # within
    return project


def test_clicking_a_header_sorts_the_runs_on_the_server(page, sign_in, alice, table):
    sign_in(alice)
    page.goto("/projects/hill/")
    expect(rows(page)).to_have_count(5)
    mark_document(page)

    turns = page.locator('th[data-sort-key="turns"] a')
    turns.click()  # the first click on a number column: largest first
    expect(page.locator('th[data-sort-key="turns"]')).to_have_attribute("aria-sort", "descending")
    expect(turns.locator(".sort-arrow")).to_have_text("▼")
    expect(page).to_have_url(re.compile(r"sort=-turns"))
    assert run_ids(page) == ["delta", "echo", "alpha", "charlie", "bravo"]

    page.locator('th[data-sort-key="turns"] a').click()  # again: flipped
    expect(page.locator('th[data-sort-key="turns"]')).to_have_attribute("aria-sort", "ascending")
    expect(page.locator('th[data-sort-key="turns"] .sort-arrow')).to_have_text("▲")
    expect(page).to_have_url(re.compile(r"sort=turns"))
    assert run_ids(page) == ["bravo", "charlie", "alpha", "echo", "delta"]

    page.locator('th[data-sort-key="run"] a').click()
    expect(page.locator('th[data-sort-key="run"]')).to_have_attribute("aria-sort", "ascending")
    expect(page.locator('th[data-sort-key="turns"]')).to_have_attribute("aria-sort", "none")
    expect(page.locator('th[data-sort-key="turns"] .sort-arrow')).to_have_count(0)
    assert run_ids(page) == ["alpha", "bravo", "charlie", "delta", "echo"]

    # A filter changed afterwards keeps the sort; the sort keeps the filter.
    page.locator("#runs-filter input[name=q]").press_sequentially("a", delay=30)
    expect(rows(page)).to_have_count(4)  # every run with an "a" in its id: not echo
    expect(page).to_have_url(re.compile(r"sort=run"))
    page.locator('th[data-sort-key="best"] a').click()
    expect(page.locator('th[data-sort-key="best"]')).to_have_attribute("aria-sort", "descending")
    expect(page).to_have_url(re.compile(r"q=a"))

    # The live refresh keeps the order it was asked for.
    push(table, "bravo", turn(2, cost_usd=0.4), score(0.95))
    expect(rows(page).first).to_have_attribute("data-run", "bravo", timeout=POLL_WAIT_MS)
    assert_not_reloaded(page)


def test_over_budget_filter_badge_and_count(page, sign_in, alice, table, screenshot_dir):
    sign_in(alice)
    page.goto("/")
    expect(page.locator('[data-project="hill"] [data-count="over-budget"]')).to_have_text("2 over budget")

    page.goto("/projects/hill/")
    expect(rows(page)).to_have_count(5)
    mark_document(page)
    badge = page.locator('tr[data-run="delta"] .badge-over-budget')
    expect(badge).to_have_text("over budget")
    expect(badge).to_have_attribute("title", "Over budget: 133 % of the $1.50 budget ($2.00 spent)")
    expect(page.locator('tr[data-run="echo"] .badge-over-budget')).to_have_attribute(
        "title", "Over budget: 18.4k / 15.0k tokens (123 %)"
    )
    expect(page.locator('tr[data-run="alpha"] .badge-over-budget')).to_have_count(0)
    expect(page.locator('#project-live [data-count="over-budget"]')).to_have_text("2 over budget")
    page.screenshot(path=screenshot_dir / "issue14-project-1440.png", full_page=True)
    page.locator("#project-live section.card").first.screenshot(
        path=screenshot_dir / "issue14-project-runs-1440.png"
    )
    assert page.evaluate(OVERFLOW_CHECK) == []

    page.check("#runs-filter input[name=over_budget]")
    expect(rows(page)).to_have_count(2)
    assert sorted(run_ids(page)) == ["delta", "echo"]
    expect(page).to_have_url(re.compile(r"over_budget=true"))
    page.uncheck("#runs-filter input[name=over_budget]")
    expect(rows(page)).to_have_count(5)

    assert_not_reloaded(page)
    page.locator('#project-live a[data-count="over-budget"]').click()  # the count is a shortcut to the filter
    expect(rows(page)).to_have_count(2)
    expect(page.locator("#runs-filter input[name=over_budget]")).to_be_checked()
    mark_document(page)

    # A run that goes over budget while watched gets the badge and joins the filtered table.
    push(table, "bravo", turn(2, cost_usd=5.0))
    services.update_run_settings(table, "bravo", budget_usd=Decimal("1"))
    expect(rows(page)).to_have_count(3, timeout=POLL_WAIT_MS)
    expect(page.locator('tr[data-run="bravo"] .badge-over-budget')).to_be_visible()
    expect(page.locator('#project-live [data-count="over-budget"]')).to_have_text("3 over budget")
    assert_not_reloaded(page)


def test_run_page_alert_and_paged_turns_and_artifacts(page, sign_in, alice, project, screenshot_dir):
    push(project, "long", state("running"), *[turn(n, cost_usd=0.1) for n in range(1, 62)], score(0.4))
    services.update_run_settings(project, "long", budget_usd=Decimal("5"), budget_tokens=250_000)
    for i in range(13):
        store(project, "long", f"submission/v{i:02d}.py", f"print({i})".encode())
    sign_in(alice)
    page.goto("/projects/hill/runs/long/")

    alert = page.locator("[data-over-budget]")
    expect(alert).to_contain_text("spent 122 % of the $5.00 budget ($6.10 spent)")
    expect(alert).to_contain_text("used 280.6k / 250.0k tokens (112 %)")
    expect(page.locator("h1 .badge-over-budget")).to_be_visible()

    turn_rows = page.locator("table.turns tbody tr[data-turn]")
    expect(turn_rows).to_have_count(25)
    expect(turn_rows.first).to_have_attribute("data-turn", "61")
    expect(page.locator("[data-turns-range]")).to_have_text("latest 25 of 61, newest first")
    page.screenshot(path=screenshot_dir / "issue14-run-1440.png", full_page=True)
    page.screenshot(
        path=screenshot_dir / "issue14-run-top-1440.png", clip={"x": 0, "y": 0, "width": 1280, "height": 330}
    )
    assert page.evaluate(OVERFLOW_CHECK) == []
    mark_document(page)

    page.locator('[data-pager="turns_page"] a[rel=next]').click()
    expect(page.locator("[data-turns-range]")).to_have_text("26–50 of 61, newest first")
    expect(turn_rows.first).to_have_attribute("data-turn", "36")
    expect(page).to_have_url(re.compile(r"turns_page=2"))
    page.locator('[data-pager="artifacts_page"] a[rel=next]').click()
    expect(page.locator("[data-artifacts-range]")).to_have_text("11–13 of 13, newest first")
    expect(page.locator("table.artifacts tr[data-artifact]")).to_have_count(3)
    expect(page.locator("[data-turns-range]")).to_have_text("26–50 of 61, newest first")  # kept
    expect(page).to_have_url(re.compile(r"turns_page=2.*artifacts_page=2|artifacts_page=2.*turns_page=2"))
    page.locator("#turns-card .card-head").screenshot(
        path=screenshot_dir / "issue14-run-turns-page2-1440.png"
    )
    page.locator("#artifacts-card").screenshot(path=screenshot_dir / "issue14-run-artifacts-page2-1440.png")

    # The live refresh (every 3 s) brings new data in and stays on the pages being looked at.
    push(project, "long", turn(62, cost_usd=0.1))
    expect(page.locator("[data-stat=turns]")).to_have_text("62", timeout=POLL_WAIT_MS)
    expect(page.locator("[data-turns-range]")).to_have_text("26–50 of 62, newest first")
    expect(turn_rows.first).to_have_attribute("data-turn", "37")
    expect(page.locator("[data-artifacts-range]")).to_have_text("11–13 of 13, newest first")
    assert_not_reloaded(page)
