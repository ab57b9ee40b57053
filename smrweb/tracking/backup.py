"""Project backups: one self-contained archive per project, restored exactly (docs/backup.md).

An archive is a zip file:

    manifest.json            format and version, the project's slug, rows per table, and the sha256
                             and size of every other member
    data/<table>.jsonl       one JSON object per row; `data/user.jsonl` the users the rows name
    blobs/<sha256>           the bytes of every artifact of the project, named by their digest

Rows point at each other by archive-local numbers (`ref`), at users by username, at the scenario by
key and at blobs by digest: no primary key of the exporting database means anything in the archive,
and an import re-maps every foreign key.

Export reads one snapshot of the database, streaming every table in chunks (`.iterator()`), so a
project with millions of metric points never sits in memory. Import verifies the whole archive
(manifest, every member's sha256, every blob's bytes against its name) before it writes anything,
then writes in one transaction with `bulk_create` in chunks. Blob bytes go to storage under their
digest as `services.save_blob` stores them; the ones an import wrote are deleted again if it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC
from functools import cached_property
from pathlib import Path
from typing import Any, Self

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import DataError, IntegrityError, connection, models, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.duration import duration_iso_string

from smrweb.tracking import services
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import (
    AgentTurn,
    ApiToken,
    ArenaResult,
    Artifact,
    ArtifactBlob,
    AuditEvent,
    Checkpoint,
    Experiment,
    KnowledgeEntry,
    Membership,
    MetricPoint,
    Project,
    Review,
    Rollback,
    Run,
    RuntimeMessage,
    Scenario,
    SourceHealth,
    StateChange,
    Submission,
    SubmissionTransition,
)

FORMAT = "smrweb.project-archive"
VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 64 * 1024 * 1024  # a manifest lists every blob: large, but never this large
CHUNK_SIZE = 2000  # rows fetched per query chunk on export and inserted per bulk_create on import
COPY_BYTES = 1024 * 1024
USER_FILE = "data/user.jsonl"
USER_COLUMNS = ("email", "first_name", "last_name")  # carried besides the username (never passwords or flags)


class BackupError(TrackingError):
    """An archive that cannot be written or is refused; on import, nothing was written."""

    code = "backup_refused"


# --- what is in an archive ------------------------------------------------------------------------


def _of_project(model: type[models.Model]) -> Callable[[Project], QuerySet]:
    return lambda project: model._default_manager.filter(project=project).order_by("pk")


def _of_runs(model: type[models.Model]) -> Callable[[Project], QuerySet]:
    return lambda project: model._default_manager.filter(run__project=project).order_by("pk")


def _of_submissions(model: type[models.Model]) -> Callable[[Project], QuerySet]:
    return lambda project: model._default_manager.filter(submission__project=project).order_by("pk")


@dataclass(frozen=True)
class Table:
    """One model's rows of a project, as one `data/<name>.jsonl` file."""

    name: str
    model: type[models.Model]
    rows: Callable[[Project], QuerySet]  # the project's rows, in an order an import preserves (pk)
    ref: bool = False  # rows carry a `ref` that other rows (or audit events) point at
    key: str = ""  # rows are pointed at by this column instead of a ref (scenario key, blob digest)
    omit: tuple[str, ...] = ()  # columns not carried; docs/backup.md says why
    extra: tuple[str, ...] = ()  # columns of the archive that are not model fields

    @cached_property
    def fields(self) -> list[models.Field]:
        """The carried columns. The link to the project is implicit (the archive holds one project)."""
        return [f for f in self.model._meta.concrete_fields
                if not f.primary_key and f.name not in self.omit and f.related_model is not Project]

    @cached_property
    def project_fields(self) -> list[models.Field]:
        return [f for f in self.model._meta.concrete_fields if f.related_model is Project]

    @property
    def file(self) -> str:
        return f"data/{self.name}.jsonl"


