"""Issue 14 ("trust what you see"), items 3, 8 and 9 in a real browser: one clock for pages and charts
whatever zone the browser is in, zoom kept across live polls, a toolbar with nothing that leaves the
server, score hovers with time and turn, relative times that keep ticking, dark mode, the phone menu."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser.conftest import DEFAULT_TIMEOUT_MS, VIEWPORT, push, score, state, turn


def state_at(name: str, ts: str) -> dict:
    return {"type": "state", "state": name, "ts": ts}


pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 8_000  # the run page polls every 3 s


def ago(minutes: float) -> str:
    return (timezone.now() - timedelta(minutes=minutes)).isoformat()


@pytest.fixture
def spread_run(project):
    """A running run with turns and scores over the last 40 minutes (so there is something to zoom into)."""
    events = [state_at("running", ago(40))]
    for i in range(20):
        events.append(turn(i, ts=ago(40 - 2 * i), tokens_in=1000 + 50 * i, cost_usd=0.01))
        if i % 4 == 3:
            events.append(score(0.1 + i / 100, ts=ago(39.5 - 2 * i)))
    push(project, "zoom-1", *events)
    return "/projects/hill/runs/zoom-1/"


def open_context(browser, live_server, **options):
    ctx = browser.new_context(base_url=live_server.url, viewport=options.pop("viewport", VIEWPORT), **options)
    ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
    return ctx


def signed_in_page(ctx, user, live_server):
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    ctx.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, errors


def x_range(page, plot="#run-timeline") -> list[str]:
    return page.evaluate(f"document.querySelector('{plot}')._fullLayout.xaxis.range.slice()")


def score_trace_index(page) -> int:
    figure = json.loads(page.locator("#run-timeline-data").text_content())
    return next(i for i, t in enumerate(figure["data"]) if t.get("legendgroup") == "score")


def hover_score(page, point: int) -> str:
    index = score_trace_index(page)
    page.evaluate(
        f"Plotly.Fx.hover(document.getElementById('run-timeline'), "
        f"[{{curveNumber: {index}, pointNumber: {point}}}])"
    )
    text = page.locator("#run-timeline .hoverlayer .hovertext").first
    expect(text).to_be_visible()
    return text.text_content()


# --- item 9: charts behave ---------------------------------------------------------------------------


def test_a_zoom_on_the_run_timeline_survives_live_polls_until_reset(
    browser, live_server, alice, project, spread_run
):
    ctx = open_context(browser, live_server)
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        page.goto(spread_run)
        expect(page.locator("#run-timeline .main-svg").first).to_be_visible()
        before = x_range(page)
        drag = page.locator("#run-timeline .nsewdrag").first.bounding_box()
        y = drag["y"] + drag["height"] / 2
        page.mouse.move(drag["x"] + drag["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(drag["x"] + drag["width"] * 0.45, y, steps=5)
        page.mouse.move(drag["x"] + drag["width"] * 0.6, y, steps=5)
        page.mouse.up()
        page.wait_for_function(
            "(before) => JSON.stringify(document.getElementById('run-timeline')._fullLayout.xaxis.range)"
            " !== before",
            arg=json.dumps(before, separators=(",", ":")),
        )
        zoomed = x_range(page)
        assert zoomed[0] > before[0] and zoomed[1] < before[1], (before, zoomed)

        # New data arrives and the poll redraws the chart with it (the run's end, "now", moves too) ...
        push(project, "zoom-1", turn(99, cost_usd=0.02), score(0.9))
        page.wait_for_function(
            "() => JSON.parse(document.getElementById('run-timeline-data').textContent).data"
            ".some(t => t.legendgroup === 'score' && t.y.includes(0.9))",
            timeout=LIVE_WAIT_MS,
        )
        page.wait_for_function(
            "() => document.getElementById('run-timeline').data"
            ".some(t => t.legendgroup === 'score' && t.y.includes(0.9))"
        )
        page.wait_for_timeout(3500)  # and one more poll for good measure
        # ... and the zoom is the viewer's until they reset it.
        assert x_range(page) == zoomed
        page.locator("#run-timeline").hover()
        page.locator(
            '#run-timeline .modebar-btn[data-attr="zoom"][data-val="reset"], '
            '#run-timeline .modebar-btn[data-val="reset"]'
        ).first.click()
        page.wait_for_function(
            "(end) => document.getElementById('run-timeline')._fullLayout.xaxis.range[1] > end", arg=zoomed[1]
        )
        assert x_range(page)[1] >= before[1]
        assert not errors, errors
    finally:
        ctx.close()


def test_a_zoom_on_the_project_chart_survives_its_poll(browser, live_server, alice, project, spread_run):
    """P1-7: the project chart's right edge jumped back to "now" on every refresh."""
    ctx = open_context(browser, live_server)
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        page.goto("/projects/hill/")
        plot = "#project-chart-plot"
        expect(page.locator(f"{plot} .main-svg").first).to_be_visible()
        before = x_range(page, plot)
        drag = page.locator(f"{plot} .nsewdrag").first.bounding_box()
        page.mouse.move(drag["x"] + drag["width"] * 0.2, drag["y"] + drag["height"] * 0.2)
        page.mouse.down()
        page.mouse.move(drag["x"] + drag["width"] * 0.5, drag["y"] + drag["height"] * 0.6, steps=5)
        page.mouse.move(drag["x"] + drag["width"] * 0.7, drag["y"] + drag["height"] * 0.8, steps=5)
        page.mouse.up()
        page.wait_for_function(
            "(before) => JSON.stringify(document.querySelector('#project-chart-plot')._fullLayout"
            ".xaxis.range) !== before",
            arg=json.dumps(before, separators=(",", ":")),
        )
        zoomed = x_range(page, plot)
        push(project, "zoom-1", score(0.95))
        page.wait_for_function(
            "() => document.querySelector('#project-chart-plot').data.some(t => t.y.includes(0.95))",
            timeout=15_000,
        )
        assert x_range(page, plot) == zoomed
        assert not errors, errors
    finally:
        ctx.close()


