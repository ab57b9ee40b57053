"""The pages of archive, delete and retention: archive and restore from the run page and the Retention
tab, archived hidden from the lists unless asked for, the delete confirmation names the counts and wants
the typed id, the retention preview shows what a dry run finds."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, MetricPoint, Project, Run
from tests.tracking.retention_helpers import finished_run, ingest, metrics, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def done(project):
    run = finished_run(project, "r-done", points=30, turns=2)
    upload(project, "r-done", b"weights" * 10)
    return run


def as_user(client, user):
    client.force_login(user)
    return client


def test_a_reviewer_archives_and_restores_a_run_from_its_page(client, project, done, bob):
    as_user(client, bob)
    page = client.get(done.get_absolute_url()).content.decode()
    assert "Archive this run" in page and "Delete this run" not in page  # deleting is for admins
    response = client.post("/projects/hill/runs/r-done/archive", {"action": "archive"})
    assert response.status_code == 302
    done.refresh_from_db()
    assert done.archived_at is not None
    page = client.get(done.get_absolute_url()).content.decode()
    assert 'data-badge="archived"' in page and "Restore this run" in page
    # Hidden from the runs table unless "show archived" is ticked.
    table = client.get("/projects/hill/").content.decode()
    assert 'data-run="r-done"' not in table and "show archived (1)" in table
    assert 'data-run="r-done"' in client.get("/projects/hill/?archived=1").content.decode()
    client.post("/projects/hill/runs/r-done/archive", {"action": "restore"})
    done.refresh_from_db()
    assert done.archived_at is None
    assert 'data-run="r-done"' in client.get("/projects/hill/").content.decode()


def test_a_live_run_has_no_archive_button_and_a_post_is_refused(client, project, bob):
    ingest(project, "live", metrics("loss", [1.0]))
    as_user(client, bob)
    page = client.get("/projects/hill/runs/live/").content.decode()
    assert "Archive this run" not in page and "only a finished run can be archived" in page
    response = client.post("/projects/hill/runs/live/archive", {"action": "archive"}, follow=True)
    assert "only a finished run can be archived" in response.content.decode()
    assert Run.objects.get(external_id="live").archived_at is None


def test_the_run_delete_page_names_the_counts_and_wants_the_typed_id(client, project, done, alice):
    as_user(client, alice)
    page = client.get("/projects/hill/runs/r-done/delete").content.decode()
    counts = dict(re.findall(r'data-count="(\w+)">(\d+)', page))
    assert counts == {
        "turns": "2",
        "metric_points": "30",
        "submissions": "1",
        "artifacts": "1",
        "blobs_freed": "1",
    }
    assert "70\xa0bytes" in page  # the bytes freed
    wrong = client.post("/projects/hill/runs/r-done/delete", {"confirm": "r-don"})
    assert wrong.status_code == 400 and "Type r-done to confirm" in wrong.content.decode()
    assert Run.objects.filter(external_id="r-done").exists()
    response = client.post("/projects/hill/runs/r-done/delete", {"confirm": "r-done"})
    assert response.status_code == 302 and response["Location"] == "/projects/hill/"
    assert not Run.objects.filter(external_id="r-done").exists()
    assert AuditEvent.objects.get(verb="run.deleted").detail["metric_points"] == 30


def test_the_project_delete_page_deletes_the_project_and_its_trail_stays(client, project, done, alice):
    as_user(client, alice)
    page = client.get("/projects/hill/delete").content.decode()
    assert 'data-count="runs">1<' in page and "Type <code>hill</code> to confirm" in page
    response = client.post("/projects/hill/delete", {"confirm": "hill"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert not Project.objects.filter(slug="hill").exists()
    assert AuditEvent.objects.get(verb="project.deleted").detail["project_slug"] == "hill"


def test_an_archived_project_is_hidden_from_the_overview_unless_asked(client, project, alice):
    as_user(client, alice)
    client.post("/projects/hill/archive", {"action": "archive"})
    project.refresh_from_db()
    assert project.archived_at is not None
    overview = client.get("/").content.decode()
    assert 'data-project="hill"' not in overview and "1 archived project hidden" in overview
    shown = client.get("/?archived=1").content.decode()
    assert 'data-project="hill"' in shown and "data-archived" in shown
    assert "data-project-archived" in client.get("/projects/hill/").content.decode()
    client.post("/projects/hill/archive", {"action": "restore"})
    assert 'data-project="hill"' in client.get("/").content.decode()


def test_the_retention_tab_saves_settings_and_previews_what_a_run_would_remove(client, project, alice):
    as_user(client, alice)
    old = finished_run(project, "old", points=200)
    Run.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=100))
    bad = client.post(
        "/projects/hill/retention/",
        {"retention_metric_days": "0", "retention_keep_points": "50", "retention_archived_run_days": ""},
    )
    assert bad.status_code == 400 and "aria-invalid" in bad.content.decode()
    response = client.post(
        "/projects/hill/retention/",
        {"retention_metric_days": "30", "retention_keep_points": "50", "retention_archived_run_days": ""},
    )
    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.retention_metric_days, project.retention_keep_points) == (30, 50)
    page = client.get("/projects/hill/retention/").content.decode()
    dry = services.apply_retention(project, dry_run=True)
    assert dry.points_removed > 0
    assert f'data-preview="points">{dry.points_removed} from 1 series' in page
    assert MetricPoint.objects.filter(run=old).count() == 200  # the page removed nothing
    assert AuditEvent.objects.filter(verb="project.retention_changed").count() == 1


def test_the_metric_panel_says_a_series_was_downsampled(client, project, alice):
    as_user(client, alice)
    old = finished_run(project, "old", points=200)
    project.retention_metric_days, project.retention_keep_points = 1, 20
    project.save()
    services.apply_retention(project, now=timezone.now() + timedelta(days=400))
    old.refresh_from_db()
    kept = old.metrics_downsampled["loss"]["kept"]
    page = client.get("/projects/hill/runs/old/?key=loss").content.decode()
    assert f"Downsampled by the retention policy: {kept} of 200 points kept." in page
