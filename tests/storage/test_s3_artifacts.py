"""Artifacts on S3 (django-storages, configured by settings.py from SMRWEB_ARTIFACT_S3_*), against a real
S3-compatible server the tests start (moto in server mode, tests/storage/conftest.py). What lands in the
bucket is read with boto3 directly, never through smrweb's code: uploads over the API, the digest check,
downloads (API, dashboard, signed links), previews, verification in the sandbox, clean-up of unreferenced
bytes, the storage quota, and backups that read blob bytes from S3 and write them back into an emptied
bucket."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
import yaml
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from smrweb.dashboard.artifacts import signed_artifact_path
from smrweb.tasks import collect_unreferenced_blobs, verify_submission
from smrweb.tracking import backup, services
from smrweb.tracking.backup import BackupError
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Artifact, ArtifactBlob, Project, Submission
from smrweb.tracking.services import submissions
from tests.api.test_artifacts import upload
from tests.tracking.test_backup import blob_bytes, canonical, empty_database, rich  # noqa: F401

pytestmark = pytest.mark.django_db

DATA = b"def solve(xs):\n    return sorted(xs)\n" + bytes(range(256))
SHA = hashlib.sha256(DATA).hexdigest()
ROOT = Path(__file__).resolve().parents[2]


def blob_key(blob: ArtifactBlob) -> str:
    """The object key of a blob: settings.py's `location` prefix, then the content-addressed name."""
    return f"artifacts/{blob.storage_name}"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- configuration ---------------------------------------------------------------------------------


def test_settings_build_s3_storage_from_the_deployments_variables(s3_storage_config, s3_endpoint):
    assert s3_storage_config["BACKEND"] == "storages.backends.s3.S3Storage"
    options = s3_storage_config["OPTIONS"]
    assert (options["bucket_name"], options["endpoint_url"], options["region_name"]) == (
        "BUCKET",
        s3_endpoint,
        "us-east-1",
    )
    assert options["file_overwrite"] is False and options["location"] == "artifacts"
    # Reads spill to disk past this size, so a download of a large artifact is not held in memory.
    assert 0 < options["max_memory_size"] <= 16 * 1024 * 1024


