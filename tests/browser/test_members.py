"""Invite → accept → see the project, in a real browser: an admin invites an address from the Members tab,
the e-mail goes through a real SMTP server, and the invitee opens its link signed out, makes an account
and lands on the project. Screenshots of the Members tab and the invitation page go to screenshots/."""

from __future__ import annotations

import re
from email import message_from_string

import pytest
from playwright.sync_api import expect

from smrweb.tracking.models import Membership

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_invited_colleague_joins_from_the_mailed_link(
    browser, page, sign_in, project, live_server, settings, mail_catcher, screenshot_dir
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", mail_catcher.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.SMRWEB_BASE_URL = live_server.url
    mail_catcher.messages.clear()

    sign_in(project.memberships.get(role="admin").user)
    page.goto("/projects/hill/members/")
    form = page.locator("form[action='/projects/hill/invitations/']")
    form.locator("input[name=email]").fill("dora@example.org")
    form.locator("select[name=role]").select_option("reviewer")
    form.locator("button[type=submit]").click()
    expect(page.locator("[data-flash=success]")).to_contain_text("Invitation sent to dora@example.org")
    expect(page.locator("tr[data-invitation='dora@example.org']")).to_contain_text("reviewer")
    page.screenshot(path=str(screenshot_dir / "members-tab.png"), full_page=True)

    [raw] = mail_catcher.wait_for(1, timeout=10)
    text = message_from_string(raw["data"]).get_payload(decode=True).decode()
    [link] = re.findall(re.escape(live_server.url) + r"(/invite/\S+/)", text)

    invitee = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    try:
        other = invitee.new_page()
        other.goto(link)
        expect(other.locator("[data-invitation-summary]")).to_contain_text("as reviewer")
        other.screenshot(path=str(screenshot_dir / "invitation-accept.png"), full_page=True)
        other.fill("#id_username", "dora")
        other.fill("#id_password1", "correct-horse-battery-9")
        other.fill("#id_password2", "correct-horse-battery-9")
        other.get_by_role("button", name="Create account and join").click()
        expect(other).to_have_url(re.compile(r"/projects/hill/$"))
        expect(other.locator("[data-flash=success]")).to_contain_text("you are reviewer of hill")
        expect(other.locator("h1")).to_contain_text("Hill climb")
        other.screenshot(path=str(screenshot_dir / "invitation-joined.png"))
        other.goto(link)  # their own link again: back to the project, not an error
        expect(other).to_have_url(re.compile(r"/projects/hill/$"))
        other.context.clear_cookies()
        other.goto(link)  # anyone else: the link worked once
        expect(other.locator("[data-refusal=used]")).to_be_visible()
        other.screenshot(path=str(screenshot_dir / "invitation-used.png"))
    finally:
        invitee.close()
    assert Membership.objects.get(project=project, user__username="dora").role == "reviewer"


def test_the_sign_in_page_leads_to_a_password_reset(page, screenshot_dir):
    page.goto("/login/")
    page.get_by_role("link", name="Forgot password?").click()
    expect(page.locator("h1")).to_have_text("Reset your password")
    page.fill("#id_email", "nobody@example.org")
    page.screenshot(path=str(screenshot_dir / "password-reset.png"))
    page.get_by_role("button", name="Send the link").click()
    expect(page.locator("h1")).to_have_text("Check your e-mail")
