"""Deleting runs and projects (services.deletion): counts named before and audited after, a typed
confirmation, admins only; blobs collected once nothing holds them — and safe against an upload of the
same bytes at the same moment, in either order."""

from __future__ import annotations

import hashlib
import threading

import pytest
from django.db import connection

from smrweb.tracking import services
from smrweb.tracking.errors import DeletionRefused, NotAllowed
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    ArtifactBlob,
    AuditEvent,
    MetricPoint,
    Project,
    Run,
    Submission,
)
from smrweb.tracking.services import artifacts
from tests.tracking.retention_helpers import finished_run, ingest, metrics, upload

pytestmark = pytest.mark.django_db

SHARED = b"shared weights " * 100
OWN = b"only r1's bytes " * 10


def files(root) -> list[str]:
    return sorted(p.name.split("-")[0] for p in root.rglob("*") if p.is_file()) if root.exists() else []


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def two_runs(project):
    r1 = finished_run(project, "r1", points=5, turns=3)
    r2 = finished_run(project, "r2", points=2, turns=1)
    upload(project, "r1", SHARED, "shared.bin")
    upload(project, "r1", OWN, "own.bin")
    upload(project, "r2", SHARED, "copy.bin")
    return r1, r2


def test_the_summary_names_what_goes_and_only_bytes_no_other_run_holds(two_runs):
    r1, _ = two_runs
    summary = services.deletion_summary(r1)
    assert summary.as_detail() == {
        "runs": 1,
        "turns": 3,
        "metric_points": 5,
        "submissions": 1,
        "artifacts": 2,
        "blobs_freed": 1,  # SHARED is still held by r2
        "bytes_freed": len(OWN),
    }


def test_deleting_a_run_needs_the_admin_role_and_the_typed_id(two_runs, alice, bob):
    r1, _ = two_runs
    with pytest.raises(NotAllowed):
        services.delete_run(r1, by=bob, confirm="r1")
    with pytest.raises(DeletionRefused, match="Type r1 to confirm"):
        services.delete_run(r1, by=alice, confirm="r2")
    assert Run.objects.filter(pk=r1.pk).exists()


def test_a_live_run_is_not_deleted(project, alice):
    ingest(project, "live", metrics("loss", [1.0]))
    live = Run.objects.get(external_id="live")
    assert "close it" in services.deletion_refusal(alice, live)
    with pytest.raises(DeletionRefused):
        services.delete_run(live, by=alice, confirm="live")


def test_a_deleted_run_takes_its_rows_and_only_its_own_bytes(two_runs, alice, artifact_root):
    r1, r2 = two_runs
    assert files(artifact_root) == sorted([sha(SHARED), sha(OWN)])
    summary = services.delete_run(r1, by=alice, confirm="r1")
    assert summary.runs == 1 and summary.bytes_freed == len(OWN)
    assert not Run.objects.filter(pk=r1.pk).exists()
    assert not MetricPoint.objects.filter(run_id=r1.pk).exists()
    assert not AgentTurn.objects.filter(run_id=r1.pk).exists()
    assert files(artifact_root) == [sha(SHARED)]  # kept while r2 holds it
    assert list(ArtifactBlob.objects.values_list("sha256", flat=True)) == [sha(SHARED)]
    event = AuditEvent.objects.get(verb="run.deleted")
    assert event.project_id == r1.project_id and event.detail["run"] == "r1"
    assert event.detail["metric_points"] == 5 and event.detail["bytes_freed"] == len(OWN)
    # The last holder goes: so do the bytes.
    services.delete_run(r2, by=alice, confirm="r2")
    assert files(artifact_root) == [] and not ArtifactBlob.objects.exists()


def test_deleting_a_project_keeps_its_audit_trail_and_other_projects_bytes(
    two_runs, project, other_project, alice, artifact_root
):
    upload(other_project, "o1", SHARED, "theirs.bin")
    services.archive_run(two_runs[0], by=alice)  # an earlier audit row of the project
    with pytest.raises(DeletionRefused, match="Type hill"):
        services.delete_project(project, by=alice, confirm="Hill")
    summary = services.delete_project(project, by=alice, confirm="hill")
    assert summary.as_detail() == {
        "runs": 2,
        "turns": 4,
        "metric_points": 7,
        "submissions": 2,
        "artifacts": 3,
        "blobs_freed": 1,
        "bytes_freed": len(OWN),
    }
    assert not Project.objects.filter(slug="hill").exists()
    assert not Submission.objects.filter(run__external_id__in=["r1", "r2"]).exists()
    assert files(artifact_root) == [sha(SHARED)]  # the other project holds it
    deleted = AuditEvent.objects.get(verb="project.deleted")
    assert deleted.project is None and deleted.detail["project_slug"] == "hill"
    assert deleted.detail["metric_points"] == 7
    assert AuditEvent.objects.filter(verb="run.archived", project=None).exists()  # survived (SET_NULL)