def test_docker_compose_sets_the_variables_settings_reads_and_creates_that_bucket():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["x-app"]["environment"]
    settings_py = (ROOT / "smrweb" / "settings.py").read_text()
    for name in ("SMRWEB_ARTIFACT_S3_BUCKET", "SMRWEB_ARTIFACT_S3_ENDPOINT", "AWS_S3_REGION_NAME"):
        assert name in env and f'"{name}"' in settings_py, name
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= env.keys()  # what boto3 reads
    minio = compose["services"]["minio"]["environment"]
    assert env["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
    assert env["SMRWEB_ARTIFACT_S3_ENDPOINT"] == "http://minio:9000"
    make_bucket = " ".join(compose["services"]["minio-bucket"]["command"])
    assert f"mc mb --ignore-existing local/{env['SMRWEB_ARTIFACT_S3_BUCKET']}" in make_bucket
    for name in ("web", "worker", "poller", "beat"):  # every process that reads or writes artifacts
        assert compose["services"][name]["environment"] == env, name


# --- upload, digest, download ----------------------------------------------------------------------


def test_an_upload_over_the_api_lands_in_the_bucket_under_its_digest(api, s3):
    response = upload(api, path="src/solution.py", kind="python_source")
    assert response.status_code == 201, response.content
    assert (response.json()["sha256"], response.json()["size"]) == (SHA, len(DATA))
    blob = ArtifactBlob.objects.get()
    [key] = s3.keys()
    assert re.fullmatch(rf"artifacts/blobs/{SHA[:2]}/{SHA[2:4]}/{SHA}-[0-9a-f]{{12}}", key)
    assert key == blob_key(blob) and s3.get(key) == DATA

    # The same bytes again, in another run: one object still.
    assert upload(api, path="src/solution.py", kind="python_source").status_code == 200
    assert upload(api, url="/api/v1/projects/hill/runs/r2/artifacts").status_code == 201
    assert s3.keys() == [key] and ArtifactBlob.objects.count() == 1 and Artifact.objects.count() == 2


def test_a_digest_mismatch_stores_nothing_in_the_bucket(api, s3):
    response = upload(api, sha256="f" * 64)
    assert response.status_code == 400 and response.json()["code"] == "digest_mismatch"
    assert s3.keys() == [] and not ArtifactBlob.objects.exists()


def test_downloads_over_the_api_the_dashboard_and_a_signed_link_return_the_buckets_bytes(
    api, client_alice, s3
):
    artifact_id = upload(api, path="src/solution.py").json()["id"]
    artifact = Artifact.objects.select_related("blob", "run").get(pk=artifact_id)
    link = signed_artifact_path(artifact)
    for who, url in (
        (api, f"/api/v1/projects/hill/runs/r1/artifacts/{artifact_id}/download"),
        (client_alice, f"/projects/hill/runs/r1/artifacts/{artifact_id}/download"),
        (Client(), link),  # no session: the token is the credential
    ):
        response = who.get(url)
        assert response.status_code == 200, (url, response.status_code)
        body = b"".join(response.streaming_content)
        assert body == DATA == s3.get(blob_key(artifact.blob))
        assert response["X-Content-SHA256"] == SHA and response["Content-Length"] == str(len(DATA))
        assert response["Content-Disposition"] == 'attachment; filename="solution.py"'


def test_the_preview_reads_its_head_from_the_bucket(api, client_alice, s3):
    artifact_id = upload(api, b"print('hello from s3')\n", name="hello.py").json()["id"]
    page = client_alice.get(f"/projects/hill/runs/r1/artifacts/{artifact_id}/preview")
    assert page.status_code == 200
    assert "hello from s3" in page.content.decode()


def test_bytes_altered_in_the_bucket_are_caught_by_the_backup_and_visible_to_a_downloader(
    api, project, s3, tmp_path
):
    artifact_id = upload(api).json()["id"]
    blob = ArtifactBlob.objects.get()
    damaged = DATA[:-1] + b"?"
    s3.put(blob_key(blob), damaged)  # bit rot, or someone writing to the bucket by hand

    with pytest.raises(BackupError, match=f"blob {SHA} .* do not match its digest"):
        backup.export_project(project, tmp_path / "hill.zip")
    assert list(tmp_path.glob("hill.zip*")) == []
    # A download streams what the bucket holds (it is not hashed twice on the server); the digest it
    # announces is the one computed at upload, so a client checking Repr-Digest sees the damage.
    response = api.get(f"/api/v1/projects/hill/runs/r1/artifacts/{artifact_id}/download")
    body = b"".join(response.streaming_content)
    assert body == damaged and sha(body) != response["X-Content-SHA256"] == SHA


def test_bytes_missing_from_the_bucket_stop_a_backup_with_a_clear_message(api, project, s3, tmp_path):
    upload(api)
    s3.empty()
    with pytest.raises(BackupError, match=f"bytes of blob {SHA} are missing from artifact storage"):
        backup.export_project(project, tmp_path / "hill.zip")


def test_bytes_missing_from_the_bucket_are_a_clear_404_everywhere_never_a_500(api, client_alice, bob, s3):
    artifact_id = upload(api, name="solution.py").json()["id"]
    artifact = Artifact.objects.select_related("blob", "run").get(pk=artifact_id)
    link = signed_artifact_path(artifact)
    s3.empty()
    message = f"The bytes of artifact {SHA} are missing from artifact storage"

    response = api.get(f"/api/v1/projects/hill/runs/r1/artifacts/{artifact_id}/download")
    assert response.status_code == 404 and response.json()["code"] == "artifact_bytes_missing"
    assert response.json()["message"].startswith(message)
    for who, url in (
        (client_alice, f"/projects/hill/runs/r1/artifacts/{artifact_id}/download"),
        (Client(), link),
    ):
        response = who.get(url)
        assert response.status_code == 404 and message in response.content.decode(), url
    preview = client_alice.get(f"/projects/hill/runs/r1/artifacts/{artifact_id}/preview")
    assert preview.status_code == 200 and message in preview.content.decode()
    assert client_alice.get("/projects/hill/runs/r1/").status_code == 200

    # A verification says why it cannot run instead of failing the task.
    project = artifact.run.project
    project.scenario.validator_command = ["python3", "-c", "pass", "{artifact}"]
    project.scenario.save()
    services.ingest_events(
        project, "r1", parse_events(json.dumps([{"type": "score", "score": 0.5, "artifact": SHA}]))
    )
    sub = Submission.objects.get(project=project)
    submissions.request_verification(sub, by=bob)
    assert verify_submission(sub.pk) == "cannot_verify"
    sub.refresh_from_db()
    assert (sub.status, sub.verification_outcome) == ("candidate", "cannot_verify")
    assert message in [t.reason for t in sub.transitions.all()][-1]


def test_a_large_download_is_spooled_to_disk_not_held_in_memory(project, s3, s3_storage_config):
    big = bytes(range(256)) * (s3_storage_config["OPTIONS"]["max_memory_size"] // 256 + 4096)
    artifact, _ = services.store_artifact(project, "r1", path="big.bin", content=io.BytesIO(big))
    assert s3.get(blob_key(artifact.blob)) == big
    etag = s3.client.head_object(Bucket=s3.name, Key=blob_key(artifact.blob))["ETag"]
    assert re.fullmatch(r'"[0-9a-f]{32}-[2-9]"', etag)  # boto3 stored it as a multipart upload
    with services.open_blob(artifact.blob) as fh:
        assert fh.read(4) == big[:4]
        assert fh.file._rolled  # SpooledTemporaryFile: past max_memory_size it is a file on disk
        assert hashlib.sha256(big[:4] + fh.read()).hexdigest() == artifact.blob.sha256


def test_a_filesystem_store_copied_under_the_prefix_is_served_from_s3(api, settings, artifact_root, s3):
    """Moving a deployment to S3: the storage names are the same on both backends, so copying
    SMRWEB_ARTIFACT_ROOT's files under the bucket's `artifacts/` prefix is the whole migration."""
    s3_settings = settings.STORAGES
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(artifact_root), "base_url": None},
        },
    }
    artifact_id = upload(api).json()["id"]
    assert s3.keys() == []
    for path in artifact_root.rglob("*"):
        if path.is_file():  # what `aws s3 sync` or `mc mirror` would do
            s3.put(f"artifacts/{path.relative_to(artifact_root).as_posix()}", path.read_bytes())
    settings.STORAGES = s3_settings
    response = api.get(f"/api/v1/projects/hill/runs/r1/artifacts/{artifact_id}/download")
    assert response.status_code == 200 and b"".join(response.streaming_content) == DATA


