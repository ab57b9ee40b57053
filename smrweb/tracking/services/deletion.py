"""Deleting tracked rows: the summaries they fed are recomputed, and bytes nothing holds go."""

from __future__ import annotations

from django.db import transaction

from smrweb.tracking.models import (
    Artifact,
    ArtifactBlob,
    Run,
)
from smrweb.tracking.services.artifacts import collect_unreferenced_blobs
from smrweb.tracking.services.runs import recompute_scores, recompute_spend, recompute_state


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
