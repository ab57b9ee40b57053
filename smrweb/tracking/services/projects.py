"""Scenarios and projects: creation (with the source binding checks) and settings."""

from __future__ import annotations

import os.path
import re
from typing import Any

from django.db import transaction

from smrweb.tracking import signals
from smrweb.tracking.errors import (
    InvalidInput,
    NotAllowed,
)
from smrweb.tracking.models import (
    AuditVerb,
    Membership,
    Project,
    ProjectFigures,
    Role,
    Scenario,
    SourceKind,
)
from smrweb.tracking.services.alerts.spend_rule import SPEND_GUARD_SETTINGS, check_spend_guard_settings
from smrweb.tracking.services.audit import _only, record_audit

SLUG_RE = re.compile(r"^[-a-zA-Z0-9_]+\Z")  # what the <slug:…> URL converter routes


def generic_scenario() -> Scenario:
    """The built-in scenario for projects created without one: maximize `score`."""
    scenario, _ = Scenario.objects.get_or_create(
        key=Scenario.GENERIC_KEY,
        defaults={"name": "Generic (maximize score)", "score_metric": "score", "direction": "maximize"},
    )
    return scenario


def create_scenario(*, by: Any = None, **fields: Any) -> Scenario:
    """Create a scenario preset from validated fields."""
    with transaction.atomic():
        scenario = Scenario.objects.create(**fields)
        record_audit(by, AuditVerb.SCENARIO_CREATED, scenario, key=scenario.key)
    return scenario


def may_create_projects(user: Any) -> bool:
    """Creating a project is for staff and users given `tracking.add_project`, not for everyone signed in."""
    return bool(
        getattr(user, "is_staff", False) or getattr(user, "has_perm", lambda _: False)("tracking.add_project")
    )


def may_bind_sources(user: Any) -> bool:
    """Binding a project to an SMR project, an SMR backend or a repository: staff, or
    `tracking.bind_source`."""
    return bool(
        getattr(user, "is_staff", False) or getattr(user, "has_perm", lambda _: False)("tracking.bind_source")
    )


