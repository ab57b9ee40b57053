"""The demo console (runstack): one line per meaningful event, read from the database."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.utils import timezone

from smrweb.stack.console import EventFeed, log_path, tail
from smrweb.tracking import services
from smrweb.tracking.models import Run, Submission
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import push

pytestmark = pytest.mark.django_db


def test_the_feed_prints_audited_actions_and_failed_or_stalled_runs_once(project, alice, bob):
    push(project, "old", {"type": "state", "state": "failed"})  # before the feed started: not news
    feed = EventFeed()
    assert list(feed.lines()) == []
    push(project, "r1", {"type": "score", "score": 0.4})
    push(project, "r1", *[{"type": "metric", "key": "loss", "value": v} for v in range(50)])  # not events
    lifecycle.request_verification(Submission.objects.get(), by=bob)
    push(
        project,
        "crash",
        {"type": "state", "state": "failed", "failure": {"family": "oom", "detail": "CUDA out of memory"}},
    )
    lines = list(feed.lines())
    assert len(lines) == 2, lines
    assert "hill submission verifying submission" in lines[0] and "by bob" in lines[0]
    assert lines[1].endswith("hill run crash failed — oom: CUDA out of memory")
    assert list(feed.lines()) == []  # each once
    Run.objects.filter(external_id="r1").update(last_progress_at=timezone.now() - timedelta(hours=3))
    services.flag_stalled_runs()
    [line] = feed.lines()
    assert line.split("  ", 1)[1].startswith("hill run stalled run") and "by system" in line
    services.store_artifact(project, "r1", path="a.txt", content=io.BytesIO(b"x"))  # too frequent to be news
    assert list(feed.lines()) == []


def test_a_childs_log_tail_is_shown_when_it_exits(tmp_path):
    path = log_path(tmp_path / "logs", "worker")
    path.write_text("\n".join(f"line {i}" for i in range(100)))
    assert tail(path, 3) == "line 97\nline 98\nline 99"
    assert tail(tmp_path / "missing.log") == ""


def test_the_feed_names_runs_as_the_audit_page_does_not_by_row_id(project):
    """The walkthrough's console P3: an MLflow-written tag printed "run tagged run 79 by token:…"."""
    from smrweb.sources.mlflow import ingest

    token = services.create_api_token(project, name="ux-walkthrough")[0]
    push(project, "filler", {"type": "state", "state": "running"})  # so the run's row id is not 1
    feed = EventFeed()
    run = ingest.create_run(project, {"run_name": "lr sweep 0.01"}, by=token)
    ingest.set_tag(run, {"key": "mlflow.user", "value": "root"}, by=token)
    lines = [line.split("  ", 1)[1] for line in feed.lines()]
    assert "hill run tagged run lr sweep 0.01 by token:ux-walkthrough (key mlflow.user)" in lines, lines
    assert not any(f"run {run.pk} " in line for line in lines)
    sub = Submission.objects.create(project=project, run=run, event_id="x", score=1.0, ts=timezone.now())
    services.record_audit(None, "submission.invalid", sub, project=project)
    Submission.objects.filter(pk=sub.pk).delete()  # gone: called what it was
    assert [line.split("  ", 1)[1] for line in feed.lines()] == [
        f"hill submission invalid submission {sub.pk} by system"
    ]
