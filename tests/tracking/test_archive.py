"""Archiving runs and projects (services.archive): who may, read-only while archived (ingest, uploads,
reviews, rollbacks, steering and polling refuse or skip), restorable, audited; the API's refusal."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from smrweb.tracking import services
from smrweb.tracking.errors import Archived, ArchiveRefused, NotAllowed
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    AuditEvent,
    MetricPoint,
    Project,
    Run,
    SourceHealth,
    SourceKind,
    Submission,
)
from smrweb.tracking.services import rollbacks
from smrweb.tracking.services import submissions as subs
from smrweb.tracking.services.capabilities import Action, may, refusal
from tests.tracking.retention_helpers import finished_run, ingest, metrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def done(project):
    return finished_run(project, "r1", points=3)


def test_reviewers_and_admins_archive_runs_viewers_and_tokens_do_not(project, done, alice, bob, victor):
    assert services.archive_role(done) == "reviewer" and services.archive_role(project) == "admin"
    assert services.may_archive(bob, done) and services.may_archive(alice, done)
    assert not services.may_archive(victor, done)
    token = services.create_api_token(project, name="ci")[0]
    assert "reviewer role" in services.archive_refusal(token, done)
    with pytest.raises(NotAllowed):
        services.archive_run(done, by=victor)
    assert not services.may_archive(bob, project) and services.may_archive(alice, project)
    with pytest.raises(NotAllowed):
        services.archive_project(project, by=bob)


def test_a_live_run_cannot_be_archived(project, bob):
    ingest(project, "live", metrics("loss", [1.0]))
    live = Run.objects.get(external_id="live")
    assert "only a finished run" in services.archive_refusal(bob, live)
    with pytest.raises(ArchiveRefused):
        services.archive_run(live, by=bob)


def test_archive_and_restore_a_run_are_audited_and_twice_is_refused(project, done, bob):
    services.archive_run(done, by=bob)
    done.refresh_from_db()
    assert done.archived_at is not None and done.archived_by == bob
    with pytest.raises(ArchiveRefused, match="already archived"):
        services.archive_run(done, by=bob)
    services.restore_run(done, by=bob)
    done.refresh_from_db()
    assert done.archived_at is None and done.archived_by is None
    verbs = list(AuditEvent.objects.filter(project=project, object_type="run").values_list("verb", flat=True))
    assert verbs[:2] == ["run.restored", "run.archived"]


def test_an_archived_run_takes_no_events_and_nothing_is_written(project, done, bob):
    services.archive_run(done, by=bob)
    before = (MetricPoint.objects.count(), AgentTurn.objects.count(), Submission.objects.count())
    with pytest.raises(Archived, match="Run r1 is archived"):
        ingest(project, "r1", metrics("loss", [5.0], prefix="late-"))
    with pytest.raises(Archived):
        services.store_artifact(project, "r1", path="x.txt", content=io.BytesIO(b"late"))
    assert (MetricPoint.objects.count(), AgentTurn.objects.count(), Submission.objects.count()) == before
    assert not Artifact.objects.exists()
    services.restore_run(done, by=bob)
    assert ingest(project, "r1", metrics("loss", [5.0], prefix="late-")).accepted == 1


def test_an_archived_project_takes_no_new_run_and_is_not_polled(project, alice):
    project.source = SourceKind.SMR
    project.save()
    services.archive_project(project, by=alice)
    with pytest.raises(Archived, match="Project hill is archived"):
        ingest(project, "new", metrics("loss", [1.0]))
    assert not Run.objects.filter(external_id="new").exists()
    assert services.claim_due_projects(hold_seconds=5) == []
    assert SourceHealth.objects.filter(project=project).exists()  # health is kept, only not claimed
    services.restore_project(project, by=alice)
    assert services.claim_due_projects(hold_seconds=5) == [project.pk]


def test_reviews_rollbacks_and_steering_are_refused_while_archived(project, done, alice, bob):
    submission = Submission.objects.get(run=done)
    services.archive_run(done, by=bob)
    submission.refresh_from_db()
    with pytest.raises(Archived):
        subs.request_verification(submission, by=bob)
    project.rollback_webhook_url = "https://hooks.example.test/rollback"
    project.save()
    with pytest.raises(Archived):
        rollbacks.request_rollback(by=bob, reason="x", submission=submission)
    services.archive_project(project, by=alice)
    project.refresh_from_db()
    assert "archived" in refusal(project, Action.ROLL_BACK)
    assert "archived" in refusal(project, Action.STEER)
    assert not may(bob, project, Action.ROLL_BACK) and not may(bob, project, Action.STEER)


def test_archived_projects_keep_their_audit_trail_and_settings(project, alice):
    services.archive_project(project, by=alice)
    project.refresh_from_db()
    assert project.archived_at is not None
    event = AuditEvent.objects.get(verb="project.archived")
    assert event.project == project and event.detail == {"project_slug": "hill"}
    assert Project.objects.filter(slug="hill").exists()


# --- the API's answer --------------------------------------------------------------------------------


def test_the_api_refuses_events_into_an_archived_run_with_409(project, done, bob, api):
    services.archive_run(done, by=bob)
    response = api.post(
        "/api/v1/projects/hill/runs/r1/events", metrics("loss", [1.0], prefix="api-"), format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "archived"
    assert "Run r1 is archived" in response.json()["message"]
    upload = api.post(
        "/api/v1/projects/hill/runs/r1/artifacts",
        {"file": SimpleUploadedFile("a.txt", b"bytes")},
        format="multipart",
    )
    assert upload.status_code == 409 and upload.json()["code"] == "archived"
    assert not Artifact.objects.exists()


def test_the_api_refuses_a_new_run_in_an_archived_project(project, alice, api):
    services.archive_project(project, by=alice)
    response = api.post("/api/v1/projects/hill/runs/fresh/events", metrics("loss", [1.0]), format="json")
    assert response.status_code == 409 and response.json()["code"] == "archived"
    assert not Run.objects.filter(external_id="fresh").exists()