def create_project(
    slug: str,
    *,
    name: str = "",
    scenario: Scenario | None = None,
    source: str = SourceKind.PUSH,
    smr_project_id: str = "",
    smr_backend_base: str = "",
    smr_api_key: str = "",
    git_repo_path: str = "",
    git_branch: str = "",
    allow_shared_smr_project: bool = False,
    by: Any = None,
    check_binding: Any = None,
    pin_repository: Any = None,
) -> Project:
    """Create a project; the creating user (if any) becomes its admin.

    `by=None` is the operator (a management command). `check_binding`, when given, asks the SMR backend
    whether the key may read the project before anything is written (it raises InvalidInput). A user needs
    `may_create_projects`, and to bind a
    source `may_bind_sources`; a user's SMR project brings its own key (the operator's is never lent to it,
    red-team finding 1), may only use scenarios it may attach, and an SMR project id already bound to
    another smrweb project is refused unless the operator or staff allow a second binding.
    `pin_repository`, when given, checks a git project's repository (git/ownership.py pin_for_binding: it
    raises InvalidInput for one that would lead git into another repository) and returns what to pin, or
    None when there is no repository there yet (the first sync that passes pins it)."""
    operator = by is None or getattr(by, "is_staff", False)
    if by is not None and not may_create_projects(by):
        raise NotAllowed("Creating projects is for staff and users given the permission to add projects.")
    binds = source != SourceKind.PUSH or bool(
        smr_project_id or smr_backend_base or smr_api_key or git_repo_path
    )
    if by is not None and binds and not may_bind_sources(by):
        raise NotAllowed(
            "Binding a project to an SMR project, a backend or a repository is for staff and users "
            "given the permission to bind sources."
        )
    if (
        scenario is not None
        and by is not None
        and not Scenario.objects.attachable_by(by).filter(pk=scenario.pk).exists()
    ):
        raise InvalidInput(
            "scenario", f"Object with key={scenario.key} does not exist."
        )  # as for an unknown key
    if not slug or len(slug) > 100 or not SLUG_RE.match(slug):
        raise InvalidInput("slug", "A slug is 1 to 100 letters, digits, hyphens or underscores.")
    if source != SourceKind.SMR and (smr_project_id or smr_backend_base or smr_api_key):
        raise InvalidInput(
            "smr_project_id", "An SMR project id, backend and key are for projects whose source is smr."
        )
    if source == SourceKind.SMR:
        if not smr_project_id:
            raise InvalidInput("smr_project_id", "A project whose source is smr needs the SMR project id.")
        if not operator and not smr_api_key:
            raise InvalidInput(
                "smr_api_key",
                "A project you bind to SMR needs its own SMR API key; the "
                "operator's key is not lent to user-created projects.",
            )
        if smr_backend_base:
            if not smr_api_key:  # the operator's key goes to the operator's backend only (finding 5)
                raise InvalidInput(
                    "smr_api_key", "A project with a backend address of its own needs an API key of its own."
                )
            check_outbound_url("smr_backend_base", smr_backend_base)
        bound = Project.objects.filter(source=SourceKind.SMR, source_settings__smr_project_id=smr_project_id)
        if bound.exists() and not (allow_shared_smr_project and operator):
            raise InvalidInput(
                "smr_project_id",
                f"SMR project {smr_project_id!r} is already bound to smrweb project "
                f"{bound.first().slug!r}; only staff can allow a second binding.",
            )
    if source == SourceKind.GIT:
        _check_git_settings(git_repo_path, git_branch)
    elif git_repo_path or git_branch:
        raise InvalidInput(
            "git_repo_path", "A repository path and branch are for projects whose source is git."
        )
    if Project.objects.filter(slug=slug).exists():
        raise InvalidInput("slug", f"A project with slug {slug!r} already exists.")
    if source == SourceKind.SMR and check_binding is not None:
        # The backend itself confirms the id and key (sources.smr.check_binding), after every check above
        # (so no one unauthorised can make smrweb probe a backend) and before anything is written.
        check_binding(
            smr_project_id=smr_project_id,
            api_key=smr_api_key,
            backend_base=smr_backend_base,
            operator=operator,
        )
    source_settings: dict[str, Any] = {"smr_project_id": smr_project_id} if smr_project_id else {}
    if source == SourceKind.GIT and pin_repository is not None:
        if pin := pin_repository(git_repo_path):  # after every check above, before anything is written
            source_settings[GIT_PIN] = pin
    if smr_backend_base:
        source_settings["backend_base"] = smr_backend_base
    if smr_api_key:
        from smrweb.core.secrets import seal

        source_settings["api_key_sealed"] = seal(smr_api_key)  # never stored or shown in clear
    elif source == SourceKind.SMR:
        source_settings["operator_key"] = True  # only reachable by the operator or staff (checked above)
    if source == SourceKind.SMR and scenario is None:
        source_settings["score_metric"] = "auto"  # score what the SMR experiments declare (sources/sync.py)
    with transaction.atomic():
        project = Project.objects.create(
            slug=slug,
            name=name or slug,
            scenario=scenario or generic_scenario(),
            source=source,
            source_settings=source_settings,
            git_repo_path=git_repo_path,
            git_branch=git_branch,
        )
        ProjectFigures.objects.create(project=project, maximize=project.scenario.maximize)  # the overview's
        if by is not None and getattr(by, "is_authenticated", False):
            Membership.objects.create(project=project, user=by, role=Role.ADMIN)
        record_audit(
            by,
            AuditVerb.PROJECT_CREATED,
            project,
            project=project,
            scenario=project.scenario.key,
            source=source,
            **({"smr_project_id": smr_project_id} if smr_project_id else {}),
        )
    return project


# Where a git project's repository resolved to when it was bound (sources/git/ownership.py, red-team N3): the
# path as bound, its real git dir and work tree. A later sync or rollback that finds it elsewhere refuses.
GIT_PIN = "git_pin"