# In dependency order: every table comes after the tables its rows point at (Experiment.parent, the
# one self-reference, is set once all experiments are in). Users are written apart (USER_FILE).
TABLES: tuple[Table, ...] = (
    Table("scenario", Scenario, lambda p: Scenario.objects.filter(pk=p.scenario_id), key="key"),
    Table("project", Project, lambda p: Project.objects.filter(pk=p.pk), ref=True),
    # A lease belongs to a worker of the exporting deployment: never carried, so the importing side
    # polls at once instead of waiting for a stranger's lease to lapse.
    Table("source_health", SourceHealth, _of_project(SourceHealth), omit=("lease_until", "lease_owner")),
    Table("membership", Membership, _of_project(Membership), ref=True),
    Table("api_token", ApiToken, _of_project(ApiToken), ref=True),
    Table("run", Run, _of_project(Run), ref=True),
    Table("state_change", StateChange, _of_runs(StateChange)),
    Table("experiment", Experiment, _of_runs(Experiment), ref=True),
    Table("metric_point", MetricPoint, _of_runs(MetricPoint)),
    Table("agent_turn", AgentTurn, _of_runs(AgentTurn)),
    Table("checkpoint", Checkpoint, _of_runs(Checkpoint), ref=True),
    Table("runtime_message", RuntimeMessage, _of_runs(RuntimeMessage)),
    # Where the bytes live is the storage's business: the importing side stores them anew.
    Table("artifact_blob", ArtifactBlob,
          lambda p: ArtifactBlob.objects.filter(artifacts__run__project=p).distinct().order_by("sha256"),
          key="sha256", omit=("storage_name",)),
    Table("artifact", Artifact, _of_runs(Artifact), ref=True),
    Table("submission", Submission, _of_project(Submission), ref=True),
    Table("submission_transition", SubmissionTransition, _of_submissions(SubmissionTransition)),
    Table("review", Review, _of_submissions(Review)),
    Table("arena_result", ArenaResult, _of_submissions(ArenaResult), ref=True),
    Table("rollback", Rollback, _of_runs(Rollback), ref=True),
    Table("knowledge_entry", KnowledgeEntry, _of_project(KnowledgeEntry), ref=True),
    # Project-scoped events only (scenario edits have no project). `object_ref` replaces object_id
    # when the event names a row of the archive.
    Table("audit_event", AuditEvent, _of_project(AuditEvent), extra=("object_ref",)),
)
TABLE_BY_NAME = {table.name: table for table in TABLES}
MAX_EXPANSION = 200  # the most a blob member may unpack to, per packed byte (export_project stores, not packs,
                     # bytes that do not shrink; text compresses well under this)
# What only an operator who trusts the archive restores (`--trust`): they grant access or send requests.
TRUSTED_ONLY = ("membership", "api_token")
# AuditEvent.object_type is the lower-cased model name of the object (services.record_audit).
AUDITED = {table.model.__name__.lower(): table.model for table in TABLES if table.ref}
COUNT_KEY = {USER_FILE: "user", **{table.file: table.name for table in TABLES}}  # data file → manifest count
DATA_FILES = frozenset(COUNT_KEY)
SCENARIO, PROJECT, BLOBS = TABLE_BY_NAME["scenario"], TABLE_BY_NAME["project"], TABLE_BY_NAME["artifact_blob"]


def default_archive_name(slug: str) -> str:
    return f"{slug}-{timezone.now().astimezone(UTC):%Y%m%dT%H%M%SZ}.smrweb.zip"


# --- export -----------------------------------------------------------------------------------------


def export_project(project: Project, path: str | os.PathLike) -> dict[str, Any]:
    """Write the project to a new archive at `path` and return its manifest.

    The archive is written next to `path` and renamed into place when complete, so a failed export
    leaves no file there; an existing file is never overwritten.
    """
    path = Path(path)
    if path.exists():
        raise BackupError(f"{path} already exists; choose another file.")
    if not path.parent.is_dir():
        raise BackupError(f"{path.parent} is not a directory.")
    partial = path.with_name(path.name + ".partial")
    try:
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf, _read_snapshot():
            manifest = _Exporter(project, zf).write()
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return manifest