# --- verification ----------------------------------------------------------------------------------

CHECK = (
    "import sys; data = open(sys.argv[1], 'rb').read(); print('checked', len(data), 'bytes'); "
    "sys.exit(0 if data.startswith(b'ok') else 1)"
)


def test_verification_copies_the_bytes_from_the_bucket_into_the_sandbox(project, bob, s3):
    project.scenario.validator_command = ["python3", "-c", CHECK, "{artifact}"]
    project.scenario.save()
    content = b"ok: an optimizer kept on S3\n"
    artifact, _ = services.store_artifact(
        project, "r1", path="submission/optimizer.py", content=io.BytesIO(content)
    )
    assert s3.get(blob_key(artifact.blob)) == content
    services.ingest_events(
        project,
        "r1",
        parse_events(json.dumps([{"type": "score", "score": 0.5, "artifact": artifact.blob.sha256}])),
    )
    sub = Submission.objects.get(project=project)
    submissions.request_verification(sub, by=bob)
    assert verify_submission(sub.pk) == "passed"
    sub.refresh_from_db()
    assert sub.status == "verified" and f"checked {len(content)} bytes" in sub.verification_output


# --- clean-up --------------------------------------------------------------------------------------


def test_deleting_artifacts_removes_their_object_once_nothing_holds_it(project, s3):
    one, _ = services.store_artifact(project, "r1", path="a.py", content=io.BytesIO(b"shared bytes"))
    two, _ = services.store_artifact(project, "r2", path="b.py", content=io.BytesIO(b"shared bytes"))
    alone, _ = services.store_artifact(project, "r1", path="c.py", content=io.BytesIO(b"only mine"))
    shared_key, alone_key = blob_key(one.blob), blob_key(alone.blob)
    assert s3.keys() == sorted([shared_key, alone_key])

    services.delete_event_rows(Artifact.objects.filter(pk__in=[one.pk, alone.pk]))
    assert s3.keys() == [shared_key]  # run r2 still holds the shared bytes
    assert s3.get(shared_key) == b"shared bytes"
    services.delete_event_rows(Artifact.objects.filter(pk=two.pk))
    assert s3.keys() == [] and not ArtifactBlob.objects.exists()


