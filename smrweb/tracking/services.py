"""The one write path. The REST API, the pollers, the demo and the management commands call these
functions; none writes tracked data another way. Services own their transaction and audit trail,
raise `tracking.errors.*`, and know nothing of HTTP or Celery."""

from __future__ import annotations

import hashlib
import re
import secrets
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import IO, Any

import msgspec
from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, DecimalField, ExpressionWrapper, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from smrweb.tracking import events as ev
from smrweb.tracking.errors import (
    ArtifactTooLarge,
    DigestMismatch,
    EventError,
    InvalidEvents,
    InvalidInput,
    NotAllowed,
    StorageQuotaExceeded,
)
from smrweb.tracking.models import (
    TERMINAL_STATES,
    NEVER_COUNTED,
    AgentTurn,
    ApiToken,
    Artifact,
    ArtifactBlob,
    ArtifactKind,
    AuditEvent,
    Checkpoint,
    Direction,
    Experiment,
    Membership,
    MetricPoint,
    Project,
    Role,
    Run,
    RunState,
    RuntimeMessage,
    Scenario,
    SourceKind,
    StateChange,
    Submission,
    TurnKind,
    blob_storage_name,
    hash_token,
)

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SLUG_RE = re.compile(r"^[-a-zA-Z0-9_]+\Z")  # what the <slug:…> URL converter routes


# --- audit ------------------------------------------------------------------------------------


def record_audit(actor: Any, verb: str, obj: Any, *, project: Project | None = None, **detail: Any) -> AuditEvent:
    """Append an audit row. `actor` is a user, an ApiToken or None (the system)."""
    user, label = None, "system"
    if isinstance(actor, ApiToken):
        label = f"token:{actor.name}"
    elif actor is not None and getattr(actor, "is_authenticated", False):
        user, label = actor, actor.get_username()
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label,
        verb=verb,
        project=project,
        object_type=type(obj).__name__.lower(),
        object_id=str(getattr(obj, "pk", obj)),
        detail=detail,
    )


def _only(changes: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    """Refuse a change to a field outside `allowed`, naming it."""
    unknown = set(changes) - set(allowed)
    if unknown:
        raise InvalidInput(sorted(unknown)[0], f"Not {what}.")


# --- scenarios, projects, tokens ----------------------------------------------------------------


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
        record_audit(by, "scenario.created", scenario, key=scenario.key)
    return scenario


def may_create_projects(user: Any) -> bool:
    """Creating a project is for staff and users given `tracking.add_project`, not for everyone signed in."""
    return bool(getattr(user, "is_staff", False) or getattr(user, "has_perm", lambda _: False)("tracking.add_project"))


def may_bind_sources(user: Any) -> bool:
    """Binding a project to an SMR project, an SMR backend or a repository: staff, or `tracking.bind_source`."""
    return bool(getattr(user, "is_staff", False) or getattr(user, "has_perm", lambda _: False)("tracking.bind_source"))


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
) -> Project:
    """Create a project; the creating user (if any) becomes its admin.

    `by=None` is the operator (a management command). `check_binding`, when given, asks the SMR backend
    whether the key may read the project before anything is written (it raises InvalidInput). A user needs `may_create_projects`, and to bind a
    source `may_bind_sources`; a user's SMR project brings its own key (the operator's is never lent to it,
    red-team finding 1), may only use scenarios it may attach, and an SMR project id already bound to
    another smrweb project is refused unless the operator or staff allow a second binding."""
    operator = by is None or getattr(by, "is_staff", False)
    if by is not None and not may_create_projects(by):
        raise NotAllowed("Creating projects is for staff and users given the permission to add projects.")
    binds = source != SourceKind.PUSH or bool(smr_project_id or smr_backend_base or smr_api_key or git_repo_path)
    if by is not None and binds and not may_bind_sources(by):
        raise NotAllowed("Binding a project to an SMR project, a backend or a repository is for staff and users "
                         "given the permission to bind sources.")
    if scenario is not None and by is not None and not Scenario.objects.attachable_by(by).filter(pk=scenario.pk).exists():
        raise InvalidInput("scenario", f"Object with key={scenario.key} does not exist.")  # as for an unknown key
    if not slug or len(slug) > 100 or not SLUG_RE.match(slug):
        raise InvalidInput("slug", "A slug is 1 to 100 letters, digits, hyphens or underscores.")
    if source != SourceKind.SMR and (smr_project_id or smr_backend_base or smr_api_key):
        raise InvalidInput("smr_project_id", "An SMR project id, backend and key are for projects whose source is smr.")
    if source == SourceKind.SMR:
        if not smr_project_id:
            raise InvalidInput("smr_project_id", "A project whose source is smr needs the SMR project id.")
        if not operator and not smr_api_key:
            raise InvalidInput("smr_api_key", "A project you bind to SMR needs its own SMR API key; the "
                                              "operator's key is not lent to user-created projects.")
        if smr_backend_base:
            if not smr_api_key:  # the operator's key goes to the operator's backend only (finding 5)
                raise InvalidInput("smr_api_key", "A project with a backend address of its own needs an API key "
                                                  "of its own.")
            check_outbound_url("smr_backend_base", smr_backend_base)
        bound = Project.objects.filter(source=SourceKind.SMR, source_settings__smr_project_id=smr_project_id)
        if bound.exists() and not (allow_shared_smr_project and operator):
            raise InvalidInput("smr_project_id", f"SMR project {smr_project_id!r} is already bound to smrweb project "
                                                 f"{bound.first().slug!r}; only staff can allow a second binding.")
    if source == SourceKind.GIT:
        _check_git_settings(git_repo_path, git_branch)
    elif git_repo_path or git_branch:
        raise InvalidInput("git_repo_path", "A repository path and branch are for projects whose source is git.")
    if Project.objects.filter(slug=slug).exists():
        raise InvalidInput("slug", f"A project with slug {slug!r} already exists.")
    if source == SourceKind.SMR and check_binding is not None:
        # The backend itself confirms the id and key (sources.smr.check_binding), after every check above
        # (so no one unauthorised can make smrweb probe a backend) and before anything is written.
        check_binding(smr_project_id=smr_project_id, api_key=smr_api_key, backend_base=smr_backend_base,
                      operator=operator)
    source_settings: dict[str, Any] = {"smr_project_id": smr_project_id} if smr_project_id else {}
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
        if by is not None and getattr(by, "is_authenticated", False):
            Membership.objects.create(project=project, user=by, role=Role.ADMIN)
        record_audit(by, "project.created", project, project=project, scenario=project.scenario.key,
                     source=source, **({"smr_project_id": smr_project_id} if smr_project_id else {}))
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


