"""The inbox a team can live in, in a real browser (issue 33 §5; the walkthrough's
18-inbox-mention-buried-in-needs-review.png): twelve verified submissions and a failure arrive, bob
@mentions alice with Markdown. The mention is on top, rendered (bold, no `**`); the twelve are one row,
"12 submissions waiting for review", that opens to them newest first; the kind filter narrows the page
and "Mark these 12 read" clears exactly those, leaving the mention and the failure unread.

Screenshots of the inbox at 1440 and 390 px, light and dark, go to /tmp/alerts-shots/ and screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Notification, Run
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from tests.browser.conftest import push, state
from tests.browser.test_alerts import bell, fits, shoot
from tests.tracking.test_inbox import needs_review

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_mention_on_top_a_grouped_firehose_and_mark_read_per_filter(
    page, sign_in, alice, bob, project, screenshot_dir
):
    for trigger in ("submission.needs_review", "run.failed"):
        services.create_alert_rule(project, by=alice, trigger=trigger, channel="inbox", recipient="alice")
    needs_review(project, bob, 6)
    services.add_comment(
        by=bob,
        body="@alice this one is approved — can you upload it? **#approach** smaller net held up.",
        run=Run.objects.get(external_id="s0"),
    )
    needs_review(project, bob, 6)  # more arrive after the mention: it still comes first
    push(project, "r9", state("failed", family="oom", detail="CUDA out of memory at step 812"))
    alert_evaluation.evaluate_run(Run.objects.get(external_id="r9").pk)
    sign_in(alice)

    page.goto("/inbox/")
    expect(bell(page)).to_have_text("14")
    mentions = page.locator("[data-mentions]")
    expect(mentions).to_contain_text("bob mentioned you on run s0")
    assert (
        page.locator("[data-mentions]").bounding_box()["y"] < page.locator("[data-group]").bounding_box()["y"]
    )
    body = mentions.locator("[data-mention-body]")
    expect(body.locator("strong")).to_have_text("#approach")
    expect(body).not_to_contain_text("**")
    expect(body.locator(".mention")).to_have_text("@alice")

    group = page.locator("ul.inbox > li[data-group]")
    expect(group).to_have_count(1)
    expect(group.locator(".inbox-title")).to_have_text("12 submissions waiting for review · Hill climb")
    expect(group.locator(".badge-new")).to_have_text("12 new")
    items = group.locator("details li[data-notification]")
    expect(items.first).not_to_be_visible()
    group.locator("summary").click()
    expect(items).to_have_count(12)
    expect(items.first).to_be_visible()
    expect(page.locator("ul.inbox > li[data-notification]").last).to_contain_text("run r9 failed (oom)")
    fits(page)
    for width, scheme in ((1440, "light"), (390, "light"), (1440, "dark"), (390, "dark")):
        page.set_viewport_size({"width": width, "height": 900 if width > 600 else 844})
        page.emulate_media(color_scheme=scheme)
        fits(page)
        shoot(page, screenshot_dir, f"inbox-grouped-{width}" + ("-dark" if scheme == "dark" else ""))
    page.set_viewport_size({"width": 1440, "height": 900})
    page.emulate_media(color_scheme="light")

    # Filter by kind: only the needs_review row; mark these 12 read.
    page.select_option("#inbox-filter select[name=kind]", "submission.needs_review")
    page.get_by_role("button", name="Filter", exact=True).click()
    expect(page.locator("[data-mentions]")).to_have_count(0)
    expect(page.locator("ul.inbox > li")).to_have_count(1)
    page.locator("[data-mark-filtered]").get_by_role("button", name="Mark these 12 read").click()
    expect(page.locator("[data-flash]")).to_contain_text("Marked 12 notifications read.")
    expect(bell(page)).to_have_text("2")
    expect(page.locator("#inbox-filter select[name=kind]")).to_have_value("submission.needs_review")
    unread = Notification.objects.filter(recipient=alice, read_at__isnull=True)
    assert sorted(n.kind for n in unread) == ["alert", "mention"]
    assert unread.get(kind="alert").rule.trigger == "run.failed"
