"""Access checks for pages and partials (the first line of every dashboard view), and fragment choice."""

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404

from smrweb.tracking.models import Project, Role, Run


def project_for_user(request, slug: str, *, role: str = Role.VIEWER) -> Project:
    """The project if the user may act on it with `role`: 404 for outsiders, 403 for too low a role."""
    project = get_object_or_404(Project.objects.select_related("scenario").visible_to(request.user), slug=slug)
    if not project.allows(request.user, role):
        raise PermissionDenied(f"This needs the {role} role in {project.slug}.")
    return project


def run_for_user(request, slug: str, run_id: str, *, role: str = Role.VIEWER) -> Run:
    project = project_for_user(request, slug, role=role)
    return get_object_or_404(Run.objects.select_related("project__scenario"), project=project, external_id=run_id)


def fragment_template(request, template: str, fragment: str) -> str:
    """One URL, one view: htmx polls get the named partial, everything else the full page."""
    if request.htmx and not request.htmx.history_restore_request:
        return f"{template}#{fragment}"
    return template