# Branch names a git project may follow: what `git check-ref-format --branch` accepts (sources/git.py asks
# git too), narrowed to characters that also fit a run id once "/" is written "~" (never in a ref name).
GIT_BRANCH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+=@-]{0,194}\Z")


def _check_git_settings(repo_path: str, branch: str) -> None:
    import os.path

    if not repo_path or len(repo_path) > 1000 or "\x00" in repo_path or not os.path.isabs(repo_path):
        raise InvalidInput("git_repo_path", "A project whose source is git needs the absolute path of its repository.")
    if not GIT_BRANCH_RE.match(branch or "") or ".." in branch or "//" in branch or branch.endswith((".", "/", ".lock")):
        raise InvalidInput("git_branch", "A branch name of letters, digits and . _ / + = @ - (starting with a letter, "
                                         "digit or underscore), as git accepts it.")


PROJECT_SETTINGS = ("name", "stall_after", "knowledge", "require_second_reviewer", "auto_verify", "regression_threshold",
                    "rollback_webhook_url")


def update_project(project: Project, *, by: Any = None, **changes: Any) -> Project:
    """Change a project's name, stall_after, knowledge, review and rollback settings."""
    _only(changes, PROJECT_SETTINGS, "a project setting")
    if "stall_after" in changes and changes["stall_after"].total_seconds() < 1:
        raise InvalidInput("stall_after", "Must be at least one second.")
    threshold = changes.get("regression_threshold")
    if threshold is not None and not (0 <= threshold < float("inf")):
        raise InvalidInput("regression_threshold", "A finite number of at least 0, or empty to turn detection off.")
    if url := changes.get("rollback_webhook_url"):
        check_outbound_url("rollback_webhook_url", url)
    with transaction.atomic():
        for field, value in changes.items():
            setattr(project, field, value)
        project.save(update_fields=[*changes, "updated"])
        record_audit(by, "project.settings_changed", project, project=project, **{k: str(v) for k, v in changes.items()})
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
        record_audit(by, "project.source_changed", project, project=project, backend_base=backend_base,
                     key_changed=bool(api_key))  # the key itself is never recorded
    return project


def add_member(project: Project, user: Any, *, role: str, by: Any = None) -> Membership:
    """Give a user a role in a project (or change it)."""
    with transaction.atomic():
        membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
        record_audit(by, "member.set", membership, project=project, user=user.get_username(), role=role)
    return membership


def set_member(project: Project, *, username: str, role: str, by: Any) -> Membership:
    """An admin adds a teammate (an existing account, by user name or e-mail) with a role, or changes
    their role. The project always keeps an admin."""
    from django.contrib.auth import get_user_model

    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Adding members needs the admin role in {project.slug}.")
    if role not in Role.values:
        raise InvalidInput("role", f"Choose one of {', '.join(Role.values)}.")
    name = (username or "").strip()
    users = get_user_model().objects.filter(is_active=True)
    user = users.filter(username=name).first() or (users.filter(email__iexact=name).first() if "@" in name else None)
    if user is None:
        raise InvalidInput("username", f"No active account is called {name!r}: a staff user creates it first "
                                       "(Admin → Users, or `manage.py createsuperuser` / `createuser`).")
    with transaction.atomic():
        _keep_an_admin(project, user, role)
        return add_member(project, user, role=role, by=by)


def remove_member(project: Project, user: Any, *, by: Any) -> None:
    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Removing members needs the admin role in {project.slug}.")
    with transaction.atomic():
        _keep_an_admin(project, user, None)
        deleted, _ = Membership.objects.filter(project=project, user=user).delete()
        if deleted:
            record_audit(by, "member.removed", project, project=project, user=user.get_username())


def _keep_an_admin(project: Project, user: Any, role: str | None) -> None:
    admins = set(Membership.objects.select_for_update().filter(project=project, role=Role.ADMIN)
                 .values_list("user_id", flat=True))
    if admins == {user.pk} and role != Role.ADMIN:
        raise InvalidInput("role", f"{user.get_username()} is the only admin of {project.slug}: make someone else "
                                   "admin first.")


def create_api_token(project: Project, *, name: str, by: Any = None) -> tuple[ApiToken, str]:
    """Create a project-scoped token. Returns the row and the raw token, which is never stored."""
    raw = ApiToken.PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            project=project,
            name=name,
            token_hash=hash_token(raw),
            hint=raw[:10],
            created_by=by if getattr(by, "is_authenticated", False) else None,
        )
        record_audit(by, "token.created", token, project=project, name=name)
    return token, raw


def revoke_api_token(token: ApiToken, *, by: Any = None) -> ApiToken:
    """Revoke a token; requests bearing it are refused from now on."""
    with transaction.atomic():
        if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
            record_audit(by, "token.revoked", token, project=token.project, name=token.name)
    token.refresh_from_db()
    return token


def authenticate_token(raw: str) -> ApiToken | None:
    """The active token matching `raw`, with its last-used time refreshed (at most once a minute)."""
    token = ApiToken.objects.select_related("project").filter(token_hash=hash_token(raw)).first()
    if token is None or not token.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


# --- runs -------------------------------------------------------------------------------------


RUN_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@+=~-]{0,199}\Z")


def _check_run_id(external_id: str) -> None:
    # A run id goes into URLs as one path segment: no "/", "?", "#", spaces, or "."/".." tricks.
    if not RUN_ID_RE.match(external_id or ""):
        raise InvalidInput("run", "A run id is 1 to 200 of A-Z a-z 0-9 . _ : @ + = ~ -, starting with a letter, "
                                  "digit or underscore.")