def test_the_chart_toolbar_has_no_cloud_share_or_external_link(
    browser, live_server, alice, project, spread_run
):
    ctx = open_context(browser, live_server)
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        for url, plot in ((spread_run, "#run-timeline"), ("/projects/hill/", "#project-chart-plot")):
            page.goto(url)
            expect(page.locator(f"{plot} .main-svg").first).to_be_visible()
            page.locator(plot).hover()
            buttons = page.locator(f"{plot} .modebar-btn")
            expect(buttons.first).to_be_attached()
            titles = [b.get_attribute("data-title") or "" for b in buttons.all()]
            assert titles and "Reset axes" in titles, titles
            assert not [t for t in titles if re.search(r"share|cloud|studio|plotly|edit", t, re.I)], titles
            assert page.locator(f"{plot} .modebar a").count() == 0  # no "Produced with Plotly" logo link
            assert page.locator(f"{plot} a[href^='http']").count() == 0
            config = page.evaluate(
                f"(() => {{ const c = document.querySelector('{plot}')._context; "
                "return [c.showSendToCloud, c.displaylogo]; })()"
            )
            assert config == [False, False]
        assert not errors, errors
    finally:
        ctx.close()


# --- item 3: one clock ---------------------------------------------------------------------------------


def run_half_an_hour_ago(project, run_id: str, *, turn_number: int) -> datetime:
    """A run started 30 minutes ago (t0) with a turn at t0+1 min and a score of 0.5 at t0+2 min."""
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    push(
        project,
        run_id,
        state_at("running", t0.isoformat()),
        turn(turn_number, ts=(t0 + timedelta(minutes=1)).isoformat()),
        score(0.5, ts=(t0 + timedelta(minutes=2)).isoformat()),
    )
    return t0


def test_a_utc_user_in_los_angeles_sees_utc_on_the_page_the_axis_and_the_hover(
    browser, live_server, alice, project
):
    """P1-2: plotly drew epoch times in the browser's zone under a "time (UTC)" label."""
    t0 = run_half_an_hour_ago(project, "tz-1", turn_number=3)
    ctx = open_context(browser, live_server, timezone_id="America/Los_Angeles")
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        page.goto("/projects/hill/runs/tz-1/")
        expect(page.locator("#run-head .meta")).to_contain_text(f"started {t0:%Y-%m-%d %H:%M} UTC")
        expect(page.locator("#run-timeline .xtitle")).to_have_text("time (UTC)")
        at = t0 + timedelta(minutes=2)
        hover = hover_score(page, 0)
        assert f"{at:%H:%M:%S} UTC" in hover, hover
        assert "after turn #3 · driver" in hover, hover
        # The drawn axis spans the run in UTC, not in Los Angeles time (8 hours behind).
        lo, hi = x_range(page)
        assert lo[:13] <= f"{t0:%Y-%m-%d %H}" <= hi[:13], (lo, hi)
        assert not errors, errors
    finally:
        ctx.close()


def test_choosing_the_browsers_zone_moves_page_text_axis_and_hover_together(
    browser, live_server, alice, project
):
    t0 = run_half_an_hour_ago(project, "tz-2", turn_number=1)
    la = ZoneInfo("America/Los_Angeles")
    ctx = open_context(browser, live_server, timezone_id="America/Los_Angeles")
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        page.goto("/")
        page.locator("#topnav").get_by_role("link", name=re.compile("Preferences")).click()
        expect(page.locator("[data-browser-zone-label]")).to_have_text("(America/Los_Angeles)")
        page.get_by_label(re.compile("My browser's time zone")).check()
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".alert.good")).to_contain_text("America/Los_Angeles")
        expect(page.locator("#topnav .clock-tag")).to_have_text("America/Los_Angeles")

        page.goto("/projects/hill/runs/tz-2/")
        expect(page.locator("#run-head .meta")).to_contain_text(
            f"started {t0.astimezone(la):%Y-%m-%d %H:%M} America/Los_Angeles"
        )
        expect(page.locator("#run-timeline .xtitle")).to_have_text("time (America/Los_Angeles)")
        hover = hover_score(page, 0)
        assert f"{(t0 + timedelta(minutes=2)).astimezone(la):%H:%M:%S} America/Los_Angeles" in hover, hover
        # A tooltip of a server-rendered time says the same zone.
        title = page.locator("table.turns td.when").first.get_attribute("title")
        assert (
            title.endswith("America/Los_Angeles")
            and f"{(t0 + timedelta(minutes=1)).astimezone(la):%H:%M:%S}" in title
        )
        assert not errors, errors
    finally:
        ctx.close()


