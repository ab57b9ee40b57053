"""The run page's live cards in a real browser: a new turn updates the cards it changes in place — a row added
to the turns table, the chart patched with the new point rather than drawn anew — while the cards it does not
change stay the very same elements, and what is typed or opened elsewhere on the page stays as it was.

No timings are asserted: the waits only bound how long the page may take to show what it must."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 8_000  # the page polls every 3 s
TURNS = 330  # more turns than the timeline has bars: a new turn adds to a bar or appends one
UNTOUCHED = ("run-submissions", "run-messages", "run-checkpoints", "run-exclusion", "artifacts-card")


@pytest.fixture
def long_live_run(project):
    now = datetime.now(UTC)
    start = now - timedelta(hours=2)
    events = [state("running")]
    for i in range(TURNS):
        ts = (start + timedelta(seconds=20 * i)).isoformat()
        events.append(
            turn(i, actor="driver" if i % 2 else "worker-1", parent=None if i % 2 else "driver", ts=ts)
        )
        if i % 50 == 0:
            events.append(score(i / TURNS, ts=ts))
            events.append({"type": "message", "body": f"note {i}", "ts": ts})
            events.append({"type": "checkpoint", "label": f"c{i}", "ts": ts})
    push(project, "live-long", *events)


def test_a_new_turn_updates_only_the_cards_it_changes_in_place(
    page, sign_in, alice, project, long_live_run, screenshot_dir
):
    sign_in(alice)
    page.goto("/projects/hill/runs/live-long/")
    chart = page.locator("#run-timeline")
    expect(chart.locator(".main-svg").first).to_be_visible()
    expect(chart).to_have_attribute("data-plot-draws", "1")
    # Marks that a swap would lose: a property on elements that must stay, text typed, a <details> opened.
    page.evaluate(
        """(names) => {
            window.__noReload = true;
            for (const name of names) document.getElementById(name).__kept = true;
            document.getElementById('run-timeline').__kept = true;
        }""",
        list(UNTOUCHED),
    )
    page.fill("#id_run_reason", "a test run, half typed")
    figure_before = json.loads(page.locator("#run-timeline-data").text_content())

    push(project, "live-long", turn(TURNS, tokens_in=7777, tokens_out=100, cost_usd=0.05))

    expect(page.locator(f'table.turns tr[data-turn="{TURNS}"]')).to_be_visible(timeout=LIVE_WAIT_MS)
    expect(page.locator('[data-stat="turns"]')).to_have_text(str(TURNS + 1))
    expect(chart).to_have_attribute("data-plot-patches", "1")
    # The chart gained the point from a patch: still the one figure drawn at load, the element never replaced.
    expect(chart).to_have_attribute("data-plot-draws", "1")
    figure = json.loads(page.locator("#run-timeline-data").text_content())
    tokens = [t for t in figure["data"] if t["type"] == "bar" and t["yaxis"] == "y2"]
    before = [t for t in figure_before["data"] if t["type"] == "bar" and t["yaxis"] == "y2"]
    assert sum(map(sum, (t["y"] for t in tokens))) == sum(map(sum, (t["y"] for t in before))) + 7877
    drawn = page.evaluate("document.getElementById('run-timeline').data.map(t => (t.y || []).length)")
    assert drawn == [len(t["y"]) for t in figure["data"]]  # what plotly draws is the patched figure
    # The table got a row and kept its length; the cards the turn did not change are the same elements.
    expect(page.locator("table.turns tbody tr")).to_have_count(25)
    kept = page.evaluate(
        "(names) => names.filter(n => document.getElementById(n).__kept)", [*UNTOUCHED, "run-timeline"]
    )
    assert kept == [*UNTOUCHED, "run-timeline"]
    expect(page.locator("#id_run_reason")).to_have_value("a test run, half typed")
    assert page.evaluate("window.__noReload === true")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(screenshot_dir / "live-cards-new-turn.png"), full_page=False)

    # A score changes its card too (a row on top of the submissions), still without drawing the chart anew.
    push(project, "live-long", score(0.99))
    expect(page.locator("table.submissions tbody tr").first).to_contain_text("0.99", timeout=LIVE_WAIT_MS)
    expect(page.locator("#id_run_reason")).to_have_value("a test run, half typed")