def _locked_run(project: Project, external_id: str, first_seen: datetime) -> Run:
    """Get or create the run and lock its row for this transaction (one writer per run at a time)."""
    _check_run_id(external_id)
    run = Run.objects.select_for_update().filter(project=project, external_id=external_id).first()
    if run is not None:
        return run
    try:
        with transaction.atomic():  # savepoint: a concurrent creator may win the unique constraint
            Run.objects.create(project=project, external_id=external_id, started_at=first_seen,
                               last_progress_at=timezone.now())
    except IntegrityError:
        pass
    return Run.objects.select_for_update().get(project=project, external_id=external_id)


RUN_SETTINGS = ("budget_usd", "budget_tokens", "requested_profile", "actual_profile", "git_branch", "git_commit")


def _set_run_fields(project: Project, external_id: str, changes: dict[str, Any]) -> Run:
    """Write some fields of a run (created on first sight) under its row lock; call inside atomic()."""
    run = _locked_run(project, external_id, timezone.now())
    for field, value in changes.items():
        setattr(run, field, value)
    run.save(update_fields=[*changes, "updated"])
    return run


def update_run_settings(project: Project, external_id: str, *, by: Any = None, **changes: Any) -> Run:
    """Set a run's budget, model profiles or git position (creating the run on first sight)."""
    _only(changes, RUN_SETTINGS, "a run setting")
    with transaction.atomic():
        run = _set_run_fields(project, external_id, changes)
        record_audit(by, "run.settings_changed", run, project=project,
                     **{k: str(v) for k, v in changes.items()})
    return run


# --- event ingest -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    run: Run | None  # None for an empty batch
    accepted: int
    duplicates: int


_EVENT_MODELS = {
    "metric": MetricPoint,
    "score": Submission,
    "agent.turn": AgentTurn,
    "state": StateChange,
    "message": RuntimeMessage,
}


_METRIC_TYPES = (ev.MetricEvent, ev.PlainMetric)


def ingest_events(project: Project, run_external_id: str, events: Sequence[ev._Event]) -> IngestResult:
    """Apply a validated batch to one run: all of it or nothing, replays counted as duplicates.

    Each event is keyed by its client id (or a digest of its content); a key the run already has,
    or one repeated inside the batch, is a duplicate and writes nothing. Agent turns are also keyed
    by (actor, turn). Summaries (spend, scores, state) are recomputed from rows, so the result is
    the same whatever order, retries or duplicates the events arrive with.
    """
    if type(events) is not ev.PlainMetrics:  # (metrics only: no score to check)
        _check_scores_in_bounds(project.scenario, events)
    _check_run_id(run_external_id)
    if not events:
        return IngestResult(run=None, accepted=0, duplicates=0)  # nothing to do: not even create the run
    now = timezone.now()
    # Metrics are the high-volume type: they skip the key lookup of `_new_events` and go straight to
    # one INSERT … ON CONFLICT DO NOTHING, whose row count says how many were new.
    metrics: list[ev.MetricEvent | ev.PlainMetric] = []
    others: list[ev._Event] = []
    first_seen: datetime | None = None
    if type(events) is ev.PlainMetrics:  # the fast path's batch: sorted and scanned already
        metrics, first_seen = events, events.earliest
    else:
        for event in events:
            (metrics if type(event) in _METRIC_TYPES else others).append(event)
            ts = event.ts
            if ts is not None and (first_seen is None or ts < first_seen):
                first_seen = ts
    with transaction.atomic():
        run = _locked_run(project, run_external_id, first_seen or now)
        fresh = _new_events(run, others) if others else []
        by_type: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for key, event in fresh:
            by_type[event.type].append((key, event))
        changed: list[str] = []
        accepted = len(fresh)
        if metrics:
            accepted += _insert_metrics(run, metrics, now)
        if by_type["agent.turn"]:
            _insert_turns(run, by_type["agent.turn"], now)
            changed += recompute_spend(run)
        if by_type["checkpoint"]:
            _insert_checkpoints(run, by_type["checkpoint"], now)
        if by_type["message"]:
            _insert_messages(run, by_type["message"], now)
        if by_type["score"]:
            _insert_scores(run, by_type["score"], now)
            changed += recompute_scores(run)
            if project.auto_verify:
                _verify_on_commit(run.pk)
        if by_type["state"]:
            _insert_states(run, by_type["state"], now)
            changed += recompute_state(run)
        if accepted:
            run.last_progress_at = now
            run.stalled_since = None  # news arrived: not stalled any more
            changed += ["last_progress_at", "stalled_since"]
        if changed:
            run.save(update_fields=[*dict.fromkeys(changed), "updated"])
    return IngestResult(run=run, accepted=accepted, duplicates=len(events) - accepted)


def unnamed_experiments(project: Project, external_id: str) -> int:
    """How many of the run's experiments are known by their id alone (a polled source names them later)."""
    return Experiment.objects.filter(run__project=project, run__external_id=external_id, title="",
                                     hypothesis="").count()


def name_experiments(project: Project, external_id: str, names: dict[str, dict[str, str]]) -> int:
    """Fill in the title and hypothesis of the run's experiments still known by id only (a source's
    answer never overwrites what was already written). Returns how many were named."""
    named = 0
    with transaction.atomic():
        for experiment in Experiment.objects.select_for_update().filter(
                run__project=project, run__external_id=external_id, external_id__in=list(names), title="",
                hypothesis=""):
            name = names[experiment.external_id]
            experiment.title, experiment.hypothesis = name.get("title", "")[:500], name.get("hypothesis", "")
            experiment.save(update_fields=["title", "hypothesis", "updated"])
            named += 1
    return named


def _verify_on_commit(run_id: int) -> None:
    """The project verifies every new score: a worker takes the run's new candidates after the commit."""
    from smrweb.tracking import tasks

    transaction.on_commit(lambda: tasks.queue_quietly(tasks.auto_verify_run, run_id))


def _check_scores_in_bounds(scenario: Scenario, events: Sequence[ev._Event]) -> None:
    errors = []
    for index, event in enumerate(events):
        if event.type != "score":
            continue
        if scenario.score_min is not None and event.score < scenario.score_min:
            errors.append(EventError(index, "score", f"Below the scenario's minimum of {scenario.score_min:g}."))
        if scenario.score_max is not None and event.score > scenario.score_max:
            errors.append(EventError(index, "score", f"Above the scenario's maximum of {scenario.score_max:g}."))
    if errors:
        raise InvalidEvents(errors)


