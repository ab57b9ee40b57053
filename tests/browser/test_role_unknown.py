"""A run one of whose actors has a role no source states (simulator shape "d", issue 34): the run page's
budget bar, split table, legend and timeline show its turns as "role unknown", apart from driver and
child, at 1440 and 390 px, light and dark. Screenshots go to screenshots/ (gitignored)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.sources import sync
from smrweb.tracking.models import Run
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, WIDTHS_AND_SCHEMES, page_at
from tests.factories import admin_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

API_KEY, PID = "roles-key", "roles-browser"


@pytest.fixture
def unknown_run(start_sim, alice) -> Run:
    backend = start_sim(
        api_key=API_KEY, project_ids=[PID], runs=2, auto_tick=False, seed=5, warmup=60, shapes=("d",)
    )
    project = admin_project(
        "roles", source="smr", smr_project_id=PID, smr_backend_base=backend.url, smr_api_key=API_KEY, by=alice
    )
    report = sync.sync_project(project, owner="test")
    assert not report.error, report.error
    run = Run.objects.filter(project=project, turn_count__gt=0).order_by("-turn_count").first()
    assert run.unknown_tokens_in > 0
    return run


def test_screenshots_of_a_run_with_an_actor_of_unknown_role(
    browser, live_server, alice, unknown_run, screenshot_dir
):
    problems = {}
    for width, scheme in WIDTHS_AND_SCHEMES:
        phone = width < 600
        with page_at(browser, live_server, alice, width, scheme) as page:
            page.goto(unknown_run.get_absolute_url())
            split = page.locator("#budget-split tr[data-role-unknown]")
            expect(split).to_contain_text("role unknown")
            expect(page.locator("#budget-legend")).to_contain_text("role unknown")
            expect(page.locator("#budget .budget-part.unknown").first).to_be_visible()
            expect(page.locator("[data-gap-role-unknown]")).to_contain_text("whose role the source states")
            # The timeline draws the unknown actor's turns as a series of their own.
            page.wait_for_function(
                "() => [...document.querySelectorAll('.js-plotly-plot')].some(p => (p.data || [])"
                ".some(t => t.name === 'role unknown'))"
            )
            suffix = f"{width}" if scheme == "light" else f"{width}-dark"
            page.screenshot(path=screenshot_dir / f"run-role-unknown-{suffix}.png", full_page=True)
            for part in ("alert-gaps", "run-timeline-card", "budget", "run-actors"):
                page.locator(f"#{part}").scroll_into_view_if_needed()
                page.locator(f"#{part}").screenshot(
                    path=screenshot_dir / f"run-role-unknown-{part}-{suffix}.png"
                )
            found = page.evaluate(OVERFLOW_CHECK, phone)
            if scheme == "dark":
                found += page.evaluate(DARK_CHECK)
            if found:
                problems[suffix] = found
    assert not problems, problems
