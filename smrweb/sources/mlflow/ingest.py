"""MLflow's tracking calls as a way in: runs created and updated, metrics (a metric named like the
scenario's score metric is also a score), params, tags and artifact uploads, each request all or nothing."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import IO, Any

from django.db import transaction
from django.utils import timezone

from smrweb.sources.apply import apply_events
from smrweb.sources.mlflow.wire import (
    ARTIFACT_TAG,
    GIT_COMMIT_TAG,
    RUN_NAME_TAG,
    STATUS_TO_STATE,
    VIA,
    MlflowError,
    from_tracking_error,
    int_field,
    invalid,
    iso_of,
    text_field,
)
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidEvents, TrackingError
from smrweb.tracking.events import MLFLOW_SCORE_ID_PREFIX
from smrweb.tracking.models import Artifact, Project, Run, RunState, RunTag

# MLflow's own limits for one log-batch request (the server's are the same numbers).
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
MAX_BATCH_TOTAL = 1000


def _tags_of(raw: Any) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise invalid("tags must be a list of {key, value} objects.")
    tags = []
    for tag in raw:
        key = text_field(tag, "key")
        value = tag.get("value") or ""
        if not isinstance(value, str):
            raise invalid(f"The value of tag {key!r} must be a string.")
        try:
            tags.append(services.check_tag(key, value))
            if key == ARTIFACT_TAG:
                services.check_artifact_path(value)
        except TrackingError as exc:
            raise invalid(f"Tag {key[:100]!r}: {exc.message}") from None
    return tags


def _artifact_ref(value: str) -> str:
    """A `smrweb.artifact` tag as the score event's `artifact`: a digest in lower case, a path as logged
    (MLflow's artifact paths have no leading `./`)."""
    if re.fullmatch(r"[0-9a-fA-F]{64}", value):
        return value.lower()
    return value.removeprefix("./")


def score_artifact(run: Run, tags: list[tuple[str, str]] = ()) -> str:
    """What a score logged now names as its artifact: the run's `smrweb.artifact` tag (set in this request
    or before), else the scenario's artifact path; "" when neither."""
    named = [value for key, value in tags if key == ARTIFACT_TAG]
    if not named:
        named = list(RunTag.objects.filter(run=run, key=ARTIFACT_TAG).values_list("value", flat=True))
    if named and named[-1]:
        return _artifact_ref(named[-1])
    return run.project.scenario.artifact_path


def _params_of(raw: Any) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise invalid("params must be a list of {key, value} objects.")
    params = []
    for param in raw:
        key = text_field(param, "key")
        value = param.get("value")
        try:
            params.append(services.check_param(key, "" if value is None else value))
        except TrackingError as exc:
            raise invalid(f"Param {key[:100]!r}: {exc.message}") from None
    return params


def _apply(project: Project, run_id: str, events: list[dict]) -> None:
    try:
        apply_events(project, run_id, list(enumerate(events)), via=VIA)
    except InvalidEvents as exc:
        raise from_tracking_error(exc) from None


def _set_tags(run: Run, tags: list[tuple[str, str]], by: Any) -> None:
    """MLflow's tags on the run: `mlflow.runName` is the run's display name (not kept twice); the git
    commit the client reports is also the run's commit; every other tag, `mlflow.*` too, is a RunTag."""
    for key, value in tags:
        if key == RUN_NAME_TAG:
            services.update_run_labels(run, display_name=value, by=by)
            continue
        services.set_tag(run, key=key, value=value, by=by)
        if key == ARTIFACT_TAG and value:  # scores logged before the tag, still waiting for bytes, name it
            services.name_awaited_artifact(run, _artifact_ref(value), event_id_prefix=MLFLOW_SCORE_ID_PREFIX)
        if key == GIT_COMMIT_TAG and value and len(value) <= 64 and run.git_commit != value:
            services.update_run_settings(run.project, run.external_id, git_commit=value, by=by)


def _fresh(run: Run) -> Run:
    return Run.objects.select_related("project__scenario").get(pk=run.pk)


def create_run(project: Project, body: dict, *, by: Any) -> Run:
    """A new run (id: a uuid hex) in `project`, running since `start_time`, with its tags and name."""
    start = int_field(body, "start_time")
    tags = _tags_of(body.get("tags"))
    name = text_field(body, "run_name", required=False)
    if name:
        tags = [t for t in tags if t[0] != RUN_NAME_TAG] + [services.check_tag(RUN_NAME_TAG, name)]
    started = iso_of(start) if start is not None else None
    run_id = uuid.uuid4().hex
    event = {"type": "state", "id": "mlflow:created", "state": RunState.RUNNING.value}
    if started:
        event["ts"] = started
    try:
        with transaction.atomic():
            _apply(project, run_id, [event])
            run = Run.objects.select_related("project__scenario").get(project=project, external_id=run_id)
            _set_tags(run, tags, by)
    except TrackingError as exc:
        raise from_tracking_error(exc) from None
    return _fresh(run)


def update_run(run: Run, body: dict, *, by: Any) -> Run:
    """MLflow's UpdateRun: a status (a state event at `end_time`, or now) and/or a new name."""
    status = body.get("status")
    end_time = int_field(body, "end_time")
    name = text_field(body, "run_name", required=False)
    events = []
    if status not in (None, ""):
        if status not in STATUS_TO_STATE:
            raise invalid(f"Invalid status {status!r}: expected one of {', '.join(STATUS_TO_STATE)}.")
        state = STATUS_TO_STATE[status]
        ts = iso_of(end_time) if end_time is not None else timezone.now().isoformat().replace("+00:00", "Z")
        events.append({"type": "state", "id": f"mlflow:status:{status}:{ts}", "state": state.value, "ts": ts})
    try:
        with transaction.atomic():
            if events:
                _apply(run.project, run.external_id, events)
            if name:
                _set_tags(run, [services.check_tag(RUN_NAME_TAG, name)], by)
    except TrackingError as exc:
        raise from_tracking_error(exc) from None
    return _fresh(run)


# --- metrics, params, tags -------------------------------------------------------------------------------


def metric_events(run: Run, raw: Any, *, artifact: str = "") -> list[dict]:
    """MLflow metrics as `metric` events (and `score` events naming `artifact` for the scenario's score
    metric), each keyed by a digest of (run, key, step, timestamp, value): a retried request is all
    duplicates."""
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise invalid("metrics must be a list of {key, value, timestamp, step} objects.")
    score_metric = run.project.scenario.score_metric
    events = []
    for metric in raw:
        key = text_field(metric, "key")
        value = metric.get("value")
        if isinstance(value, str):  # protobuf's JSON writes NaN and the infinities as strings
            value = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.get(
                value, value
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(f"Metric {key[:100]!r}: the value must be a number, not {value!r}.")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise invalid(
                f"Metric {key[:100]!r}: smrweb keeps finite values only (got {value}); nothing was written."
            )
        timestamp = int_field(metric, "timestamp", required=True)
        step = int_field(metric, "step", default=0)
        if step < 0:
            raise invalid(f"Metric {key[:100]!r}: smrweb keeps steps from 0 up (got {step}).")
        ts = iso_of(timestamp)
        digest = hashlib.blake2b(
            json.dumps([run.external_id, key, step, timestamp, value.hex()]).encode(), digest_size=16
        ).hexdigest()
        events.append(
            {"type": "metric", "id": f"mlflow:{digest}", "key": key, "value": value, "step": step, "ts": ts}
        )
        if key == score_metric:
            score = {"type": "score", "id": f"{MLFLOW_SCORE_ID_PREFIX}{digest}", "score": value, "ts": ts}
            if artifact:
                score["artifact"] = artifact
            events.append(score)
    return events


def log_batch(run: Run, body: dict, *, by: Any) -> None:
    """Metrics, params and tags in one transaction: all written, or none."""
    metrics, params, tags = body.get("metrics") or [], body.get("params") or [], body.get("tags") or []
    for name, items, limit in (
        ("metrics", metrics, MAX_BATCH_METRICS),
        ("params", params, MAX_BATCH_PARAMS),
        ("tags", tags, MAX_BATCH_TAGS),
    ):
        if not isinstance(items, list):
            raise invalid(f"{name} must be a list.")
        if len(items) > limit:
            raise invalid(
                f"A batch holds at most {limit} {name} ({len(items)} were sent); nothing was written."
            )
    if len(metrics) + len(params) + len(tags) > MAX_BATCH_TOTAL:
        raise invalid(
            f"A batch holds at most {MAX_BATCH_TOTAL} metrics, params and tags together "
            f"({len(metrics) + len(params) + len(tags)} were sent); nothing was written."
        )
    checked_params = _params_of(params)
    checked_tags = _tags_of(tags)
    scored = any(isinstance(m, dict) and m.get("key") == run.project.scenario.score_metric for m in metrics)
    events = metric_events(run, metrics, artifact=score_artifact(run, checked_tags) if scored else "")
    try:
        with transaction.atomic():
            if checked_params:
                services.log_params(run, checked_params, by=by)
            if events:
                _apply(run.project, run.external_id, events)
            _set_tags(run, checked_tags, by)
    except TrackingError as exc:
        raise from_tracking_error(exc) from None


def log_metric(run: Run, body: dict, *, by: Any) -> None:
    metric = {k: body.get(k) for k in ("key", "value", "timestamp", "step")}
    log_batch(run, {"metrics": [metric]}, by=by)


def log_param(run: Run, body: dict, *, by: Any) -> None:
    log_batch(run, {"params": [{"key": body.get("key"), "value": body.get("value")}]}, by=by)


def set_tag(run: Run, body: dict, *, by: Any) -> None:
    log_batch(run, {"tags": [{"key": body.get("key"), "value": body.get("value")}]}, by=by)


def delete_tag(run: Run, body: dict, *, by: Any) -> None:
    key = text_field(body, "key")
    try:
        if key == RUN_NAME_TAG:
            services.update_run_labels(run, display_name="", by=by)
        elif not services.remove_tag(run, key=key, by=by):
            raise MlflowError(
                "RESOURCE_DOES_NOT_EXIST", f"No tag with key {key[:100]!r} on run {run.external_id}."
            )
    except TrackingError as exc:
        raise from_tracking_error(exc) from None


def store_artifact(run: Run, path: str, content: IO[bytes], *, content_type: str, by: Any) -> Artifact:
    if not path:
        raise invalid("An artifact upload names a file: …/artifacts/<path>.")
    try:
        artifact, _ = services.store_artifact(
            run.project,
            run.external_id,
            path=path,
            content=content,
            content_type=(content_type or "application/octet-stream")[:200],
            by=by,
        )
    except TrackingError as exc:
        raise from_tracking_error(exc) from None
    return artifact