def _new_events(run: Run, events: Sequence[ev._Event]) -> list[tuple[str, Any]]:
    """The events of the batch that the run has not seen, each with its idempotency key."""
    keyed = [(e.idempotency_key(), e) for e in events]
    keys_by_type: dict[str, set[str]] = defaultdict(set)
    for key, event in keyed:
        keys_by_type[event.type].add(key)
    known: set[tuple[str, str]] = set()
    for etype, keys in keys_by_type.items():
        if etype == "checkpoint":
            rows = Checkpoint.objects.filter(run=run, external_id__in=keys).values_list("external_id", flat=True)
        else:
            rows = _EVENT_MODELS[etype].objects.filter(run=run, event_id__in=keys).values_list("event_id", flat=True)
        known.update((etype, k) for k in rows)
    turn_numbers = {e.turn for _, e in keyed if e.type == "agent.turn"}
    known_turns = set(
        AgentTurn.objects.filter(run=run, turn__in=turn_numbers).values_list("actor", "turn")
    ) if turn_numbers else set()

    fresh = []
    for key, event in keyed:
        if (event.type, key) in known:
            continue
        known.add((event.type, key))
        if event.type == "agent.turn":
            if (event.actor, event.turn) in known_turns:
                continue
            known_turns.add((event.actor, event.turn))
        fresh.append((key, event))
    return fresh


def _metric_insert_sql() -> str:
    q = connection.ops.quote_name
    table = q(MetricPoint._meta.db_table)
    columns = ", ".join(q(c) for c in ("run_id", "key", "step", "value", "ts", "event_id"))
    # The conflict target is the unique constraint metric_run_event_uniq: a key the run already has,
    # or one repeated inside the batch, inserts nothing and is not counted.
    return (f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s) "
            f"ON CONFLICT ({q('run_id')}, {q('event_id')}) DO NOTHING")


def _metric_insert_sql_pg() -> str:
    q = connection.ops.quote_name
    columns = ", ".join(q(c) for c in ("run_id", "key", "step", "value", "ts", "event_id"))
    return (f"INSERT INTO {q(MetricPoint._meta.db_table)} ({columns}) "
            "SELECT %s, r->>0, (r->>1)::bigint, (r->>2)::float8, (r->>3)::timestamptz, r->>4 "
            "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS u(r, n) ORDER BY n "
            f"ON CONFLICT ({q('run_id')}, {q('event_id')}) DO NOTHING")


def _insert_metrics(run: Run, events: list[ev.MetricEvent | ev.PlainMetric], now: datetime) -> int:
    """Insert the batch's metric points; return how many were new (the rest are duplicates).

    One INSERT … ON CONFLICT DO NOTHING for the batch: no model instances, no per-event lookup, the
    arrival time adapted once. Call inside the batch's transaction, with the run row locked; the
    database's row count is the number of new points, and the first of two rows with one key wins.
    """
    if connection.vendor == "postgresql":
        return _insert_metrics_pg(run, events, now)
    adapt = connection.ops.adapt_datetimefield_value
    # SQLite stores a UTC datetime as its naive str(); the validator already converted every ts to
    # UTC, so skip Django's per-value make_naive for those (anything else goes through Django).
    naive_utc = settings.USE_TZ and connection.timezone_name == "UTC"
    now_db = adapt(now)
    run_id = run.pk
    if naive_utc and type(events) is ev.PlainMetrics:
        # The fast path's batch: ids always set, UTC text usually ready (else a zone was sent, or none).
        rows = [(run_id, e.key, e.step, e.value,
                 e.naive_utc or (now_db if e.ts is None else str(e.ts)[:-6]), e.id) for e in events]
    else:
        rows = []
        append = rows.append
        for e in events:
            ts = e.ts
            if ts is None:
                stamp = now_db
            elif naive_utc and (text := getattr(e, "naive_utc", None)) is not None:
                stamp = text  # a PlainMetric sent in UTC: already in the stored form
            elif naive_utc and ts.tzinfo is UTC:
                stamp = str(ts)[:-6]  # == str(ts.replace(tzinfo=None)): drop "+00:00"
            else:
                stamp = adapt(ts)
            append((run_id, e.key, e.step, e.value, stamp, e.id if e.id is not None else e.idempotency_key()))
    with connection.cursor() as cursor:
        cursor.executemany(_metric_insert_sql(), rows)
        inserted = cursor.rowcount
    if inserted < 0:  # every supported driver reports it; never guess the duplicate count
        raise RuntimeError("The database driver did not report how many metric points were inserted.")
    return inserted


_encode_json = msgspec.json.Encoder().encode


def _insert_metrics_pg(run: Run, events: list[ev.MetricEvent | ev.PlainMetric], now: datetime) -> int:
    """PostgreSQL: the batch goes over as one JSON array of rows that the server unpacks in order.
    msgspec encodes it in C (floats in shortest round-trip form, timestamps as RFC 3339), where
    psycopg's array dumpers spent ~7 µs a value in Python; executemany, even pipelined, was slower."""
    rows = [(e.key, e.step, e.value, e.ts or now, e.id if e.id is not None else e.idempotency_key()) for e in events]
    with connection.cursor() as cursor:
        cursor.execute(_metric_insert_sql_pg(), [run.pk, _encode_json(rows).decode()])
        return cursor.rowcount


def _insert_turns(run: Run, items: list[tuple[str, ev.TurnEvent]], now: datetime) -> None:
    AgentTurn.objects.bulk_create(
        [
            AgentTurn(
                run=run, event_id=k, turn=e.turn, actor=e.actor, parent_actor=e.parent_actor or "",
                kind=e.resolved_kind, model=e.model, tokens_in=e.tokens_in, tokens_out=e.tokens_out,
                cost_usd=e.cost_decimal, tool_calls=list(e.tool_calls), duration_ms=e.duration_ms, ts=e.ts or now,
            )
            for k, e in items
        ],
        batch_size=1000,
    )


def _insert_checkpoints(run: Run, items: list[tuple[str, ev.CheckpointEvent]], now: datetime) -> None:
    Checkpoint.objects.bulk_create(
        [
            Checkpoint(run=run, external_id=k, label=e.label, commit=e.commit, restorable=e.restorable,
                       failure_reason=e.failure_reason, ts=e.ts or now)
            for k, e in items
        ]
    )


