"""A project's Members tab (admins): members and their roles, invitations by e-mail (pending ones can be
resent or revoked); and the page an invitation's link opens (anyone holding it)."""

from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import BaseUserCreationForm
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from smrweb.dashboard.access import project_for_user
from smrweb.outbound import mail
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, InvitationUnusable, TrackingError
from smrweb.tracking.models import Membership, ProjectInvitation, Role
from smrweb.tracking.services.invitations import account_for_email, check_usable


class MemberForm(forms.Form):
    username = forms.CharField(
        max_length=254,
        label="User name or e-mail",
        help_text="An existing account. Someone without one: invite their e-mail address instead.",
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.REVIEWER)


class InviteForm(forms.Form):
    email = forms.EmailField(max_length=254, label="E-mail address")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.REVIEWER)


class JoinForm(BaseUserCreationForm):
    """A new account for the invited address: a user name and a password (Django's validators)."""


def _members_url(project) -> str:
    return reverse("dashboard:project-members", args=[project.slug])


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_members(request, slug: str):
    """The Members tab; POST adds an existing account with a role, changes a role, or removes someone."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    if request.method == "GET":
        return _render(request, project)
    if request.POST.get("action") == "remove":
        member = (
            Membership.objects.filter(project=project, pk=request.POST.get("membership") or 0)
            .select_related("user")
            .first()
        )
        if member is None:
            messages.error(request, "That member is not in this project (any more).")
        else:
            try:
                services.remove_member(project, member.user, by=request.user)
            except TrackingError as exc:
                messages.error(request, exc.message)
            else:
                messages.success(
                    request, f"{member.user.get_username()} is no longer a member of {project.slug}."
                )
        return redirect(_members_url(project))
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            member = services.set_member(project, by=request.user, **form.cleaned_data)
        except InvalidInput as exc:
            if exc.field == "role" and request.POST.get("action") == "change":
                messages.error(request, exc.message)  # the last admin: said above the table
                return redirect(_members_url(project))
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"{member.user.get_username()} is now {member.role} of {project.slug}.")
            return redirect(_members_url(project))
    return _render(request, project, member_form=form, status=400)


@require_POST
@login_required
def invite_member(request, slug: str):
    """Invite an e-mail address with a role; the e-mail goes out at once."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    form = InviteForm(request.POST)
    if form.is_valid():
        try:
            invitation = services.invite_member(project, by=request.user, **form.cleaned_data)
        except InvalidInput as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            _sent(request, invitation, "Invitation sent")
            return redirect(_members_url(project))
    return _render(request, project, invite_form=form, status=400)


@require_POST
@login_required
def invitation_action(request, slug: str, invitation_id: int, action: str):
    """Resend (a new link and expiry; older links stop working) or revoke a pending invitation."""
    project = project_for_user(request, slug, role=Role.ADMIN)
    invitation = get_object_or_404(
        ProjectInvitation.objects.select_related("project"), project=project, pk=invitation_id
    )
    try:
        if action == "resend":
            _sent(request, services.resend_invitation(invitation, by=request.user), "Invitation sent again")
        else:
            services.revoke_invitation(invitation, by=request.user)
            messages.success(
                request, f"The invitation of {invitation.email} is revoked: its link no longer works."
            )
    except TrackingError as exc:
        messages.error(request, exc.message)
    return redirect(_members_url(project))


def _sent(request, invitation, what: str) -> None:
    error = mail.send_invitation(invitation)
    if error:
        messages.error(
            request,
            f"The invitation of {invitation.email} is saved, but its e-mail was not sent ({error}). "
            "Resend it once the mail server is reachable.",
        )
    else:
        until = f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC"
        messages.success(
            request, f"{what} to {invitation.email} ({invitation.role}); the link works until {until}."
        )


def _render(request, project, *, member_form=None, invite_form=None, status=200):
    invitations = project.invitations.filter(accepted_at=None, revoked_at=None).select_related("invited_by")
    return render(
        request,
        "dashboard/project_members.html",
        {
            "project": project,
            "members": project.memberships.select_related("user").order_by("user__username"),
            "invitations": invitations,
            "member_form": member_form or MemberForm(),
            "invite_form": invite_form or InviteForm(),
            "roles": Role.choices,
        },
        status=status,
    )


@require_http_methods(["GET", "POST"])
@never_cache
def invitation(request, token: str):
    """What an invitation's link opens: the project and role; joining with a new account (signed out) or
    accepting (signed in with the invited address). Unusable links get a page that says why (4xx)."""
    try:
        invite = services.invitation_for_token(token)
        if invite.accepted_by_id is not None and invite.accepted_by_id == request.user.pk:
            return redirect(invite.project.get_absolute_url())  # their own link, opened again
        check_usable(invite, request.user)
    except InvitationUnusable as exc:
        return render(request, "registration/invitation.html", {"refusal": exc}, status=exc.status)
    context = {"invitation": invite, "project": invite.project, "token": token}
    if request.user.is_authenticated:
        if request.method == "POST":
            try:
                services.accept_invitation(invite, request.user)
            except InvitationUnusable as exc:  # a second tab, or a revocation meanwhile
                return render(request, "registration/invitation.html", {"refusal": exc}, status=exc.status)
            return _joined(request, invite)
        return render(request, "registration/invitation.html", context)
    existing = account_for_email(invite.email)
    form = JoinForm(request.POST if request.method == "POST" and existing is None else None)
    form.instance.email = invite.email  # the password validators compare the password with it too
    status = 200
    if form.is_bound:
        if form.is_valid():
            try:
                membership = services.join_with_new_account(
                    invite, username=form.cleaned_data["username"], password=form.cleaned_data["password1"]
                )
            except InvitationUnusable as exc:
                return render(request, "registration/invitation.html", {"refusal": exc}, status=exc.status)
            except InvalidInput as exc:
                form.add_error("username" if exc.field == "username" else None, exc.message)
            else:
                login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
                return _joined(request, invite)
        status = 400
    elif request.method == "POST":
        status = 400  # an account with the address exists: it signs in instead
    sign_in = f"{reverse('login')}?{urlencode({'next': request.path})}"
    context.update(form=form, existing=existing is not None, sign_in=sign_in)
    return render(request, "registration/invitation.html", context, status=status)


def _joined(request, invite):
    project = invite.project
    role = project.role_of(request.user)
    messages.success(request, f"Welcome to {project.name}: you are {role} of {project.slug}.")
    return redirect(project.get_absolute_url())
