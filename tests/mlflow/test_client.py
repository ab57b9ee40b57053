"""An unchanged MLflow client logs into smrweb: experiments are projects, runs are runs, and every value it
wrote is read back through MLflow's API and through smrweb's own (/api/v1/...)."""

from __future__ import annotations

import time

import pytest

from smrweb.tracking.models import AuditEvent, MetricPoint, Run, RunParam, RunTag, Submission

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_run_logged_with_the_mlflow_client_reads_back_the_same_in_smrweb(tracking, api, project, tmp_path):
    import mlflow
    from mlflow.entities import Metric, Param
    from mlflow.entities import RunTag as MlflowTag
    from mlflow.tracking import MlflowClient

    experiment = mlflow.set_experiment("hill")
    assert (experiment.experiment_id, experiment.name) == (str(project.pk), "hill")
    weights = tmp_path / "weights.txt"
    weights.write_text("w = [0.25, 0.5]\n")
    now = int(time.time() * 1000)
    with mlflow.start_run(run_name="sweep lr 0.01") as active:
        run_id = active.info.run_id
        assert active.info.artifact_uri == f"mlflow-artifacts:/{project.pk}/{run_id}/artifacts"
        mlflow.log_params({"lr": 0.01, "layers": 4})
        mlflow.log_param("optimizer", "adam")
        mlflow.set_tag("team", "agents")
        mlflow.set_tags({"learning rate schedule": "cosine", "phase": "warm-up"})
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step, timestamp=now + step)
        mlflow.log_metrics({"acc": 0.75, "f1": 0.5}, step=2, timestamp=now)
        MlflowClient().log_batch(
            run_id,
            metrics=[Metric("loss", 0.125, now + 10, 5), Metric("acc", 0.875, now + 10, 5)],
            params=[Param("batch size", "32")],
            tags=[MlflowTag("phase", "fine-tune")],  # a tag can change; a param cannot
        )
        mlflow.log_artifact(str(weights))
        mlflow.log_text("hello from the harness\n", "notes/readme.txt")

    client = MlflowClient()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "sweep lr 0.01"
    assert run.info.experiment_id == str(project.pk)
    assert run.info.end_time is not None and run.info.end_time >= run.info.start_time
    assert run.data.params == {"lr": "0.01", "layers": "4", "optimizer": "adam", "batch size": "32"}
    assert run.data.metrics == {"loss": 0.125, "acc": 0.875, "f1": 0.5}
    tags = run.data.tags
    assert tags["team"] == "agents" and tags["phase"] == "fine-tune"
    assert tags["learning rate schedule"] == "cosine" and tags["mlflow.runName"] == "sweep lr 0.01"
    assert tags["mlflow.source.name"] and tags["mlflow.user"]  # the client's own tags are kept
    history = client.get_metric_history(run_id, "loss")
    assert [(m.step, m.value, m.timestamp) for m in history] == [
        (0, 1.0, now),
        (1, 0.5, now + 1),
        (2, 1 / 3, now + 2),
        (3, 0.25, now + 3),
        (4, 0.2, now + 4),
        (5, 0.125, now + 10),
    ]
    listed = {(f.path, f.is_dir, f.file_size) for f in client.list_artifacts(run_id)}
    assert listed == {("weights.txt", False, 16), ("notes", True, None)}
    assert [f.path for f in client.list_artifacts(run_id, "notes")] == ["notes/readme.txt"]
    assert mlflow.artifacts.load_text(f"runs:/{run_id}/notes/readme.txt") == "hello from the harness\n"
    downloaded = client.download_artifacts(run_id, "weights.txt", str(tmp_path / "out"))
    assert open(downloaded).read() == "w = [0.25, 0.5]\n"
    found = client.search_runs([experiment.experiment_id], "params.lr = '0.01' and metrics.loss < 0.2")
    assert [r.info.run_id for r in found] == [run_id]
    assert client.search_runs([experiment.experiment_id], "tags.phase = 'warm-up'") == []

    # smrweb's own read API says the same.
    body = api.get(f"/api/v1/projects/hill/runs/{run_id}").json()
    assert body["state"] == "done" and body["display_name"] == "sweep lr 0.01"
    assert body["finished_at"] is not None
    assert {p["key"]: p["value"] for p in body["params"]} == run.data.params
    assert {t["key"]: t["value"] for t in body["tags"]} == {
        k: v for k, v in tags.items() if k != "mlflow.runName"
    }
    series = api.get(f"/api/v1/projects/hill/runs/{run_id}/metrics", {"key": "loss"}).json()
    assert [(p["step"], p["value"]) for p in series["points"]] == [(m.step, m.value) for m in history]
    assert sorted(api.get(f"/api/v1/projects/hill/runs/{run_id}/metrics").json()["keys"]) == [
        "acc",
        "f1",
        "loss",
    ]
    artifacts = api.get(f"/api/v1/projects/hill/runs/{run_id}/artifacts").json()
    assert sorted((a["path"], a["size"]) for a in artifacts) == [
        ("notes/readme.txt", 23),
        ("weights.txt", 16),
    ]
    listing = api.get("/api/v1/projects/hill/runs", {"param": "lr=0.01"}).json()
    assert [r["external_id"] for r in listing["results"]] == [run_id]
    assert api.get("/api/v1/projects/hill/runs", {"param": "lr=0.1"}).json()["results"] == []
    assert AuditEvent.objects.filter(verb="run.params_logged", actor_label="token:ci").count() == 3


