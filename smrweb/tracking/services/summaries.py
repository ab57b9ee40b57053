"""Blob summaries (an ONNX model's, `core.onnx_summary`; two models' weights compared): claimed by the
page or API call that first needs one, computed once per digest (pair) on a worker
(`sources/summaries.py`, red-team N2), read back here.

The row is the claim. A request that finds no row creates it pending and announces `summary_wanted`
(the sources app queues the task); one that finds it pending waits. A claim no worker started within
CLAIM_SECONDS (the broker was down, the message was lost), or whose worker died, is queued again by the
next request that looks.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from smrweb.tracking.models import ArtifactBlob, BlobSummary, SummaryStatus
from smrweb.tracking.signals import summary_wanted

ONNX = "onnx"  # the kinds of summary (BlobSummary.kind)
ONNX_WEIGHTS = "onnx-weights"  # of a pair of blobs: two models' weights, element by element
CLAIM_SECONDS = 120  # past the summary task's hard time limit (smrweb/tasks.py): its worker is gone


def claimed_summary(
    blob: ArtifactBlob, kind: str, version: int, *, other: ArtifactBlob | None = None
) -> BlobSummary:
    """The blob's (or the pair's, with `other`) summary row of `kind` and `version`, claimed and queued
    when nobody has it. A pair is one row whichever way round it is asked for."""
    if other is not None and other.pk < blob.pk:
        blob, other = other, blob
    key = {"blob": blob, "other": other, "kind": kind, "version": version}
    now = timezone.now()
    row = BlobSummary.objects.filter(**key).first()
    if row is None:
        try:
            with transaction.atomic():
                row = BlobSummary.objects.create(**key, claimed=now)
        except IntegrityError:  # a concurrent request claimed it first: theirs is queued
            return BlobSummary.objects.get(**key)
        _announce(row.pk)
        return row
    lost = now - timedelta(seconds=CLAIM_SECONDS)
    if (
        row.status == SummaryStatus.PENDING
        and row.claimed < lost
        and (row.started is None or row.started < lost)
    ):
        renewed = BlobSummary.objects.filter(
            pk=row.pk, status=SummaryStatus.PENDING, claimed=row.claimed
        ).update(claimed=now, attempts=F("attempts") + 1)
        if renewed:  # only one of several requests that found it lost queues it again
            row.refresh_from_db()
            _announce(row.pk)
    return row


def start_summary(summary_id: int) -> BlobSummary | None:
    """The row, marked started, for the worker that computes it; None when it is done, or another worker
    started it within CLAIM_SECONDS (a duplicate message)."""
    now = timezone.now()
    taken = (
        BlobSummary.objects.filter(pk=summary_id, status=SummaryStatus.PENDING)
        .filter(Q(started__isnull=True) | Q(started__lt=now - timedelta(seconds=CLAIM_SECONDS)))
        .update(started=now)
    )
    return BlobSummary.objects.select_related("blob", "other").get(pk=summary_id) if taken else None


def record_summary(summary_id: int, status: str, *, result: dict | None = None, reason: str = "") -> None:
    """What the worker found; written once (a pending row only)."""
    BlobSummary.objects.filter(pk=summary_id, status=SummaryStatus.PENDING).update(
        status=status, result=result, reason=reason, finished=timezone.now()
    )


def _announce(summary_id: int) -> None:
    transaction.on_commit(lambda: summary_wanted.send(sender="summary", summary_id=summary_id))
