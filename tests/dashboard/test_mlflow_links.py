"""/mlflow/runs/<run id> and /mlflow/experiments/<id>, where /mlflow/'s script sends the MLflow client's
printed links (the browser test plays the whole link): the run or project this person may see, else the
not-found page; a run id found in two projects is told apart by its experiment."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from tests.factories import admin_project

pytestmark = pytest.mark.django_db


def run_in(project, run_id="3f2a"):
    services.ingest_events(project, run_id, parse_events(json.dumps([{"type": "state", "state": "running"}])))


def test_a_run_id_leads_to_its_run_page_in_the_experiment_named(client, alice, project):
    twin = admin_project("twin", by=alice)
    run_in(project)
    run_in(twin)
    client.force_login(alice)
    answer = client.get(f"/mlflow/runs/3f2a?experiment={project.pk}")
    assert (answer.status_code, answer["Location"]) == (302, "/projects/hill/runs/3f2a/")
    answer = client.get(f"/mlflow/runs/3f2a?experiment={twin.pk}")
    assert answer["Location"] == "/projects/twin/runs/3f2a/"
    assert client.get("/mlflow/runs/3f2a").status_code == 302  # no experiment: the newest of the two
    assert client.get(f"/mlflow/experiments/{twin.pk}")["Location"] == "/projects/twin/"


def test_what_a_person_may_not_see_is_not_found(client, carol, project):
    run_in(project)
    client.force_login(carol)
    for path in (
        f"/mlflow/runs/3f2a?experiment={project.pk}",
        "/mlflow/runs/no-such-run",
        f"/mlflow/experiments/{project.pk}",
        "/mlflow/experiments/not-a-number",
    ):
        answer = client.get(path)
        assert answer.status_code == 404 and b"Not found" in answer.content, path


def test_the_link_page_is_a_static_script_under_the_csp(client):
    page = client.get("/mlflow/")
    body = page.content.decode()
    assert page.status_code == 200 and "js/mlflow-link.js" in body
    assert 'data-runs="/mlflow/runs/RUN"' in body
    assert 'data-experiments="/mlflow/experiments/EXPERIMENT"' in body
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert "<script>" not in body  # nothing inline: the CSP would refuse it
