"""Export: one snapshot of the database streamed into an archive, table by table in chunks."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, models, transaction
from django.utils import timezone
from django.utils.duration import duration_iso_string

from smrweb.tracking import services
from smrweb.tracking.backup import tables
from smrweb.tracking.backup.tables import (
    AUDITED,
    BLOBS,
    FORMAT,
    MANIFEST,
    TABLES,
    USER_COLUMNS,
    USER_FILE,
    VERSION,
    BackupError,
    Table,
    _has_field,
)
from smrweb.tracking.errors import ArtifactBytesMissing
from smrweb.tracking.models import (
    AuditEvent,
    Project,
)


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
        if self._pending_size >= tables.COPY_BYTES:  # one deflate call per ~1 MB, not per row
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


def _encode_time(value):
    return None if value is None else value.isoformat()  # a wall-clock time (an arena's reset), no zone


def _encoder_for(f: models.Field) -> Callable[[Any], Any] | None:
    if isinstance(f, models.DateTimeField):
        return _encode_datetime
    if isinstance(f, models.TimeField):
        return _encode_time
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
                self.refs[table.model] = dict(pairs.iterator(chunk_size=tables.CHUNK_SIZE))
            elif table.ref:
                pks = (
                    table.rows(self.project)
                    .values_list("pk", flat=True)
                    .iterator(chunk_size=tables.CHUNK_SIZE)
                )
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
                columns.append(
                    (
                        f.name,
                        self._user_encoder()
                        if f.related_model is self.user_model
                        else self._ref_encoder(table, f),
                    )
                )
            else:
                columns.append((f.name, _encoder_for(f)))
        columns += [(name, None) for name, _ in table.joined]
        lookups = [f.attname for f in table.fields] + [lookup for _, lookup in table.joined]
        values = table.rows(self.project).values_list("pk", *lookups)
        own_refs = self.refs.get(table.model) if table.ref else None
        with self._member(table.file) as out:
            for pk, *row_values in values.iterator(chunk_size=table.rows_per_chunk):
                row: dict[str, Any] = {"ref": own_refs[pk]} if own_refs is not None else {}
                for (name, encode), value in zip(columns, row_values, strict=True):
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
                raise BackupError(
                    f"A {table.model.__name__} of {self.project.slug} points at "
                    f"{f.related_model.__name__} #{pk} of another project ({f.name}); "
                    "such a row cannot be exported."
                )
            return refs[pk]

        return encode

    def _user_encoder(self) -> Callable[[int | None], str | None]:
        def encode(pk):
            if pk is None:
                return None
            if pk not in self.usernames:
                self.usernames[pk] = (
                    self.user_model._default_manager.filter(pk=pk)
                    .values_list(self.user_model.USERNAME_FIELD, flat=True)
                    .get()
                )
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
            for values in users.values_list(*columns).iterator(chunk_size=tables.CHUNK_SIZE):
                out.write_row({"username": values[0], **dict(zip(columns[1:], values[1:]))})
        self.counts["user"] = out.rows

    def _write_blobs(self) -> None:
        for blob in BLOBS.rows(self.project).iterator(chunk_size=tables.CHUNK_SIZE):
            try:
                source = services.open_blob(blob)
            except ArtifactBytesMissing:
                raise BackupError(
                    f"The bytes of blob {blob.sha256} are missing from artifact storage "
                    f"({blob.storage_name}); the project cannot be exported whole."
                ) from None
            with source, self._member(f"blobs/{blob.sha256}") as out:
                while chunk := source.read(tables.COPY_BYTES):
                    out.write(chunk)
            if out.digest.hexdigest() != blob.sha256 or out.size != blob.size:
                raise BackupError(
                    f"The stored bytes of blob {blob.sha256} ({blob.storage_name}) do not match "
                    "its digest: artifact storage is damaged; nothing was exported."
                )
