"""Scripted set-up: `create_project`, `create_api_token` and `flag_stalled_runs` management commands."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.models import ApiToken, AuditEvent, Project, Run, Scenario


def run_command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_project_uses_the_generic_scenario_by_default(db):
    out, _ = run_command("create_project", "solo")
    project = Project.objects.get(slug="solo")
    assert (project.scenario.key, project.source, project.name) == (Scenario.GENERIC_KEY, "push", "solo")
    assert project.scenario.direction == "maximize"
    assert "created project solo" in out
    assert not project.memberships.exists()  # nobody signed in: no admin membership
    assert AuditEvent.objects.get(verb="project.created").actor_label == "system"


def test_create_project_with_a_scenario(db):
    services.create_scenario(key="tsp", name="TSP", direction="minimize")
    out, _ = run_command("create_project", "tour", "--scenario", "tsp", "--name", "Tours")
    project = Project.objects.get(slug="tour")
    assert (project.scenario.key, project.name) == ("tsp", "Tours")
    assert "scenario tsp" in out


def test_create_project_with_an_unknown_scenario_fails(db):
    with pytest.raises(CommandError) as caught:
        run_command("create_project", "tour", "--scenario", "nope")
    assert "No scenario 'nope'" in str(caught.value)
    assert "generic" in str(caught.value)  # the known keys are listed
    assert not Project.objects.filter(slug="tour").exists()


def test_create_project_with_the_smr_source_needs_its_project_id(db):
    with pytest.raises(CommandError) as caught:
        run_command("create_project", "managed", "--source", "smr")
    assert "SMR project id" in str(caught.value)
    assert not Project.objects.filter(slug="managed").exists()


def test_create_project_with_the_smr_source_asks_the_backend_first(db, settings):
    settings.SMRWEB_SMR_BACKEND_BASE, settings.SMRWEB_SMR_API_KEY = "", ""
    with pytest.raises(CommandError, match="No SMR backend address"):
        run_command("create_project", "managed", "--source", "smr", "--smr-project-id", "proj-123")
    assert not Project.objects.filter(slug="managed").exists()


def test_create_project_with_the_smr_source_and_its_project_id(db):
    run_command(
        "create_project", "managed", "--source", "smr", "--smr-project-id", "proj-123", "--skip-check"
    )
    project = Project.objects.get(slug="managed")
    assert (project.source, project.source_settings) == (
        "smr",
        {"smr_project_id": "proj-123", "operator_key": True, "score_metric": "auto"},
    )


def test_create_project_refuses_a_taken_slug(project):
    with pytest.raises(CommandError) as caught:
        run_command("create_project", "hill")
    assert "already exists" in str(caught.value)
    assert Project.objects.filter(slug="hill").count() == 1


def test_create_api_token_prints_a_working_token_on_the_last_line(db):
    run_command("create_project", "scripted")
    out, err = run_command("create_api_token", "scripted", "--name", "harness")
    raw = out.strip().splitlines()[-1]
    assert raw.startswith(ApiToken.PREFIX)
    assert raw not in err  # printed once, on stdout
    token = ApiToken.objects.get(project__slug="scripted")
    assert token.name == "harness" and token.token_hash != raw

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert [p["slug"] for p in client.get("/api/v1/projects/").json()] == ["scripted"]
    response = client.post(
        "/api/v1/projects/scripted/runs/r1/events",
        b'[{"type": "metric", "key": "loss", "value": 1}]',
        content_type="application/json",
    )
    assert response.status_code == 200 and response.json()["accepted"] == 1


def test_create_api_token_for_an_unknown_project_fails(db):
    with pytest.raises(CommandError) as caught:
        run_command("create_api_token", "ghost")
    assert "ghost" in str(caught.value)
    assert not ApiToken.objects.exists()


def test_flag_stalled_runs_command_flags_and_reports(project):
    stale = timezone.now() - project.stall_after - timedelta(minutes=1)
    Run.objects.create(project=project, external_id="old", last_progress_at=stale)
    Run.objects.create(project=project, external_id="fresh")
    Run.objects.create(project=project, external_id="finished", state="done", last_progress_at=stale)
    out, _ = run_command("flag_stalled_runs")
    assert "stalled: hill/old" in out
    assert "1 run(s) flagged" in out
    assert set(Run.objects.filter(stalled_since__isnull=False).values_list("external_id", flat=True)) == {
        "old"
    }
    again, _ = run_command("flag_stalled_runs")
    assert "0 run(s) flagged" in again


@pytest.mark.parametrize("slug", ["Not A Slug!", "a/b", "x" * 101, "caf\u00e9"])
def test_create_project_refuses_a_slug_the_urls_cannot_route(db, slug):
    # Such a project would break every page that links to it.
    with pytest.raises(CommandError) as caught:
        run_command("create_project", slug)
    assert "slug" in str(caught.value).lower()
    assert not Project.objects.exists()