def _insert_messages(run: Run, items: list[tuple[str, ev.MessageEvent]], now: datetime) -> None:
    # The run row is locked, so max(seq)+1 cannot race with another batch.
    start = (RuntimeMessage.objects.filter(run=run).aggregate(m=Max("seq"))["m"] or 0) + 1
    RuntimeMessage.objects.bulk_create(
        [
            RuntimeMessage(run=run, seq=start + i, event_id=k, topic=e.topic, target=e.target, mode=e.mode,
                           body=e.body, ts=e.ts or now)
            for i, (k, e) in enumerate(items)
        ]
    )


def _insert_states(run: Run, items: list[tuple[str, ev.StateEvent]], now: datetime) -> None:
    StateChange.objects.bulk_create(
        [
            StateChange(
                run=run, event_id=k, state=e.state, ts=e.ts or now,
                failure_family=e.failure.family if e.failure else "",
                failure_detail=e.failure.detail if e.failure else "",
                failure_source=e.failure.source if e.failure else "",
            )
            for k, e in items
        ]
    )


def _insert_scores(run: Run, items: list[tuple[str, ev.ScoreEvent]], now: datetime) -> None:
    experiment_ids = {e.experiment for _, e in items if e.experiment}
    experiments = {x.external_id: x for x in Experiment.objects.filter(run=run, external_id__in=experiment_ids)}
    for external_id in experiment_ids - experiments.keys():
        experiments[external_id] = Experiment.objects.create(run=run, external_id=external_id)
    artifacts = _artifacts_by_ref(run, {_normal_ref(e.artifact) for _, e in items if e.artifact})
    Submission.objects.bulk_create(
        [
            Submission(
                project_id=run.project_id, run=run, event_id=k, score=e.score, harness_id=e.harness_id,
                artifact_ref=_normal_ref(e.artifact), artifact=artifacts.get(_normal_ref(e.artifact)),
                experiment=experiments.get(e.experiment) if e.experiment else None,
                commit=e.commit, details=dict(e.details), ts=e.ts or now,
            )
            for k, e in items
        ]
    )


def _normal_ref(ref: str | None) -> str:
    """Digests compare in lower case (uploads accept either); paths as given."""
    return ref.lower() if ref and SHA256_RE.match(ref.lower()) else (ref or "")


def _artifacts_by_ref(run: Run, refs: set[str]) -> dict[str, Artifact]:
    """The run's artifacts named by digest or path (a path means its latest version), in two queries."""
    digests = {r for r in refs if SHA256_RE.match(r)}
    paths = refs - digests
    found: dict[str, Artifact] = {}
    if digests:
        for artifact in Artifact.objects.filter(run=run, blob__sha256__in=digests).select_related("blob"):
            found.setdefault(artifact.blob.sha256, artifact)
    if paths:
        for artifact in Artifact.objects.filter(run=run, path__in=paths).order_by("created", "id"):
            found[artifact.path] = artifact  # later versions overwrite earlier ones
    return found


_ZERO_USD = Value(Decimal(0), output_field=DecimalField(max_digits=18, decimal_places=6))


def recompute_spend(run: Run) -> list[str]:
    """Set the run's spend totals to the sum of its turns, split by kind. Returns changed fields."""
    def total(field: str, kind: str | None = None):
        zero = _ZERO_USD if field == "cost_usd" else Value(0)
        return Coalesce(Sum(field, filter=Q(kind=kind) if kind else None), zero)

    sums = AgentTurn.objects.filter(run=run).aggregate(
        turn_count=Count("id"),
        driver_tokens_in=total("tokens_in", TurnKind.DRIVER_INFERENCE),
        driver_tokens_out=total("tokens_out", TurnKind.DRIVER_INFERENCE),
        driver_cost_usd=total("cost_usd", TurnKind.DRIVER_INFERENCE),
        child_tokens_in=total("tokens_in", TurnKind.CHILD_WORK),
        child_tokens_out=total("tokens_out", TurnKind.CHILD_WORK),
        child_cost_usd=total("cost_usd", TurnKind.CHILD_WORK),
    )
    # Totals are the sum of the two parts, so the invariant holds by construction.
    sums["tokens_in"] = sums["driver_tokens_in"] + sums["child_tokens_in"]
    sums["tokens_out"] = sums["driver_tokens_out"] + sums["child_tokens_out"]
    sums["cost_usd"] = Decimal(sums["driver_cost_usd"]) + Decimal(sums["child_cost_usd"])
    for field, value in sums.items():
        setattr(run, field, value)
    return list(sums)


def recompute_scores(run: Run) -> list[str]:
    """Set the run's best (of the submissions that count: not invalid, rejected or excluded), latest
    (not excluded) and count of scores from its submissions."""
    maximize = run.project.scenario.maximize
    counted = Q(excluded_at__isnull=True) & ~Q(status__in=NEVER_COUNTED)
    best = Max("score", filter=counted) if maximize else Min("score", filter=counted)
    agg = Submission.objects.filter(run=run).aggregate(n=Count("id"), best=best)
    latest = (Submission.objects.filter(run=run, excluded_at__isnull=True).order_by("-ts", "-id")
              .values_list("score", flat=True).first())
    run.score_count, run.best_score, run.latest_score = agg["n"], agg["best"], latest
    return ["score_count", "best_score", "latest_score"]


def recompute_state(run: Run) -> list[str]:
    """Set the run's state and failure from its latest state change by timestamp."""
    change = StateChange.objects.filter(run=run).order_by("-ts", "-id").first()
    if change is None:
        return []
    run.state = change.state
    run.failure_family, run.failure_detail, run.failure_source = (
        change.failure_family, change.failure_detail, change.failure_source,
    )
    run.finished_at = change.ts if change.state in TERMINAL_STATES else None
    return ["state", "failure_family", "failure_detail", "failure_source", "finished_at"]


