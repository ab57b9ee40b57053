"""Issue 34: a run whose results the source could not all give says so beside its best, on the run page
and in the project's runs table, at desktop and phone widths, light and dark: readable, not clipped, and
no horizontal overflow."""

from __future__ import annotations

import pytest

from smrweb.tracking.models import Run
from tests.browser.test_screenshots import WIDTHS_AND_SCHEMES, page_at
from tests.sources.test_smr_results_window import synced_project, wide_world  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_incomplete_run_says_so_at_every_width(browser, live_server, alice, wide_world, screenshot_dir):  # noqa: F811
    project = synced_project(wide_world, alice)
    run = Run.objects.filter(project=project, results_complete=False, results_missing__gt=0).first()
    assert run is not None
    text = f"incomplete: {run.results_missing:,} results not readable from the source"
    for width, scheme in WIDTHS_AND_SCHEMES:
        with page_at(browser, live_server, alice, width, scheme) as page:
            page.goto(run.get_absolute_url())
            mark = page.locator("#stat-best [data-results-incomplete]")
            assert mark.inner_text().strip().endswith(text)
            box, card = mark.bounding_box(), page.locator("#stat-best").bounding_box()
            assert box["x"] >= card["x"] and box["x"] + box["width"] <= card["x"] + card["width"] + 0.5
            # (The run page itself overflows at 390 px with a 36-character run id: not this mark's doing.)
            assert box["x"] + box["width"] <= page.evaluate("window.innerWidth")
            page.screenshot(path=screenshot_dir / f"results-incomplete-run-{width}-{scheme}.png")
            page.goto(project.get_absolute_url())
            assert page.locator("[data-results-gap]").is_visible()
            assert page.locator(f'tr [data-results-incomplete="{run.results_missing}"]').count() == 1
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            page.screenshot(
                path=screenshot_dir / f"results-incomplete-project-{width}-{scheme}.png", full_page=True
            )
