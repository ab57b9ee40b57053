"""Red-team finding 10: one token stored 5 × 30 MiB in 1.2 s with no quota or rate, and a deleted artifact
kept its blob row and bytes. Now a project has a byte quota over the distinct bytes it holds, uploads are
rate-limited per caller, and bytes nothing holds are collected (at once on delete, hourly otherwise)."""

from __future__ import annotations

import io
from datetime import timedelta

import time_machine
from django.utils import timezone

from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.models import Artifact, ArtifactBlob, SourceHealth, SourceKind
from tests.api.test_artifacts import files_under, upload


def test_an_upload_over_the_projects_quota_is_413_and_stores_nothing(api, project, settings, artifact_root):
    settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES = 100
    assert upload(api, b"a" * 60, name="one.bin").status_code == 201
    response = upload(api, b"b" * 60, name="two.bin")
    assert response.status_code == 413 and response.json()["code"] == "storage_quota_exceeded"
    assert (
        "holds 60 bytes of artifacts; these 60 more would pass its quota of 100" in response.json()["message"]
    )
    assert (
        Artifact.objects.count() == 1
        and ArtifactBlob.objects.count() == 1
        and len(files_under(artifact_root)) == 1
    )
    assert upload(api, b"a" * 60, name="again.bin").status_code == 201  # bytes it holds already cost nothing


def test_uploads_are_rate_limited_per_caller(api, project, settings):
    settings.SMRWEB_UPLOAD_RATE = "2/d"  # fixed windows: a minute one can end mid-test
    assert [upload(api, bytes([i]) * 10, name=f"{i}.bin").status_code for i in range(2)] == [201, 201]
    refused = upload(api, b"z" * 10, name="z.bin")
    assert (
        refused.status_code == 429
        and refused.json()["code"] == "rate_limited"
        and int(refused["Retry-After"]) > 0
    )
    assert Artifact.objects.count() == 2


def test_a_deleted_artifact_takes_its_bytes_unless_another_holds_them(project, artifact_root):
    one, _ = services.store_artifact(project, "r1", path="a.py", content=io.BytesIO(b"shared bytes"))
    two, _ = services.store_artifact(project, "r2", path="b.py", content=io.BytesIO(b"shared bytes"))
    alone, _ = services.store_artifact(project, "r1", path="c.py", content=io.BytesIO(b"only mine"))
    services.delete_event_rows(Artifact.objects.filter(pk__in=[one.pk, alone.pk]))
    assert list(ArtifactBlob.objects.values_list("sha256", flat=True)) == [two.blob.sha256]
    assert len(files_under(artifact_root)) == 1
    services.delete_event_rows(Artifact.objects.filter(pk=two.pk))
    assert not ArtifactBlob.objects.exists() and files_under(artifact_root) == []


def test_the_hourly_sweep_spares_blobs_an_upload_is_still_linking(project, artifact_root):
    from smrweb.tasks import collect_unreferenced_blobs

    artifact, _ = services.store_artifact(project, "r1", path="a.py", content=io.BytesIO(b"bytes"))
    Artifact.objects.filter(
        pk=artifact.pk
    ).delete()  # as if an upload stored the blob and had not linked it yet
    assert collect_unreferenced_blobs() == 0 and ArtifactBlob.objects.count() == 1
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        assert collect_unreferenced_blobs() == 1
    assert not ArtifactBlob.objects.exists() and files_under(artifact_root) == []


def test_an_smr_artifact_over_the_quota_is_a_visible_sync_failure(db, start_sim, settings):
    sim = start_sim(api_key="k", project_ids=["p"], runs=2, tick=0.1, seed=3, warmup=30)
    project = services.create_project(
        "smr", source=SourceKind.SMR, smr_project_id="p", smr_api_key="k", smr_backend_base=sim.url
    )
    settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES = 1
    sync.sync_project(project, owner="test")
    health = SourceHealth.objects.get(project=project)
    assert health.last_error_kind == "quota" and "SMRWEB_PROJECT_STORAGE_QUOTA_BYTES" in health.last_error
    assert not Artifact.objects.filter(run__project=project).exists()