@contextmanager
def _read_snapshot() -> Iterator[None]:
    """Read every table from one snapshot, so summaries match the rows they summarise while ingest
    goes on: a REPEATABLE READ transaction on PostgreSQL; on SQLite a DEFERRED one, which in WAL
    mode reads a snapshot without taking the write lock (IMMEDIATE, our default, would stop ingest
    for as long as the export runs). Inside a caller's transaction, that transaction is the snapshot."""
    if connection.in_atomic_block:
        yield
        return
    # A pending connection health check must not become the transaction's first query (PostgreSQL
    # refuses SET TRANSACTION after one).
    connection.cursor().close()
    if connection.vendor == "sqlite":
        mode = connection.transaction_mode  # read by the backend at BEGIN; set from OPTIONS at connect
        connection.transaction_mode = "DEFERRED"
        try:
            with transaction.atomic():
                connection.transaction_mode = mode
                yield
        finally:
            connection.transaction_mode = mode
    else:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield


class _Member:
    """A zip member being written: rows or bytes, hashed and counted on the way."""

    def __init__(self, stream):
        self.stream, self.digest, self.size, self.rows = stream, hashlib.sha256(), 0, 0
        self._pending: list[bytes] = []
        self._pending_size = 0

    def write(self, data: bytes) -> None:
        self.digest.update(data)
        self.size += len(data)
        self.stream.write(data)

    def write_row(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        self.rows += 1
        self._pending.append(line)
        self._pending_size += len(line)
        if self._pending_size >= COPY_BYTES:  # one deflate call per ~1 MB, not per row
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self.write(b"".join(self._pending))
            self._pending, self._pending_size = [], 0


def _encode_datetime(value):
    return None if value is None else value.astimezone(UTC).isoformat()


def _encode_decimal(value):
    return None if value is None else format(value, "f")  # never exponent notation


def _encode_duration(value):
    return None if value is None else duration_iso_string(value)


def _encoder_for(f: models.Field) -> Callable[[Any], Any] | None:
    if isinstance(f, models.DateTimeField):
        return _encode_datetime
    if isinstance(f, models.DecimalField):
        return _encode_decimal
    if isinstance(f, models.DurationField):
        return _encode_duration
    return None  # JSON can hold it as it is (str, int, float, bool, JSON)


class _Exporter:
    def __init__(self, project: Project, zf: zipfile.ZipFile):
        self.project, self.zf = project, zf
        self.user_model = get_user_model()
        # Per model: primary key → what the archive calls that row (a ref number, a key or a digest).
        self.refs: dict[type[models.Model], dict[int, int | str]] = {}
        self.usernames: dict[int, str] = {}
        self.files: dict[str, dict[str, Any]] = {}
        self.counts: dict[str, int] = {}

    def write(self) -> dict[str, Any]:
        # Numbered before any row is written, so a row may point forward (an experiment's parent).
        for table in TABLES:
            if table.key:
                pairs = table.rows(self.project).values_list("pk", table.key)
                self.refs[table.model] = dict(pairs.iterator(chunk_size=CHUNK_SIZE))
            elif table.ref:
                pks = table.rows(self.project).values_list("pk", flat=True).iterator(chunk_size=CHUNK_SIZE)
                self.refs[table.model] = {pk: number for number, pk in enumerate(pks, 1)}
        for table in TABLES:
            self._write_table(table)
        self._write_users()  # last: only now are all the users the rows name known
        self._write_blobs()
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": timezone.now().astimezone(UTC).isoformat(),
            "project": self.project.slug,
            "counts": self.counts,
            "files": self.files,
        }
        self.zf.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        return manifest

    @contextmanager
    def _member(self, name: str) -> Iterator[_Member]:
        with self.zf.open(name, "w", force_zip64=True) as stream:
            member = _Member(stream)
            yield member
            member.flush()
        self.files[name] = {"sha256": member.digest.hexdigest(), "size": member.size}

    def _write_table(self, table: Table) -> None:
        columns = []  # (archive column, encode)
        for f in table.fields:
            if f.related_model is not None:
                columns.append((f.name, self._user_encoder() if f.related_model is self.user_model
                                else self._ref_encoder(table, f)))
            else:
                columns.append((f.name, _encoder_for(f)))
        values = table.rows(self.project).values_list("pk", *(f.attname for f in table.fields))
        own_refs = self.refs.get(table.model) if table.ref else None
        with self._member(table.file) as out:
            for pk, *row_values in values.iterator(chunk_size=CHUNK_SIZE):
                row: dict[str, Any] = {"ref": own_refs[pk]} if own_refs is not None else {}
                for (name, encode), value in zip(columns, row_values):
                    row[name] = value if encode is None else encode(value)
                if table.model is AuditEvent:
                    self._name_audited_object(row)
                out.write_row(row)
        self.counts[table.name] = out.rows

    def _ref_encoder(self, table: Table, f: models.Field) -> Callable[[int | None], int | str | None]:
        refs = self.refs[f.related_model]

        def encode(pk):
            if pk is None:
                return None
            if pk not in refs:
                raise BackupError(f"A {table.model.__name__} of {self.project.slug} points at "
                                  f"{f.related_model.__name__} #{pk} of another project ({f.name}); "
                                  "such a row cannot be exported.")
            return refs[pk]

        return encode

    def _user_encoder(self) -> Callable[[int | None], str | None]:
        def encode(pk):
            if pk is None:
                return None
            if pk not in self.usernames:
                self.usernames[pk] = self.user_model._default_manager.filter(pk=pk).values_list(
                    self.user_model.USERNAME_FIELD, flat=True).get()
            return self.usernames[pk]

        return encode

    def _name_audited_object(self, row: dict[str, Any]) -> None:
        """Point the event at its object's ref when the object is in the archive; otherwise (another
        kind of object, or one deleted since) keep the id as it was written."""
        model = AUDITED.get(row["object_type"])
        object_id = row["object_id"]
        numeric = object_id.isascii() and object_id.isdigit()
        ref = self.refs[model].get(int(object_id)) if model and numeric else None
        row["object_ref"] = ref
        if ref is not None:
            row["object_id"] = ""

    def _write_users(self) -> None:
        User = self.user_model
        columns = [User.USERNAME_FIELD, *(c for c in USER_COLUMNS if _has_field(User, c))]
        users = User._default_manager.filter(pk__in=list(self.usernames)).order_by(User.USERNAME_FIELD)
        with self._member(USER_FILE) as out:
            for values in users.values_list(*columns).iterator(chunk_size=CHUNK_SIZE):
                out.write_row({"username": values[0], **dict(zip(columns[1:], values[1:]))})
        self.counts["user"] = out.rows

    def _write_blobs(self) -> None:
        for blob in BLOBS.rows(self.project).iterator(chunk_size=CHUNK_SIZE):
            try:
                source = services.open_blob(blob)
            except FileNotFoundError:
                raise BackupError(f"The bytes of blob {blob.sha256} are missing from artifact storage "
                                  f"({blob.storage_name}); the project cannot be exported whole.") from None
            with source, self._member(f"blobs/{blob.sha256}") as out:
                while chunk := source.read(COPY_BYTES):
                    out.write(chunk)
            if out.digest.hexdigest() != blob.sha256 or out.size != blob.size:
                raise BackupError(f"The stored bytes of blob {blob.sha256} ({blob.storage_name}) do not match "
                                  "its digest: artifact storage is damaged; nothing was exported.")