def test_project_deletion_runs_in_batches(project, alice, monkeypatch):
    from smrweb.tracking.services import deletion

    monkeypatch.setattr(deletion, "RUN_BATCH", 2)
    for i in range(5):
        finished_run(project, f"r{i}", points=1, turns=1)
    assert services.delete_project(project, by=alice, confirm="hill").runs == 5
    assert not Run.objects.exists()


# --- the collector and an upload of the same bytes, in both orders --------------------------------------


def test_an_upload_that_took_the_blob_first_keeps_it(two_runs, project, alice, artifact_root):
    """The collector listed the blob as unheld, but an upload linked it before the collector's locked
    re-check: it stays, bytes and row."""
    r1, r2 = two_runs
    Artifact.objects.filter(blob__sha256=sha(SHARED)).delete()  # nothing holds SHARED now…
    blob = ArtifactBlob.objects.get(sha256=sha(SHARED))
    upload(project, "r2", SHARED, "again.bin")  # …until this upload takes it
    assert services.collect_blob(blob.pk) is False
    assert sha(SHARED) in files(artifact_root)
    assert artifacts.open_blob(ArtifactBlob.objects.get(sha256=sha(SHARED))).read() == SHARED


def test_an_upload_that_found_the_blob_just_before_it_was_collected_stores_it_again(
    two_runs, project, alice, artifact_root, monkeypatch
):
    """The upload's save_blob found the row; then the last holder was deleted and the blob collected,
    before the upload recorded its artifact. The upload must not point at a row (or bytes) that are gone:
    it stores the bytes again."""
    r1, r2 = two_runs
    Artifact.objects.filter(blob__sha256=sha(SHARED), run=r2).delete()  # only r1 holds SHARED now
    original = artifacts.save_blob
    raced = []

    def save_then_race(sha256, size, readable, **kwargs):
        result = original(sha256, size, readable, **kwargs)
        if sha256 == sha(SHARED) and not raced:
            raced.append(True)
            services.delete_run(r1, by=alice, confirm="r1")  # collects SHARED: its last holder went
            assert not ArtifactBlob.objects.filter(sha256=sha256).exists()
        return result

    monkeypatch.setattr(artifacts, "save_blob", save_then_race)
    artifact = upload(project, "r2", SHARED, "late.bin")
    assert raced
    artifact.refresh_from_db()
    assert artifact.blob.sha256 == sha(SHARED)
    assert artifacts.open_blob(artifact.blob).read() == SHARED
    assert files(artifact_root) == [sha(SHARED)]


@pytest.mark.django_db(transaction=True)
def test_uploads_and_deletions_of_the_same_bytes_in_threads_never_lose_bytes(
    alice, bob, victor, artifact_root
):
    """Real connections at once (on PostgreSQL the row locks decide; on SQLite the write lock does):
    whatever the interleaving, every artifact left points at a blob whose bytes are readable, and no
    blob is left that nothing holds."""
    from tests.factories import admin_project

    project = admin_project("race", by=alice)
    for i in range(4):
        finished_run(project, f"old{i}", points=0, turns=1)
        upload(project, f"old{i}", SHARED, f"f{i}.bin")
    runs = list(Run.objects.filter(project=project))
    errors: list[BaseException] = []

    def deleter():
        try:
            for run in runs:
                services.delete_run(run, by=alice, confirm=run.external_id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    def uploader():
        try:
            for i in range(4):
                upload(project, "new", SHARED, f"n{i}.bin")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deleter), threading.Thread(target=uploader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert Artifact.objects.filter(run__external_id="new").count() == 4
    for artifact in Artifact.objects.select_related("blob"):
        assert artifacts.open_blob(artifact.blob).read() == SHARED
    assert services.collect_unreferenced_blobs() == 0
    assert files(artifact_root) == [sha(SHARED)]


def test_a_run_with_a_rollback_to_its_own_submission_can_be_deleted(project, alice, bob):
    """Rollback.target_submission is PROTECT: the run's own rollbacks go first, so they do not block it."""
    from smrweb.tracking.models import Rollback
    from smrweb.tracking.services import rollbacks

    run = finished_run(project, "rb", points=1)
    project.rollback_webhook_url = "https://hooks.example.test/rollback"
    project.save()
    rollbacks.request_rollback(by=bob, reason="back", submission=Submission.objects.get(run=run))
    assert Rollback.objects.filter(run=run).exists()
    assert services.delete_run(run, by=alice, confirm="rb").submissions == 1
    assert not Rollback.objects.exists() and not Run.objects.filter(external_id="rb").exists()