def test_the_hourly_sweep_removes_unheld_objects_and_spares_fresh_ones(project, s3):
    artifact, _ = services.store_artifact(project, "r1", path="a.py", content=io.BytesIO(b"bytes"))
    key = blob_key(artifact.blob)
    Artifact.objects.filter(pk=artifact.pk).delete()  # as if an upload had not linked its blob yet
    assert collect_unreferenced_blobs() == 0 and s3.keys() == [key]
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        assert collect_unreferenced_blobs() == 1
    assert s3.keys() == []


def test_the_storage_quota_counts_distinct_bytes_on_s3(api, project, settings, s3):
    settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES = 100
    assert upload(api, b"a" * 60, name="one.bin").status_code == 201
    response = upload(api, b"b" * 60, name="two.bin")
    assert response.status_code == 413 and response.json()["code"] == "storage_quota_exceeded"
    assert [s3.get(key) for key in s3.keys()] == [b"a" * 60]  # the refused bytes never reached the bucket
    assert upload(api, b"a" * 60, name="again.bin").status_code == 201
    assert services.project_storage_bytes(project) == 60 and len(s3.keys()) == 1


# --- backups ---------------------------------------------------------------------------------------


def test_a_backup_reads_blobs_from_s3_and_a_restore_writes_them_back_into_an_emptied_bucket(
    s3,
    rich,  # noqa: F811 (after s3: its artifacts are stored in this test's bucket)
    tmp_path,
):
    before, bytes_before = canonical(rich), blob_bytes(rich)
    blobs = {blob.sha256: blob_key(blob) for blob in ArtifactBlob.objects.all()}
    assert len(blobs) >= 2 and s3.keys() == sorted(blobs.values())
    archive = tmp_path / "hill.smrweb.zip"
    call_command("export_project", "hill", "-o", str(archive), stdout=io.StringIO())
    with zipfile.ZipFile(archive) as zf:  # the archive holds exactly the bytes the bucket held
        for sha256, key in blobs.items():
            assert zf.read(f"blobs/{sha256}") == s3.get(key)

    empty_database()
    s3.empty()
    assert not Project.objects.exists() and s3.keys() == []
    out = io.StringIO()
    call_command("import_project", str(archive), "--trust", stdout=out, stderr=io.StringIO())
    assert "imported project hill" in out.getvalue()

    restored = Project.objects.get(slug="hill")
    assert canonical(restored) == before
    assert blob_bytes(restored) == bytes_before
    keys = s3.keys()
    assert keys == sorted(blob_key(blob) for blob in ArtifactBlob.objects.all()) and len(keys) == len(blobs)
    for blob in ArtifactBlob.objects.all():  # written back under a content-addressed key, bytes intact
        assert blob_key(blob).startswith(
            f"artifacts/blobs/{blob.sha256[:2]}/{blob.sha256[2:4]}/{blob.sha256}-"
        )
        assert sha(s3.get(blob_key(blob))) == blob.sha256


def test_a_failed_restore_leaves_no_objects_in_the_bucket(
    s3,
    rich,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    archive = tmp_path / "hill.smrweb.zip"
    backup.export_project(rich, archive)
    empty_database()
    s3.empty()

    def fail(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(services, "record_audit", fail)  # the import's last write, after the blobs
    with pytest.raises(RuntimeError):
        backup.import_project(archive)
    assert s3.keys() == [] and not ArtifactBlob.objects.exists()
