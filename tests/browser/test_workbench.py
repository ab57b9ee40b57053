"""The review queue as a workbench, in Chromium, by keyboard: j/k move and open a row's panel (preview,
diff, validator output), a approves in place, r with no reason asks for one and Ctrl+Enter rejects;
the row's badge follows without a page load. Screenshots of the queue and of a submission's diff at
1440 and 390 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.tracking.models import Submission
from smrweb.tracking.models import SubmissionStatus as S
from tests.review.helpers import submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASE = b'"""Optimizer."""\n\nLR = 0.001\n\n\nclass Optimizer:\n'
BASE += b"    def step(self, grads):\n        return grads\n"


def version(lr: str, extra: bytes = b"") -> bytes:
    return BASE.replace(b"0.001", lr.encode()) + extra


@pytest.fixture
def queue(project):
    submit(project, BASE, score=0.50, run="r0", status=S.APPROVED)
    subs = [
        submit(project, version("0.003", b"\n    def zero_grad(self):\n        pass\n"), score=0.9, run="r1"),
        submit(project, version("0.002"), score=0.8, run="r2"),
        submit(project, version("0.004", b"# <script>alert(1)</script>\n"), score=0.7, run="r3"),
    ]
    Submission.objects.filter(pk__in=[s.pk for s in subs]).update(status=S.VERIFIED)
    return subs


def test_review_the_queue_with_the_keyboard(page, sign_in, bob, queue, screenshot_dir):
    first, second, third = queue
    sign_in(bob)
    page.goto("/projects/hill/review/?status=verified")
    expect(page.locator("[data-kbd-hint]")).to_contain_text("approve")
    rows = page.locator("tr[data-queue-row]")
    expect(rows).to_have_count(3)

    page.keyboard.press("j")  # the first row, opened: its diff against the approved one
    panel = page.locator(f"#panel-row-{first.pk}")
    expect(panel).to_be_visible()
    expect(panel.locator("[data-added]")).to_have_attribute("data-added", "4")
    expect(panel.locator("[data-preview=code]")).to_be_visible()
    expect(rows.nth(0)).to_have_attribute("aria-expanded", "true")

    page.keyboard.press("j")  # moves on: the first closes, the second opens
    expect(panel).to_be_hidden()
    expect(page.locator(f"#panel-row-{second.pk} [data-removed]")).to_have_attribute("data-removed", "1")
    page.keyboard.press("k")
    expect(panel).to_be_visible()
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.screenshot(path=str(screenshot_dir / "review-queue-workbench-1440.png"), full_page=True)

    page.keyboard.press("a")  # approve in place: the row's badge follows, no page load
    expect(page.locator(f"#status-{first.pk}")).to_have_text("approved")
    expect(panel.locator("[data-outcome]")).to_be_visible()
    assert Submission.objects.get(pk=first.pk).status == S.APPROVED

    page.keyboard.press("j")
    page.keyboard.press("j")  # the third: its hostile line is shown as text
    third_panel = page.locator(f"#panel-row-{third.pk}")
    expect(third_panel.locator("[data-diff]")).to_contain_text("<script>alert(1)</script>")
    page.keyboard.press("r")  # no reason yet: the comment box asks for one
    box = third_panel.locator("textarea[name=comment]")
    expect(box).to_be_focused()
    box.type("overfits the public seed")
    page.keyboard.press("Control+Enter")
    expect(page.locator(f"#status-{third.pk}")).to_have_text("rejected")
    assert Submission.objects.get(pk=third.pk).status == S.REJECTED
    assert Submission.objects.get(pk=second.pk).status == S.VERIFIED  # passed over, untouched

    page.set_viewport_size({"width": 390, "height": 844})
    page.keyboard.press("Escape")
    page.keyboard.press("k")
    expect(page.locator(f"#panel-row-{second.pk}")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "review-queue-workbench-390.png"), full_page=True)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the queue overflows a 390 px screen by {overflow} px"


def test_submission_page_shows_the_diff_and_switches_layout(page, sign_in, victor, queue, screenshot_dir):
    first = queue[0]
    sign_in(victor)
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(f"/projects/hill/submissions/{first.pk}/")
        diff = page.locator("#changes [data-diff]")
        expect(diff.locator("[data-view=split]")).to_be_visible()
        expect(page.locator("#preview [data-preview=code]")).to_be_visible()
        page.screenshot(path=str(screenshot_dir / f"submission-diff-{width}.png"), full_page=True)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the submission page overflows {width} px by {overflow} px"
    page.get_by_label("unified").check()
    expect(page.locator("#changes [data-view=unified]")).to_be_visible()
    # The swapped-in form is wired by htmx when it settles (20 ms after the swap, while it still carries
    # htmx-added); a change before then is not sent, which only a test is fast enough to do.
    expect(page.locator("#changes .diff.htmx-added")).to_have_count(0)
    page.locator("[data-diff-against]").select_option("best")
    expect(page.locator("#changes .diff-summary")).to_contain_text("the project's best")


def test_an_onnx_submission_shows_its_summary_and_a_structural_diff(
    celery_worker, page, sign_in, victor, project, screenshot_dir
):
    """The models are summarised on the real worker (red-team N2): the page says so, polls, and swaps
    the summary and the structural diff in."""
    import random

    from smrweb.stack.harness import onnx_policy

    path, kind = "submission/policy.onnx", "onnx_model"
    submit(
        project, onnx_policy(random.Random(1), flaw=""), score=0.5, path=path, kind=kind, status=S.APPROVED
    )
    sub = submit(project, onnx_policy(random.Random(2), flaw="wrong-shape"), score=0.6, path=path, kind=kind)
    sign_in(victor)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(f"/projects/hill/submissions/{sub.pk}/")
    expect(page.locator("#preview [data-onnx-summary] [data-onnx-output]")).to_contain_text("[1, 4]")
    expect(page.locator("#changes [data-structural]")).to_contain_text("outputs")
    page.screenshot(path=str(screenshot_dir / "submission-onnx-1440.png"), full_page=True)
