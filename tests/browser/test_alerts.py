"""Alerts in a real browser: an admin adds an inbox rule on the project's Alerts tab through the form, a
run fails, the bell in the header counts the notification, the inbox lists it and links to the run, and
marking it read drops the count; the run page shows a loop badge and snoozes its alerts.

Screenshots of the Alerts tab, the inbox and a run page with a loop badge go to /tmp/alerts-shots/ (and
screenshots/) for people to look at."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Notification, Run
from smrweb.tracking.services.alerts import delivery as alert_delivery
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path("/tmp/alerts-shots")


def shoot(page, screenshot_dir, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # a page opened at an anchor: the sticky bar belongs on top
    for folder in (SHOTS, screenshot_dir):
        page.screenshot(path=folder / f"{name}.png", full_page=True)


def fits(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, f"the page scrolls sideways: {width}px"


def bell(page):
    return page.locator("[data-inbox-bell] .bell-count")


def test_an_admin_adds_an_inbox_rule_and_reads_what_it_sends(page, sign_in, alice, project, screenshot_dir):
    page.on("dialog", lambda dialog: dialog.accept())
    push(project, "r1", state("running"), turn(1), score(0.4))
    sign_in(alice)

    # The Alerts tab, from the project page; the form starts on alice's own inbox.
    page.goto("/projects/hill/")
    page.get_by_role("link", name="Alerts", exact=True).click()
    expect(page).to_have_url(re.compile(r"/projects/hill/alerts/$"))
    expect(page.locator("h1")).to_have_text("Alerts")
    expect(page.locator("#id_channel")).to_have_value("inbox")
    expect(page.locator("#id_recipient")).to_have_value("alice")
    expect(bell(page)).to_have_count(0)

    # A bad target comes back as a field error, nothing is made.
    page.select_option("#id_trigger", "run.stalled")
    page.select_option("#id_channel", "webhook")
    page.fill("#id_target", "http://10.1.2.3/hook")
    page.get_by_role("button", name="Add rule").click()
    expect(page.locator("#id_target")).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".rule-form .form-error")).to_contain_text("private address")

    # The rule we want: run.failed to alice's inbox.
    page.select_option("#id_trigger", "run.failed")
    page.select_option("#id_channel", "inbox")
    page.fill("#id_target", "")
    page.get_by_role("button", name="Add rule").click()
    expect(page.locator("[data-flash]")).to_contain_text("Rule added: run failed → inbox of alice.")
    rule_card = page.locator('[data-rule="run.failed"]')
    expect(rule_card).to_be_visible()
    expect(rule_card.locator("[data-destination]")).to_have_text("inbox of alice")

    # The run fails; the evaluator (a worker's job, called here) writes the notification to the inbox.
    push(project, "r1", state("failed", family="oom", detail="CUDA out of memory at step 812"))
    alert_evaluation.evaluate_run(Run.objects.get(external_id="r1").pk)
    assert Notification.objects.filter(recipient=alice, read_at__isnull=True).count() == 1

    page.reload()
    expect(bell(page)).to_have_text("1")
    expect(rule_card.locator("tbody tr")).to_have_count(1)
    expect(rule_card.locator("tbody tr")).to_contain_text("Hill climb: run r1 failed (oom)")
    expect(rule_card.locator("tbody tr [data-status], tbody tr .badge").first).to_have_text("sent")

    # A test send from the rule: a second unread notification.
    rule_card.get_by_role("button", name="Send test").click()
    expect(page.locator("[data-flash]")).to_contain_text("Test sent to the inbox of alice.")
    expect(bell(page)).to_have_text("2")
    fits(page)
    shoot(page, screenshot_dir, "alerts-tab")

    # The inbox, from the bell: both, newest first, unread.
    page.locator("[data-inbox-bell]").click()
    expect(page).to_have_title("Inbox · smrweb")
    items = page.locator("ul.inbox > li")
    expect(items).to_have_count(2)
    expect(page.locator("ul.inbox > li[data-unread]")).to_have_count(2)
    expect(items.nth(0)).to_contain_text("Test of the run.failed alert of Hill climb")
    expect(items.nth(1)).to_contain_text("Hill climb: run r1 failed (oom)")
    expect(items.nth(1)).to_contain_text("CUDA out of memory at step 812")
    fits(page)
    shoot(page, screenshot_dir, "inbox")

    # Mark one read: the count drops, the item stays (no longer marked).
    items.nth(1).get_by_role("button", name=re.compile(r"^Mark .* read$")).click()
    expect(bell(page)).to_have_text("1")
    expect(page.locator("ul.inbox > li[data-unread]")).to_have_count(1)
    expect(page.locator("[data-inbox-summary]")).to_contain_text("1 unread")

    # The failure's link goes to the run on this host (the stored URL is under SMRWEB_BASE_URL).
    page.locator("ul.inbox > li").nth(1).locator("a.inbox-title").click()
    expect(page).to_have_url(re.compile(r"^http://(localhost|127\.0\.0\.1):\d+/projects/hill/runs/r1/$"))
    expect(page.locator("h1 .rid-title")).to_have_text("r1")

    # Mark all read: the bell has no count any more.
    page.goto("/inbox/")
    page.get_by_role("button", name="Mark all read").click()
    expect(page.locator("[data-flash]")).to_contain_text("Marked 1 notification read.")
    expect(bell(page)).to_have_count(0)
    expect(page.locator("[data-inbox-bell]")).to_have_attribute("aria-label", "Inbox, 0 unread")
    assert not Notification.objects.filter(recipient=alice, read_at__isnull=True).exists()


def test_the_alerts_tab_shows_a_webhook_secret_and_its_delivery_log(
    page, sign_in, alice, project, screenshot_dir
):
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.budget", channel="webhook", target="https://hooks.example/alerts"
    )
    retrying, failed, _ = (services.send_test(rule, by=alice) for _ in range(3))
    alert_delivery.finish_delivery(
        alert_delivery.claim_delivery(failed.pk), error="attempt 1: HTTP 410 Gone from hooks.example"
    )
    alert_delivery.finish_delivery(
        alert_delivery.claim_delivery(retrying.pk),
        error="attempt 1: HTTP 503 from hooks.example; retrying in 30 s",
        retry_at=timezone.now() + timedelta(seconds=30),
    )
    services.create_alert_rule(
        project, by=alice, trigger="run.no_progress", window=80, channel="inbox", recipient="bob"
    )
    services.create_alert_rule(
        project, by=alice, trigger="run.stalled", channel="email", target="ops@example.com"
    )
    sign_in(alice)
    page.goto("/projects/hill/alerts/")
    card = page.locator('[data-rule="run.budget"]')
    expect(card.locator("[data-webhook-secret] code.secret")).to_have_text(rule.secret)
    expect(card.locator('tr[data-status="failed"]')).to_contain_text("HTTP 410 Gone")
    expect(card.locator('tr[data-status="retrying"]')).to_contain_text("next attempt in")
    expect(card.locator('tr[data-status="pending"]')).to_have_count(1)
    expect(page.locator('[data-rule="run.no_progress"]')).to_contain_text("80")
    fits(page)
    shoot(page, screenshot_dir, "alerts-tab-webhook")
    page.set_viewport_size({"width": 390, "height": 900})
    page.reload()
    fits(page)
    shoot(page, screenshot_dir, "alerts-tab-phone")


def test_the_run_page_shows_a_loop_badge_and_snoozes_alerts(page, sign_in, bob, project, screenshot_dir):
    call = [{"name": "bash", "arguments": {"cmd": "pytest tests/test_model.py -x"}}]
    push(
        project,
        "loopy",
        state("running"),
        score(0.31),
        *[turn(i, tool_calls=call, tokens_in=6000, tokens_out=400, cost_usd=0.021) for i in range(1, 7)],
    )
    run = Run.objects.get(external_id="loopy")
    alert_evaluation.update_loop_findings(run)  # what the evaluator does after each batch
    sign_in(bob)
    page.goto(run.get_absolute_url())
    badge = page.locator('h1 [data-badge="loop"]')
    expect(badge).to_contain_text("loop: bash(")
    expect(page.locator('[data-loop="repeat"]')).to_contain_text("6 times in a row (turns 1–6 of driver)")
    expect(page.locator('[data-loop="repeat"]')).to_contain_text("the repeats cost 32.0k tokens and $0.10.")
    fits(page)
    shoot(page, screenshot_dir, "run-loop-badge")

    page.select_option(".snooze-form select[name=hours]", "12")
    page.get_by_role("button", name="Snooze alerts").click()
    expect(page.locator("[data-flash]")).to_contain_text("Alerts about loopy are snoozed until")
    expect(page.locator("[data-snoozed]")).to_contain_text("alerts snoozed until")
    page.get_by_role("button", name="Unsnooze alerts").click()
    expect(page.locator("[data-snoozed]")).to_have_count(0)
    expect(page.get_by_role("button", name="Snooze alerts")).to_be_visible()