def test_relative_times_keep_ticking_on_a_page_that_is_not_polled(browser, live_server, alice, project):
    push(project, "done-1", state("running"), turn(1), state("done"))
    ctx = open_context(browser, live_server)
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        page.goto("/projects/hill/runs/done-1/")
        assert page.locator("#run-poll[data-live]").count() == 0  # a finished run's page is not polled
        when = page.locator(".meta time[data-ago]").first
        first = when.text_content()
        assert re.fullmatch(r"\d+s ago", first), first
        expect(when).not_to_have_text(first, timeout=8_000)
        assert int(when.text_content().split("s")[0]) >= int(first.split("s")[0]) + 4
        assert not errors, errors
    finally:
        ctx.close()


# --- item 8: phones and dark mode ---------------------------------------------------------------------


def test_dark_mode_follows_the_system_setting_pages_and_charts(
    browser, live_server, alice, project, spread_run
):
    def luminance(css: str) -> float:
        if css.startswith("#"):
            css = "#" + "".join(c * 2 for c in css[1:]) if len(css) == 4 else css
            r, g, b = (int(css[i : i + 2], 16) for i in (1, 3, 5))
        else:
            r, g, b = (float(v) for v in re.findall(r"[\d.]+", css)[:3])
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255

    for scheme, dark in (("dark", True), ("light", False)):
        ctx = open_context(browser, live_server, color_scheme=scheme)
        try:
            page, errors = signed_in_page(ctx, alice, live_server)
            page.goto(spread_run)
            expect(page.locator("#run-timeline .main-svg").first).to_be_visible()
            body = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
            card = page.evaluate("getComputedStyle(document.querySelector('.card')).backgroundColor")
            ink = page.evaluate("getComputedStyle(document.body).color")
            plot_bg = page.evaluate("document.getElementById('run-timeline')._fullLayout.plot_bgcolor")
            tick = page.locator("#run-timeline .xtick text").first.evaluate("e => getComputedStyle(e).fill")
            if dark:
                assert luminance(body) < 0.1 and luminance(card) < 0.15, (body, card)
                assert luminance(ink) > 0.75 and luminance(tick) > 0.6, (ink, tick)
                assert luminance(plot_bg) < 0.15, plot_bg
            else:
                assert luminance(body) > 0.9 and luminance(plot_bg) > 0.9 and luminance(ink) < 0.3
            assert not errors, errors
        finally:
            ctx.close()


def test_on_a_phone_the_nav_is_a_menu_button(browser, live_server, alice, project):
    ctx = open_context(browser, live_server, viewport={"width": 390, "height": 844})
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        page.goto("/projects/hill/")
        toggle = page.locator("[data-nav-toggle]")
        expect(toggle).to_be_visible()
        expect(page.locator("#topnav")).to_be_hidden()
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(page.locator("#topnav").get_by_role("button", name="Sign out")).to_be_in_viewport()
        toggle.click()
        expect(page.locator("#topnav")).to_be_hidden()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.set_viewport_size({"width": 1440, "height": 900})
        expect(toggle).to_be_hidden()
        expect(page.locator("#topnav").get_by_role("button", name="Sign out")).to_be_visible()
        assert not errors, errors
    finally:
        ctx.close()


def test_on_a_phone_the_chart_toolbar_does_not_cover_the_legend(
    browser, live_server, alice, project, spread_run, screenshot_dir
):
    ctx = open_context(browser, live_server, viewport={"width": 390, "height": 844})
    try:
        page, errors = signed_in_page(ctx, alice, live_server)
        for url, plot in ((spread_run, "#run-timeline"), ("/projects/hill/", "#project-chart-plot")):
            page.goto(url)
            expect(page.locator(f"{plot} .main-svg").first).to_be_visible()
            page.locator(plot).scroll_into_view_if_needed()
            page.locator(f"{plot} .nsewdrag").first.hover()
            bar = page.locator(f"{plot} .modebar")
            expect(bar).to_be_visible()
            page.wait_for_timeout(400)  # the toolbar fades in
            b = bar.bounding_box()
            legend = page.locator(f"{plot} .legend").bounding_box()
            assert legend and b, (legend, b)
            overlap = not (
                b["x"] >= legend["x"] + legend["width"]
                or b["x"] + b["width"] <= legend["x"]
                or b["y"] >= legend["y"] + legend["height"]
                or b["y"] + b["height"] <= legend["y"]
            )
            page.screenshot(path=screenshot_dir / f"toolbar-390-{plot[1:]}.png")
            assert not overlap, (plot, b, legend)
            assert b["x"] + b["width"] <= 390
        assert not errors, errors
    finally:
        ctx.close()