def delete_event_rows(rows) -> int:
    """Delete event-derived rows (turns, scores, state changes, …) and recompute their runs' summaries.
    Artifacts take their bytes along when nothing else holds them (red-team finding 10)."""
    blob_ids = set(rows.values_list("blob_id", flat=True)) if rows.model is Artifact else set()
    with transaction.atomic():
        run_ids = set(rows.values_list("run_id", flat=True))
        deleted, _ = rows.delete()
        for run in Run.objects.select_for_update().select_related("project__scenario").filter(pk__in=run_ids):
            fields = recompute_spend(run) + recompute_scores(run) + recompute_state(run)
            run.save(update_fields=[*fields, "updated"])
    if blob_ids:
        collect_unreferenced_blobs(ArtifactBlob.objects.filter(pk__in=blob_ids))
    return deleted


def collect_unreferenced_blobs(blobs=None, *, older_than: timedelta = timedelta(0)) -> int:
    """Delete blobs no artifact holds (rows, then bytes), created more than `older_than` ago: an upload
    stores its blob a moment before the artifact row that holds it, so the periodic sweep waits."""
    blobs = ArtifactBlob.objects.all() if blobs is None else blobs
    candidates = blobs.filter(created__lt=timezone.now() - older_than).exclude(
        pk__in=Artifact.objects.values("blob_id"))
    removed = 0
    for blob in candidates.iterator():
        with transaction.atomic():
            # Deleted only if still unheld at this moment (an upload of the same bytes may just have taken it).
            gone, _ = ArtifactBlob.objects.filter(pk=blob.pk).exclude(pk__in=Artifact.objects.values("blob_id")).delete()
        if gone:
            artifact_storage().delete(blob.storage_name)
            removed += 1
    return removed


def project_storage_bytes(project: Project) -> int:
    """Bytes of the distinct blobs the project's artifacts hold (what its quota counts).

    In steps over primary keys (runs → their artifacts' blobs → sizes), each an index lookup: the one
    query with an `IN (subquery)` let PostgreSQL, on tables it had no statistics for yet (a fresh
    database filling up), pick a nested loop that rescanned every artifact for every blob — seconds per
    upload after a few thousand."""
    run_ids = list(Run.objects.filter(project=project).values_list("pk", flat=True))
    blob_ids: set[int] = set()
    for chunk in _chunks(run_ids):
        blob_ids.update(Artifact.objects.filter(run_id__in=chunk).values_list("blob_id", flat=True))
    return sum(ArtifactBlob.objects.filter(pk__in=chunk).aggregate(total=Sum("size"))["total"] or 0
               for chunk in _chunks(sorted(blob_ids)))


def _chunks(ids: list[int], size: int = 500):
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def _check_quota(project: Project, sha256: str, size: int) -> None:
    quota = settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES
    if not quota or Artifact.objects.filter(run__project=project, blob__sha256=sha256).exists():
        return  # no limit, or bytes the project already holds (they cost nothing more)
    used = project_storage_bytes(project)
    if used + size > quota:
        raise StorageQuotaExceeded(f"Project {project.slug} holds {used} bytes of artifacts; these {size} more would "
                                   f"pass its quota of {quota} (SMRWEB_PROJECT_STORAGE_QUOTA_BYTES). Nothing was "
                                   "stored.")


# --- artifacts --------------------------------------------------------------------------------


def artifact_storage():
    return storages["artifacts"]


def store_artifact(
    project: Project,
    run_external_id: str,
    *,
    path: str,
    content: IO[bytes],
    kind: str = ArtifactKind.FILE,
    content_type: str = "application/octet-stream",
    claimed_sha256: str | None = None,
    commit: str = "",
    by: Any = None,
) -> tuple[Artifact, bool]:
    """Store an artifact content-addressed: hash it, verify the client's digest, keep the bytes once.

    Returns (artifact, created). The same bytes at the same path and commit of the same run are one
    artifact (the bytes are stored once whatever the commit); score events that named this artifact before it arrived are linked to it now.
    """
    _check_run_id(run_external_id)  # every column is checked before any bytes are stored
    if not path or len(path) > 500 or "\x00" in path:
        raise InvalidInput("path", "An artifact needs a path of 1 to 500 characters, without NUL.")
    if kind not in ArtifactKind.values:
        raise InvalidInput("kind", f"Expected one of: {', '.join(ArtifactKind.values)}.")
    if not content_type or len(content_type) > 200 or "\x00" in content_type:
        raise InvalidInput("file", "The file's content type must be 1 to 200 characters.")
    if len(commit) > 64 or "\x00" in commit:
        raise InvalidInput("commit", "A commit is at most 64 characters.")
    if claimed_sha256 is not None and not SHA256_RE.match(claimed_sha256.lower()):
        raise InvalidInput("sha256", "Expected 64 hexadecimal characters.")
    with ExitStack() as stack:
        sha256, size, readable = _hash_upload(content, stack)
        if claimed_sha256 is not None and claimed_sha256.lower() != sha256:
            raise DigestMismatch(f"The upload's sha256 is {sha256}, not {claimed_sha256.lower()}; nothing was stored.")
        _check_quota(project, sha256, size)
        blob = _save_blob(sha256, size, readable)
    with transaction.atomic():
        run = _locked_run(project, run_external_id, timezone.now())
        artifact, created = Artifact.objects.get_or_create(
            run=run, path=path, blob=blob, commit=commit, defaults={"kind": kind, "content_type": content_type}
        )
        if created:
            Submission.objects.filter(run=run, artifact__isnull=True, artifact_ref__in=[sha256, path]).update(
                artifact=artifact
            )
            run.last_progress_at, run.stalled_since = timezone.now(), None
            run.save(update_fields=["last_progress_at", "stalled_since", "updated"])
            record_audit(by, "artifact.stored", artifact, project=project, path=path, sha256=sha256, size=size)
    return artifact, created


def _hash_upload(content: IO[bytes], stack: ExitStack) -> tuple[str, int, IO[bytes]]:
    """sha256 and size of the upload, and something to read its bytes from again.

    Uploads Django already spooled to disk are read twice in place; only unseekable streams are copied.
    """
    seekable = getattr(content, "seekable", lambda: False)()
    spool = None if seekable else stack.enter_context(tempfile.TemporaryFile())
    digest, size = hashlib.sha256(), 0
    for chunk in iter(lambda: content.read(1024 * 1024), b""):
        size += len(chunk)
        if size > settings.MAX_ARTIFACT_BYTES:
            raise ArtifactTooLarge(f"Artifacts are limited to {settings.MAX_ARTIFACT_BYTES} bytes.")
        digest.update(chunk)
        if spool is not None:
            spool.write(chunk)
    readable = content if spool is None else spool
    readable.seek(0)
    return digest.hexdigest(), size, readable


