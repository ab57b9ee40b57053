"""Issue 33's P0-B replayed in a real browser: with "Require a second person to approve" on, an
auto-verified submission (nobody proposed it) approved by one person stays waiting for a second, with
Mark uploaded not offered; a second person's approval approves it. And the review queue's bulk
selection with its confirmation. Screenshots of both at 1440 and 390 px, light and dark."""

from __future__ import annotations

import io
import json

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Project, Submission
from smrweb.tracking.services import submissions as lifecycle
from tests.browser.test_screenshots import WIDTHS_AND_SCHEMES, _session_cookie, page_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def auto_verified(project, value: float, run: str = "r1") -> Submission:
    """A score verified the way the auto-verify setting does it: by the system, with no proposer."""
    artifact, _ = services.store_artifact(
        project, run, path="submission/optimizer.py", content=io.BytesIO(b"ok %f" % value)
    )
    services.ingest_events(
        project,
        run,
        parse_events(json.dumps([{"type": "score", "score": value, "artifact": artifact.blob.sha256}])),
    )
    sub = Submission.objects.filter(project=project).order_by("-id").first()
    lifecycle.request_verification(sub, by=None, automatic=True)
    return lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "ok", "exited 0"))


def fits(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, f"the page scrolls sideways: {width}px"


@pytest.mark.parametrize("width", [1440, 390])
def test_an_auto_verified_submission_needs_a_second_approver(
    page, context, live_server, sign_in, alice, bob, project, width
):
    page.set_viewport_size({"width": width, "height": 900})
    Project.objects.filter(pk=project.pk).update(auto_verify=True)
    sub = auto_verified(project, 0.7)
    assert sub.proposed_by is None

    # 1. An admin turns the rule on in the project's settings.
    sign_in(alice)
    page.goto("/projects/hill/settings/")
    page.check("#id_require_second_reviewer")
    page.get_by_role("button", name="Save").first.click()
    expect(page.locator("#id_require_second_reviewer")).to_be_checked()

    # 2. One person approves the auto-verified submission.
    page.goto(f"/projects/hill/submissions/{sub.pk}/")
    page.get_by_role("button", name="Approve").click()

    # Still waiting for a second approver: not approved, nothing to upload, Approve disabled with why.
    expect(page.locator("h1 [data-status]")).to_have_text("verified")
    expect(page.get_by_role("button", name="Mark uploaded")).to_have_count(0)
    expect(page.locator("[data-approval-rule]")).to_have_text("two people must approve")
    expect(page.locator("[data-approvals]")).to_contain_text(
        "1 of 2 approvals (alice) · waiting for one more approval by someone other than alice"
    )
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_disabled()
    expect(page.locator("[data-approve-refused]")).to_contain_text("You approved it already (1 of 2)")
    assert approve.evaluate("b => getComputedStyle(b).cursor") == "not-allowed"
    expect(page.locator("[data-approval-label]")).to_have_text("approval 1 of 2")
    expect(page.locator("#history")).to_contain_text("approval 1 of 2 · alice")
    fits(page)

    # The queue row says the same.
    page.goto("/projects/hill/review/")
    expect(page.locator(f'tr[data-submission="{sub.pk}"] [data-row-approvals]')).to_contain_text(
        "1/2 approvals · needs one more approval by someone other than alice"
    )

    # 3. A second person approves: approved, and the upload is offered.
    context.clear_cookies()
    sign_in(bob)
    page.goto(f"/projects/hill/submissions/{sub.pk}/")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("h1 [data-status]")).to_have_text("approved")
    expect(page.get_by_role("button", name="Mark uploaded")).to_be_visible()
    expect(page.locator("#history")).to_contain_text("approval 2 of 2 · alice, bob")
    fits(page)
    assert Submission.objects.get(pk=sub.pk).status == "approved"


def test_bulk_approve_from_the_queue_skips_what_the_person_proposed(page, sign_in, alice, bob, project):
    services.update_project(project, require_second_reviewer=True, by=alice)
    system = [auto_verified(project, 0.1 * i, run=f"r{i}") for i in range(1, 4)]
    mine = Submission.objects.get(pk=auto_verified(project, 0.9, run="r9").pk)
    Submission.objects.filter(pk=mine.pk).update(proposed_by=bob)  # bob proposed this one
    sign_in(bob)
    page.goto("/projects/hill/review/?status=verified")
    approve = page.locator("[data-bulk-action=approve]")
    expect(approve).to_be_disabled()  # nothing selected yet
    page.check("input[data-bulk-all]")
    expect(page.locator("[data-bulk-count]")).to_have_text("4 selected")
    dialogs = []
    page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    approve.click()
    expect(page.locator(".messages, [role=status], .alert").first).to_contain_text(
        "3 approvals recorded (waiting for a second approver), 1 skipped: you proposed it"
    )
    assert dialogs and dialogs[0].startswith("Approve 4 submissions?")
    assert all(Submission.objects.get(pk=s.pk).status == "verified" for s in system)
    assert all(lifecycle.approvals(Submission.objects.get(pk=s.pk)).by == ("bob",) for s in system)
    assert not Submission.objects.get(pk=mine.pk).reviews.exists()


def test_screenshots_of_one_of_two_approvals_and_the_bulk_selection(
    browser, live_server, alice, bob, project, screenshot_dir
):
    services.update_project(project, require_second_reviewer=True, by=alice)
    subs = [auto_verified(project, 0.1 * i, run=f"run-{i}") for i in range(1, 6)]
    lifecycle.review(subs[0], by=alice, verdict="approve", comment="the warmup change is sound")
    for width, scheme in WIDTHS_AND_SCHEMES:
        suffix = f"{width}" if scheme == "light" else f"{width}-dark"
        with page_at(browser, live_server, None, width, scheme) as page:
            ctx = page.context
            for who in (alice, bob):  # alice: Approve disabled with why; bob: may give the second
                ctx.clear_cookies()
                ctx.add_cookies([_session_cookie(who, live_server.url)])
                page.goto(f"/projects/hill/submissions/{subs[0].pk}/")
                card = page.locator("#review")
                expect(card.locator("[data-approvals]")).to_contain_text("1 of 2 approvals")
                card.screenshot(path=screenshot_dir / f"review-card-1-of-2-{who.username}-{suffix}.png")
            page.goto("/projects/hill/review/?status=verified")
            page.locator("input[data-bulk-pick]").nth(1).check()
            page.locator("input[data-bulk-pick]").nth(2).check()
            expect(page.locator("[data-bulk-count]")).to_have_text("2 selected")
            page.screenshot(path=screenshot_dir / f"review-queue-bulk-{suffix}.png", full_page=True)
            fits(page)
