"""Issue 14 in a real browser, at a desktop width and a phone's: the leaderboard's scope toggles, the
review queue's filters, the second-person rule's disabled Approve, excluding a junk score, and the
regression banner after a rollback — each clicked, not just rendered, and the document never wider
than the window."""

from __future__ import annotations

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Submission
from smrweb.tracking.services import rollbacks
from smrweb.tracking.services import submissions as lifecycle
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WIDTHS = [1440, 390]


def verify(sub, by, passed=True):
    lifecycle.request_verification(sub, by=by)
    return lifecycle.record_verification(
        sub.pk,
        lifecycle.VerificationResult("passed" if passed else "failed", 0 if passed else 1, "", "checked"),
    )


def fits(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, f"the page scrolls sideways: {width}px"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_leaderboard_counts_verified_work_and_its_toggles_say_so(
    page, sign_in, alice, bob, project, width
):
    page.set_viewport_size({"width": width, "height": 900})
    push(project, "steady", state("running"), score(0.5), score(0.6))
    push(project, "junk", state("running"), score(9.0))  # what the API docs' example once wrote
    for sub in Submission.objects.filter(run__external_id="steady"):
        verify(sub, bob)
    sign_in(alice)
    page.goto("/projects/hill/")
    board = page.locator("table.leaderboard tbody tr")
    expect(board).to_have_count(1)
    expect(board.first.locator("a.rid")).to_have_text("steady")
    expect(page.locator("[data-unverified-hint]")).to_contain_text(
        "1 unverified submission not counted (best 9)"
    )
    fits(page)

    page.get_by_role("link", name="including unverified").click()
    expect(board).to_have_count(2)
    expect(board.first.locator("a.rid")).to_have_text("junk")
    page.get_by_role("link", name="every submission").click()
    expect(board).to_have_count(3)
    # An admin excludes the junk from the submission's page: it leaves the board, even with unverified ones.
    page.locator("table.leaderboard tbody tr").first.locator("td.num a").click()
    page.fill("#id_reason", "the API docs' example body")
    page.get_by_role("button", name="Exclude from the project's numbers").click()
    expect(page.locator("[data-excluded-why]")).to_contain_text("the API docs' example body")
    fits(page)
    page.goto("/projects/hill/?board=all")  # unverified ones still included (kept for the session)
    expect(board).to_have_count(2)
    expect(board.locator("a.rid")).to_have_text(["steady", "steady"])


@pytest.mark.parametrize("width", WIDTHS)
def test_the_review_queue_filters_by_status_and_groups_runs(page, sign_in, alice, bob, project, width):
    page.set_viewport_size({"width": width, "height": 900})
    for i in range(3):
        push(project, f"run-{i}", state("running"), *[score(0.1 * k + i) for k in range(4)])
    verify(Submission.objects.filter(run__external_id="run-0").first(), bob)
    sign_in(alice)
    page.goto("/projects/hill/review/")
    expect(page.locator('[data-status="waiting"] b')).to_have_text("12")
    rows = page.locator("table.queue tbody tr[data-queue-row]")  # not the panels under them
    expect(rows).to_have_count(3)
    expect(page.locator("[data-run-waiting]").first).to_contain_text("+3 more")
    fits(page)
    page.locator('[data-status="verified"]').click()
    expect(rows).to_have_count(1)
    page.get_by_role("link", name="every submission").click()
    expect(rows).to_have_count(1)
    page.locator('[data-status="candidate"]').click()
    expect(rows).to_have_count(11)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_proposer_sees_why_their_approve_is_disabled(page, sign_in, alice, bob, project, width):
    page.set_viewport_size({"width": width, "height": 900})
    services.update_project(project, require_second_reviewer=True, by=alice)
    push(project, "r", state("running"), score(0.7))
    sub = Submission.objects.get()
    sign_in(bob)
    page.goto(f"/projects/hill/submissions/{sub.pk}/")
    expect(page.locator("[data-proposer-note]")).to_contain_text("your own approval will not count")
    verify(sub, bob)
    page.reload()
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_disabled()
    expect(page.locator("[data-own-approval]")).to_be_visible()
    # Reject needs a reason: an empty one is a form error in place, nothing recorded.
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#review .form-error")).to_contain_text("Say why it is rejected")
    fits(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_after_a_rollback_the_banner_says_what_happened(page, sign_in, alice, project, width):
    page.set_viewport_size({"width": width, "height": 900})
    services.update_project(
        project, regression_threshold=0.1, rollback_webhook_url="https://hooks.example/rb", by=alice
    )
    push(project, "r", state("running"), score(0.9), score(0.3))
    best = Submission.objects.get(score=0.9)
    rollback = rollbacks.request_rollback(by=alice, reason="back", submission=best).rollback
    rollbacks.finish(rollback.pk, ok=True, detail="queued", accepted_only=True)
    sign_in(alice)
    page.goto("/projects/hill/runs/r/")
    banner = page.locator(".alert.regression")
    expect(banner.locator('[data-rolled-back="accepted"]')).to_contain_text(f"Rolled back to #{best.pk}")
    expect(banner).to_contain_text("has not confirmed the restore")
    expect(banner).to_contain_text("The run is running")
    expect(banner.get_by_role("button")).to_have_count(0)
    fits(page)


def test_the_project_chart_follows_the_filters(page, sign_in, alice, project):
    push(project, "ok-run", state("running"), score(0.4), score(0.6))
    push(project, "broken", score(0.9), state("failed"))
    sign_in(alice)
    page.goto("/projects/hill/?unverified=1")
    head = page.locator("#project-chart .card-head")
    expect(head).to_contain_text("3 scores from 2 runs")
    page.locator('form.filters input[name="failed"]').check()
    expect(head).to_contain_text("the runs matching the filters: 1 score from 1 run")
    expect(page.locator("table.runs tbody tr[data-run]")).to_have_count(1)


def test_the_over_budget_filter_narrows_the_project_chart(page, sign_in, alice, project):
    """The walkthrough: "over budget" narrowed the table to 11 runs, but the chart kept drawing every run."""
    push(project, "thrifty", state("running"), score(0.4), score(0.6))
    push(project, "spender", state("running"), score(0.9), turn(1, cost_usd=3.0))
    services.update_run_settings(project, "spender", budget_usd=Decimal("1"))
    sign_in(alice)
    page.goto("/projects/hill/?unverified=1")
    head = page.locator("#project-chart .card-head")
    expect(head).to_contain_text("3 scores from 2 runs")
    page.locator('form.filters input[name="over_budget"]').check()
    expect(page.locator("table.runs tbody tr[data-run]")).to_have_count(1)
    expect(head).to_contain_text("the runs matching the filters: 1 score from 1 run")
    # The count's shortcut (a link, a new page) narrows the chart the same way.
    page.goto("/projects/hill/?unverified=1")
    page.locator('#project-live a[data-count="over-budget"]').click()
    expect(head).to_contain_text("the runs matching the filters: 1 score from 1 run")
    page.locator('form.filters input[name="over_budget"]').uncheck()
    expect(head).not_to_contain_text("matching the filters")
    expect(head).to_contain_text("3 scores from 2 runs")
