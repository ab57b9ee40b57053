"""The MLflow example of docs/integrations.md#mlflow-client, run as written by a separate Python process
with only the two environment variables, against a live smrweb; what it logged is read back through
smrweb's own API."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smrweb.tracking.models import Run, Submission

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs" / "integrations.md"
pytestmark = [pytest.mark.django_db(transaction=True)]


def _run_example(code: str, live_server, token: str, cwd) -> subprocess.CompletedProcess:
    """Run a docs example in a separate Python process with only the two MLflow environment variables."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DJANGO_", "SMRWEB_", "DATABASE"))
    }
    env.update(MLFLOW_TRACKING_URI=f"{live_server.url}/mlflow", MLFLOW_TRACKING_TOKEN=token)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_docs_mlflow_example_logs_into_smrweb(live_server, token, api, project, tmp_path):
    found = re.search(r"<!-- test: mlflow-example -->\s*\n```python\n(.*?)\n```", DOCS.read_text(), re.DOTALL)
    assert found, "no code block marked mlflow-example in docs/integrations.md"
    _run_example(found.group(1), live_server, token, tmp_path)
    run = Run.objects.get(project=project)
    body = api.get(f"/api/v1/projects/hill/runs/{run.external_id}").json()
    assert body["state"] == "done" and body["display_name"] == "lr sweep 0.01"
    assert {p["key"]: p["value"] for p in body["params"]} == {"lr": "0.01", "optimizer": "adam"}
    assert {t["key"]: t["value"] for t in body["tags"]}["team"] == "agents"
    assert body["best_score"] == 0.83 and body["score_count"] == 1
    assert list(Submission.objects.filter(run=run).values_list("score", flat=True)) == [0.83]
    loss = api.get(f"/api/v1/projects/hill/runs/{run.external_id}/metrics", {"key": "loss"}).json()
    assert [(p["step"], p["value"]) for p in loss["points"]] == [(0, 1.0), (1, 0.5), (2, 1 / 3)]
    artifacts = api.get(f"/api/v1/projects/hill/runs/{run.external_id}/artifacts").json()
    assert [(a["path"], a["size"]) for a in artifacts] == [("notes.txt", 24)]


@pytest.mark.integration
def test_the_docs_mlflow_scores_that_count_example_is_verified_by_a_worker(
    live_server, alice, tmp_path, celery_worker
):
    """docs/integrations.md#mlflow-scores-that-count, as written, against a project like the demo's
    demo-optimizer (the optimizer preset, auto-verify on): the score logged before its file takes the file
    at the scenario's path, and a real worker's validator verifies it, so it counts (P1-B)."""
    from django.core.management import call_command

    from smrweb.tracking import services
    from smrweb.tracking.models import Scenario
    from smrweb.tracking.queries.projects import counted_leaderboard
    from tests.conftest import wait_for
    from tests.factories import admin_project

    call_command("load_presets", stdout=io.StringIO())
    project = admin_project(
        "demo-optimizer", scenario=Scenario.objects.get(key="optimizer-hill-climb"), by=alice
    )
    services.update_project(project, auto_verify=True, by=alice)
    token = services.create_api_token(project, name="harness")[1]
    found = re.search(
        r"<!-- test: mlflow-verified-example -->\s*\n```python\n(.*?)\n```", DOCS.read_text(), re.DOTALL
    )
    assert found, "no code block marked mlflow-verified-example in docs/integrations.md"
    done = _run_example(found.group(1), live_server, token, tmp_path)
    run = Run.objects.get(project=project)
    assert f"/mlflow/#/experiments/{project.pk}/runs/{run.external_id}" in done.stdout
    sub = wait_for(lambda: Submission.objects.filter(run=run, status="verified").first(), timeout=90)
    assert (sub.score, sub.artifact.path) == (3.05, "submission/optimizer.py")
    assert sub.verification_outcome == "passed"
    assert sub in counted_leaderboard(project)
