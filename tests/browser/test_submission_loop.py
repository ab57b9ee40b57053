"""The whole leaderboard loop in a real browser with a real worker: a run produces a candidate; a
reviewer verifies it (the validator runs on the worker), approves it, copies its signed link, marks it
uploaded and records the arena's answer; the knowledge block carries the delta; a later worse score
raises the regression banner; one click rolls back (a signed webhook the harness receives)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from smrweb.outbound import webhooks
from smrweb.tracking.models import Rollback, Submission
from tests.browser.conftest import push, score, state, store
from tests.conftest import wait_for
from tests.sources.test_submission_loop import CHECK_PREFIX, Receiver

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]
WAIT_MS = 15_000


@pytest.fixture
def loop_project(project):
    scenario = project.scenario
    scenario.validator_command = ["python3", "-c", CHECK_PREFIX, "{artifact}"]
    scenario.arena_name, scenario.arena_url = "Dogfight", "https://optimizationarena.com/dogfight"
    scenario.save()
    project.regression_threshold = 0.1
    project.save()
    return project


def test_candidate_to_ranked_to_knowledge_then_regression_and_one_click_rollback(
    page, context, sign_in, bob, loop_project, celery_worker, live_server, screenshot_dir
):
    receiver = Receiver([200], webhooks.webhook_secret(loop_project))
    loop_project.rollback_webhook_url = receiver.url
    loop_project.save()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        artifact = store(loop_project, "r1", "submission/optimizer.py", b"ok: optimizer v1\n")
        push(loop_project, "r1", state("running"), score(0.8, artifact=artifact.blob.sha256))
        sub = Submission.objects.get()
        sign_in(bob)

        # Verify: the validator runs on the worker; the page follows by itself.
        page.goto(f"/projects/hill/submissions/{sub.pk}/")
        expect(page.locator("h1 [data-status]")).to_have_text("candidate")
        page.get_by_role("button", name="Verify").click()
        expect(page.locator("h1 [data-status]")).to_have_text("verified", timeout=WAIT_MS)
        expect(page.locator("#verification pre.output")).to_contain_text("checked 17 bytes")
        # "Verification started…" does not sit beside the result once it came (walkthrough P3).
        expect(page.locator("[data-flash-until-change]")).to_have_count(0)

        # Approve with a comment.
        page.fill("#id_comment", "clean, small, beats v0")
        page.get_by_role("button", name="Approve").click()
        expect(page.locator("h1 [data-status]")).to_have_text("approved")

        # Copy the signed link: it downloads the bytes without a session.
        page.locator('#artifact button[data-copy-label="signed link"]').click()
        link = page.evaluate("navigator.clipboard.readText()")
        assert re.fullmatch(rf"{re.escape(live_server.url)}/a/[A-Za-z0-9._-]+/", link)
        expect(page.locator('#artifact a[href="https://optimizationarena.com/dogfight"]')).to_have_attribute(
            "target", "_blank"
        )

        # The manual arena handoff: mark uploaded, record the answer.
        page.get_by_role("button", name="Mark uploaded").click()
        expect(page.locator("h1 [data-status]")).to_have_text("uploaded")
        page.fill('input[name="rank"]', "12")
        page.fill('input[name="arena_score"]', "1234")
        page.fill("#id_note", "wins at long range")
        page.get_by_role("button", name="Record arena result").click()
        expect(page.locator("h1 [data-status]")).to_have_text("ranked")
        expect(page.locator("#arena")).to_contain_text("rank 12")
        expect(page.locator("#verification")).to_contain_text("exit code 0")
        expect(page.locator("[data-verification-reason]")).to_have_count(0)  # "exited 0" only repeated it
        history = page.locator("#history tbody tr")
        expect(history).to_have_count(5)
        page.screenshot(path=str(screenshot_dir / "loop-submission-ranked.png"), full_page=True)

        # The knowledge block carries the arena's answer forward.
        page.goto("/projects/hill/knowledge/")
        expect(page.locator("pre").first).to_contain_text("rank 12")
        expect(page.locator("pre").first).to_contain_text("wins at long range")

        # A later, worse score raises the regression banner; one click rolls back to the best.
        push(loop_project, "r1", score(0.5))
        page.goto("/projects/hill/runs/r1/")
        banner = page.locator(".alert.regression")
        expect(banner).to_contain_text("0.3 worse than this run's best 0.8")
        banner.get_by_role("button", name="Roll back to the best").click()
        expect(page.locator(".alert.good")).to_contain_text("Rollback to submission")
        expect(page.locator('#rollbacks [data-rollback-status="applied"]')).to_be_visible(timeout=WAIT_MS)
        # The banner now says what happened instead of offering the same rollback again.
        expect(banner.locator('[data-rolled-back="applied"]')).to_contain_text(f"Rolled back to #{sub.pk}")
        expect(banner.get_by_role("button", name="Roll back to the best")).to_have_count(0)
        page.screenshot(path=str(screenshot_dir / "loop-run-rolled-back.png"), full_page=True)
    finally:
        receiver.stop()
    wait_for(lambda: Rollback.objects.get().status == "applied")
    assert len(receiver.seen) == 1 and receiver.seen[0]["valid"]
    assert receiver.seen[0]["body"]["target"]["id"] == sub.pk
