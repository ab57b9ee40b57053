"""Invitations: an admin invites an e-mail address with a role; the link mailed there (signed, expiring,
single-use, bound to the address) lets its holder join — with a new account made for that address, or
signed in to an account that has it. Sending the e-mail is the sources' (outbound/mail.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone

from smrweb.tracking.errors import InvalidInput, InvitationUnusable, NotAllowed
from smrweb.tracking.models import AuditVerb, Membership, Project, ProjectInvitation, Role
from smrweb.tracking.models.invitation import new_nonce
from smrweb.tracking.services.audit import record_audit

SALT = "smrweb.invitation"

NOT_VALID = (
    "This invitation link is not valid: it was altered, or a newer invitation e-mail replaced it. "
    "Use the link in the latest e-mail, or ask the project's admin to send it again."
)


def normalize_email(email: str) -> str:
    address = (email or "").strip().lower()
    try:
        validate_email(address)
    except ValidationError:
        raise InvalidInput("email", "Enter a valid e-mail address.") from None
    return address


def _signer(invitation: ProjectInvitation) -> signing.Signer:
    # The address and the nonce are in the salt: the link names one address, and a resend retires it.
    return signing.Signer(salt=f"{SALT}:{invitation.email}:{invitation.nonce}", sep=".")


def invitation_token(invitation: ProjectInvitation) -> str:
    """The secret part of the invitation's link: `<id>.<signature>`."""
    return _signer(invitation).sign(str(invitation.pk))


def invitation_for_token(token: str) -> ProjectInvitation:
    """The invitation a link names, whatever its state; InvitationUnusable (404) for anything this server
    did not sign for the invitation as it is now."""
    head, _, _ = (token or "").partition(".")
    invitation = (
        ProjectInvitation.objects.select_related("project", "invited_by").filter(pk=int(head)).first()
        if head.isascii() and head.isdigit() and len(head) < 19
        else None
    )
    if invitation is None:
        raise InvitationUnusable("invalid", NOT_VALID, status=404)
    try:
        _signer(invitation).unsign(token)
    except signing.BadSignature:
        raise InvitationUnusable("invalid", NOT_VALID, status=404) from None
    return invitation


def check_usable(invitation: ProjectInvitation, user: Any = None) -> None:
    """Refuse an invitation that is used, revoked or expired (410), or — when `user` is signed in — one
    for another address (403)."""
    slug = invitation.project.slug
    if invitation.accepted_at is not None:
        raise InvitationUnusable(
            "used", f"This invitation to {slug} was already accepted; a link works once."
        )
    if invitation.revoked_at is not None:
        raise InvitationUnusable(
            "revoked", f"This invitation to {slug} was withdrawn by the project's admin."
        )
    if invitation.is_expired:
        raise InvitationUnusable(
            "expired",
            f"This invitation to {slug} expired on {invitation.expires_at:%Y-%m-%d %H:%M} UTC: "
            "ask the project's admin to send it again.",
        )
    if user is not None and getattr(user, "is_authenticated", False):
        if (user.email or "").strip().lower() != invitation.email:
            raise InvitationUnusable(
                "wrong_email",
                f"This invitation is for {invitation.email}, but you are signed in as {user.get_username()}"
                f"{f' ({user.email})' if user.email else ' (no e-mail address)'}. Sign out and open the "
                "link again, or ask the admin to invite the address of this account.",
                status=403,
            )


def _must_admin(project: Project, by: Any) -> None:
    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Inviting members needs the admin role in {project.slug}.")


def invite_member(project: Project, *, email: str, role: str, by: Any) -> ProjectInvitation:
    """Invite an address with a role (admins). Inviting an address that has an open invitation renews
    it (new role, new link, new expiry); an address whose account is already a member is refused."""
    _must_admin(project, by)
    if role not in Role.values:
        raise InvalidInput("role", f"Choose one of {', '.join(Role.values)}.")
    address = normalize_email(email)
    member = (
        Membership.objects.filter(project=project, user__email__iexact=address).select_related("user").first()
    )
    if member is not None:
        raise InvalidInput(
            "email",
            f"{member.user.get_username()} ({address}) is already {member.role} of {project.slug}: "
            "change the role in the table above.",
        )
    with transaction.atomic():
        invitation = (
            ProjectInvitation.objects.select_for_update()
            .filter(project=project, email=address, accepted_at=None, revoked_at=None)
            .first()
        )
        renewed = invitation is not None
        if invitation is None:
            invitation = ProjectInvitation(project=project, email=address)
        invitation.role, invitation.invited_by = role, by
        _renew(invitation)
        invitation.save()
        record_audit(
            by,
            AuditVerb.MEMBER_INVITED,
            invitation,
            project=project,
            email=address,
            role=role,
            renewed=renewed,
        )
    return invitation


