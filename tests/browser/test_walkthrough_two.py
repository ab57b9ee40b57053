"""The second newcomer walkthrough's monitoring papercuts, in a real browser at a desktop and a phone
width, light and dark: a finished run's rollback told at the top of its page and the pending flash gone
once the outcome shows, "/" to search, no console error from a run without metrics, and phone charts
whose legend sits under the plot with the toolbar off it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.core import queue
from smrweb.tracking import services
from smrweb.tracking.models import Rollback
from smrweb.tracking.services import rollbacks
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
HOOK = "https://hooks.example/rb"
POLL_WAIT_MS = 15_000


def shoot(page, screenshot_dir, name: str) -> None:
    """The page at 1440 and 390 px, light and dark, into screenshots/ (looked at by people)."""
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.wait_for_timeout(300)
            page.screenshot(path=screenshot_dir / f"walkthrough2-{name}-{width}-{scheme}.png", full_page=True)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1440, "height": 900})


def test_a_finished_runs_rollback_is_told_at_the_top_and_the_pending_flash_goes(
    page, sign_in, alice, project, screenshot_dir, monkeypatch
):
    # The test plays the worker (it finishes the rollback below): a session's real worker, started by an
    # earlier test, must not dispatch it to the webhook first. The live server runs in this process.
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: True)
    services.update_project(project, rollback_webhook_url=HOOK, by=alice)
    push(
        project,
        "done-run",
        state("running"),
        score(0.4),
        {"type": "checkpoint", "id": "c1", "label": "improvement 13", "commit": "abc123"},
        score(0.5),
        state("done"),
    )
    sign_in(alice)
    page.goto("/projects/hill/runs/done-run/")
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("#run-checkpoints").get_by_role("button", name="Roll back to this").click()
    line = page.locator("#alert-rollback")
    expect(line).to_have_attribute("data-rollback-outcome", "requested")
    expect(line).to_contain_text("Rollback to checkpoint improvement 13: requested")
    flash = page.locator("[data-flash]", has_text="Rollback to checkpoint improvement 13 requested")
    expect(flash).to_be_visible()
    # Above the stats, the chart and every card: what the walkthrough looked for at the top.
    assert line.bounding_box()["y"] < page.locator("#run-stats").bounding_box()["y"]

    rollback = Rollback.objects.get()
    rollbacks.finish(rollback.pk, ok=True, detail="the webhook answered HTTP 202", accepted_only=True)
    expect(line).to_have_attribute("data-rollback-outcome", "accepted", timeout=POLL_WAIT_MS)
    expect(line).to_contain_text("The run stays done: nothing runs again unless the harness starts it")
    expect(line.get_by_role("link", name="Start the next run")).to_have_attribute(
        "href", "/projects/hill/launches/new?from=done-run"
    )
    expect(flash).to_have_count(0)  # the pending flash went with the outcome
    expect(page.locator('#rollbacks [data-rollback-status="accepted"]')).to_be_visible()
    shoot(page, screenshot_dir, "rollback-accepted")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1441


def test_slash_focuses_the_search_box_but_types_a_slash_in_a_field(page, sign_in, alice, project):
    push(project, "r1", state("running"), score(0.4))
    sign_in(alice)
    page.goto("/projects/hill/")
    search = page.locator("form.filters input[name=q]")
    expect(search).not_to_be_focused()
    page.keyboard.press("/")
    expect(search).to_be_focused()
    expect(search).to_have_value("")  # the key focused the box; it typed nothing
    page.keyboard.type("r/1")  # inside a field "/" is a character
    expect(search).to_have_value("r/1")
    page.locator("form.filters input[name=tag]").focus()
    page.keyboard.press("/")
    expect(page.locator("form.filters input[name=tag]")).to_have_value("/")
    # A page without a search box: nothing happens, nothing breaks.
    page.goto("/projects/hill/runs/r1/")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement === document.body")


def test_a_live_run_without_metrics_polls_without_a_console_error(page, sign_in, alice, project):
    push(project, "quiet", state("running"), turn(1))
    console: list[str] = []
    page.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
    sign_in(alice)
    page.goto("/projects/hill/runs/quiet/")
    expect(page.locator("#metrics-card")).to_contain_text("No metrics yet")
    poll = page.locator("#run-poll")
    expect(poll).to_have_attribute("hx-include", "#metrics-card .card-head")
    with page.expect_response(lambda r: "/runs/quiet/" in r.url and r.request.headers.get("hx-request")):
        pass  # the page's own poll, every 3 s
    with page.expect_response(lambda r: "/runs/quiet/" in r.url and r.request.headers.get("hx-request")):
        push(project, "quiet", turn(2))
    expect(page.locator("#run-stats")).to_contain_text("2", timeout=POLL_WAIT_MS)
    assert not [c for c in console if "hx-include" in c or "returned no matches" in c], console
    assert not console, console


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_phone_charts_put_the_legend_under_the_plot_and_the_toolbar_off_it(
    page, sign_in, alice, project, screenshot_dir, scheme
):
    page.emulate_media(color_scheme=scheme)
    for i in range(6):
        push(project, f"sweep-run-{i}", state("running"), score(0.1 * i), score(0.1 * i + 0.05))
    sign_in(alice)
    page.set_viewport_size({"width": 390, "height": 844})
    ids = "&".join(f"runs=sweep-run-{i}" for i in range(4))
    for url, plot in (
        ("/projects/hill/?unverified=1", "#project-chart-plot"),
        (f"/projects/hill/compare/?{ids}", '[data-plot="compare-score-data"]'),
    ):
        page.goto(url)
        chart = page.locator(plot)
        expect(chart.locator(".main-svg").first).to_be_visible()
        chart.scroll_into_view_if_needed()
        area = chart.locator(".nsewdrag").first.bounding_box()
        legend = chart.locator(".legend").bounding_box()
        assert legend and area, (legend, area)
        assert legend["y"] >= area["y"] + area["height"], (plot, "the legend covers the plot", legend, area)
        assert area["height"] >= 150, (plot, "the plot is squeezed", area)
        chart.locator(".nsewdrag").first.hover()
        bar = chart.locator(".modebar")
        expect(bar).to_be_visible()
        page.wait_for_timeout(400)  # the toolbar fades in
        b = bar.bounding_box()
        assert b["x"] >= area["x"] + area["width"] - 1, (plot, "the toolbar covers the plot", b, area)
        assert b["x"] + b["width"] <= 390
        chart.screenshot(path=screenshot_dir / f"walkthrough2-phone-chart-{plot[1:8]}-{scheme}.png")
        assert page.evaluate("document.documentElement.scrollWidth") <= 391
