"""The real MLflow client (mlflow-skinny, pinned in the test lock) against a live smrweb."""

from __future__ import annotations

import pytest


@pytest.fixture
def tracking(live_server, token, monkeypatch):
    """`mlflow`, pointed at the live server's /mlflow with the project's token, as a harness would be:
    only the two environment variables. No retries: a refusal is an answer, not a transient failure."""
    import mlflow

    uri = f"{live_server.url}/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    mlflow.set_tracking_uri(uri)
    yield mlflow
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(None)