def _save_blob(sha256: str, size: int, readable: IO[bytes]) -> ArtifactBlob:
    """The blob for these bytes, storing them if they are new.

    Bytes go under a name of their own and the row is created only once they are complete, so a
    crash mid-write leaves an unreferenced file, never a row pointing at partial bytes; when two
    writers race on new bytes, the loser deletes its copy.
    """
    blob = ArtifactBlob.objects.filter(sha256=sha256).first()
    if blob is not None:
        return blob  # same bytes already stored: keep one copy
    storage = artifact_storage()
    name = storage.save(blob_storage_name(sha256, unique=uuid.uuid4().hex[:12]), File(readable))
    blob, created = ArtifactBlob.objects.get_or_create(sha256=sha256, defaults={"size": size, "storage_name": name})
    if not created:
        storage.delete(name)
    return blob


def open_blob(blob: ArtifactBlob) -> IO[bytes]:
    """Open a stored blob for reading."""
    return artifact_storage().open(blob.storage_name, "rb")


# --- stalled runs -----------------------------------------------------------------------------


def flag_stalled_runs(now: datetime | None = None) -> list[Run]:
    """Mark live runs with no progress for their project's stall_after as stalled; return them."""
    now = now or timezone.now()
    deadline = ExpressionWrapper(Value(now) - F("project__stall_after"), output_field=Run._meta.get_field("last_progress_at"))
    candidates = list(
        Run.objects.select_related("project")
        .exclude(state__in=[*TERMINAL_STATES, RunState.PAUSED])  # a paused run is quiet on purpose
        .filter(stalled_since__isnull=True, last_progress_at__lt=deadline)
    )
    flagged = []
    for run in candidates:
        with transaction.atomic():
            # Claim the row: ingest may have brought news since the query above.
            claimed = Run.objects.filter(
                pk=run.pk, stalled_since__isnull=True, last_progress_at=run.last_progress_at
            ).update(stalled_since=now, updated=now)  # `updated` versions the dashboard's polls
            if claimed:
                run.stalled_since = now
                record_audit(None, "run.stalled", run, project=run.project,
                             last_progress_at=run.last_progress_at.isoformat())
                flagged.append(run)
    return flagged



# --- polled sources (SMR) ---------------------------------------------------------------------


POLL_FIELDS = ("live_phase", "terminal_outcome", "requested_profile", "actual_profile", "budget_usd",
               "other_meters_usd", "source_total_usd", "source_updated_at", "source_cursor", "git_branch", "git_commit",
               "source_spend", "spend_unaccounted", "entries_unreadable", "actor_profiles")


def record_poll(project: Project, external_id: str, **fields: Any) -> Run:
    """Store what a poll saw of a run beyond its events: phase, profiles, budget, meters, cursor."""
    _only(fields, POLL_FIELDS, "a polled run field")
    with transaction.atomic():
        return _set_run_fields(project, external_id, {**fields, "last_polled_at": timezone.now()})


def source_health(project: Project):
    """The project's source-health row (created on first use)."""
    from smrweb.tracking.models import SourceHealth

    health, _ = SourceHealth.objects.get_or_create(project=project)
    return health


def claim_source_lease(project: Project, *, owner: str, seconds: float) -> bool:
    """Take the project's polling lease unless another worker holds a live one."""
    from smrweb.tracking.models import SourceHealth

    source_health(project)
    now = timezone.now()
    claimed = (
        SourceHealth.objects.filter(project=project)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner))
        .update(lease_until=now + timedelta(seconds=seconds), lease_owner=owner, last_attempt_at=now)
    )
    return claimed == 1


def release_source_lease(project: Project, *, owner: str) -> None:
    from smrweb.tracking.models import SourceHealth

    SourceHealth.objects.filter(project=project, lease_owner=owner).update(lease_until=None, lease_owner="")


def record_source_success(project: Project, *, active_runs: int, next_in: float, warning: str = "") -> None:
    """A sync worked: clear the failure streak and schedule the next one. `warning` says what it read
    but could not fully trust (health is amber while it is set)."""
    from smrweb.tracking.models import SourceHealth

    now = timezone.now()
    SourceHealth.objects.filter(project=project).update(
        last_success_at=now, consecutive_failures=0, active_runs=active_runs,
        next_attempt_at=now + timedelta(seconds=next_in), updated=now,
        warning=warning[:2000].replace("\x00", "\ufffd"),
    )


def record_full_listing(project: Project) -> None:
    """A sync walked every page of the project's runs (the next walks may stop at known runs)."""
    from smrweb.tracking.models import SourceHealth

    SourceHealth.objects.filter(project=project).update(full_list_at=timezone.now())


SOURCE_DIRECTIONS = {"higher_is_better": Direction.MAXIMIZE, "maximize": Direction.MAXIMIZE, "max": Direction.MAXIMIZE,
                     "higher": Direction.MAXIMIZE, "lower_is_better": Direction.MINIMIZE,
                     "minimize": Direction.MINIMIZE, "min": Direction.MINIMIZE, "lower": Direction.MINIMIZE}


