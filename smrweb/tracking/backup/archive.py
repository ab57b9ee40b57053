"""Reading an archive: the manifest and every member checked (sizes, digests, expansion) before use."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from django.conf import settings

from smrweb.tracking import services
from smrweb.tracking.backup import tables
from smrweb.tracking.backup.tables import (
    COUNT_KEY,
    DATA_FILES,
    FORMAT,
    MANIFEST,
    MANIFEST_MAX_BYTES,
    MAX_EXPANSION,
    TABLES,
    VERSION,
    BackupError,
)


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
            raise BackupError(
                f"{self.path} has no {MANIFEST}: it is not an smrweb project archive."
            ) from None
        if info.file_size > MANIFEST_MAX_BYTES:
            raise BackupError(f"{MANIFEST} is {info.file_size} bytes: not a manifest smrweb writes.")
        try:
            manifest = json.loads(self.zf.read(MANIFEST))
        except (ValueError, zipfile.BadZipFile, zlib.error) as exc:
            raise BackupError(f"{MANIFEST} cannot be read: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise BackupError(
                f"{self.path} is not an smrweb project archive (its manifest names no {FORMAT!r})."
            )
        if manifest.get("version") != VERSION:
            raise BackupError(
                f"The archive is in format version {manifest.get('version')!r}; this smrweb reads "
                f"version {VERSION} only. Nothing was imported."
            )
        files, counts = manifest.get("files"), manifest.get("counts")
        if not (
            isinstance(manifest.get("project"), str) and isinstance(files, dict) and isinstance(counts, dict)
        ):
            raise BackupError(f"{MANIFEST} lacks its project, files or counts.")
        for name, entry in files.items():
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("size"), int)
                and entry["size"] >= 0
                and isinstance(entry.get("sha256"), str)
                and services.SHA256_RE.match(entry["sha256"])
            ):
                raise BackupError(f"{MANIFEST}: the entry of {name} needs a sha256 and a size.")
        expected_counts = {table.name for table in TABLES} | {"user"}
        if set(counts) != expected_counts or not all(isinstance(n, int) and n >= 0 for n in counts.values()):
            raise BackupError(f"{MANIFEST}: counts must name exactly the tables {sorted(expected_counts)}.")
        if counts["scenario"] != 1 or counts["project"] != 1 or counts["source_health"] > 1:
            raise BackupError(
                f"{MANIFEST}: an archive holds one project, its scenario and at most one source-health row."
            )
        return manifest

    def _check_members(self) -> None:
        names = self.zf.namelist()
        if len(names) != len(set(names)):
            raise BackupError("The archive holds two members under one name: it was altered.")
        listed = set(self.files)
        missing, unlisted = sorted(listed - set(names)), sorted(set(names) - listed - {MANIFEST})
        if missing or unlisted:
            raise BackupError(
                "The archive does not match its manifest: "
                + "; ".join(
                    filter(
                        None,
                        [
                            missing and f"missing {', '.join(missing[:5])}",
                            unlisted and f"not listed {', '.join(unlisted[:5])}",
                        ],
                    )
                )
            )
        data = {name for name in listed if not name.startswith("blobs/")}
        if data != DATA_FILES:
            raise BackupError(
                f"The archive's data files are {sorted(data)}; version {VERSION} has {sorted(DATA_FILES)}."
            )
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
            if size > settings.SMRWEB_MAX_ARTIFACT_BYTES:
                raise BackupError(
                    f"{name} is {size} bytes; artifacts are limited to {settings.SMRWEB_MAX_ARTIFACT_BYTES} "
                    "(SMRWEB_MAX_ARTIFACT_BYTES)."
                )
            packed = self.zf.getinfo(name).compress_size
            if size > MAX_EXPANSION * max(packed, 1) and size > 1024 * 1024:
                raise BackupError(
                    f"{name} unpacks to {size} bytes from {packed}: more than {MAX_EXPANSION}× is "
                    "refused (a zip bomb, or not an archive export_project wrote)."
                )
            total += size
        if (quota := settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES) and total > quota:
            raise BackupError(
                f"The archive's artifacts hold {total} bytes, over a project's storage quota of {quota} "
                "(SMRWEB_PROJECT_STORAGE_QUOTA_BYTES)."
            )

    def chunks(self, name: str) -> Iterator[bytes]:
        """The member's bytes; raises BackupError when they are exhausted and do not match the manifest
        (and as soon as there are more of them than it says)."""
        expected = self.files[name]
        digest, size = hashlib.sha256(), 0
        try:
            with self.zf.open(name) as member:
                while chunk := member.read(tables.COPY_BYTES):
                    size += len(chunk)
                    if size > expected["size"]:
                        break
                    digest.update(chunk)
                    yield chunk
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
            raise BackupError(
                f"{name} cannot be read: {exc}. The archive is damaged; nothing was imported."
            ) from None
        if size != expected["size"] or digest.hexdigest() != expected["sha256"]:
            raise BackupError(
                f"{name} does not match its sha256 in the manifest: the archive was altered or "
                "is damaged. Nothing was imported."
            )

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
