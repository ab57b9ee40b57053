"""Access checks for pages and partials (the first line of every dashboard view), and fragment choice."""

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404

from smrweb.tracking.models import Project, Role, Run


def project_for_user(request, slug: str, *, role: str = Role.VIEWER) -> Project:
    """The project if the user may act on it with `role`: 404 for outsiders, 403 for too low a role."""
    project = get_object_or_404(
        Project.objects.select_related("scenario").visible_to(request.user), slug=slug
    )
    have = role_of(request, project)
    if have is None or Role.rank(have) < Role.rank(role):
        raise PermissionDenied(f"This needs the {role} role in {project.slug}.")
    return project


def role_of(request, project: Project) -> str | None:
    """The signed-in user's role in `project`, read once per request (the access check and the page's
    permissions ask for it: a live poll read it twice)."""
    roles = request.__dict__.setdefault("_smrweb_roles", {})
    if project.pk not in roles:
        roles[project.pk] = project.role_of(request.user)
    return roles[project.pk]


def run_for_user(request, slug: str, run_id: str, *, role: str = Role.VIEWER) -> Run:
    project = project_for_user(request, slug, role=role)
    return get_object_or_404(
        Run.objects.select_related("project__scenario"), project=project, external_id=run_id
    )


def fragment_template(request, template: str, fragment: str) -> str:
    """One URL, one view: htmx polls get the named partial, everything else the full page."""
    if request.htmx and not request.htmx.history_restore_request:
        return f"{template}#{fragment}"
    return template


UNVERIFIED_SESSION_KEY = "smrweb.include_unverified"


def include_unverified(request) -> bool:
    """Whether the project's numbers on the pages this person sees include submissions that have not
    passed verification yet: `?unverified=1` / `?unverified=0` sets it, remembered for the session."""
    asked = request.GET.get("unverified")
    if asked in ("0", "1"):
        request.session[UNVERIFIED_SESSION_KEY] = asked == "1"
    return bool(request.session.get(UNVERIFIED_SESSION_KEY, False))
