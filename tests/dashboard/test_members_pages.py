"""The Members tab and the invitation page, end to end: invitations go out through a real SMTP server
(aiosmtpd, the suite's mail catcher) and the link in the received mail is followed to a membership — with
a new account (signed out) or by accepting (signed in). Expired, used, revoked, altered and wrong-address
links get a page that says so (4xx); the last admin cannot be demoted or removed from the page."""

from __future__ import annotations

import re
from datetime import timedelta
from email import message_from_string

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from smrweb.tracking.models import AuditEvent, Membership, ProjectInvitation, Role
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()
MEMBERS = "/projects/hill/members/"


def received(smtp, count: int) -> list:
    """The messages the SMTP server received, parsed (each has .to, .subject, .text and .link)."""
    out = []
    for raw in smtp.wait_for(count, timeout=10)[:count]:
        msg = message_from_string(raw["data"])
        text = msg.get_payload(decode=True).decode(msg.get_content_charset() or "utf-8")
        links = re.findall(r"https://smrweb\.example(/\S+)", text)
        out.append(
            {"to": raw["to"], "subject": msg["Subject"], "text": text, "link": links[0] if links else None}
        )
    assert len(out) == count, f"{len(smtp.messages)} messages arrived, expected {count}"
    return out


def invite(client_alice, email="dora@example.org", role="reviewer"):
    response = client_alice.post("/projects/hill/invitations/", {"email": email, "role": role}, follow=True)
    assert response.status_code == 200, response.content.decode()[-500:]
    return response.content.decode()


def test_an_invitee_without_an_account_follows_the_mailed_link_makes_one_and_sees_the_project(
    client_alice, project, smtp
):
    page = invite(client_alice, email="Dora@Example.org", role="reviewer")
    assert (
        "Invitation sent to dora@example.org (reviewer)" in page
        and 'data-invitation="dora@example.org"' in page
    )
    [mail] = received(smtp, 1)
    assert mail["to"] == ["dora@example.org"] and "alice invites you to Hill climb (hill)" in mail["subject"]
    assert "as reviewer" in mail["text"] and mail["link"].startswith("/invite/")

    dora = Client()
    shown = dora.get(mail["link"]).content.decode()
    assert "Join Hill climb" in shown and "data-role>reviewer" in shown and "dora@example.org" in shown
    assert f"/login/?next={mail['link'].replace('/', '%2F')}" in shown  # SSO or password: sign in, come back
    weak = dora.post(mail["link"], {"username": "dora", "password1": "123", "password2": "123"})
    assert weak.status_code == 400 and "too short" in weak.content.decode()
    assert not User.objects.filter(username="dora").exists()

    password = "correct-horse-battery-9"
    joined = dora.post(mail["link"], {"username": "dora", "password1": password, "password2": password})
    assert joined.status_code == 302 and joined["Location"] == "/projects/hill/"
    project_page = dora.get("/projects/hill/").content.decode()
    assert "Hill climb" in project_page and "Welcome to Hill climb: you are reviewer of hill" in project_page
    user = User.objects.get(username="dora")
    assert (
        user.email == "dora@example.org"
        and Membership.objects.get(project=project, user=user).role == "reviewer"
    )
    assert Client().login(username="dora", password=password)

    again = Client().get(mail["link"])
    assert again.status_code == 410 and "already accepted" in again.content.decode()
    assert 'data-invitation="dora@example.org"' not in client_alice.get(MEMBERS).content.decode()


def test_a_signed_in_invitee_accepts_and_someone_else_is_refused(client, client_alice, project, carol, smtp):
    invite(client_alice, email="CAROL@example.com", role="viewer")
    [mail] = received(smtp, 1)
    mallory = UserFactory(username="mallory")
    client.force_login(mallory)
    refused = client.get(mail["link"])
    assert refused.status_code == 403
    body = refused.content.decode()
    assert "This invitation is for someone else" in body and "carol@example.com" in body
    assert client.post(mail["link"]).status_code == 403
    assert not Membership.objects.filter(project=project, user=mallory).exists()

    client.force_login(carol)
    shown = client.get(mail["link"]).content.decode()
    assert "Accept and join hill" in shown and "signed in as <b>carol</b>" in shown
    response = client.post(mail["link"])
    assert (
        response.status_code == 302 and Membership.objects.get(project=project, user=carol).role == "viewer"
    )
    joined = AuditEvent.objects.get(verb="member.joined")
    assert joined.actor == carol and joined.detail["new_account"] is False


def test_an_invitee_whose_address_has_an_account_is_sent_to_sign_in(client_alice, project, carol, smtp):
    invite(client_alice, email="carol@example.com")
    [mail] = received(smtp, 1)
    anon = Client()
    page = anon.get(mail["link"]).content.decode()
    assert "Sign in to accept" in page and 'name="password1"' not in page
    response = anon.post(
        mail["link"], {"username": "carol2", "password1": "x-long-pass-9", "password2": "x-long-pass-9"}
    )
    assert response.status_code == 400 and not User.objects.filter(username="carol2").exists()


