"""A turn's prompt and response in a real browser (walkthrough P2-11): opened from the turns table, shown
collapsed with their sizes, expanded on a click, escaped (a script in a prompt is text), wrapped inside
the panel at 1440 and 390 px, light and dark. Screenshots go to screenshots/ (gitignored)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import TurnBody
from tests.browser.conftest import push, turn
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, WIDTHS_AND_SCHEMES, page_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
PROMPT = [
    {
        "role": "system",
        "content": "You improve submission/optimizer.py. Keep val_loss falling; never edit the harness.",
    },
    {"role": "user", "content": "Last score 3.412 (best 3.318). " + XSS + " Try: " + "lr=3e-4 " * 60},
]
RESPONSE = (
    "Lowering the learning rate and adding warm-up.\n"
    + "def schedule(step):\n    return min(1, step / 500)\n" * 8
)


@pytest.fixture
def run_with_bodies(project, alice):
    services.update_project(project, by=alice, capture_turn_bodies=True)
    push(
        project,
        "bodies-1",
        turn(1, tool_calls=[{"name": "read_file", "arguments": {"path": "submission/optimizer.py"}}]),
        turn(2, prompt=PROMPT, response=RESPONSE, tool_calls=["run_harness"], duration_ms=5400),
    )
    return project


def open_turn(page, n: int) -> None:
    page.goto("/projects/hill/runs/bodies-1/")
    link = page.locator(f'table.turns tr[data-turn="{n}"] button.turn-link')
    link.scroll_into_view_if_needed()
    link.click()
    expect(page.locator("#turn-detail h3")).to_contain_text(f"Turn {n}")


def test_a_turns_prompt_opens_collapsed_expands_and_stays_text(page, sign_in, alice, run_with_bodies):
    sign_in(alice)
    open_turn(page, 2)
    panel = page.locator("#turn-detail")
    prompt = panel.locator('details[data-body="prompt"]')
    body = TurnBody.objects.get()
    expect(prompt.locator("summary")).to_contain_text("Prompt")
    expect(prompt.locator("summary")).to_contain_text("685\u00a0bytes")
    expect(prompt.locator("pre")).to_be_hidden()  # collapsed until asked
    prompt.locator("summary").click()
    expect(prompt.locator("pre")).to_be_visible()
    assert prompt.locator("pre").inner_text() == body.prompt
    assert XSS in prompt.locator("pre").inner_text()  # the markup shows as text …
    assert page.evaluate("window.pwned") is None  # … and never ran
    assert prompt.locator("pre img, pre script").count() == 0
    # Wrapped inside the panel: the long line of the prompt does not scroll the panel sideways.
    assert page.evaluate(
        "() => { const pre = document.querySelector('#turn-detail details[data-body=prompt] pre');"
        " return pre.scrollWidth <= pre.clientWidth + 1; }"
    )
    expect(panel.locator('details[data-body="response"] pre')).to_be_hidden()
    expect(panel.locator(".tool-name")).to_have_text(["run_harness"])


def test_a_turn_without_a_body_says_so(page, sign_in, alice, run_with_bodies):
    sign_in(alice)
    open_turn(page, 1)
    expect(page.locator("#turn-detail")).to_contain_text(
        "The source sent no prompt or response with this turn."
    )


def test_screenshots_of_the_turn_detail_with_bodies(
    browser, live_server, alice, run_with_bodies, screenshot_dir
):
    problems = {}
    for width, scheme in WIDTHS_AND_SCHEMES:
        phone = width < 600
        with page_at(browser, live_server, alice, width, scheme) as page:
            open_turn(page, 2)
            page.locator('#turn-detail details[data-body="prompt"] summary').click()
            page.locator("#turn-detail").scroll_into_view_if_needed()
            suffix = f"{width}" if scheme == "light" else f"{width}-dark"
            page.locator("#turn-detail").screenshot(path=screenshot_dir / f"turn-detail-bodies-{suffix}.png")
            found = page.evaluate(OVERFLOW_CHECK, phone)
            if scheme == "dark":
                found += page.evaluate(DARK_CHECK)
                pre_bg = page.evaluate(
                    "getComputedStyle(document.querySelector('#turn-detail pre.body-text')).backgroundColor"
                )
                if pre_bg != "rgb(13, 17, 23)":
                    found.append(f"the prompt is shown on {pre_bg} in dark mode")
            if found:
                problems[suffix] = found
    assert not problems, problems
