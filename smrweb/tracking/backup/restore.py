"""Import: a checked archive written in one transaction, every key re-mapped; blob bytes stored the\nway
every upload stores them."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, models, transaction

from smrweb.tracking import services
from smrweb.tracking.backup import tables
from smrweb.tracking.backup.archive import _Archive
from smrweb.tracking.backup.tables import (
    AUDITED,
    BLOBS,
    PROJECT,
    SCENARIO,
    SCENARIO_TRUSTED_ONLY,
    TABLES,
    TRUSTED_ONLY,
    USER_COLUMNS,
    USER_FILE,
    BackupError,
    Table,
    _has_field,
)
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import (
    AgentTurn,
    ApiToken,
    ArtifactBlob,
    AuditEvent,
    AuditVerb,
    Membership,
    MetricPoint,
    Project,
    Run,
    RunLaunch,
    Scenario,
    ShareLink,
    TurnBody,
)
from smrweb.tracking.services.figures import rebuild_project_figures


@dataclass(frozen=True)
class ImportResult:
    project: Project
    counts: dict[str, int]  # rows written per table (api tokens left out are not counted)
    created_users: list[str]  # usernames that did not exist here, created inactive without a password
    warnings: list[str] = field(default_factory=list)  # what was not restored, and why


def import_project(
    path: str | os.PathLike,
    *,
    slug: str | None = None,
    scenario_key: str | None = None,
    by: Any = None,
    trust: bool = False,
) -> ImportResult:
    """Restore an archive as a new project, under `slug` (default: the archived one).

    The archive is verified whole before anything is written; then every row goes in within one
    transaction. A refused or failed import writes nothing (blobs it stored are deleted again).
    `scenario_key` restores the archived scenario under that key when the one of the archived key
    differs here.

    An archive is input like any other (red-team finding 5): without `trust` its API tokens, memberships,
    SMR backend address and key and rollback webhook are left out (and said so); with `trust` they are
    restored, and the addresses still pass the outbound guard.
    """
    with _Archive(path) as archive:
        target = slug or archive.manifest["project"]
        _check_new_slug(target)
        if scenario_key is not None and not services.SLUG_RE.match(scenario_key):
            raise BackupError("A scenario key is letters, digits, hyphens or underscores.")
        archive.verify()
        importer = _Importer(archive, slug=target, scenario_key=scenario_key, trust=trust)
        try:
            with transaction.atomic():
                return importer.run(by)
        except BaseException as exc:
            importer.delete_stored_blobs()  # their rows were rolled back: the bytes are nobody's
            if isinstance(exc, IntegrityError | DataError):
                raise BackupError(
                    f"The archive's rows do not fit this database ({exc}); nothing was imported."
                ) from exc
            raise


def _check_new_slug(slug: str) -> None:
    if not slug or len(slug) > 100 or not services.SLUG_RE.match(slug):
        raise BackupError(f"{slug!r} is not a slug: 1 to 100 letters, digits, hyphens or underscores.")
    if Project.objects.filter(slug=slug).exists():
        raise BackupError(
            f"A project with slug {slug!r} already exists here; import the archive under a new "
            "slug (--as NEWSLUG)."
        )


def _stamped(f: models.Field) -> bool:
    return getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)


def _insert(model: type[models.Model], objs: list[models.Model]) -> None:
    """bulk_create that keeps the archive's timestamps: auto_now(_add) fields are set to now by any
    insert, so they are written again with bulk_update, which sets what it is given (a stamp the
    archive lacks keeps the insert's now)."""
    stamps = [f.name for f in model._meta.concrete_fields if _stamped(f)]
    kept = [[getattr(obj, name) for name in stamps] for obj in objs]
    model._default_manager.bulk_create(objs, batch_size=tables.CHUNK_SIZE)
    if stamps and objs:
        for obj, values in zip(objs, kept):
            for name, value in zip(stamps, values):
                if value is not None:
                    setattr(obj, name, value)
        model._default_manager.bulk_update(objs, stamps, batch_size=tables.CHUNK_SIZE)


class _Importer:
    def __init__(self, archive: _Archive, *, slug: str, scenario_key: str | None, trust: bool = False):
        self.archive, self.slug, self.scenario_key, self.trust = archive, slug, scenario_key, trust
        self.user_model = get_user_model()
        # Per model: what the archive calls a row (ref number, scenario key, digest) → its new pk.
        self.refs: dict[type[models.Model], dict[int | str, int]] = {}
        self.skipped: dict[type[models.Model], set[int]] = {}  # refs deliberately not restored
        self.users: dict[str, int] = {}
        self.created_users: list[str] = []
        self.warnings: list[str] = []
        self.counts: dict[str, int] = {}
        self.stored: list[str] = []  # storage names of blob bytes this import wrote
        self.project: Project | None = None

    def run(self, by: Any) -> ImportResult:
        self._users()
        scenario = self._scenario()
        self.project = self._project(scenario)
        for table in TABLES[2:]:
            if table is BLOBS:
                self._blobs()
            elif table.name in TRUSTED_ONLY and not self.trust:
                self._leave_out(table)
            else:
                self._table(table)
                if table.name == "membership" and self.counts.get("membership"):
                    self.warnings.append(
                        "restored memberships (--trust): "
                        + ", ".join(
                            f"{m.user.get_username()} {m.role}"
                            for m in Membership.objects.filter(project=self.project)
                            .select_related("user")
                            .order_by("pk")
                        )
                    )
        services.rebuild_turn_rollups(  # derived, not archived (tables.DERIVED)
            Run.objects.filter(project=self.project, turn_count__gt=0).values_list("pk", flat=True)
        )
        services.rebuild_metric_rollups(
            MetricPoint.objects.filter(run__project=self.project).values_list("run_id", flat=True).distinct()
        )
        rebuild_project_figures(self.project.pk, runs=True)  # derived too: the overview's figures
        services.record_audit(
            by,
            AuditVerb.PROJECT_IMPORTED,
            self.project,
            slug=self.slug,
            archived_slug=self.archive.manifest["project"],
            exported_at=self.archive.manifest.get("exported_at"),
            created_users=self.created_users,
            warnings=self.warnings,
        )  # outside the project's own trail (project=None), which stays exactly the archived one
        return ImportResult(self.project, self.counts, self.created_users, self.warnings)

    def delete_stored_blobs(self) -> None:
        storage = services.artifact_storage()
        for name in self.stored:
            storage.delete(name)

    # rows

    def _decode(self, table: Table, row: dict[str, Any], where: str) -> tuple[models.Model, dict[str, Any]]:
        """A model instance from an archive row (not saved) and its self-references to set later."""
        allowed = {f.name for f in table.fields} | set(table.extra) | ({"ref"} if table.ref else set())
        unknown = sorted(row.keys() - allowed)
        if unknown:
            raise BackupError(f"{where}: unknown column {unknown[0]!r} (an archive of a newer smrweb?).")
        if table.ref and (type(row.get("ref")) is not int):
            raise BackupError(f"{where}: no ref number.")
        values: dict[str, Any] = {}
        if self.project is not None:  # the archive's one project: the link every row has implicitly
            values.update({f.attname: self.project.pk for f in table.project_fields})
        later: dict[str, Any] = {}
        for f in table.fields:
            if f.name not in row:
                if f.has_default() or f.null or _stamped(f):
                    continue  # a column this archive predates: the model's default
                raise BackupError(f"{where}: no {f.name}.")
            raw = row[f.name]
            if raw is None:
                if not f.null:
                    raise BackupError(f"{where}: {f.name} cannot be empty.")
                values[f.attname] = None
            elif f.related_model is self.user_model:
                if raw not in self.users:
                    raise BackupError(f"{where}: {f.name} names user {raw!r}, who is not in {USER_FILE}.")
                values[f.attname] = self.users[raw]
            elif f.related_model is table.model:
                later[f.name] = raw
            elif f.related_model is not None:
                pk = self.refs.get(f.related_model, {}).get(raw)
                if pk is None:
                    raise BackupError(
                        f"{where}: {f.name} points at {raw!r}, which the archive does not hold."
                    )
                values[f.attname] = pk
            else:
                try:
                    value = f.to_python(raw)
                    f.run_validators(value)  # the field's own rules (an arena's time zone, a limit's range)
                except ValidationError as exc:
                    raise BackupError(f"{where}: {f.name}: {' '.join(exc.messages)}") from None
                if f.max_length is not None and isinstance(value, str) and len(value) > f.max_length:
                    raise BackupError(f"{where}: {f.name} is longer than {f.max_length} characters.")
                values[f.attname] = value
        return table.model(**values), later

    def _table(self, table: Table) -> None:
        batch: list[tuple[Any, models.Model, dict[str, Any]]] = []
        deferred: list[tuple[models.Model, dict[str, Any]]] = []
        self.counts[table.name] = 0
        for where, row in self.archive.rows(table.file):
            obj, later = self._decode(table, row, where)
            if table.model is AuditEvent:
                self._resolve_audited_object(obj, row, where)
            if table.model is TurnBody:
                obj.archived_event_id = row.get("event_id")  # its turn, found per batch in _flush
            batch.append((row.get("ref"), obj, later))
            if len(batch) >= table.rows_per_chunk:
                deferred += self._flush(table, batch)
                batch = []
        deferred += self._flush(table, batch)
        if deferred:  # self-references (an experiment's parent): every row of the table is in now
            refs = self.refs[table.model]
            names: set[str] = set()
            for obj, later in deferred:
                for name, ref in later.items():
                    if ref not in refs:
                        raise BackupError(
                            f"{table.file}: a row's {name} points at ref {ref!r}, which the archive "
                            "does not hold."
                        )
                    setattr(obj, table.model._meta.get_field(name).attname, refs[ref])
                    names.add(name)
            table.model._default_manager.bulk_update(
                [obj for obj, _ in deferred], sorted(names), batch_size=tables.CHUNK_SIZE
            )

    def _flush(self, table: Table, batch: list[tuple[Any, models.Model, dict[str, Any]]]):
        if table.model in (ApiToken, ShareLink):
            batch = self._without_tokens_in_use(table.model, batch)
        if table.model is RunLaunch:
            self._rekey_launches_in_use(batch)
        if table.model is TurnBody:
            self._link_turns(table, [obj for _, obj, _ in batch])
        _insert(table.model, [obj for _, obj, _ in batch])
        self.counts[table.name] += len(batch)
        if table.ref:
            refs = self.refs.setdefault(table.model, {})
            for ref, obj, _ in batch:
                if ref in refs:
                    raise BackupError(f"{table.file}: ref {ref} appears twice.")
                refs[ref] = obj.pk
        return [(obj, later) for _, obj, later in batch if later]

    def _link_turns(self, table: Table, bodies: list[TurnBody]) -> None:
        """Point each body at its turn, named in the archive by its run and event id (one query a batch)."""
        event_ids = {body.archived_event_id for body in bodies if isinstance(body.archived_event_id, str)}
        turns = dict(
            (
                ((run_id, event_id), pk)
                for pk, run_id, event_id in AgentTurn.objects.filter(
                    run_id__in={body.run_id for body in bodies}, event_id__in=event_ids
                ).values_list("pk", "run_id", "event_id")
            )
        )
        for body in bodies:
            pk = turns.get((body.run_id, body.archived_event_id))
            if pk is None:
                raise BackupError(
                    f"{table.file}: a body names turn {body.archived_event_id!r} of its run, which the "
                    "archive does not hold."
                )
            body.turn_id = pk

    def _without_tokens_in_use(self, model, batch):
        """A token hash (an API token's, a share link's) is unique across the deployment: a restored copy
        next to its original (or a token another project holds) cannot have it too. Such rows are left out
        and named."""
        in_use = set(
            model.objects.filter(token_hash__in=[obj.token_hash for _, obj, _ in batch]).values_list(
                "token_hash", flat=True
            )
        )
        kept = []
        for ref, obj, later in batch:
            if obj.token_hash not in in_use:
                kept.append((ref, obj, later))
                continue
            self.skipped.setdefault(model, set()).add(ref)
            if model is ApiToken:
                self.warnings.append(
                    f"API token {obj.name!r} ({obj.hint}…) is in use here by another project and "
                    "was not restored: create a new token for this project."
                )
            else:
                self.warnings.append(
                    f"Share link #{ref} ({obj.kind}) is in use here by another project and was not restored: "
                    "share the page again from this project."
                )
        return kept

    def _rekey_launches_in_use(self, batch) -> None:
        """A launch's idempotency key is unique across the deployment (it is what a repeated request is
        recognised by): a restored copy next to its original gets the key with a suffix, and says so."""
        keys = [obj.idempotency_key for _, obj, _ in batch]
        in_use = set(
            RunLaunch.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True)
        )
        rekeyed = 0
        for _, obj, _ in batch:
            if obj.idempotency_key in in_use:
                base, n = f"{obj.idempotency_key[:78]}-restored-{self.project.pk}", 1
                obj.idempotency_key = base
                while RunLaunch.objects.filter(idempotency_key=obj.idempotency_key).exists():
                    n += 1
                    obj.idempotency_key = f"{base}-{n}"
                rekeyed += 1
        if rekeyed:
            self.warnings.append(
                f"{rekeyed} launch(es) got a new idempotency key: their keys are in use here by the "
                "project they were exported from."
            )

    def _leave_out(self, table: Table) -> None:
        """A table only a trusted import restores: its rows are counted and named, not written."""
        refs = {
            row["ref"]
            for _, row in self.archive.rows(table.file)
            if table.ref and type(row.get("ref")) is int
        }
        self.skipped.setdefault(table.model, set()).update(refs)
        self.counts[table.name] = 0
        left = sum(1 for _ in self.archive.rows(table.file))
        if left:
            self.warnings.append(
                f"{left} {table.name.replace('_', ' ')} row(s) were not restored: they grant access or "
                "send to addresses, and only an import with --trust restores them."
            )

    def _resolve_audited_object(self, event: AuditEvent, row: dict[str, Any], where: str) -> None:
        ref = row.get("object_ref")
        if ref is None:
            return
        model = AUDITED.get(event.object_type)
        if model is None or type(ref) is not int:
            raise BackupError(f"{where}: object_ref {ref!r} for a {event.object_type!r} cannot be resolved.")
        pk = self.refs.get(model, {}).get(ref)
        if pk is not None:
            event.object_id = str(pk)
        elif ref in self.skipped.get(model, set()):
            event.object_id = ""  # the object was left out on purpose (a token in use here)
        else:
            raise BackupError(
                f"{where}: object_ref {ref} names a {event.object_type} the archive does not hold."
            )

    # the special tables

    def _users(self) -> None:
        """Users are matched by username. One that does not exist here is created inactive, with no
        usable password: history keeps its name, and nobody can log in as it until an admin says so."""
        User = self.user_model
        for where, row in self.archive.rows(USER_FILE):
            username = row.get("username")
            unknown = sorted(row.keys() - {"username", *USER_COLUMNS})
            if not isinstance(username, str) or not username or unknown:
                raise BackupError(f"{where}: a user row is a username and {', '.join(USER_COLUMNS)}.")
            user = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
            if user is None:
                extra = {
                    c: row[c] for c in USER_COLUMNS if isinstance(row.get(c), str) and _has_field(User, c)
                }
                user = User(**{User.USERNAME_FIELD: username}, **extra)
                user.is_active = False
                user.set_unusable_password()
                user.save()
                self.created_users.append(username)
            self.users[username] = user.pk

    def _scenario(self) -> Scenario:
        """The archived scenario: the one of its key when that is the same definition, else created
        (under `scenario_key` when given). A different definition under the same key is refused:
        direction and bounds change what every score means.

        Without `trust`, what the scenario would make this server do is not taken from the archive
        (finding N7): the commands a worker runs on every submission, and sharing with every user who
        may create a project. A new scenario is created without them, and said so; an existing one of
        the same key is this server's own and keeps its own."""
        [(where, row)] = list(self.archive.rows(SCENARIO.file))
        archived, _ = self._decode(SCENARIO, row, where)
        archived_key = archived.key
        archived.key = self.scenario_key or archived_key
        ignored = () if self.trust else SCENARIO_TRUSTED_ONLY
        existing = Scenario.objects.filter(key=archived.key).first()
        if existing is None:
            if not self.trust:
                self._restrict_scenario(archived)
            _insert(Scenario, [archived])
            scenario = archived
        else:
            differs = [
                f.name
                for f in SCENARIO.fields
                if f.name not in ("key", "created", "updated", *ignored)
                and getattr(existing, f.attname) != getattr(archived, f.attname)
            ]
            if differs:
                raise BackupError(
                    f"Scenario {archived.key!r} exists here with a different {', '.join(differs)}; "
                    "import with --scenario-as NEWKEY to restore the archived definition under a "
                    "new key."
                )
            scenario = existing
        self.refs[Scenario] = {archived_key: scenario.pk}
        return scenario

    def _restrict_scenario(self, scenario: Scenario) -> None:
        dropped = [
            name
            for name in SCENARIO_TRUSTED_ONLY
            if getattr(scenario, name) != Scenario._meta.get_field(name).get_default()
        ]
        for name in SCENARIO_TRUSTED_ONLY:
            setattr(scenario, name, Scenario._meta.get_field(name).get_default())
        if dropped:
            self.warnings.append(
                f"scenario {scenario.key!r} restored without its {', '.join(dropped)}: an archive may not "
                "make this server run a command or publish a scenario to everyone; import with --trust to "
                "restore them, or set them again (staff, the scenario's page)."
            )

    def _project(self, scenario: Scenario) -> Project:
        [(where, row)] = list(self.archive.rows(PROJECT.file))
        if row.get("slug") != self.archive.manifest["project"]:
            raise BackupError(
                f"{where}: the slug is not the manifest's {self.archive.manifest['project']!r}."
            )
        project, _ = self._decode(PROJECT, row, where)
        project.slug = self.slug
        self._restrict_bindings(project)
        sealed = (project.source_settings or {}).get("api_key_sealed")
        if sealed:
            from nacl.exceptions import CryptoError

            from smrweb.core.secrets import reveal

            try:
                reveal(sealed)
            except (CryptoError, ValueError, TypeError):
                # Sealed with the exporting deployment's SECRET_KEY: unusable here, and the poller
                # would fail on it, so it is left out and the admin sets the key again.
                project.source_settings = {
                    k: v for k, v in project.source_settings.items() if k != "api_key_sealed"
                }
                self.warnings.append(
                    "The project's SMR API key was sealed with another SECRET_KEY and cannot be "
                    "opened here; it was left out: set it again in the project settings."
                )
        _insert(Project, [project])
        self.refs[Project] = {row["ref"]: project.pk}
        self.counts["project"] = 1
        return project

    def _restrict_bindings(self, project: Project) -> None:
        """Addresses and keys smrweb would use: left out unless trusted, and checked like any user's."""
        settings_ = dict(project.source_settings or {})
        bound = {
            key: settings_[key]
            for key in ("backend_base", "api_key_sealed", "operator_key")
            if key in settings_
        }
        if not self.trust:
            # A repository path too: an archive may not bind this server to a directory on its disk
            # (another team's repository, red-team N3), nor pin one.
            bound.update({k: settings_[k] for k in (services.GIT_PIN,) if k in settings_})
            dropped = [
                *(k for k in bound if k != services.GIT_PIN),
                *(["rollback_webhook_url"] if project.rollback_webhook_url else []),
                *(["git_repo_path"] if project.git_repo_path else []),
            ]
            if dropped:
                self.warnings.append(
                    f"left out {', '.join(dropped)}: an archive may not point this server at an "
                    "address, a repository or a key; import with --trust to restore them, or set them again."
                )
            project.source_settings = {k: v for k, v in settings_.items() if k not in bound}
            project.rollback_webhook_url = project.git_repo_path = ""
            return
        try:
            if project.rollback_webhook_url:
                services.check_outbound_url("rollback_webhook_url", project.rollback_webhook_url)
            if bound.get("backend_base"):
                services.check_outbound_url("backend_base", bound["backend_base"])
        except TrackingError as exc:
            raise BackupError(
                f"The archived project's {getattr(exc, 'field', 'address')}: {exc.message}"
            ) from None

    def _blobs(self) -> None:
        """Blob rows and bytes. Bytes already stored here (same digest) are not stored twice; new ones
        are copied out of the archive, checked against their digest, then stored under it."""
        refs = self.refs.setdefault(ArtifactBlob, {})
        self.counts[BLOBS.name] = 0
        for where, row in self.archive.rows(BLOBS.file):
            blob, _ = self._decode(BLOBS, row, where)
            name = f"blobs/{blob.sha256}"
            if name not in self.archive.files or self.archive.files[name]["size"] != blob.size:
                raise BackupError(
                    f"{where}: the archive holds no bytes of {blob.sha256} of size {blob.size}."
                )
            if blob.sha256 in refs:
                raise BackupError(f"{where}: blob {blob.sha256} appears twice.")
            refs[blob.sha256] = self._store(name, blob).pk
            self.counts[BLOBS.name] += 1
        held = {name.removeprefix("blobs/") for name in self.archive.files if name.startswith("blobs/")}
        unused = held - set(refs)
        if unused:
            raise BackupError(f"The archive holds bytes no blob row names: {', '.join(sorted(unused)[:3])}.")

    def _store(self, member: str, blob: ArtifactBlob) -> ArtifactBlob:
        """The blob row of these bytes: the one already here, or a new one once the archive's bytes are
        checked and stored the way every upload stores them (`services.save_blob`)."""
        # Locked until the import commits, so the blob collector cannot take bytes no artifact holds
        # yet before the restored artifacts hold them (services.collect_blob re-checks under this lock).
        existing = ArtifactBlob.objects.select_for_update().filter(sha256=blob.sha256).first()
        if existing is not None:
            return existing
        with tempfile.TemporaryFile() as spool:
            for chunk in self.archive.chunks(member):  # raises unless the bytes match their digest
                spool.write(chunk)
            spool.seek(0)
            with transaction.atomic():  # a concurrent upload of the same new bytes may commit first
                stored, name = services.save_blob(blob.sha256, blob.size, spool, created=blob.created)
        if name is not None:
            self.stored.append(name)  # deleted again if the import fails
        return stored