def test_expired_revoked_and_altered_links_get_a_page_that_says_so(
    client_alice, alice, project, smtp, settings
):
    settings.SMRWEB_INVITE_MAX_AGE_DAYS = 2
    invite(client_alice, email="erin@example.org")
    invite(client_alice, email="fay@example.org")
    erin, fay = received(smtp, 2)
    with time_machine.travel(timezone.now() + timedelta(days=2, minutes=1)):
        expired = Client().get(erin["link"])
        assert expired.status_code == 410 and "This invitation expired" in expired.content.decode()
        client_alice.force_login(alice)  # two days idle ended the session
        assert 'class="badge badge-warn"' in client_alice.get(MEMBERS).content.decode()
    fay_invitation = ProjectInvitation.objects.get(email="fay@example.org")
    response = client_alice.post(f"/projects/hill/invitations/{fay_invitation.pk}/revoke", follow=True)
    assert "is revoked" in response.content.decode()
    revoked = Client().get(fay["link"])
    assert revoked.status_code == 410 and "withdrawn" in revoked.content.decode()
    altered = Client().get(erin["link"][:-3] + "Zz/")
    assert altered.status_code == 404 and "not valid" in altered.content.decode()
    assert list(
        AuditEvent.objects.filter(verb="member.invite_revoked").values_list("detail__email", flat=True)
    ) == ["fay@example.org"]


def test_resend_mails_a_new_link_and_the_old_one_stops_working(client_alice, project, smtp):
    invite(client_alice, email="gus@example.org", role="admin")
    invitation = ProjectInvitation.objects.get()
    response = client_alice.post(f"/projects/hill/invitations/{invitation.pk}/resend", follow=True)
    assert "Invitation sent again to gus@example.org (admin)" in response.content.decode()
    first, second = received(smtp, 2)
    assert first["link"] != second["link"]
    assert Client().get(first["link"]).status_code == 404
    assert Client().get(second["link"]).status_code == 200
    assert AuditEvent.objects.filter(verb="member.invite_resent").count() == 1


def test_a_mail_server_that_is_down_is_said_and_the_invitation_kept(client_alice, project, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2  # nothing listens
    page = invite(client_alice, email="hal@example.org")
    assert "is saved, but its e-mail was not sent" in page and "not sent" in page
    invitation = ProjectInvitation.objects.get()
    assert invitation.sent_at is None and "ConnectionRefusedError" in invitation.send_error


def test_invite_form_errors_come_back_on_the_page(client_alice, project):
    response = client_alice.post("/projects/hill/invitations/", {"email": "bob@example.com", "role": "admin"})
    assert (
        response.status_code == 400
        and "bob (bob@example.com) is already reviewer" in response.content.decode()
    )
    response = client_alice.post("/projects/hill/invitations/", {"email": "nope", "role": "admin"})
    assert response.status_code == 400 and "Enter a valid email address" in response.content.decode()
    assert not ProjectInvitation.objects.exists()


def test_only_admins_reach_the_members_tab_and_its_actions(client, project, bob, victor, carol, alice):
    invitation = ProjectInvitation.objects.create(
        project=project, email="x@example.org", role="viewer", invited_by=alice
    )
    for user, status in [(carol, 404), (victor, 403), (bob, 403)]:
        client.force_login(user)
        assert client.get(MEMBERS).status_code == status
        assert (
            client.post(
                "/projects/hill/invitations/", {"email": "y@example.org", "role": "admin"}
            ).status_code
            == status
        )
        assert client.post(f"/projects/hill/invitations/{invitation.pk}/revoke").status_code == status
    assert ProjectInvitation.objects.get().state == "pending" and ProjectInvitation.objects.count() == 1


# --- members (walkthrough P1-14: adding a teammate needed raw Django admin) ------------------------------


def test_an_admin_adds_changes_and_removes_members_and_the_project_keeps_an_admin(
    client_alice, project, alice, carol
):
    page = client_alice.get(MEMBERS).content.decode()
    assert 'id="members"' in page and 'data-member="bob"' in page and 'data-member="victor"' in page
    assert 'aria-current="page">Members' in page
    response = client_alice.post(MEMBERS, {"username": "carol", "role": "reviewer"})
    assert response.status_code == 302 and response["Location"] == MEMBERS
    assert Membership.objects.get(project=project, user=carol).role == "reviewer"
    client_alice.post(MEMBERS, {"action": "change", "username": "carol", "role": "viewer"})
    assert Membership.objects.get(project=project, user=carol).role == "viewer"
    response = client_alice.post(MEMBERS, {"username": "nobody-here", "role": "viewer"})
    assert response.status_code == 400 and "No active account is called" in response.content.decode()
    membership = Membership.objects.get(project=project, user=carol)
    client_alice.post(MEMBERS, {"action": "remove", "membership": membership.pk})
    assert not Membership.objects.filter(project=project, user=carol).exists()
    assert list(
        AuditEvent.objects.filter(verb__startswith="member.", detail__user="carol")
        .values_list("verb", flat=True)
        .order_by("id")
    ) == ["member.set", "member.set", "member.removed"]


def test_the_last_admin_can_be_neither_demoted_nor_removed_from_the_page(client_alice, project, alice, bob):
    own = Membership.objects.get(project=project, user=alice)
    demote = client_alice.post(
        MEMBERS, {"action": "change", "username": "alice", "role": "viewer"}, follow=True
    )
    assert "alice is the only admin of hill" in demote.content.decode()
    remove = client_alice.post(MEMBERS, {"action": "remove", "membership": own.pk}, follow=True)
    assert "alice is the only admin of hill" in remove.content.decode()
    assert Membership.objects.get(pk=own.pk).role == Role.ADMIN
    # With a second admin, the first may step down.
    client_alice.post(MEMBERS, {"action": "change", "username": "bob", "role": "admin"})
    client_alice.post(MEMBERS, {"action": "change", "username": "alice", "role": "viewer"})
    assert Membership.objects.get(pk=own.pk).role == Role.VIEWER
    assert client_alice.get(MEMBERS).status_code == 403  # no longer an admin