def pin_git_repository(project: Project, pin: dict[str, str]) -> Project:
    """Record where an unpinned git project's repository resolved to, from a check that passed (a binding
    made before pins, or before the repository existed). A pin made meanwhile for the same path wins."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        current = (project.source_settings or {}).get(GIT_PIN)
        if isinstance(current, dict) and current.get("path") == project.git_repo_path:
            return project
        project.source_settings = {**(project.source_settings or {}), GIT_PIN: dict(pin)}
        project.save(update_fields=["source_settings", "updated"])
        record_audit(None, AuditVerb.PROJECT_GIT_REPOSITORY_PINNED, project, project=project, **pin)
    return project


def check_outbound_url(field: str, url: str) -> None:
    """A user-supplied address smrweb will send requests to (a webhook, a project's own SMR backend):
    refused here, with a field error, unless the outbound guard would let a request through now. It
    checks again at every send, since what a name resolves to can change."""
    from smrweb.core import outbound

    if len(url) > 1000:
        raise InvalidInput(field, "At most 1000 characters.")
    try:
        outbound.vet(url)
    except outbound.Unresolvable as exc:
        if not outbound.allow_listed(url):  # a listed host may be set up before its name resolves here
            raise InvalidInput(field, str(exc)) from None
    except outbound.Refused as exc:
        raise InvalidInput(field, str(exc)) from None


# Branch names a git project may follow: what `git check-ref-format --branch` accepts (sources/git/cli.py asks
# git too), narrowed to characters that also fit a run id once "/" is written "~" (never in a ref name).
GIT_BRANCH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+=@-]{0,194}\Z")


def _check_git_settings(repo_path: str, branch: str) -> None:

    if not repo_path or len(repo_path) > 1000 or "\x00" in repo_path or not os.path.isabs(repo_path):
        raise InvalidInput(
            "git_repo_path", "A project whose source is git needs the absolute path of its repository."
        )
    if (
        not GIT_BRANCH_RE.match(branch or "")
        or ".." in branch
        or "//" in branch
        or branch.endswith((".", "/", ".lock"))
    ):
        raise InvalidInput(
            "git_branch",
            "A branch name of letters, digits and . _ / + = @ - (starting with a letter, "
            "digit or underscore), as git accepts it.",
        )


PROJECT_SETTINGS = (
    "name",
    "stall_after",
    "knowledge",
    "require_second_reviewer",
    "auto_verify",
    "capture_turn_bodies",
    "regression_threshold",
    "budget_guard",
    "rollback_webhook_url",
    *SPEND_GUARD_SETTINGS,
)


def update_project(project: Project, *, by: Any = None, **changes: Any) -> Project:
    """Change a project's name, stall_after, knowledge, review and rollback settings."""
    _only(changes, PROJECT_SETTINGS, "a project setting")
    if "stall_after" in changes and changes["stall_after"].total_seconds() < 1:
        raise InvalidInput("stall_after", "Must be at least one second.")
    threshold = changes.get("regression_threshold")
    if threshold is not None and not (0 <= threshold < float("inf")):
        raise InvalidInput(
            "regression_threshold", "A finite number of at least 0, or empty to turn detection off."
        )
    if url := changes.get("rollback_webhook_url"):
        check_outbound_url("rollback_webhook_url", url)
    changes = {**changes, **check_spend_guard_settings(changes)}
    switched_on = bool(changes.get("auto_verify")) and not project.auto_verify
    with transaction.atomic():
        for field, value in changes.items():
            setattr(project, field, value)
        project.save(update_fields=[*changes, "updated"])
        record_audit(
            by,
            AuditVerb.PROJECT_SETTINGS_CHANGED,
            project,
            project=project,
            **{k: str(v) for k, v in changes.items()},
        )
        if switched_on:
            # The candidates already waiting are verified too, a few at a time (smrweb/tasks.py).
            from smrweb.tracking.services.submissions import start_catch_up

            if start_catch_up(project, by=by):
                transaction.on_commit(
                    lambda: signals.auto_verify_switched_on.send(sender=Project, project_id=project.pk)
                )
    return project


def set_source_backend(project: Project, *, backend_base: str, api_key: str = "", by: Any = None) -> Project:
    """Point a polled project at its own backend address (and key, sealed at rest)."""
    from smrweb.core.secrets import seal

    check_outbound_url("backend_base", backend_base)
    with transaction.atomic():
        settings_ = {**project.source_settings, "backend_base": backend_base}
        if api_key:
            settings_["api_key_sealed"] = seal(api_key)
        project.source_settings = settings_
        project.save(update_fields=["source_settings", "updated"])
        record_audit(
            by,
            AuditVerb.PROJECT_SOURCE_CHANGED,
            project,
            project=project,
            backend_base=backend_base,
            key_changed=bool(api_key),
        )  # the key itself is never recorded
    return project
