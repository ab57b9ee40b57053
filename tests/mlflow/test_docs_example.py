"""The MLflow example of docs/integrations.md#mlflow-client, run as written by a separate Python process
with only the two environment variables, against a live smrweb; what it logged is read back through
smrweb's own API."""

from __future__ import annotations

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


def test_the_docs_mlflow_example_logs_into_smrweb(live_server, token, api, project, tmp_path):
    found = re.search(r"<!-- test: mlflow-example -->\s*\n```python\n(.*?)\n```", DOCS.read_text(), re.DOTALL)
    assert found, "no code block marked mlflow-example in docs/integrations.md"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DJANGO_", "SMRWEB_", "DATABASE"))
    }
    env.update(MLFLOW_TRACKING_URI=f"{live_server.url}/mlflow", MLFLOW_TRACKING_TOKEN=token)
    done = subprocess.run(
        [sys.executable, "-c", found.group(1)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
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
