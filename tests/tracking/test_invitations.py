"""Invitations (services/invitations.py): signed, expiring, single-use links bound to the invited address;
resend retires older links, revoke kills them, the invited role is applied (never a demotion), and every
step is audited."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, InvitationUnusable, NotAllowed
from smrweb.tracking.models import AuditEvent, Membership, ProjectInvitation, Role
from smrweb.tracking.services.invitations import check_usable
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()


def invite(project, alice, email="Dora@Example.org", role=Role.REVIEWER):
    return services.invite_member(project, email=email, role=role, by=alice)


def verbs(project) -> list[str]:
    return list(
        AuditEvent.objects.filter(project=project, verb__startswith="member.")
        .order_by("id")
        .values_list("verb", flat=True)
    )


def test_an_invitation_link_names_its_invitation_and_a_new_account_joins_with_the_invited_role(
    project, alice
):
    invitation = invite(project, alice)
    assert invitation.email == "dora@example.org" and invitation.state == "pending"
    token = services.invitation_token(invitation)
    assert services.invitation_for_token(token) == invitation

    membership = services.join_with_new_account(invitation, username="dora", password="a-long-pass-phrase-9")
    dora = User.objects.get(username="dora")
    assert membership.user == dora and membership.role == Role.REVIEWER and dora.email == "dora@example.org"
    assert dora.check_password("a-long-pass-phrase-9")
    invitation.refresh_from_db()
    assert invitation.state == "accepted" and invitation.accepted_by == dora
    joined = AuditEvent.objects.get(verb="member.joined")
    assert (
        joined.actor == dora
        and joined.detail["new_account"] is True
        and joined.detail["invited_by"] == "alice"
    )
    assert verbs(project)[-2:] == ["member.invited", "member.joined"]


def test_a_link_works_once(project, alice, carol):
    invitation = invite(project, alice, email="carol@example.com", role=Role.VIEWER)
    services.accept_invitation(invitation, carol)
    with pytest.raises(InvitationUnusable) as refused:
        services.accept_invitation(invitation, carol)
    assert refused.value.reason == "used" and refused.value.status == 410
    with pytest.raises(InvitationUnusable):
        services.join_with_new_account(invitation, username="someone", password="a-long-pass-phrase-9")
    assert not User.objects.filter(username="someone").exists()
    assert verbs(project).count("member.joined") == 1


def test_a_link_expires_after_the_configured_days_and_a_resend_renews_it(project, alice, carol, settings):
    settings.SMRWEB_INVITE_MAX_AGE_DAYS = 3
    invitation = invite(project, alice, email="carol@example.com")
    old_token = services.invitation_token(invitation)
    with time_machine.travel(timezone.now() + timedelta(days=3, seconds=-60)):
        check_usable(services.invitation_for_token(old_token), carol)  # still good a minute before
    with time_machine.travel(timezone.now() + timedelta(days=3, seconds=1)):
        with pytest.raises(InvitationUnusable) as refused:
            services.accept_invitation(services.invitation_for_token(old_token), carol)
        assert refused.value.reason == "expired" and refused.value.status == 410
        renewed = services.resend_invitation(invitation, by=alice)
        new_token = services.invitation_token(renewed)
        with pytest.raises(InvitationUnusable) as replaced:  # the resend retired the old link
            services.invitation_for_token(old_token)
        assert replaced.value.reason == "invalid" and replaced.value.status == 404
        services.accept_invitation(services.invitation_for_token(new_token), carol)
    assert Membership.objects.get(project=project, user=carol).role == Role.REVIEWER
    assert not Membership.objects.filter(project=project, user=carol).exclude(role=Role.REVIEWER).exists()


def test_the_link_is_bound_to_the_invited_address_case_insensitively(project, alice, carol):
    invitation = invite(project, alice, email="CAROL@example.COM")
    wrong = UserFactory(username="mallory", email="mallory@example.com")
    with pytest.raises(InvitationUnusable) as refused:
        services.accept_invitation(invitation, wrong)
    assert refused.value.reason == "wrong_email" and refused.value.status == 403
    assert "carol@example.com" in refused.value.message and "mallory" in refused.value.message
    assert not Membership.objects.filter(project=project, user=wrong).exists()
    carol.email = "Carol@Example.com"
    carol.save()
    assert services.accept_invitation(invitation, carol).role == Role.REVIEWER


def test_a_revoked_or_altered_link_does_nothing(project, alice, carol):
    invitation = invite(project, alice, email="carol@example.com")
    token = services.invitation_token(invitation)
    for bad in (
        token[:-2] + ("AA" if token[-2:] != "AA" else "BB"),
        f"{invitation.pk + 99}.{token.split('.', 1)[1]}",
        "x",
        "",
    ):
        with pytest.raises(InvitationUnusable) as refused:
            services.invitation_for_token(bad)
        assert refused.value.status == 404
    services.revoke_invitation(invitation, by=alice)
    with pytest.raises(InvitationUnusable) as refused:
        services.accept_invitation(services.invitation_for_token(token), carol)
    assert refused.value.reason == "revoked"
    with pytest.raises(InvalidInput):  # nothing open to revoke or resend any more
        services.revoke_invitation(invitation, by=alice)
    with pytest.raises(InvalidInput):
        services.resend_invitation(invitation, by=alice)
    assert not Membership.objects.filter(project=project, user=carol).exists()
    assert verbs(project)[-2:] == ["member.invited", "member.invite_revoked"]


def test_only_admins_invite_resend_and_revoke(project, alice, bob):
    with pytest.raises(NotAllowed):
        services.invite_member(project, email="x@example.com", role=Role.VIEWER, by=bob)
    invitation = invite(project, alice)
    for verb in (services.resend_invitation, services.revoke_invitation):
        with pytest.raises(NotAllowed):
            verb(invitation, by=bob)
    assert ProjectInvitation.objects.get().state == "pending"


def test_inviting_again_renews_the_open_invitation_and_members_are_not_invited(project, alice, bob):
    first = invite(project, alice, role=Role.VIEWER)
    token = services.invitation_token(first)
    again = invite(project, alice, email=" dora@EXAMPLE.org ", role=Role.ADMIN)
    assert again.pk == first.pk and again.role == Role.ADMIN and ProjectInvitation.objects.count() == 1
    with pytest.raises(InvitationUnusable):
        services.invitation_for_token(token)
    with pytest.raises(InvalidInput) as member:
        services.invite_member(project, email="BOB@example.com", role=Role.ADMIN, by=alice)
    assert member.value.field == "email" and "already reviewer" in member.value.message
    with pytest.raises(InvalidInput) as bad:
        services.invite_member(project, email="not an address", role=Role.VIEWER, by=alice)
    assert bad.value.field == "email"
    with pytest.raises(InvalidInput):
        services.invite_member(project, email="e@example.com", role="owner", by=alice)


def test_an_invitation_never_demotes_a_member(project, alice, bob):
    invitation = invite(project, alice, email="bob-new@example.com", role=Role.VIEWER)
    bob.email = "bob-new@example.com"  # a member who took the invited address after the invitation
    bob.save()
    assert services.accept_invitation(invitation, bob).role == Role.REVIEWER
    assert AuditEvent.objects.get(verb="member.joined").detail["was"] == Role.REVIEWER


def test_a_new_account_is_refused_when_the_address_or_the_name_is_taken(project, alice, carol):
    invitation = invite(project, alice, email="carol@example.com")
    with pytest.raises(InvalidInput) as exists:
        services.join_with_new_account(invitation, username="carol2", password="a-long-pass-phrase-9")
    assert "sign in" in exists.value.message
    other = invite(project, alice, email="new@example.com")
    with pytest.raises(InvalidInput) as taken:
        services.join_with_new_account(other, username="CAROL", password="a-long-pass-phrase-9")
    assert taken.value.field == "username"
    assert not User.objects.filter(email="new@example.com").exists()
    assert ProjectInvitation.objects.get(pk=other.pk).state == "pending"


@pytest.mark.django_db(transaction=True)
def test_two_people_racing_on_one_link_make_one_account_and_one_membership(project, alice):
    invitation = invite(project, alice, email="race@example.org")
    barrier = threading.Barrier(4)
    outcomes: list = []

    def join(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(
                services.join_with_new_account(invitation, username=name, password="a-long-pass-9x")
            )
        except (InvitationUnusable, InvalidInput) as exc:
            outcomes.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=join, args=(f"racer{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    joined = [o for o in outcomes if isinstance(o, Membership)]
    assert len(outcomes) == 4 and len(joined) == 1, outcomes
    assert User.objects.filter(email="race@example.org").count() == 1
    assert Membership.objects.filter(project=project, user__email="race@example.org").count() == 1
    assert AuditEvent.objects.filter(verb="member.joined").count() == 1
