"""The monitoring dashboard in a real browser: a running run's page takes new turns without a reload,
a turn's details open from the table and from a timeline bar, a stall shows up by itself, copy
buttons put the right text on the clipboard, and runs picked on the project page are compared.

Screenshots of each state go to screenshots/ (the test-output folder, gitignored)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Run
from tests.browser.conftest import push, score, state, store, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 6_000  # the run page checks every 3 s; new data must show within 5 s (plus render time)
POLL_WAIT_MS = 12_000  # the project page checks every 5 s


def mark_document(page) -> None:
    page.evaluate("window.__smrwebNoReload = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.__smrwebNoReload === true"), "the page was reloaded"


def timeline_figure(page) -> dict:
    return json.loads(page.locator("#run-timeline-data").text_content())


@pytest.fixture
def running_run(project):
    services.update_run_settings(project, "live-1", budget_usd=Decimal("1.00"))
    push(
        project,
        "live-1",
        state("running"),
        turn(0, tokens_in=3000, tokens_out=400, cost_usd=0.02, tool_calls=["read_file"]),
        turn(
            1,
            tokens_in=5000,
            tokens_out=700,
            cost_usd=0.03,
            duration_ms=4200,
            tool_calls=[{"name": "run_harness", "args": {"episodes": 64}}, "git_commit"],
        ),
        turn(
            0,
            actor="worker-1",
            parent="driver",
            model="gpt-5.4-mini",
            tokens_in=900,
            tokens_out=90,
            cost_usd=0.004,
        ),
        score(0.31),
        score(0.44),
    )
    return Run.objects.get(project=project, external_id="live-1")


def test_a_running_run_shows_a_new_turn_and_score_without_reloading(
    page, sign_in, alice, project, running_run, screenshot_dir
):
    sign_in(alice)
    page.goto("/projects/hill/runs/live-1/")
    expect(page.locator("#run-timeline .main-svg").first).to_be_visible()
    expect(page.locator("table.turns tbody tr")).to_have_count(3)
    bars_before = sum(len(t["x"]) for t in timeline_figure(page)["data"] if t["type"] == "bar")
    mark_document(page)

    push(
        project,
        "live-1",
        turn(2, tokens_in=7000, tokens_out=1200, cost_usd=0.05, tool_calls=["apply_patch", "run_harness"]),
        score(0.52),
    )

    expect(page.locator('table.turns tr[data-turn="2"]')).to_be_visible(timeout=LIVE_WAIT_MS)
    expect(page.locator('[data-stat="turns"]')).to_have_text("4")
    expect(page.locator('[data-stat="best"]')).to_have_text("0.52")
    figure = timeline_figure(page)
    scores = next(t for t in figure["data"] if t["yaxis"] == "y" and t["mode"] == "markers")
    assert scores["y"] == [0.31, 0.44, 0.52]
    assert sum(len(t["x"]) for t in figure["data"] if t["type"] == "bar") >= bars_before
    # plotly redrew in place: the chart element is the same one, with the new score drawn.
    expect(page.locator("#run-timeline g.scatterlayer .trace").first.locator("path.point")).to_have_count(3)
    assert_not_reloaded(page)
    page.screenshot(path=str(screenshot_dir / "live-run-new-turn.png"), full_page=True)


def test_a_turns_details_open_from_the_table_and_from_a_timeline_bar(
    page, sign_in, alice, project, running_run, screenshot_dir
):
    sign_in(alice)
    page.goto("/projects/hill/runs/live-1/")

    page.locator('table.turns tr[data-turn="1"] button.turn-link').scroll_into_view_if_needed()
    page.locator('table.turns tr[data-turn="1"] button.turn-link').click()
    panel = page.locator("#turn-detail")
    expect(panel.locator("h3")).to_contain_text("Turn 1")
    # The panel sits far above the table: the click brings it into view (walkthrough P1-11).
    page.wait_for_function(
        "() => { const r = document.getElementById('turn-detail').getBoundingClientRect();"
        " return r.top >= 40 && r.top < window.innerHeight / 2; }"
    )  # below the top bar
    expect(panel.locator(".tool-calls")).to_contain_text("2 tool calls")
    expect(panel.locator(".tool-name")).to_have_text(["run_harness", "git_commit"])
    expect(panel.locator("pre")).to_contain_text('"episodes": 64')
    expect(panel).to_contain_text("4.2 s")
    page.screenshot(path=str(screenshot_dir / "live-run-turn-detail.png"), full_page=False)

    # The panel survives the page's own polling (it is preserved across swaps).
    push(project, "live-1", turn(2, cost_usd=0.01))
    expect(page.locator('table.turns tr[data-turn="2"]')).to_be_visible(timeout=LIVE_WAIT_MS)
    expect(panel.locator("h3")).to_contain_text("Turn 1")

    # Clicking a bar of the tokens row asks for that bar's turns (the panel is emptied first to see it fill).
    page.evaluate("document.getElementById('turn-detail').innerHTML = ''")
    bar = page.locator("#run-timeline g.barlayer g.point path").first
    expect(bar).to_be_visible()
    page.locator("#run-timeline").scroll_into_view_if_needed()
    box = bar.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] - 2
    page.mouse.move(x - 1, y)  # plotly clicks on the point under the hover, which follows the pointer
    page.mouse.move(x, y)
    expect(page.locator("#run-timeline .hoverlayer .hovertext").first).to_be_visible()
    page.mouse.click(x, y)
    expect(panel.locator("[data-turn-detail]").first).to_be_visible()
    expect(panel.locator("h3")).to_contain_text(re.compile(r"Turn \d+ of|\d+ turns"))


def test_a_stalled_badge_appears_on_the_project_and_run_pages_without_reloading(
    page, sign_in, alice, project, running_run, screenshot_dir
):
    sign_in(alice)
    page.goto("/projects/hill/")
    row = page.locator('tr[data-run="live-1"]')
    expect(row.locator(".badge-running")).to_be_visible()
    expect(row.locator(".badge-stalled")).to_have_count(0)
    mark_document(page)

    Run.objects.filter(pk=running_run.pk).update(last_progress_at=timezone.now() - timedelta(hours=1))
    assert [r.external_id for r in services.flag_stalled_runs()] == ["live-1"]

    expect(row.locator(".badge-stalled")).to_be_visible(timeout=POLL_WAIT_MS)
    expect(row.locator(".badge-stalled")).to_have_attribute("title", re.compile(r"^No progress for 1h"))
    assert_not_reloaded(page)

    page.goto("/projects/hill/runs/live-1/")
    expect(page.locator("h1 .badge-stalled")).to_be_visible()
    expect(page.locator(".alert.warn")).to_contain_text("Stalled:")
    page.screenshot(path=str(screenshot_dir / "live-run-stalled.png"), full_page=False)


def test_copy_buttons_put_the_link_and_digest_on_the_clipboard(
    page, context, browser, sign_in, alice, project, live_server
):
    payload = b"onnx-bytes\x00\x01" * 50
    artifact = store(project, "live-2", "submission/policy.onnx", payload)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    sign_in(alice)
    page.goto("/projects/hill/runs/live-2/")
    row = page.locator('table.artifacts tr[data-artifact="submission/policy.onnx"]')

    sha_button = row.locator('button[data-copy-label="sha256"]')  # by role, not by its changing text
    sha_button.click()
    expect(sha_button).to_have_text("Copied")
    expect(page.locator("#announcer")).to_have_text("Copied the sha256 to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == artifact.blob.sha256
    expect(sha_button).to_have_text("Copy sha256", timeout=4000)  # the confirmation goes away

    link_button = row.locator('button[data-copy-label="signed link"]')
    link_button.click()
    expect(link_button).to_have_text("Copied")
    expect(page.locator("#announcer")).to_have_text("Copied the signed link to the clipboard.")
    link = page.evaluate("navigator.clipboard.readText()")
    assert re.fullmatch(rf"{re.escape(live_server.url)}/a/[0-9]+\.[0-9A-Za-z]+\.[A-Za-z0-9_-]{{43}}/", link)

    # Pasted somewhere with no session (a colleague's curl, an arena's upload form): still the exact bytes.
    stranger = browser.new_context()
    try:
        assert stranger.cookies() == []
        fetched = stranger.request.get(link, max_redirects=0)
        assert fetched.status == 200
        assert fetched.body() == payload
        assert fetched.headers["x-content-sha256"] == artifact.blob.sha256
        assert fetched.headers["content-disposition"] == 'attachment; filename="policy.onnx"'
        assert fetched.headers["cache-control"] == "private, no-store"
        # The plain download link, by contrast, needs a signed-in member.
        plain = stranger.request.get(
            f"{live_server.url}/projects/hill/runs/live-2/artifacts/{artifact.pk}/download", max_redirects=0
        )
        assert plain.status == 302 and "/login/" in plain.headers["location"]
        # An altered link is refused.
        assert stranger.request.get(link[:-5] + "x/", max_redirects=0).status == 403
    finally:
        stranger.close()


def test_runs_picked_on_the_project_page_are_compared(page, sign_in, alice, project, screenshot_dir):
    for i, best in enumerate([0.4, 0.7, 0.55]):
        push(
            project,
            f"cmp-{i}",
            state("running"),
            turn(0, cost_usd=0.1 * (i + 1)),
            score(best / 2),
            score(best),
        )
    sign_in(alice)
    page.goto("/projects/hill/")
    compare = page.locator('[data-compare-link="hill"]')
    expect(compare).to_have_attribute("aria-disabled", "true")

    page.get_by_label("Pick cmp-0 to compare").check()
    page.get_by_label("Pick cmp-2 to compare").check()
    expect(compare.locator("[data-pick-count]")).to_have_text("2")
    expect(compare).to_have_attribute("aria-disabled", "false")
    # The choice survives the table being swapped by a poll.
    mark_document(page)
    push(project, "cmp-1", score(0.75))
    expect(page.locator('tr[data-run="cmp-1"] td.num b')).to_have_text("0.75", timeout=POLL_WAIT_MS)
    expect(page.get_by_label("Pick cmp-0 to compare")).to_be_checked()
    expect(page.get_by_label("Pick cmp-1 to compare")).not_to_be_checked()
    page.get_by_label("Pick cmp-1 to compare").check()
    expect(compare.locator("[data-pick-count]")).to_have_text("3")
    assert_not_reloaded(page)

    compare.click()
    expect(page).to_have_url(re.compile(r"/projects/hill/compare/\?runs=cmp-0&runs=cmp-2&runs=cmp-1$"))
    for run_id in ("cmp-0", "cmp-2", "cmp-1"):
        expect(page.locator("main")).to_contain_text(run_id)
    expect(page.locator("[data-plot] .main-svg").first).to_be_visible()
    # The picker below loads once scrolled to: the compared runs first, ticked, in their order.
    page.locator("#pick").scroll_into_view_if_needed()
    expect(page.locator("#pick input[name=runs]:checked")).to_have_count(3)
    ticked = page.locator("#pick input[name=runs]:checked").evaluate_all("els => els.map(e => e.value)")
    assert ticked == ["cmp-0", "cmp-2", "cmp-1"]
    page.screenshot(path=str(screenshot_dir / "live-compare.png"), full_page=True)


def test_a_long_comparison_loads_its_later_rows_once_scrolled_to(
    page, sign_in, alice, project, screenshot_dir
):
    from smrweb.dashboard.views.compare import ROWS_FIRST

    ids = [f"long-{i:02d}" for i in range(ROWS_FIRST + 4)]
    for i, rid in enumerate(ids):
        push(project, rid, turn(0, cost_usd=0.01 * (i + 1)), score(0.3 + i / 100))
    sign_in(alice)
    page.goto("/projects/hill/compare/?" + "&".join(f"runs={rid}" for rid in ids))
    expect(page.locator("[data-plot] .main-svg").first).to_be_visible()
    side = page.locator("table.compare-table tbody tr[data-run]")
    expect(side).to_have_count(ROWS_FIRST)
    # Scrolled to, each table's placeholder row is replaced by the other runs' rows, in order.
    page.locator('tr[data-later="side-rows"]').scroll_into_view_if_needed()
    expect(side).to_have_count(len(ids))
    assert side.evaluate_all("rows => rows.map(r => r.dataset.run)") == ids
    page.locator('tr[data-later="turn-rows"]').scroll_into_view_if_needed()
    turns = page.locator("table.compare-turns tbody tr")
    expect(turns).to_have_count(len(ids))
    assert turns.locator(".rid").last.get_attribute("title") == ids[-1]
    expect(page.locator("tr.rows-later")).to_have_count(0)
    # A later row's button works like the first rows': it makes that run the baseline.
    page.locator(f'tr[data-run="{ids[-1]}"] button[name="baseline"]').click()
    expect(page.locator(f'tr[data-run="{ids[-1]}"].baseline')).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "live-compare-long.png"), full_page=True)


def test_a_failed_click_says_so_in_the_panel_instead_of_doing_nothing(
    page, sign_in, alice, project, running_run
):
    sign_in(alice)
    page.goto("/projects/hill/runs/live-1/")
    link = page.locator('table.turns tr[data-turn="1"] button.turn-link')
    expect(link).to_be_visible()
    running_run.turns.filter(turn=1).delete()  # gone between rendering the table and the click

    link.click()
    error = page.locator("#turn-detail .form-error[role=alert]")
    expect(error).to_have_text("Could not load this (404 Not Found).")
