"""Bad input found in review: each gets a 4xx JSON answer with detail, never a 500, nothing written."""

import json
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import ArtifactBlob, Run

pytestmark = pytest.mark.django_db

EVENTS = "/api/v1/projects/hill/runs/r1/events"


def error_fields(response) -> list[tuple]:
    assert response["Content-Type"].startswith("application/json")
    return [(e["index"], e["field"]) for e in response.json()["errors"]]


@pytest.mark.parametrize(
    "ts", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1969-12-31T23:59:59Z"]
)
def test_timestamps_outside_the_supported_range_are_field_errors(api, ts):
    response = api.post(
        EVENTS,
        [{"type": "metric", "key": "k", "value": 1}, {"type": "metric", "key": "k", "value": 1, "ts": ts}],
        format="json",
    )
    assert response.status_code == 400
    assert error_fields(response) == [(1, "ts")]
    assert not Run.objects.exists()


def test_a_timestamp_with_an_offset_is_stored_in_utc(api):
    api.post(EVENTS, [{"type": "state", "state": "done", "ts": "2026-03-01T10:00:00+02:00"}], format="json")
    assert Run.objects.get().finished_at.isoformat() == "2026-03-01T08:00:00+00:00"


def test_an_empty_batch_creates_no_run(api):
    response = api.post(EVENTS, [], format="json")
    assert response.json() == {"run": "r1", "accepted": 0, "duplicates": 0}
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "field, value", [("budget_tokens", 2**70), ("budget_usd", "1e15"), ("budget_tokens", -1)]
)
def test_run_settings_out_of_range_are_field_errors(api, field, value):
    response = api.patch("/api/v1/projects/hill/runs/r1", {field: value}, format="json")
    assert response.status_code == 400
    assert error_fields(response) == [(None, field)]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/projects/hill/runs/a%00b",
        "/api/v1/projects/hill/runs?q=%00",
        "/api/v1/projects/hill/runs/r1/metrics?key=%00",
    ],
)
def test_nul_characters_in_api_urls_are_refused_with_json(api, url):
    response = api.get(url)
    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"


def test_nul_characters_in_page_urls_are_refused(client_alice):
    assert client_alice.get("/projects/hill/runs/a%00b/").status_code == 400


@pytest.mark.parametrize("run_id", ["..", ".hidden", "a?b", "x y", "a#b", "é"])
def test_run_ids_that_cannot_be_linked_are_refused(project, run_id):
    with pytest.raises(InvalidInput) as caught:
        services.ingest_events(project, run_id, parse_events(b'[{"type": "metric", "key": "k", "value": 1}]'))
    assert caught.value.field == "run"


def test_an_overlong_artifact_content_type_is_refused_before_any_bytes_are_stored(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("m.bin", b"bytes", content_type="application/" + "x" * 300)
    response = api.post("/api/v1/projects/hill/runs/r1/artifacts", {"file": upload}, format="multipart")
    assert response.status_code == 400
    assert error_fields(response) == [(None, "file")]
    assert not ArtifactBlob.objects.exists()


def test_an_announced_oversize_upload_is_refused_before_it_is_read(api, settings):
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 1000
    response = api.post(
        "/api/v1/projects/hill/runs/r1/artifacts",
        data=b"x" * 10,
        content_type="multipart/form-data; boundary=zzz",
        CONTENT_LENGTH=str(50 * 1024 * 1024),
    )
    assert response.status_code == 413
    assert response.json()["code"] == "artifact_too_large"


def test_a_busy_sqlite_database_answers_503_with_retry_after(api, monkeypatch):
    def locked(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(services, "ingest_events", locked)
    response = api.post(EVENTS, [{"type": "metric", "key": "k", "value": 1}], format="json")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response.json()["code"] == "busy"


def test_a_request_for_an_unknown_host_under_api_answers_json(client, settings):
    settings.DEBUG = False
    response = client.get("/api/v1/health", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"


def test_non_staff_users_are_refused_scenario_creation_before_validation(client, alice):
    client.force_login(alice)
    response = client.post("/api/v1/scenarios/", {"key": "not a slug"}, content_type="application/json")
    assert response.status_code == 403


def test_a_paused_run_is_never_flagged_stalled(project):
    services.ingest_events(project, "p1", parse_events(json.dumps([{"type": "state", "state": "paused"}])))
    Run.objects.filter(external_id="p1").update(last_progress_at=timezone.now() - timedelta(days=1))
    assert services.flag_stalled_runs() == []


def test_download_urls_are_built_by_reversing_the_route(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    api.post(
        "/api/v1/projects/hill/runs/run:1/artifacts",
        {"file": SimpleUploadedFile("a.txt", b"a")},
        format="multipart",
    )
    [artifact] = api.get("/api/v1/projects/hill/runs/run:1/artifacts").json()
    assert api.get(artifact["download_url"]).status_code == 200
