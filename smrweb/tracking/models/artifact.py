"""Artifacts: content-addressed blobs and the run files that hold them."""

from __future__ import annotations

from django.db import models

from smrweb.tracking.models.run import Run
from smrweb.tracking.models.scenario import ArtifactKind


def blob_storage_name(sha256: str, *, unique: str) -> str:
    """Where a blob's bytes live: fanned out by digest, with a per-write suffix (see services.save_blob)."""
    return f"blobs/{sha256[:2]}/{sha256[2:4]}/{sha256}-{unique}"


class ArtifactBlob(models.Model):
    """Stored bytes, addressed by content: the same bytes are stored once whatever the run or path."""

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    storage_name = models.CharField(max_length=300)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.sha256


class Artifact(models.Model):
    run = models.ForeignKey(Run, models.CASCADE, related_name="artifacts")
    path = models.CharField(max_length=500)
    kind = models.CharField(max_length=20, choices=ArtifactKind, default=ArtifactKind.FILE)
    blob = models.ForeignKey(ArtifactBlob, models.PROTECT, related_name="artifacts")
    content_type = models.CharField(max_length=200, default="application/octet-stream")
    commit = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        # A version is (path, bytes, commit): the bytes are stored once (the blob), but the same bytes at
        # two commits — a revert, a rollback commit — are two versions with their own lineage.
        constraints = [
            models.UniqueConstraint(
                fields=["run", "path", "blob", "commit"], name="artifact_run_path_blob_commit_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.path}@{self.blob.sha256[:12]}"

    @property
    def sha256(self) -> str:
        return self.blob.sha256

    @property
    def size(self) -> int:
        return self.blob.size


class SummaryStatus(models.TextChoices):
    PENDING = "pending"  # claimed: a worker has it queued or running
    DONE = "done"
    UNREADABLE = "unreadable"  # not a model of that kind: `reason` says why
    TOO_LARGE = "too_large"  # past a limit (bytes, nodes, memory, time): `reason` says which


class BlobSummary(models.Model):
    """What a blob's bytes are (an ONNX model's summary), or what changed between two blobs (`other`: two
    models' weights compared), read once per digest (pair) on a worker under limits (red-team N2: never in
    a web request). A blob's bytes never change, so neither does this, until the summariser's `version`
    does. The row is also the claim: one pending row per blob (pair), kind and version, so concurrent
    requests queue one computation."""

    blob = models.ForeignKey(ArtifactBlob, models.CASCADE, related_name="summaries")
    # The second blob of a comparison (kind "onnx-weights"), the one with the larger id: a pair is
    # stored once whichever side is asked about. None for a summary of one blob.
    other = models.ForeignKey(ArtifactBlob, models.CASCADE, null=True, blank=True, related_name="+")
    kind = models.CharField(max_length=20)  # "onnx" | "onnx-weights"
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=SummaryStatus, default=SummaryStatus.PENDING)
    result = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    claimed = models.DateTimeField()  # when it was (last) queued
    started = models.DateTimeField(null=True, blank=True)  # when a worker (last) took it
    attempts = models.PositiveIntegerField(default=1)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["blob", "kind", "version"],
                condition=models.Q(other__isnull=True),
                name="blob_summary_blob_kind_version_uniq",
            ),
            models.UniqueConstraint(
                fields=["blob", "other", "kind", "version"],
                condition=models.Q(other__isnull=False),
                name="blob_summary_pair_kind_version_uniq",
            ),
        ]

    def __str__(self) -> str:
        of = f"{self.blob_id}" if self.other_id is None else f"{self.blob_id}/{self.other_id}"
        return f"{self.kind} v{self.version} of {of}: {self.status}"
