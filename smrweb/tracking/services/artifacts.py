"""Artifacts: content-addressed blobs, the storage quota, and linking scores that named them."""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
import uuid
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from smrweb.tracking import signals
from smrweb.tracking.errors import (
    ArtifactBytesMissing,
    ArtifactTooLarge,
    DigestMismatch,
    InvalidInput,
    StorageQuotaExceeded,
)
from smrweb.tracking.events import MLFLOW_ARTIFACT_TAG, MLFLOW_SCORE_ID_PREFIX
from smrweb.tracking.models import (
    Artifact,
    ArtifactBlob,
    ArtifactKind,
    AuditVerb,
    Project,
    Run,
    Submission,
    SubmissionStatus,
    VerificationOutcome,
    blob_storage_name,
)
from smrweb.tracking.services import figures
from smrweb.tracking.services.archive import check_writable
from smrweb.tracking.services.audit import record_audit
from smrweb.tracking.services.runs import _check_run_id, _locked_run

log = logging.getLogger(__name__)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def collect_unreferenced_blobs(blobs=None, *, older_than: timedelta = timedelta(0)) -> int:
    """Delete blobs no artifact holds (rows, then bytes), created more than `older_than` ago: an upload
    stores its blob a moment before the artifact row that holds it, so the periodic sweep waits.
    Each blob is decided on its own under its row lock (`collect_blob`), so an upload of the same bytes
    at the same moment either keeps it or stores it again (`store_artifact`)."""
    blobs = ArtifactBlob.objects.all() if blobs is None else blobs
    candidates = list(
        blobs.filter(created__lt=timezone.now() - older_than)
        .exclude(pk__in=Artifact.objects.values("blob_id"))
        .values_list("pk", flat=True)
    )
    return sum(collect_blob(pk) for pk in candidates)


def collect_blob(pk: int) -> bool:
    """Delete one blob if no artifact holds it at this moment: its row is locked and the references are
    counted again inside the transaction (an upload that took it first wins; one that comes later finds
    the row gone and stores the bytes again under a new name). The bytes go after the commit."""
    with transaction.atomic():
        blob = ArtifactBlob.objects.select_for_update().filter(pk=pk).first()
        if blob is None or Artifact.objects.filter(blob_id=pk).exists():
            return False
        name = blob.storage_name
        blob.delete()
    artifact_storage().delete(name)
    return True


def _held_blob(sha256: str, size: int, readable: IO[bytes]) -> ArtifactBlob:
    """The blob row for these bytes, locked until the caller's transaction ends (call inside one), so
    the collector cannot take it before the artifact that holds it commits; stored again when the
    collector took it after `save_blob` found it (a run holding the same bytes was deleted meanwhile)."""
    blob = ArtifactBlob.objects.select_for_update().filter(sha256=sha256).first()
    if blob is None:
        readable.seek(0)
        blob, _ = save_blob(sha256, size, readable)
        blob = ArtifactBlob.objects.select_for_update().get(pk=blob.pk)
    return blob


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
    return sum(
        ArtifactBlob.objects.filter(pk__in=chunk).aggregate(total=Sum("size"))["total"] or 0
        for chunk in _chunks(sorted(blob_ids))
    )


def _chunks(ids: list[int], size: int = 500):
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def _check_quota(project: Project, sha256: str, size: int) -> None:
    quota = settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES
    if not quota or Artifact.objects.filter(run__project=project, blob__sha256=sha256).exists():
        return  # no limit, or bytes the project already holds (they cost nothing more)
    used = project_storage_bytes(project)
    if used + size > quota:
        raise StorageQuotaExceeded(
            f"Project {project.slug} holds {used} bytes of artifacts; these {size} more would "
            f"pass its quota of {quota} (SMRWEB_PROJECT_STORAGE_QUOTA_BYTES). Nothing was "
            "stored."
        )


def artifact_storage():
    return storages["artifacts"]


