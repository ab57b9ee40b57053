"""Notes, tags and comments in a real browser: a reviewer writes the run's note with the htmx editor (hostile
Markdown shows inert), tags, names and pins the run, comments with an @mention that rings the viewer's
bell, and the submission page loads its thread; every page fits a 390-pixel phone and breaks no CSP rule.

Screenshots (1440 and 390 pixels) go to /tmp/annotations-shots/ (and screenshots/) for people to look at."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Comment, Run, RunNote, Submission
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path("/tmp/annotations-shots")
PHONE = {"width": 390, "height": 844}
WIDE = {"width": 1440, "height": 900}
LONG = "a-very-long-word-without-any-break-" * 6


def shoot(page, screenshot_dir, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    for folder in (SHOTS, screenshot_dir):
        page.screenshot(path=folder / f"{name}.png", full_page=True)


def fits(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, f"the page scrolls sideways: {width}px"


def watch_csp(page) -> list[str]:
    violations: list[str] = []
    page.on(
        "console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None
    )
    return violations


def test_a_reviewer_annotates_a_run_and_a_viewer_reads_it(
    page, sign_in, bob, victor, project, screenshot_dir
):
    page.on("dialog", lambda dialog: dialog.accept())
    violations = watch_csp(page)
    push(project, "run-7", state("running"), turn(1), score(0.42))
    sign_in(bob)
    page.set_viewport_size(WIDE)
    page.goto("/projects/hill/runs/run-7/")

    # The note: the htmx editor answers with the card; hostile Markdown is inert.
    page.locator("#run-note summary").click()
    page.locator("#run-note textarea").fill(
        f"Diverged after warmup. <img src=x onerror=alert(1)> [click](javascript:alert(1))\n\n"
        f"#approach: **500 warmup steps**, then sweep the lr. {LONG}"
    )
    page.locator("#run-note button[type=submit]").click()
    expect(page.locator("#run-note [data-note] strong")).to_have_text("500 warmup steps")
    expect(page.locator("#run-note [data-note] img")).to_have_count(0)
    expect(page.locator("#run-note [data-note] a")).to_have_count(0)
    assert RunNote.objects.get().edited_by == bob

    # Tags, a name and a pin: plain forms that come back to the page, whose title shows them.
    page.fill("#id_tag", "model=gpt-5.4-medium")
    page.locator("#id_tag").press("Enter")
    page.fill("#id_tag", "baseline")
    page.locator("#id_tag").press("Enter")
    page.fill("#id_display_name", "Warmup sweep, lr 3e-4")
    page.get_by_role("button", name="Save name").click()
    page.get_by_role("button", name="Pin to the top").click()
    expect(page.locator("h1 .rid-title")).to_have_text("Warmup sweep, lr 3e-4")
    expect(page.locator("h1 .rid-sub")).to_have_text("run-7")
    expect(page.locator("h1 [data-pinned]")).to_be_visible()
    expect(page.locator("h1 .tag-chip")).to_have_text(["baseline", "model=gpt-5.4-medium"])

    # A comment that mentions victor, then an edit.
    page.fill(".comment-form textarea", f"@victor the loss spikes at step 1200. {LONG}")
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(page.locator(".comment .mention")).to_have_text("@victor")
    comment = Comment.objects.get()
    page.locator(f"#comment-{comment.pk} summary").click()
    page.locator(f"#comment-{comment.pk} textarea").fill("@victor the loss spikes at step 1200 (edited).")
    page.locator(f"#comment-{comment.pk}").get_by_role("button", name="Save").click()
    expect(page.locator(f"#comment-{comment.pk}")).to_contain_text("(edited).")
    shoot(page, screenshot_dir, "run-annotated-1440")
    page.set_viewport_size(PHONE)
    page.reload()
    fits(page)
    shoot(page, screenshot_dir, "run-annotated-390")

    # The project page: the name, the pin and the chips; a chip filters the table.
    page.set_viewport_size(WIDE)
    push(project, "run-8", state("running"), score(0.3))
    page.goto("/projects/hill/")
    expect(page.locator("tr[data-run]").first).to_have_attribute("data-run", "run-7")  # pinned first
    page.locator("tr[data-run='run-7'] .run-tags a", has_text="baseline").click()
    expect(page.locator("tr[data-run]")).to_have_count(1)
    expect(page.locator("[data-active-tags]")).to_contain_text("baseline")
    shoot(page, screenshot_dir, "project-tags-1440")
    page.set_viewport_size(PHONE)
    page.reload()
    fits(page)
    shoot(page, screenshot_dir, "project-tags-390")

    # victor, a viewer: the bell rings once, the inbox links to the comment; he reads but writes nothing.
    context = page.context
    context.clear_cookies()
    sign_in(victor)
    page.set_viewport_size(WIDE)
    page.goto("/projects/hill/")
    expect(page.locator("[data-inbox-bell] .bell-count")).to_have_text("1")
    page.goto("/inbox/")
    page.locator(".inbox-title").first.click()
    expect(page.locator(f"#comment-{comment.pk}")).to_be_visible()
    expect(page.locator("#run-note summary")).to_have_count(0)
    expect(page.locator(".comment-form")).to_have_count(0)
    assert not violations, violations


def test_the_submission_page_loads_its_thread_and_fits_a_phone(page, sign_in, bob, project, screenshot_dir):
    violations = watch_csp(page)
    push(project, "run-9", state("done"), score(0.77))
    sub = Submission.objects.get(run=Run.objects.get(external_id="run-9"))
    services.add_comment(
        submission=sub, by=bob, body=f"| metric | value |\n|---|---|\n| score | 0.77 |\n\n`{LONG}`"
    )
    sign_in(bob)
    page.set_viewport_size(PHONE)
    page.goto(f"/projects/hill/submissions/{sub.pk}/")
    thread = page.locator(f"#comments-sub-{sub.pk}")
    expect(thread.locator(".comment")).to_have_count(1)  # loaded by htmx
    thread.locator(".comment-form textarea").fill("Approved: the seed is fixed. #approach fixed seeds")
    thread.get_by_role("button", name="Comment", exact=True).click()
    expect(page.locator(f"#comments-sub-{sub.pk} .comment")).to_have_count(2)
    fits(page)
    shoot(page, screenshot_dir, "submission-comments-390")
    page.set_viewport_size(WIDE)
    shoot(page, screenshot_dir, "submission-comments-1440")
    page.goto("/projects/hill/knowledge/")
    expect(page.locator("#carry-text")).to_contain_text("Approaches noted by the team")
    assert not violations, violations
