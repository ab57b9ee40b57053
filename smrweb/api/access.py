"""What a request may reach through the API: the one place a token or a session is resolved to the
projects, runs, scenarios and submissions it may act on. A project token reaches its own project and
nothing else; a session reaches what the user's memberships (and staff rights) allow. Refusals are
403 (seen but not allowed) or 404 (not visible), as DRF exceptions the error handler renders."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from rest_framework.exceptions import PermissionDenied

from smrweb.tracking.models import AlertRule, ApiToken, Project, Role, Run, Scenario, Submission


def actor_of(request):
    """Who the audit trail names: the token for token requests, else the user."""
    return request.auth if isinstance(request.auth, ApiToken) else request.user


def visible_projects(request) -> QuerySet[Project]:
    """The projects this request may list: a token's own, else those the user can see."""
    if isinstance(request.auth, ApiToken):
        return Project.objects.filter(pk=request.auth.project_id)
    return Project.objects.visible_to(request.user)


def project_for(request, slug: str, *, role: str = Role.VIEWER) -> Project:
    """The project named in the URL, if this request may act on it with `role`; 403/404 otherwise."""
    token = request.auth if isinstance(request.auth, ApiToken) else None
    if token is not None:
        # A project's token may do everything the API offers within that project, nothing outside it.
        if token.project.slug != slug:
            raise PermissionDenied(f"This token is scoped to project {token.project.slug!r}, not {slug!r}.")
        return token.project  # loaded with its scenario by the authentication, this request
    project = get_object_or_404(
        Project.objects.select_related("scenario").visible_to(request.user), slug=slug
    )
    if not project.allows(request.user, role):
        raise PermissionDenied(f"This needs the {role} role in project {slug!r}.")
    return project


def project_for_person(request, slug: str, *, role: str, doing: str) -> Project:
    """The project named in the URL, for an action that is a person's, not a harness's (alert rules:
    they send the project's news to addresses outside it). A project token has no role: 403, after the
    usual checks (a token of another project hears that first); a session needs `role`."""
    project = project_for(request, slug)
    if isinstance(request.auth, ApiToken):
        raise PermissionDenied(
            f"Project tokens cannot {doing}: sign in as a user with the {role} role in {slug!r}."
        )
    if not project.allows(request.user, role):
        raise PermissionDenied(f"This needs the {role} role in project {slug!r}.")
    return project


def is_admin(request, project: Project) -> bool:
    """Whether the request is a person with the admin role in the project (a token never is)."""
    return not isinstance(request.auth, ApiToken) and project.allows(request.user, Role.ADMIN)


def alert_rule_for(project: Project, rule_id: int) -> AlertRule:
    """An alert rule of an already-checked project; 404 otherwise."""
    return get_object_or_404(
        AlertRule.objects.select_related("project", "recipient", "created_by"), project=project, pk=rule_id
    )


def run_for(project: Project, run_id: str) -> Run:
    """The run of an already-checked project, by its external id; 404 otherwise."""
    return get_object_or_404(
        Run.objects.select_related("project__scenario"), project=project, external_id=run_id
    )


def scenario_for(request, key: str) -> Scenario:
    """The scenario, if this caller may see it (a token: its project's; 404 otherwise, as for projects)."""
    return get_object_or_404(Scenario.objects.visible_to(actor_of(request)), key=key)


def submission_for(request, slug: str, submission_id: int) -> Submission:
    """A submission of the project named in the URL, if this request may see that project; 403/404
    otherwise."""
    project = project_for(request, slug)
    return get_object_or_404(
        Submission.objects.select_related("project__scenario", "run", "proposed_by"),
        project=project,
        pk=submission_id,
    )