def check_artifact_path(path: str) -> str:
    """The rule for every stored artifact path, whoever writes it: 1 to 500 characters, no NUL, and `/` as
    the only separator. A backslash is refused: a Windows client that mirrors a run's artifacts would read
    `a\\..\\..\\b` as a way out of its target directory (review N10)."""
    if not path or len(path) > 500 or "\x00" in path:
        raise InvalidInput("path", "An artifact needs a path of 1 to 500 characters, without NUL.")
    if "\\" in path:
        raise InvalidInput("path", "An artifact path separates its parts with / only, not a backslash.")
    return path


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
    artifact (the bytes are stored once whatever the commit); score events that named this artifact before it
    arrived are linked to it now.
    """
    _check_run_id(run_external_id)  # every column is checked before any bytes are stored
    check_artifact_path(path)
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
            raise DigestMismatch(
                f"The upload's sha256 is {sha256}, not {claimed_sha256.lower()}; nothing was stored."
            )
        _check_quota(project, sha256, size)
        check_writable(project, Run.objects.filter(project=project, external_id=run_external_id).first())
        save_blob(sha256, size, readable)
        with transaction.atomic():
            run = _locked_run(project, run_external_id, timezone.now())
            blob = _held_blob(sha256, size, readable)
            artifact, created = _record_artifact(run, path, blob, commit, kind, content_type)
            if created:
                run.last_progress_at, run.stalled_since = timezone.now(), None
                run.save(update_fields=["last_progress_at", "stalled_since", "updated"])
                figures.refresh_project_figures(project, best=False)  # its last activity, not stalled
                record_audit(
                    by,
                    AuditVerb.ARTIFACT_STORED,
                    artifact,
                    project=project,
                    path=path,
                    sha256=sha256,
                    size=size,
                )
    return artifact, created


def _record_artifact(run, path, blob, commit, kind, content_type) -> tuple[Artifact, bool]:
    artifact, created = Artifact.objects.get_or_create(
        run=run,
        path=path,
        blob=blob,
        commit=commit,
        defaults={"kind": kind, "content_type": content_type},
    )
    if created:
        _link_waiting_submissions(run, artifact)
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
        if size > settings.SMRWEB_MAX_ARTIFACT_BYTES:
            raise ArtifactTooLarge(f"Artifacts are limited to {settings.SMRWEB_MAX_ARTIFACT_BYTES} bytes.")
        digest.update(chunk)
        if spool is not None:
            spool.write(chunk)
    readable = content if spool is None else spool
    readable.seek(0)
    return digest.hexdigest(), size, readable


def save_blob(
    sha256: str, size: int, readable: IO[bytes], *, created: datetime | None = None
) -> tuple[ArtifactBlob, str | None]:
    """The blob for these bytes, storing them if they are new; with the storage name this call wrote
    (None when the bytes were already stored), so a caller that fails later can delete them again.
    `created`: when the bytes were first stored (a restored archive keeps its time).

    Bytes go under a name of their own and the row is created only once they are complete, so a
    crash mid-write leaves an unreferenced file, never a row pointing at partial bytes; when two
    writers race on new bytes, the loser deletes its copy.
    """
    blob = ArtifactBlob.objects.filter(sha256=sha256).first()
    if blob is not None:
        return blob, None  # same bytes already stored: keep one copy
    storage = artifact_storage()
    name = storage.save(blob_storage_name(sha256, unique=uuid.uuid4().hex[:12]), File(readable))
    blob, new = ArtifactBlob.objects.get_or_create(
        sha256=sha256, defaults={"size": size, "storage_name": name}
    )
    if not new:
        storage.delete(name)
        return blob, None
    if created is not None:
        ArtifactBlob.objects.filter(pk=blob.pk).update(created=created)
        blob.created = created
    return blob, name


def _link_waiting_submissions(run, artifact: Artifact) -> None:
    """Scores that named these bytes (by digest or path) before they arrived now hold them. A project that
    verifies every score verifies them now: auto-verify left them waiting for their bytes, and one a person
    sent to verification too early (cannot verify: no bytes) is asked again."""
    linked = list(
        Submission.objects.filter(
            run=run, artifact__isnull=True, artifact_ref__in=[artifact.blob.sha256, artifact.path]
        ).values_list("pk", flat=True)
    )
    if not linked:
        return
    now = timezone.now()  # (`updated`: the submission page polls it)
    Submission.objects.filter(pk__in=linked).update(artifact=artifact, updated=now)
    if run.project.auto_verify:
        Submission.objects.filter(
            pk__in=linked,
            status=SubmissionStatus.CANDIDATE,
            verification_outcome=VerificationOutcome.CANNOT_VERIFY,
        ).update(verification_outcome="", updated=now)
        signals.announce_scores_to_verify(run.pk)


def name_awaited_artifact(run: Run, ref: str, *, event_id_prefix: str) -> int:
    """The run's scores still waiting for their bytes (no artifact, not yet decided), of one source (event
    ids starting with `event_id_prefix`), now name `ref` (a path in the run, or a sha256): a source that
    learns the artifact's name after the score (MLflow's `smrweb.artifact` tag set late). They hold it at
    once when the run has it (its latest version at a path), else when it arrives. Returns how many."""
    with transaction.atomic():
        run = _locked_run(run.project, run.external_id, timezone.now())
        waiting = Submission.objects.filter(
            run=run,
            artifact__isnull=True,
            # one being checked right now without bytes too: its check runs again once they are linked
            status__in=(SubmissionStatus.CANDIDATE, SubmissionStatus.VERIFYING),
            event_id__startswith=event_id_prefix,
        ).exclude(artifact_ref=ref)
        renamed = waiting.update(artifact_ref=ref)
        if renamed:
            found = Artifact.objects.filter(run=run).select_related("blob")
            found = found.filter(blob__sha256=ref) if SHA256_RE.match(ref) else found.filter(path=ref)
            artifact = found.order_by("-created", "-id").first()
            if artifact is not None:
                _link_waiting_submissions(run, artifact)
    return renamed


def missing_artifact(submission: Submission) -> str:
    """Why a submission has no bytes to check, and how its harness fixes that (MLflow's way for a score
    logged through MLflow: its event id says so)."""
    scenario = submission.project.scenario
    via_mlflow = submission.event_id.startswith(MLFLOW_SCORE_ID_PREFIX)
    ref = submission.artifact_ref
    if ref:
        digest = SHA256_RE.match(ref)
        what = f"the file with sha256 {ref}" if digest else f"`{ref}`"
        if via_mlflow:
            how = "log it with mlflow.log_artifact" + ("" if digest else f" at `{ref}`")
        else:
            run_id = submission.run.external_id
            how = f"upload it (POST …/runs/{run_id}/artifacts, or `smrweb report artifact`)"
        then = "it is verified" if submission.project.auto_verify else "verify again"
        return (
            f"No artifact to check: the score names {what}, which run {submission.run.name} has not "
            f"uploaded. Fix: {how}; the score takes it when it arrives, then {then}."
        )
    if via_mlflow:
        where = (
            f"log the file at the scenario's path `{scenario.artifact_path}` (mlflow.log_artifact), or "
            if scenario.artifact_path
            else f"the scenario {scenario.key} declares no artifact path: "
        )
        return (
            f"No artifact to check: the MLflow score names no file. Fix: {where}set the run's tag "
            f"`{MLFLOW_ARTIFACT_TAG}` to the file's path in the run, before logging "
            f"`{scenario.score_metric}`."
        )
    return (
        "No artifact to check: the score names no file. Fix: send the score with `artifact` (the file's path "
        "in the run, or its sha256) and upload that file."
    )


def open_blob(blob: ArtifactBlob) -> IO[bytes]:
    """Open a stored blob for reading; ArtifactBytesMissing when storage no longer holds its bytes
    (both the filesystem and S3 backends raise FileNotFoundError for a missing name)."""
    try:
        return artifact_storage().open(blob.storage_name, "rb")
    except FileNotFoundError:
        log.error("artifact storage holds no %s (blob %s)", blob.storage_name, blob.sha256)
        raise ArtifactBytesMissing(
            f"The bytes of artifact {blob.sha256} are missing from artifact storage; an operator can "
            "restore them from a backup."
        ) from None


def blob_stored(sha256: str) -> bool:
    """Whether these bytes are stored already (an artifact of them needs no download)."""
    return ArtifactBlob.objects.filter(sha256=sha256).exists()


def store_known_artifact(
    project: Project,
    run_external_id: str,
    *,
    sha256: str,
    path: str,
    kind: str,
    content_type: str,
    commit: str = "",
) -> Artifact | None:
    """Record an artifact whose bytes are already stored (same digest): no download needed.

    Returns None when the bytes are not known yet, so the caller pulls them once.
    """
    check_artifact_path(path)
    if not ArtifactBlob.objects.filter(sha256=sha256).exists():
        return None
    with transaction.atomic():
        run = _locked_run(project, run_external_id, timezone.now())
        # Locked so the collector cannot take it before this artifact commits; gone: pull the bytes.
        blob = ArtifactBlob.objects.select_for_update().filter(sha256=sha256).first()
        if blob is None:
            return None
        artifact, created = _record_artifact(run, path, blob, commit, kind, content_type[:200])
        if created:
            run.save(update_fields=["updated"])  # the run page shows its artifacts: a new version to poll
    return artifact