def _has_field(model: type[models.Model], name: str) -> bool:
    try:
        model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return True


# --- reading an archive ------------------------------------------------------------------------------


class _Archive:
    """An opened archive whose manifest was checked; every read is verified against the manifest."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.zf = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise BackupError(f"{self.path} is not a readable archive: {exc}") from None
        try:
            self.manifest = self._read_manifest()
            self._check_members()
        except BaseException:
            self.zf.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.zf.close()

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return self.manifest["files"]

    def _read_manifest(self) -> dict[str, Any]:
        try:
            info = self.zf.getinfo(MANIFEST)
        except KeyError:
            raise BackupError(f"{self.path} has no {MANIFEST}: it is not an smrweb project archive.") from None
        if info.file_size > MANIFEST_MAX_BYTES:
            raise BackupError(f"{MANIFEST} is {info.file_size} bytes: not a manifest smrweb writes.")
        try:
            manifest = json.loads(self.zf.read(MANIFEST))
        except (ValueError, zipfile.BadZipFile, zlib.error) as exc:
            raise BackupError(f"{MANIFEST} cannot be read: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise BackupError(f"{self.path} is not an smrweb project archive (its manifest names no {FORMAT!r}).")
        if manifest.get("version") != VERSION:
            raise BackupError(f"The archive is in format version {manifest.get('version')!r}; this smrweb reads "
                              f"version {VERSION} only. Nothing was imported.")
        files, counts = manifest.get("files"), manifest.get("counts")
        if not (isinstance(manifest.get("project"), str) and isinstance(files, dict) and isinstance(counts, dict)):
            raise BackupError(f"{MANIFEST} lacks its project, files or counts.")
        for name, entry in files.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("size"), int) and entry["size"] >= 0
                    and isinstance(entry.get("sha256"), str) and services.SHA256_RE.match(entry["sha256"])):
                raise BackupError(f"{MANIFEST}: the entry of {name} needs a sha256 and a size.")
        expected_counts = {table.name for table in TABLES} | {"user"}
        if set(counts) != expected_counts or not all(isinstance(n, int) and n >= 0 for n in counts.values()):
            raise BackupError(f"{MANIFEST}: counts must name exactly the tables {sorted(expected_counts)}.")
        if counts["scenario"] != 1 or counts["project"] != 1 or counts["source_health"] > 1:
            raise BackupError(f"{MANIFEST}: an archive holds one project, its scenario and at most one "
                              "source-health row.")
        return manifest

    def _check_members(self) -> None:
        names = self.zf.namelist()
        if len(names) != len(set(names)):
            raise BackupError("The archive holds two members under one name: it was altered.")
        listed = set(self.files)
        missing, unlisted = sorted(listed - set(names)), sorted(set(names) - listed - {MANIFEST})
        if missing or unlisted:
            raise BackupError("The archive does not match its manifest: "
                              + "; ".join(filter(None, [missing and f"missing {', '.join(missing[:5])}",
                                                        unlisted and f"not listed {', '.join(unlisted[:5])}"])))
        data = {name for name in listed if not name.startswith("blobs/")}
        if data != DATA_FILES:
            raise BackupError(f"The archive's data files are {sorted(data)}; version {VERSION} has "
                              f"{sorted(DATA_FILES)}.")
        total = 0
        for name in listed - data:
            # A blob is named by its digest, so its bytes are checked against the name, not only
            # against a manifest that whoever altered the bytes could have rewritten too.
            digest = name.removeprefix("blobs/")
            if not services.SHA256_RE.match(digest) or self.files[name]["sha256"] != digest:
                raise BackupError(f"{name} is not named by the sha256 of its bytes: the archive was altered.")
            # Sizes are the manifest's word, so they are bounded before any byte is unpacked (red-team
            # finding 5: a 622 KB archive became a 600 MiB blob).
            size = self.files[name]["size"]
            if size > settings.MAX_ARTIFACT_BYTES:
                raise BackupError(f"{name} is {size} bytes; artifacts are limited to {settings.MAX_ARTIFACT_BYTES} "
                                  "(SMRWEB_MAX_ARTIFACT_BYTES).")
            packed = self.zf.getinfo(name).compress_size
            if size > MAX_EXPANSION * max(packed, 1) and size > 1024 * 1024:
                raise BackupError(f"{name} unpacks to {size} bytes from {packed}: more than {MAX_EXPANSION}× is "
                                  "refused (a zip bomb, or not an archive export_project wrote).")
            total += size
        if (quota := settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES) and total > quota:
            raise BackupError(f"The archive's artifacts hold {total} bytes, over a project's storage quota of {quota} "
                              "(SMRWEB_PROJECT_STORAGE_QUOTA_BYTES).")

    def chunks(self, name: str) -> Iterator[bytes]:
        """The member's bytes; raises BackupError when they are exhausted and do not match the manifest
        (and as soon as there are more of them than it says)."""
        expected = self.files[name]
        digest, size = hashlib.sha256(), 0
        try:
            with self.zf.open(name) as member:
                while chunk := member.read(COPY_BYTES):
                    size += len(chunk)
                    if size > expected["size"]:
                        break
                    digest.update(chunk)
                    yield chunk
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
            raise BackupError(f"{name} cannot be read: {exc}. The archive is damaged; "
                              "nothing was imported.") from None
        if size != expected["size"] or digest.hexdigest() != expected["sha256"]:
            raise BackupError(f"{name} does not match its sha256 in the manifest: the archive was altered or "
                              "is damaged. Nothing was imported.")

    def lines(self, name: str) -> Iterator[tuple[int, bytes]]:
        # JSON escapes newlines inside strings, so a raw newline always ends a row.
        pending, number = b"", 0
        for chunk in self.chunks(name):
            *complete, pending = (pending + chunk).split(b"\n")
            for line in complete:
                number += 1
                yield number, line
        if pending:
            raise BackupError(f"{name} does not end with a newline.")

    def rows(self, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(where, row) for each row of a data file; `where` names the line for error messages."""
        for number, line in self.lines(name):
            where = f"{name} line {number}"
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise BackupError(f"{where}: not JSON ({exc}).") from None
            if not isinstance(row, dict):
                raise BackupError(f"{where}: not a JSON object.")
            yield where, row

    def verify(self) -> None:
        """Read every member once: digests, sizes and row counts must match the manifest."""
        counts = self.manifest["counts"]
        for name in sorted(self.files):
            if name in DATA_FILES:
                rows = sum(1 for _ in self.lines(name))
                table = COUNT_KEY[name]
                if rows != counts[table]:
                    raise BackupError(f"{name} holds {rows} rows; the manifest counts {counts[table]}.")
            else:
                for _ in self.chunks(name):
                    pass