def test_an_exception_inside_start_run_fails_the_run(tracking, api, project):
    import mlflow

    mlflow.set_experiment("hill")
    with pytest.raises(ZeroDivisionError):
        with mlflow.start_run() as active:
            mlflow.log_metric("loss", 0.5)
            1 / 0  # noqa: B018
    run_id = active.info.run_id
    assert mlflow.tracking.MlflowClient().get_run(run_id).info.status == "FAILED"
    body = api.get(f"/api/v1/projects/hill/runs/{run_id}").json()
    assert body["state"] == "failed" and body["finished_at"] is not None


def test_the_client_hears_mlflow_errors(tracking, project, other_project):
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    with pytest.raises(MlflowException) as refused:
        mlflow.set_experiment("other")  # another project: not found, then not creatable
    assert refused.value.error_code == "PERMISSION_DENIED" and "smrweb projects" in refused.value.message
    with pytest.raises(MlflowException) as missing:
        client.get_run("0123456789abcdef0123456789abcdef")
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    mlflow.set_experiment("hill")
    with mlflow.start_run() as active:
        mlflow.log_param("lr", "0.01")
        with pytest.raises(MlflowException) as changed:
            mlflow.log_param("lr", "0.02")
        assert (
            changed.value.error_code == "INVALID_PARAMETER_VALUE" and "cannot change" in changed.value.message
        )
        with pytest.raises(MlflowException) as nan:
            mlflow.log_metric("loss", float("nan"))
        assert nan.value.error_code == "INVALID_PARAMETER_VALUE" and "finite" in nan.value.message
    run = Run.objects.get(external_id=active.info.run_id)
    assert list(RunParam.objects.filter(run=run).values_list("key", "value")) == [("lr", "0.01")]
    assert not MetricPoint.objects.filter(run=run).exists()


def test_the_score_metric_becomes_a_submission_and_retries_write_nothing_twice(tracking, project):
    import mlflow

    assert project.scenario.score_metric == "score"
    mlflow.set_experiment("hill")
    with mlflow.start_run() as active:
        mlflow.log_metric("score", 0.42, step=1, timestamp=1_700_000_000_000)
        mlflow.log_metric("score", 0.42, step=1, timestamp=1_700_000_000_000)  # a retry of the same point
        mlflow.log_metric("score", 0.57, step=2, timestamp=1_700_000_001_000)
    run = Run.objects.get(external_id=active.info.run_id)
    assert list(MetricPoint.objects.filter(run=run).order_by("step").values_list("step", "value")) == [
        (1, 0.42),
        (2, 0.57),
    ]
    assert sorted(Submission.objects.filter(run=run).values_list("score", flat=True)) == [0.42, 0.57]
    run.refresh_from_db()
    assert (run.best_score, run.latest_score, run.score_count) == (0.57, 0.57, 2)
    assert not RunTag.objects.filter(run=run, key="mlflow.runName").exists()  # the display name holds it


def test_nested_runs_log_dict_and_fluent_search(tracking, project):
    import mlflow

    mlflow.set_experiment("hill")
    with mlflow.start_run(run_name="parent") as parent:
        with mlflow.start_run(run_name="child", nested=True) as child:
            mlflow.log_dict({"layers": [64, 32]}, "config/model.json")
            mlflow.log_metric("loss", 0.3)
    assert mlflow.artifacts.load_dict(f"runs:/{child.info.run_id}/config/model.json") == {"layers": [64, 32]}
    found = mlflow.search_runs(
        experiment_names=["hill"],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
        output_format="list",
    )
    assert [r.info.run_name for r in found] == ["child"]
    assert {
        r.info.status for r in mlflow.search_runs(experiment_ids=[str(project.pk)], output_format="list")
    } == {"FINISHED"}