def _renew(invitation: ProjectInvitation) -> None:
    invitation.nonce, invitation.renewed_at = new_nonce(), timezone.now()
    invitation.sent_at, invitation.send_error = None, ""


def _open_for_admin(invitation: ProjectInvitation, by: Any, what: str) -> ProjectInvitation:
    _must_admin(invitation.project, by)
    locked = ProjectInvitation.objects.select_for_update().get(pk=invitation.pk)
    if not locked.is_open:
        raise InvalidInput(
            "invitation", f"The invitation of {locked.email} is {locked.state}: nothing to {what}."
        )
    return locked


def resend_invitation(invitation: ProjectInvitation, *, by: Any) -> ProjectInvitation:
    """A new link and a new expiry for an open invitation (the older links stop working); the caller
    sends it."""
    with transaction.atomic():
        locked = _open_for_admin(invitation, by, "resend")
        _renew(locked)
        locked.save(update_fields=["nonce", "renewed_at", "sent_at", "send_error"])
        record_audit(
            by,
            AuditVerb.MEMBER_INVITE_RESENT,
            locked,
            project=locked.project,
            email=locked.email,
            role=locked.role,
        )
    return locked


def revoke_invitation(invitation: ProjectInvitation, *, by: Any) -> ProjectInvitation:
    """Withdraw an open invitation: its link stops working."""
    with transaction.atomic():
        locked = _open_for_admin(invitation, by, "revoke")
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
        record_audit(
            by,
            AuditVerb.MEMBER_INVITE_REVOKED,
            locked,
            project=locked.project,
            email=locked.email,
            role=locked.role,
        )
    return locked


def record_invitation_sent(invitation: ProjectInvitation, *, error: str = "") -> None:
    """What the mail server said to the latest e-mail of this invitation (shown on the Members tab)."""
    ProjectInvitation.objects.filter(pk=invitation.pk, nonce=invitation.nonce).update(
        sent_at=None if error else timezone.now(), send_error=error[:500]
    )


def accept_invitation(invitation: ProjectInvitation, user: Any) -> Membership:
    """`user` (signed in, with the invited address) joins with the invited role — or keeps the role they
    have if it is higher: an invitation never demotes. Once only."""
    with transaction.atomic():
        locked = ProjectInvitation.objects.select_for_update().select_related("project").get(pk=invitation.pk)
        check_usable(locked, user)
        return _join(locked, user, new_account=False)


def _join(invitation: ProjectInvitation, user: Any, *, new_account: bool) -> Membership:
    project = invitation.project
    membership = Membership.objects.select_for_update().filter(project=project, user=user).first()
    before = membership.role if membership else None
    if membership is None:
        membership = Membership.objects.create(project=project, user=user, role=invitation.role)
    elif Role.rank(invitation.role) > Role.rank(membership.role):
        membership.role = invitation.role
        membership.save(update_fields=["role"])
    invitation.accepted_at, invitation.accepted_by = timezone.now(), user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    record_audit(
        user,
        AuditVerb.MEMBER_JOINED,
        membership,
        project=project,
        user=user.get_username(),
        role=membership.role,
        invitation=invitation.pk,
        invited_by=invitation.invited_by.get_username() if invitation.invited_by else None,
        was=before,
        new_account=new_account,
    )
    return membership


def account_for_email(email: str) -> Any:
    """The active account that has this address, if any (an invitee with one signs in instead)."""
    return get_user_model().objects.filter(is_active=True, email__iexact=email).order_by("pk").first()


def join_with_new_account(invitation: ProjectInvitation, *, username: str, password: str) -> Membership:
    """Make an account for the invited address (the caller validated the password) and join with it."""
    with transaction.atomic():
        locked = ProjectInvitation.objects.select_for_update().select_related("project").get(pk=invitation.pk)
        check_usable(locked)
        if account_for_email(locked.email) is not None:
            raise InvalidInput(
                "username", f"An account with {locked.email} exists already: sign in to accept."
            )
        users = get_user_model().objects
        if users.filter(username__iexact=username).exists():
            raise InvalidInput("username", "That user name is taken: choose another.")
        try:
            with transaction.atomic():
                user = users.create_user(username=username, email=locked.email, password=password)
        except IntegrityError:
            raise InvalidInput("username", "That user name is taken: choose another.") from None
        return _join(locked, user, new_account=True)