def note_declared_metrics(project: Project, declared: dict[str, str]) -> Project:
    """Remember the metrics a project's SMR experiments declare; a project that listens to them
    (`score_metric` "auto", or the name an admin picked) scores the one metric they declare, or the
    picked one, in its declared direction. Earlier results of it become scores on the next read."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        settings_ = dict(project.source_settings)
        known = dict(settings_.get("declared_metrics") or {})
        for metric, direction in declared.items():
            known.setdefault(str(metric)[:200], str(direction)[:50])
        if len(known) > 50:  # a source that names a metric per result is not declaring a score
            known = dict(sorted(known.items())[:50])
        choice = settings_.get("score_metric")
        target = next(iter(known)) if choice == "auto" and len(known) == 1 else (choice if choice in known else None)
        changed = known != settings_.get("declared_metrics")
        if changed:
            settings_["declared_metrics"] = known
            project.source_settings = settings_
            project.save(update_fields=["source_settings", "updated"])
        if target is not None:
            direction = SOURCE_DIRECTIONS.get(str(known[target]).lower(), Direction.MAXIMIZE)
            if (project.scenario.score_metric, project.scenario.direction) != (target, direction):
                _adopt_scenario(project, target, direction)
    return project


def _adopt_scenario(project: Project, metric: str, direction: str) -> None:
    """Point the project at the scenario "SMR experiments: <direction> <metric>" (made once, not shared)
    and have every run's results read again so earlier results of that metric become scores."""
    from django.utils.text import slugify

    digest = hashlib.blake2b(f"{metric}|{direction}".encode(), digest_size=4).hexdigest()
    key = f"smr-{slugify(metric)[:60] or 'metric'}-{direction}-{digest}"
    scenario, _ = Scenario.objects.get_or_create(key=key, defaults={
        "name": f"SMR experiments: {direction} {metric}"[:200], "score_metric": metric, "direction": direction,
        "description": "Adopted from the metric and direction that the SMR project's experiments declare."})
    before = project.scenario.key
    project.scenario = scenario
    project.save(update_fields=["scenario", "updated"])
    for run in Run.objects.filter(project=project).only("pk", "source_cursor"):
        cursor = dict(run.source_cursor or {})
        cursor.pop("results", None)
        # source_updated_at cleared: a finished run is synced again too (its results are read anew).
        Run.objects.filter(pk=run.pk).update(source_cursor=cursor, source_updated_at=None)
    record_audit(None, "project.metric_adopted", project, project=project, scenario=key, before=before,
                 metric=metric, direction=direction)


def replace_smr_api_key(project: Project, api_key: str, *, by: Any = None, check_binding: Any = None) -> Project:
    """Give an SMR project a key of its own (sealed), asked of the backend first when `check_binding`."""
    from smrweb.core.secrets import seal

    if project.source != SourceKind.SMR:
        raise InvalidInput("smr_api_key", "Only projects whose source is smr have an SMR API key.")
    if not api_key or len(api_key) > 1000:
        raise InvalidInput("smr_api_key", "Enter the new API key (at most 1000 characters).")
    if check_binding is not None:
        check_binding(smr_project_id=project.source_settings.get("smr_project_id", ""), api_key=api_key,
                      backend_base=project.source_settings.get("backend_base", ""), operator=False)
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        settings_ = {k: v for k, v in project.source_settings.items() if k != "operator_key"}
        settings_["api_key_sealed"] = seal(api_key)
        project.source_settings = settings_
        project.save(update_fields=["source_settings", "updated"])
        record_audit(by, "project.smr_key_replaced", project, project=project)  # never the key itself
    return project


def choose_score_metric(project: Project, metric: str, *, by: Any = None) -> Project:
    """An admin picks which declared metric is the project's score (or "auto": the only one declared)."""
    declared = project.source_settings.get("declared_metrics") or {}
    if metric != "auto" and metric not in declared:
        raise InvalidInput("score_metric", f"Choose one of the metrics the SMR experiments declare: "
                                           f"{', '.join(sorted(declared)) or 'none yet'}.")
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        project.source_settings = {**project.source_settings, "score_metric": metric}
        project.save(update_fields=["source_settings", "updated"])
        record_audit(by, "project.score_metric_chosen", project, project=project, metric=metric)
    return note_declared_metrics(project, {})


def record_source_failure(project: Project, *, kind: str, message: str, retry_in: float) -> None:
    """A sync failed: keep the error for the page and push the next attempt back."""
    from smrweb.tracking.models import SourceHealth

    now = timezone.now()
    with transaction.atomic():
        health = SourceHealth.objects.select_for_update().get(project=project)
        # A source's own words (git's stderr, a backend's body) may hold NUL, which PostgreSQL text cannot.
        health.last_error_at, health.last_error, health.last_error_kind = now, message[:2000].replace("\x00", "\ufffd"), kind
        health.consecutive_failures += 1
        health.next_attempt_at = now + timedelta(seconds=retry_in)
        health.save()


def claim_due_projects(*, hold_seconds: float, now: datetime | None = None) -> list[int]:
    """Ids of polled projects whose next attempt is due, each pushed `hold_seconds` ahead so that the
    next beat tick does not enqueue it again while its sync is queued or running."""
    from smrweb.tracking.models import SourceHealth

    now = now or timezone.now()
    from smrweb.tracking.models import POLLED_SOURCES

    for project in Project.objects.filter(source__in=POLLED_SOURCES, source_health__isnull=True):
        source_health(project)
    claimed = []
    for pk in SourceHealth.objects.filter(project__source__in=POLLED_SOURCES, next_attempt_at__lte=now).values_list(
        "project_id", flat=True
    ):
        if SourceHealth.objects.filter(project_id=pk, next_attempt_at__lte=now).update(
            next_attempt_at=now + timedelta(seconds=hold_seconds)
        ):
            claimed.append(pk)
    return claimed


def store_known_artifact(project: Project, run_external_id: str, *, sha256: str, path: str, kind: str,
                         content_type: str, commit: str = "") -> Artifact | None:
    """Record an artifact whose bytes are already stored (same digest): no download needed.

    Returns None when the bytes are not known yet, so the caller pulls them once.
    """
    blob = ArtifactBlob.objects.filter(sha256=sha256).first()
    if blob is None:
        return None
    with transaction.atomic():
        run = _locked_run(project, run_external_id, timezone.now())
        artifact, created = Artifact.objects.get_or_create(
            run=run, path=path, blob=blob, commit=commit, defaults={"kind": kind, "content_type": content_type[:200]}
        )
        if created:
            Submission.objects.filter(run=run, artifact__isnull=True, artifact_ref__in=[sha256, path]).update(
                artifact=artifact
            )
            run.save(update_fields=["updated"])  # the run page shows its artifacts: a new version to poll
    return artifact


def request_stop(run: Run, *, by: Any) -> AuditEvent:
    """Record that someone asked to stop a run; the caller dispatches the stop after commit."""
    if run.is_terminal:
        raise InvalidInput("run", f"The run is already {run.state}.")
    return record_audit(by, "run.stop_requested", run, project=run.project)


def record_stop_result(run: Run, *, ok: bool, detail: str) -> AuditEvent:
    return record_audit(None, "run.stopped" if ok else "run.stop_failed", run, project=run.project, detail=detail)
