"""Submissions with real stored artifacts, for the reviewer's workbench tests."""

from __future__ import annotations

import io
import json

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Submission


def submit(
    project,
    content: bytes,
    *,
    score: float,
    path="submission/optimizer.py",
    run="r1",
    status=None,
    kind="file",
):
    """Store `content` at `path` in `run`, score it, and (optionally) put the submission in `status`."""
    services.store_artifact(project, run, path=path, content=io.BytesIO(content), kind=kind)
    event = {"type": "score", "score": score, "artifact": path}
    services.ingest_events(project, run, parse_events(json.dumps([event])))
    sub = Submission.objects.filter(project=project).select_related("artifact__blob").order_by("-id").first()
    if status:
        Submission.objects.filter(pk=sub.pk).update(status=status)
        sub.refresh_from_db()
    return sub
