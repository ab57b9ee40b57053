"""smrweb's rows read back in MLflow's JSON shapes: experiments, runs, metric history, artifact listings."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import QuerySet

from smrweb.sources.mlflow.wire import (
    DEFAULT_EXPERIMENT_ID,
    RUN_NAME_TAG,
    STATE_TO_STATUS,
    USER_TAG,
    MlflowError,
    ms_of,
)
from smrweb.tracking.models import Artifact, MetricPoint, Project, Run, RunParam, RunTag


def experiment_json(project: Project) -> dict:
    return {
        "experiment_id": str(project.pk),
        "name": project.slug,
        "artifact_location": f"mlflow-artifacts:/{project.pk}",
        "lifecycle_stage": "active",
        "creation_time": ms_of(project.created),
        "last_update_time": ms_of(getattr(project, "updated", None) or project.created),
        "tags": [{"key": "smrweb.project_name", "value": project.name}],
    }


def experiment_for(projects: QuerySet[Project], experiment_id: Any, *, default: Project | None) -> Project:
    """The visible project with this experiment id ("0": `default`, a token's project)."""
    experiment_id = str(experiment_id if experiment_id is not None else "")
    if experiment_id == DEFAULT_EXPERIMENT_ID and default is not None:
        return default
    if not re.fullmatch(r"\d{1,18}", experiment_id):
        raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"No experiment with id {experiment_id[:100]!r}.")
    project = projects.select_related("scenario").filter(pk=int(experiment_id)).first()
    if project is None:
        raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"No experiment with id {experiment_id!r}.")
    return project


def artifact_uri(run: Run) -> str:
    return f"mlflow-artifacts:/{run.project_id}/{run.external_id}/artifacts"


def status_of(run: Run) -> str:
    return STATE_TO_STATUS.get(run.state, "RUNNING")


def _latest_metrics(run: Run) -> list[dict]:
    """Each key's latest point as MLflow picks it: the highest step, then time, then value."""
    keys = MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct().order_by("key")
    latest = []
    for key in keys:
        point = MetricPoint.objects.filter(run=run, key=key).order_by("-step", "-ts", "-value").first()
        latest.append(_metric_json(point))
    return latest


def _metric_json(point: MetricPoint) -> dict:
    return {"key": point.key, "value": point.value, "timestamp": ms_of(point.ts), "step": point.step}


def run_json(run: Run) -> dict:
    tags = [{"key": t.key, "value": t.value} for t in RunTag.objects.filter(run=run)]
    tags.append({"key": RUN_NAME_TAG, "value": run.name})
    user = next((t["value"] for t in tags if t["key"] == USER_TAG), "")
    info = {
        "run_id": run.external_id,
        "run_uuid": run.external_id,
        "run_name": run.name,
        "experiment_id": str(run.project_id),
        "user_id": user,
        "status": status_of(run),
        "start_time": ms_of(run.started_at),
        "artifact_uri": artifact_uri(run),
        "lifecycle_stage": "active",
    }
    if run.finished_at is not None:
        info["end_time"] = ms_of(run.finished_at)
    return {
        "info": info,
        "data": {
            "metrics": _latest_metrics(run),
            "params": [{"key": p.key, "value": p.value} for p in RunParam.objects.filter(run=run)],
            "tags": tags,
        },
        "inputs": {},
    }


def metric_history(run: Run, key: str) -> dict:
    points = MetricPoint.objects.filter(run=run, key=key).order_by("step", "ts", "id")
    return {"metrics": [_metric_json(p) for p in points]}


def latest_artifact(run: Run, path: str) -> Artifact | None:
    return (
        Artifact.objects.filter(run=run, path=path).select_related("blob").order_by("-created", "-id").first()
    )


def list_artifacts(run: Run, path: str) -> dict:
    """The files and directories directly under `path` (latest version of each file), as MLflow lists them:
    paths relative to `path`."""
    prefix = f"{path}/" if path else ""
    files: dict[str, int] = {}
    dirs: set[str] = set()
    rows = (
        Artifact.objects.filter(run=run, path__startswith=prefix)
        .order_by("path", "-created", "-id")
        .values_list("path", "blob__size")
    )
    for full, size in rows:
        rest = full[len(prefix) :]
        head, sep, _ = rest.partition("/")
        if sep:
            dirs.add(head)
        elif head not in files:
            files[head] = size
    entries = [{"path": d, "is_dir": True} for d in sorted(dirs - set(files))]
    entries += [{"path": name, "is_dir": False, "file_size": size} for name, size in sorted(files.items())]
    return {"files": entries}
