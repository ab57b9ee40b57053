"""Artifacts over HTTP: multipart upload (sha256 computed and verified by the server, bytes kept once)
and download of the exact bytes with their digest."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import Artifact, ArtifactBlob, AuditEvent, Run, Submission

URL = "/api/v1/projects/hill/runs/r1/artifacts"
DATA = b"def solve(xs):\n    return sorted(xs)\n" + bytes(range(256))
SHA = hashlib.sha256(DATA).hexdigest()


def upload(client, data: bytes = DATA, name: str = "solution.py", url: str = URL, **fields):
    payload = {"file": SimpleUploadedFile(name, data, content_type="text/x-python"), **fields}
    return client.post(url, payload, format="multipart")


def files_under(root) -> list:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_an_upload_answers_201_with_its_sha256_and_size(api, artifact_root):
    response = upload(api, path="src/solution.py", kind="python_source", commit="abc123")
    assert response.status_code == 201, response.content
    data = response.json()
    assert (data["sha256"], data["size"], data["created_now"]) == (SHA, len(DATA), True)
    assert (data["path"], data["kind"], data["commit"], data["content_type"]) == (
        "src/solution.py",
        "python_source",
        "abc123",
        "text/x-python",
    )
    assert data["download_url"].endswith(f"/api/v1/projects/hill/runs/r1/artifacts/{data['id']}/download")
    [stored] = files_under(artifact_root)
    assert stored.read_bytes() == DATA
    assert Run.objects.filter(external_id="r1").exists()  # created on first sight, as events do
    assert AuditEvent.objects.get(verb="artifact.stored").actor_label == "token:ci"


def test_the_path_defaults_to_the_uploaded_file_name(api):
    assert upload(api, name="model.onnx").json()["path"] == "model.onnx"


def test_the_same_upload_again_answers_200_and_stores_nothing_new(api, artifact_root):
    first = upload(api).json()
    response = upload(api)
    assert response.status_code == 200
    data = response.json()
    assert (data["id"], data["sha256"], data["created_now"]) == (first["id"], SHA, False)
    assert Artifact.objects.count() == 1 and ArtifactBlob.objects.count() == 1
    assert len(files_under(artifact_root)) == 1


def test_the_same_bytes_in_another_run_share_one_blob(api, artifact_root):
    upload(api)
    response = upload(api, url="/api/v1/projects/hill/runs/r2/artifacts")
    assert response.status_code == 201
    assert Artifact.objects.count() == 2 and ArtifactBlob.objects.count() == 1
    assert len(files_under(artifact_root)) == 1


def test_a_matching_sha256_is_accepted(api):
    response = upload(api, sha256=SHA.upper())
    assert response.status_code == 201 and response.json()["sha256"] == SHA


def test_a_sha256_mismatch_is_refused_and_nothing_is_stored(api, artifact_root):
    response = upload(api, sha256="f" * 64)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "digest_mismatch" and SHA in body["message"]
    assert body["errors"] == []
    assert not ArtifactBlob.objects.exists() and not Artifact.objects.exists()
    assert files_under(artifact_root) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"sha256": "xyz"}, "sha256"), ({"kind": "spreadsheet"}, "kind"), ({"path": "p" * 501}, "path")],
)
def test_invalid_upload_fields_are_refused_with_field_errors(api, fields, field, artifact_root):
    response = upload(api, **fields)
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == [field]
    assert files_under(artifact_root) == []


def test_an_upload_to_an_over_long_run_id_is_refused_and_stores_nothing(api, artifact_root):
    response = upload(api, url=f"/api/v1/projects/hill/runs/{'r' * 201}/artifacts")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["run"]
    assert not ArtifactBlob.objects.exists() and files_under(artifact_root) == []


def test_an_upload_without_a_file_is_refused(api):
    response = api.post(URL, {"path": "x"}, format="multipart")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["file"]


def test_an_upload_over_the_size_limit_is_refused_with_413_json(api, settings, artifact_root):
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 100
    response = upload(api, data=b"z" * 101)
    assert response.status_code == 413
    assert response.json()["code"] == "artifact_too_large"
    assert not ArtifactBlob.objects.exists() and files_under(artifact_root) == []


def test_a_score_sent_before_its_artifact_is_linked_by_the_upload(api, project):
    services.ingest_events(
        project,
        "r1",
        ev.parse_events(json.dumps([{"type": "score", "id": "s1", "score": 0.9, "artifact": SHA}])),
    )
    assert Submission.objects.get(event_id="s1").artifact is None
    artifact_id = upload(api).json()["id"]
    assert Submission.objects.get(event_id="s1").artifact_id == artifact_id
    [sub] = api.get("/api/v1/projects/hill/submissions").json()["results"]
    assert sub["artifact_sha256"] == SHA


def test_a_runs_artifacts_are_listed(api):
    upload(api, name="a.py", data=b"a")
    upload(api, name="b.py", data=b"bb")
    listed = api.get(URL).json()
    assert sorted((a["path"], a["size"]) for a in listed) == [("a.py", 1), ("b.py", 2)]


# --- who may upload -------------------------------------------------------------------------------------


def test_only_admins_upload(project, bob, artifact_root):
    client = APIClient()
    client.force_login(bob)
    response = upload(client)
    assert response.status_code == 403
    assert files_under(artifact_root) == []


def test_another_projects_token_cannot_upload(other_project, project, artifact_root):
    _, raw = services.create_api_token(other_project, name="theirs")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert upload(client).status_code == 403
    assert files_under(artifact_root) == []


# --- download ---------------------------------------------------------------------------------------------


@pytest.fixture
def stored(api):
    return upload(api, path="out/solution.py").json()


def download_url(artifact: dict, run: str = "r1") -> str:
    return f"/api/v1/projects/hill/runs/{run}/artifacts/{artifact['id']}/download"


def test_a_download_returns_the_exact_bytes_with_digest_headers(api, stored):
    response = api.get(download_url(stored))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == DATA
    assert response["X-Content-SHA256"] == SHA
    assert response["Repr-Digest"] == f"sha-256=:{base64.b64encode(hashlib.sha256(DATA).digest()).decode()}:"
    assert response["Content-Length"] == str(len(DATA))
    assert response["Content-Type"] == "text/x-python"
    assert 'filename="solution.py"' in response["Content-Disposition"]
    assert response["Content-Disposition"].startswith("attachment")


def test_a_download_needs_credentials(anon_api, stored):
    response = anon_api.get(download_url(stored))
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_another_projects_token_cannot_download(other_project, stored):
    _, raw = services.create_api_token(other_project, name="theirs")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get(download_url(stored))
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_a_viewer_may_download(victor, stored):
    client = APIClient()
    client.force_login(victor)
    response = client.get(download_url(stored))
    assert response.status_code == 200 and b"".join(response.streaming_content) == DATA


def test_an_artifact_is_downloaded_only_through_its_own_run(api, stored):
    services.update_run_settings(Run.objects.get(external_id="r1").project, "r2")
    response = api.get(download_url(stored, run="r2"))
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert api.get(download_url({"id": 999999})).status_code == 404


def test_bytes_missing_from_storage_are_a_404_with_a_clear_message(api, artifact_root):
    artifact_id = upload(api).json()["id"]
    for stored in files_under(artifact_root):
        stored.unlink()
    response = api.get(f"/api/v1/projects/hill/runs/r1/artifacts/{artifact_id}/download")
    assert response.status_code == 404 and response.json() == {
        "code": "artifact_bytes_missing",
        "message": f"The bytes of artifact {SHA} are missing from artifact storage; an operator can "
        "restore them from a backup.",
        "errors": [],
    }
