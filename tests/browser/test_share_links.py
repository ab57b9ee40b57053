"""Read-only share links in a browser (issue 39, item 5): a reviewer shares the tree of attempts from its
page (the Share… control, htmx, the URL shown once with a copy button), someone not signed in opens it — the
tree, a banner, no forms or buttons — at 1440 px light and 390 px dark; a shared comparison draws its charts;
revoked on the project's list, the link answers "not found"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import ArenaResult, Submission
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, page_at
from tests.browser.test_tree import climb

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def read_only(page) -> None:
    expect(page.locator("[data-share-banner]")).to_contain_text("Read-only view shared by")
    expect(page.locator("form")).to_have_count(0)
    # No buttons but the charts' own tools (plotly's mode bar: zoom, pan, download).
    assert (
        page.evaluate(
            "() => [...document.querySelectorAll('button')].filter(b => !b.closest('.plot')).length"
        )
        == 0
    )
    expect(page.locator("a[href^='/projects/']")).to_have_count(0)


def test_share_the_tree_open_it_signed_out_and_revoke_it(
    browser, live_server, project, alice, bob, screenshot_dir
):
    climb(project, bob)
    with page_at(browser, live_server, bob, 1440, "light") as page:
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto("/projects/hill/tree/?q=iter")
        page.get_by_text("Share…").click()
        page.locator("#share-box select[name=expires]").select_option("30")
        page.get_by_role("button", name="Create read-only link").click()
        url_box = page.locator("[data-share-url]")
        expect(url_box).to_have_value(re.compile(r"/s/[A-Za-z0-9_-]{43}/$"))
        url = url_box.input_value()
        expect(page.get_by_role("button", name="Copy link")).to_be_visible()
        page.screenshot(path=str(screenshot_dir / "share-control-1440-light.png"))
        assert not errors, errors
    path = url.replace(live_server.url, "")

    with page_at(browser, live_server, None, 1440, "light") as page:
        response = page.goto(path)
        assert response.status == 200
        assert response.headers["x-robots-tag"].startswith("noindex")
        assert response.headers["referrer-policy"] == "no-referrer"
        read_only(page)
        tree = page.locator("#tree")
        expect(tree.locator("h2")).to_contain_text("match the filters")  # the filter it was shared with
        expect(tree.locator('[data-run="iter-3"]')).to_be_visible()
        expect(tree.locator("a")).to_have_count(0)  # runs named in plain text
        assert not page.evaluate(OVERFLOW_CHECK, False)
        page.screenshot(path=str(screenshot_dir / "share-tree-1440-light.png"), full_page=True)

    with page_at(browser, live_server, None, 390, "dark") as page:
        page.goto(path)
        read_only(page)
        assert not page.evaluate(OVERFLOW_CHECK, True)
        assert not page.evaluate(DARK_CHECK)
        page.screenshot(path=str(screenshot_dir / "share-tree-390-dark.png"), full_page=True)

    # A comparison, shared from the service: its charts draw without signing in.
    _, raw = services.create_share_link(
        by=bob, kind="compare", days=7, project=project, query="runs=iter-1&runs=iter-2&runs=iter-3"
    )
    for width, scheme in ((1440, "light"), (390, "dark")):
        with page_at(browser, live_server, None, width, scheme) as page:
            page.goto(f"/s/{raw}/")
            read_only(page)
            page.wait_for_selector("[data-plot] .main-svg")
            expect(page.locator("#shared-compare tbody tr")).to_have_count(3)
            assert not page.evaluate(OVERFLOW_CHECK, width < 600)
            if scheme == "dark":
                assert not page.evaluate(DARK_CHECK)
            page.screenshot(path=str(screenshot_dir / f"share-compare-{width}-{scheme}.png"), full_page=True)

    # The arena history (two recorded results) and the scenario's leaderboard, shared and opened signed out.
    for i, sub in enumerate(Submission.objects.filter(project=project).order_by("pk")[:3]):
        result = ArenaResult.objects.create(
            submission=sub, arena="dogfight", rank=6 - 2 * i, arena_score=0.5 + i / 10, recorded_by=bob
        )
        ArenaResult.objects.filter(pk=result.pk).update(created=timezone.now() - timedelta(days=3 - i))
    _, arena = services.create_share_link(by=bob, kind="arena", days=1, project=project)
    _, board = services.create_share_link(by=bob, kind="leaderboard", days=1, scenario=project.scenario)
    for name, raw, needle in (
        ("arena", arena, "#arena-history [data-plot] .main-svg"),
        ("board", board, "#scenario-board"),
    ):
        for width, scheme in ((1440, "light"), (390, "dark")):
            with page_at(browser, live_server, None, width, scheme) as page:
                page.goto(f"/s/{raw}/")
                read_only(page)
                page.wait_for_selector(needle)
                assert not page.evaluate(OVERFLOW_CHECK, width < 600)
                if scheme == "dark":
                    assert not page.evaluate(DARK_CHECK)
                page.screenshot(
                    path=str(screenshot_dir / f"share-{name}-{width}-{scheme}.png"), full_page=True
                )

    # Revoked on the project's list (alice, an admin): whoever holds the link gets "not found".
    with page_at(browser, live_server, alice, 1440, "light") as page:
        page.goto("/projects/hill/shares/")
        rows = page.locator("tr[data-share]")
        expect(rows).to_have_count(3)
        page.screenshot(path=str(screenshot_dir / "share-links-1440-light.png"), full_page=True)
        page.on("dialog", lambda dialog: dialog.accept())
        rows.filter(has_text="Tree of attempts").get_by_role("button", name="Revoke").click()
        expect(page.locator('tr[data-state="revoked"]')).to_have_count(1)
    with page_at(browser, live_server, None, 1440, "light") as page:
        assert page.goto(path).status == 404
        expect(page.locator("h1")).to_have_text("Link not found")