# --- import ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportResult:
    project: Project
    counts: dict[str, int]  # rows written per table (api tokens left out are not counted)
    created_users: list[str]  # usernames that did not exist here, created inactive without a password
    warnings: list[str] = field(default_factory=list)  # what was not restored, and why


def import_project(path: str | os.PathLike, *, slug: str | None = None, scenario_key: str | None = None,
                   by: Any = None, trust: bool = False) -> ImportResult:
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
                raise BackupError(f"The archive's rows do not fit this database ({exc}); "
                                  "nothing was imported.") from exc
            raise


def _check_new_slug(slug: str) -> None:
    if not slug or len(slug) > 100 or not services.SLUG_RE.match(slug):
        raise BackupError(f"{slug!r} is not a slug: 1 to 100 letters, digits, hyphens or underscores.")
    if Project.objects.filter(slug=slug).exists():
        raise BackupError(f"A project with slug {slug!r} already exists here; import the archive under a new "
                          "slug (--as NEWSLUG).")


def _stamped(f: models.Field) -> bool:
    return getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)


def _insert(model: type[models.Model], objs: list[models.Model]) -> None:
    """bulk_create that keeps the archive's timestamps: auto_now(_add) fields are set to now by any
    insert, so they are written again with bulk_update, which sets what it is given (a stamp the
    archive lacks keeps the insert's now)."""
    stamps = [f.name for f in model._meta.concrete_fields if _stamped(f)]
    kept = [[getattr(obj, name) for name in stamps] for obj in objs]
    model._default_manager.bulk_create(objs, batch_size=CHUNK_SIZE)
    if stamps and objs:
        for obj, values in zip(objs, kept):
            for name, value in zip(stamps, values):
                if value is not None:
                    setattr(obj, name, value)
        model._default_manager.bulk_update(objs, stamps, batch_size=CHUNK_SIZE)


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
                    self.warnings.append("restored memberships (--trust): " + ", ".join(
                        f"{m.user.get_username()} {m.role}" for m in
                        Membership.objects.filter(project=self.project).select_related("user").order_by("pk")))
        services.record_audit(
            by, "project.imported", self.project, slug=self.slug, archived_slug=self.archive.manifest["project"],
            exported_at=self.archive.manifest.get("exported_at"), created_users=self.created_users,
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
                    raise BackupError(f"{where}: {f.name} points at {raw!r}, which the archive does not hold.")
                values[f.attname] = pk
            else:
                try:
                    value = f.to_python(raw)
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
            batch.append((row.get("ref"), obj, later))
            if len(batch) >= CHUNK_SIZE:
                deferred += self._flush(table, batch)
                batch = []
        deferred += self._flush(table, batch)
        if deferred:  # self-references (an experiment's parent): every row of the table is in now
            refs = self.refs[table.model]
            names: set[str] = set()
            for obj, later in deferred:
                for name, ref in later.items():
                    if ref not in refs:
                        raise BackupError(f"{table.file}: a row's {name} points at ref {ref!r}, which the archive "
                                          "does not hold.")
                    setattr(obj, table.model._meta.get_field(name).attname, refs[ref])
                    names.add(name)
            table.model._default_manager.bulk_update([obj for obj, _ in deferred], sorted(names),
                                                     batch_size=CHUNK_SIZE)

    def _flush(self, table: Table, batch: list[tuple[Any, models.Model, dict[str, Any]]]):
        if table.model is ApiToken:
            batch = self._without_tokens_in_use(batch)
        _insert(table.model, [obj for _, obj, _ in batch])
        self.counts[table.name] += len(batch)
        if table.ref:
            refs = self.refs.setdefault(table.model, {})
            for ref, obj, _ in batch:
                if ref in refs:
                    raise BackupError(f"{table.file}: ref {ref} appears twice.")
                refs[ref] = obj.pk
        return [(obj, later) for _, obj, later in batch if later]

    def _without_tokens_in_use(self, batch):
        """A token hash is unique across the deployment: a restored copy next to its original (or a
        token another project holds) cannot have it too. Such tokens are left out and named."""
        in_use = set(ApiToken.objects.filter(token_hash__in=[obj.token_hash for _, obj, _ in batch])
                     .values_list("token_hash", flat=True))
        kept = []
        for ref, obj, later in batch:
            if obj.token_hash in in_use:
                self.skipped.setdefault(ApiToken, set()).add(ref)
                self.warnings.append(f"API token {obj.name!r} ({obj.hint}…) is in use here by another project and "
                                     "was not restored: create a new token for this project.")
            else:
                kept.append((ref, obj, later))
        return kept

    def _leave_out(self, table: Table) -> None:
        """A table only a trusted import restores: its rows are counted and named, not written."""
        refs = {row["ref"] for _, row in self.archive.rows(table.file) if table.ref and type(row.get("ref")) is int}
        self.skipped.setdefault(table.model, set()).update(refs)
        self.counts[table.name] = 0
        left = sum(1 for _ in self.archive.rows(table.file))
        if left:
            self.warnings.append(f"{left} {table.name.replace('_', ' ')} row(s) were not restored: they grant access, "
                                 "and only an import with --trust restores them.")

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
            raise BackupError(f"{where}: object_ref {ref} names a {event.object_type} the archive does not hold.")

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
                extra = {c: row[c] for c in USER_COLUMNS if isinstance(row.get(c), str) and _has_field(User, c)}
                user = User(**{User.USERNAME_FIELD: username}, **extra)
                user.is_active = False
                user.set_unusable_password()
                user.save()
                self.created_users.append(username)
            self.users[username] = user.pk

    def _scenario(self) -> Scenario:
        """The archived scenario: the one of its key when that is the same definition, else created
        (under `scenario_key` when given). A different definition under the same key is refused:
        direction and bounds change what every score means."""
        [(where, row)] = list(self.archive.rows(SCENARIO.file))
        archived, _ = self._decode(SCENARIO, row, where)
        archived_key = archived.key
        archived.key = self.scenario_key or archived_key
        existing = Scenario.objects.filter(key=archived.key).first()
        if existing is None:
            _insert(Scenario, [archived])
            scenario = archived
        else:
            differs = [f.name for f in SCENARIO.fields if f.name not in ("key", "created", "updated")
                       and getattr(existing, f.attname) != getattr(archived, f.attname)]
            if differs:
                raise BackupError(f"Scenario {archived.key!r} exists here with a different {', '.join(differs)}; "
                                  "import with --scenario-as NEWKEY to restore the archived definition under a "
                                  "new key.")
            scenario = existing
        self.refs[Scenario] = {archived_key: scenario.pk}
        return scenario

    def _project(self, scenario: Scenario) -> Project:
        [(where, row)] = list(self.archive.rows(PROJECT.file))
        if row.get("slug") != self.archive.manifest["project"]:
            raise BackupError(f"{where}: the slug is not the manifest's {self.archive.manifest['project']!r}.")
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
                project.source_settings = {k: v for k, v in project.source_settings.items()
                                           if k != "api_key_sealed"}
                self.warnings.append("The project's SMR API key was sealed with another SECRET_KEY and cannot be "
                                     "opened here; it was left out: set it again in the project settings.")
        _insert(Project, [project])
        self.refs[Project] = {row["ref"]: project.pk}
        self.counts["project"] = 1
        return project

    def _restrict_bindings(self, project: Project) -> None:
        """Addresses and keys smrweb would use: left out unless trusted, and checked like any user's."""
        settings_ = dict(project.source_settings or {})
        bound = {key: settings_[key] for key in ("backend_base", "api_key_sealed", "operator_key") if key in settings_}
        if not self.trust:
            if bound or project.rollback_webhook_url:
                dropped = [*bound, *(["rollback_webhook_url"] if project.rollback_webhook_url else [])]
                self.warnings.append(f"left out {', '.join(dropped)}: an archive may not point this server at an "
                                     "address or lend it a key; import with --trust to restore them, or set them again.")
            project.source_settings = {k: v for k, v in settings_.items() if k not in bound}
            project.rollback_webhook_url = ""
            return
        try:
            if project.rollback_webhook_url:
                services.check_outbound_url("rollback_webhook_url", project.rollback_webhook_url)
            if bound.get("backend_base"):
                services.check_outbound_url("backend_base", bound["backend_base"])
        except TrackingError as exc:
            raise BackupError(f"The archived project's {getattr(exc, 'field', 'address')}: {exc.message}") from None

    def _blobs(self) -> None:
        """Blob rows and bytes. Bytes already stored here (same digest) are not stored twice; new ones
        are copied out of the archive, checked against their digest, then stored under it."""
        refs = self.refs.setdefault(ArtifactBlob, {})
        self.counts[BLOBS.name] = 0
        for where, row in self.archive.rows(BLOBS.file):
            blob, _ = self._decode(BLOBS, row, where)
            name = f"blobs/{blob.sha256}"
            if name not in self.archive.files or self.archive.files[name]["size"] != blob.size:
                raise BackupError(f"{where}: the archive holds no bytes of {blob.sha256} of size {blob.size}.")
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
        existing = ArtifactBlob.objects.filter(sha256=blob.sha256).first()
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
