"""Single sign-on end to end in Chromium against a real OpenID Connect provider: django-oauth-toolkit in
its own process (tests/oidc_provider), with its own database, RSA key, sign-in form and consent page.

smrweb's sign-in page → "Sign in with Test IdP" → the provider's sign-in form → its consent page → back on
smrweb, signed in as a user created from the claims, on the page `next` named, with the project the
projects claim grants in the list; then signing out works and the next sign-in is the same user."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from smrweb.dashboard.models import SsoIdentity
from smrweb.tracking.models import AuditEvent, Membership, Role
from tests.factories import admin_project
from tests.oidc_provider import running_provider, sso_enabled

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PROVIDER_USERS = [
    {
        "username": "nora",
        "password": "provider-pw-nora",
        "email": "nora@lab.example",
        "claims": {"email_verified": True, "smrweb_groups": ["hill:reviewer", "missing-project:admin"]},
    }
]


@pytest.fixture(scope="module")
def provider(live_server):
    with running_provider([f"{live_server.url}/oidc/callback/"], PROVIDER_USERS) as running:
        yield running


@pytest.fixture
def sso(settings, provider):
    with sso_enabled(
        settings,
        provider.issuer,
        provider.client_id,
        provider.client_secret,
        SMRWEB_OIDC_BUTTON_LABEL="Test IdP",
        SMRWEB_OIDC_PROJECTS_CLAIM="smrweb_groups",
    ):
        yield provider


def sign_in_at_provider(page, *, consent: bool) -> None:
    expect(page).to_have_url(re.compile(r"^http://127\.0\.0\.1:\d+/accounts/login/"))
    page.fill("#op-username", "nora")
    page.fill("#op-password", "provider-pw-nora")
    page.click("#op-submit")
    if consent:
        expect(page.locator("h3")).to_have_text("Authorize smrweb?")
        page.click("input[name=allow]")


def test_sign_in_with_the_provider_creates_the_user_grants_the_claimed_project_and_signs_out(
    page, live_server, sso, alice, screenshot_dir
):
    project = admin_project("hill", name="Hill climb", by=alice)
    admin_project("lab-b", name="Not granted", by=alice)

    page.goto(f"/login/?next=/projects/{project.slug}/")
    button = page.get_by_role("link", name="Sign in with Test IdP")
    expect(button).to_be_visible()
    page.screenshot(path=screenshot_dir / "login-sso.png", full_page=True)
    button.click()

    sign_in_at_provider(page, consent=True)

    # Back on smrweb, signed in, on the page `next` named.
    expect(page).to_have_url(f"{live_server.url}/projects/hill/")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    user = get_user_model().objects.get(username="nora")
    assert (user.email, user.has_usable_password()) == ("nora@lab.example", False)
    identity = SsoIdentity.objects.get(user=user)
    assert identity.issuer == sso.issuer and identity.subject != ""
    assert dict(Membership.objects.filter(user=user).values_list("project__slug", "role")) == {
        "hill": Role.REVIEWER
    }
    assert AuditEvent.objects.filter(verb="member.set", project=project, detail__user="nora").count() == 1

    page.goto("/")
    expect(page.locator('#project-cards [data-project="hill"]')).to_be_visible()
    expect(page.locator('#project-cards [data-project="lab-b"]')).to_have_count(0)

    # A signed-in SSO user is like any other: a CSRF-protected POST (sign out) works.
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))

    # Signing in again: the provider remembers the person (its own session) and the consent is asked again;
    # smrweb finds the same user by the subject.
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page.locator("h3")).to_have_text("Authorize smrweb?")
    page.click("input[name=allow]")
    expect(page).to_have_url(f"{live_server.url}/")
    assert get_user_model().objects.filter(username__startswith="nora").count() == 1
    assert SsoIdentity.objects.count() == 1


def test_cancelling_at_the_provider_returns_to_the_sign_in_page_signed_out(page, live_server, sso):
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    sign_in_at_provider(page, consent=False)
    page.click("input[value=Cancel]")
    expect(page).to_have_url(f"{live_server.url}/login/")
    expect(page.locator("[data-flash=error]")).to_contain_text("Single sign-on did not sign you in")
    assert not get_user_model().objects.filter(username="nora").exists()
