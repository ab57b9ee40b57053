"""The run page's Logs card in a real browser: the tail opens at its bottom like a terminal, the level
filter and the search swap the card alone and put their state in the address, older and newer pages go by
seq, a line's markup stays text, and a live run's new lines arrive on the page's poll. Screenshots of the
card at 1440 light and 390 dark go to /tmp/logs-shots/ (and screenshots/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from smrweb.tracking.models import LogLevel, Run
from tests.browser.conftest import push
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, page_at
from tests.dashboard.test_logs_card import add_lines

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

URL = "/projects/hill/runs/logs-1/"
XSS = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
SHOTS = Path("/tmp/logs-shots")
SIDEWAYS = "() => { const b = document.getElementById('log-box'); return b.scrollWidth > b.clientWidth + 1; }"


def harness_line(seq: int) -> str:
    """What a wedged SMR run's log says (seed 000): checkpoints failing, then the intent rejected."""
    if seq == 3:
        return "kickoff: " + XSS
    if seq % 40 == 0:
        return (
            "runtime_checkpoint_failed before_actor:orchestrator turn=1: RuntimeError: workspace does not "
            f"exist: /srv/smr/projects/91b5879f/runs/56f76ec3/workspace (attempt {seq // 40})"
        )
    if seq % 45 == 0:
        return "plan_tasks rejected: repo_like_task_count_mismatch:requested=2:persisted=3 " + "x" * 300
    if seq % 9 == 0:
        return "state_machine.waiting_fallthrough task_total=1 runnable_tasks=0 active_workers=0"
    return f"worker-3 step {seq}: make build ok ({seq * 7 % 900} ms)"


def harness_level(seq: int) -> int:
    if seq % 40 == 0:
        return LogLevel.ERROR
    if seq % 45 == 0:
        return LogLevel.CRITICAL
    if seq % 9 == 0:
        return LogLevel.WARNING
    return LogLevel.DEBUG if seq % 4 == 0 else LogLevel.INFO


@pytest.fixture
def logs_run(project):
    push(project, "logs-1", {"type": "state", "state": "running"})
    run = Run.objects.get(project=project, external_id="logs-1")
    add_lines(run, 450, text=harness_line, level=harness_level)
    Run.objects.filter(pk=run.pk).update(log_lines_dropped=37)
    run.refresh_from_db()
    return run


def shown_seqs(page) -> list[int]:
    return [
        int(s) for s in page.locator("#log-lines > li").evaluate_all("els => els.map(e => e.dataset.seq)")
    ]


def at_bottom(page) -> bool:
    return page.evaluate(
        "() => { const b = document.getElementById('log-box');"
        " return b.scrollHeight - b.scrollTop - b.clientHeight < 4; }"
    )


def test_the_logs_card_filters_searches_pages_and_follows(page, sign_in, alice, logs_run):
    sign_in(alice)
    page.goto(URL)
    box = page.locator("#log-box")
    box.scroll_into_view_if_needed()
    expect(page.locator("#logs-counts")).to_contain_text("450 lines")
    expect(page.locator("#logs-dropped")).to_contain_text("37 lines were over the run's cap")
    assert shown_seqs(page) == list(range(251, 451))
    assert at_bottom(page)  # a terminal: the newest line in view
    expect(page.locator("#log-450")).to_be_in_viewport()

    # Older: the 200 before, by seq; the address says so, and the box opens at its bottom again.
    page.locator('[data-log-link="older"]').click()
    expect(page).to_have_url(re.compile(r"logs_before=251"))
    expect(page.locator("#log-250")).to_be_attached()
    assert shown_seqs(page) == list(range(51, 251)) and at_bottom(page)
    page.locator('[data-log-link="older"]').click()
    expect(page.locator("#log-1")).to_be_attached()
    # A line's markup is text: shown, never run.
    expect(page.locator("#log-3 .log-text")).to_have_text("kickoff: " + XSS)
    assert (
        page.evaluate("window.pwned") is None
        and page.locator("#log-lines img, #log-lines script").count() == 0
    )
    page.locator('[data-log-link="newer"]').click()
    expect(page).to_have_url(re.compile(r"logs_after=50"))
    expect(page.locator("#log-51")).to_be_attached()
    assert shown_seqs(page)[0] == 51
    page.locator('[data-log-link="newest"]').click()
    expect(page.locator("#log-450")).to_be_attached()
    assert "logs_" not in page.url

    # The level filter: errors and worse only; the select alone asks (no button).
    page.locator('select[name="logs_level"]').select_option("error")
    expect(page).to_have_url(re.compile(r"logs_level=error"))
    expect(page.locator("#log-lines > li.lv-info")).to_have_count(0)
    levels = page.locator("#log-lines > li").evaluate_all("els => els.map(e => +e.dataset.level)")
    assert levels and min(levels) >= 40

    # The search, any case, within the level: Enter submits.
    search = page.locator('input[name="logs_q"]')
    search.fill("WORKSPACE does not")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"logs_q=WORKSPACE(\+|%20)does(\+|%20)not"))
    found = list(range(40, 451, 40))  # the checkpoint failures
    expect(page.locator("#log-lines > li")).to_have_count(len(found))
    texts = page.locator("#log-lines .log-text").all_inner_texts()
    assert all("workspace does not exist" in t for t in texts) and shown_seqs(page) == found
    expect(page.locator("[data-log-range]")).to_contain_text("matching")

    # A link shows the same view: reload the address.
    page.reload()
    expect(page.locator('input[name="logs_q"]')).to_have_value("WORKSPACE does not")
    expect(page.locator('select[name="logs_level"]')).to_have_value("error")
    page.get_by_role("link", name="Clear").click()
    expect(page.locator("#log-lines > li")).to_have_count(200)
    assert "logs_" not in page.url

    # Live: lines the harness sends now arrive on the poll, the box stays at its bottom.
    add_lines(logs_run, 5, text=lambda seq: f"late line {seq} <b>not bold</b>", level=harness_level)
    expect(page.locator("#log-455")).to_be_attached(timeout=10_000)
    expect(page.locator("#log-455 .log-text")).to_have_text("late line 455 <b>not bold</b>")
    expect(page.locator("#logs-counts")).to_contain_text("455 lines")
    assert shown_seqs(page) == list(range(256, 456))
    page.wait_for_timeout(100)
    assert at_bottom(page)


def test_screenshots_of_the_logs_card(browser, live_server, alice, logs_run, screenshot_dir):
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems = {}
    for width, scheme, query in (
        (1440, "light", ""),
        (390, "dark", ""),
        (1440, "light", "?logs_level=warning"),
    ):
        phone = width < 600
        with page_at(browser, live_server, alice, width, scheme) as page:
            page.goto(URL + query)
            card = page.locator("#run-logs")
            card.scroll_into_view_if_needed()
            suffix = f"{width}" + ("-dark" if scheme == "dark" else "") + ("-warning" if query else "")
            for out in (SHOTS / f"logs-{suffix}.png", screenshot_dir / f"run-logs-{suffix}.png"):
                card.screenshot(path=out)
            found = page.evaluate(OVERFLOW_CHECK, phone)
            if page.evaluate(SIDEWAYS):
                found.append("the log box scrolls sideways (long lines must wrap)")
            if scheme == "dark":
                found += page.evaluate(DARK_CHECK)
            if found:
                problems[suffix] = found
    assert not problems, problems
