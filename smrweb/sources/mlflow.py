"""MLflow's tracking API as a way in (docs/integrations.md, "MLflow client"): what an unchanged MLflow client
sends, mapped onto the ingest contract and the write path, and smrweb's rows read back in MLflow's shapes.

Experiments are projects (name = slug, id = the project's pk as text; "0", MLflow's default experiment,
is a token's own project). Runs keep their smrweb external id as MLflow's run id (new runs get a uuid hex,
as MLflow gives them). Metrics are `metric` events whose id is a digest of (run, key, step, timestamp,
value), so a client's retry writes nothing twice; a metric named like the scenario's score metric is also
a `score` event (a submission) naming its artifact: the run's `smrweb.artifact` tag, else the scenario's
artifact path (its latest version then, or the first to arrive when the file is logged after the score).
Run status is `state` events (FINISHED → done, FAILED → failed, KILLED → stopped, at the end time given).
Params (`RunParam`) and tags (`RunTag`, the review workbench's tags) have no event: they go through their
services. A request is written all or nothing.

Requests arrive as the decoded JSON (or query) dicts; `MlflowError` carries MLflow's error code."""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import IO, Any
from urllib.parse import unquote

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from smrweb.core.patterns import Like, PatternRefused
from smrweb.sources.apply import apply_events, describe
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidEvents, TrackingError
from smrweb.tracking.events import MLFLOW_ARTIFACT_TAG, MLFLOW_SCORE_ID_PREFIX
from smrweb.tracking.models import Artifact, MetricPoint, Project, Run, RunParam, RunState, RunTag

VIA = "mlflow"
DEFAULT_EXPERIMENT_ID = "0"
RUN_NAME_TAG = "mlflow.runName"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
USER_TAG = "mlflow.user"
ARTIFACT_TAG = MLFLOW_ARTIFACT_TAG  # the artifact a run's scores name (its path in the run, or a sha256)
# MLflow's own limits for one log-batch request (the server's are the same numbers).
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
MAX_BATCH_TOTAL = 1000
MAX_SEARCH_RESULTS = 50_000
# A page token's offset: far past any project's runs, and small enough that offset + max_results stays a
# 64-bit integer for the database (an offset of 2**63 was a 500, review N8).
MAX_PAGE_OFFSET = 1_000_000_000
# A filter's size: each clause is a query and a pass over its rows, and an IN list is one SQL variable per
# value (SQLite's and PostgreSQL's limits are 32,766 and 65,535 in common builds): bounded work per search.
MAX_FILTER_CLAUSES = 50
MAX_IN_VALUES = 10_000

STATUS_TO_STATE = {
    "RUNNING": RunState.RUNNING,
    "SCHEDULED": RunState.QUEUED,
    "FINISHED": RunState.DONE,
    "FAILED": RunState.FAILED,
    "KILLED": RunState.STOPPED,
}
_STATE_TO_STATUS = {
    RunState.QUEUED: "SCHEDULED",
    RunState.DONE: "FINISHED",
    RunState.FAILED: "FAILED",
    RunState.ABANDONED: "FAILED",
    RunState.STOPPED: "KILLED",
    RunState.CANCELED: "KILLED",
}


class MlflowError(Exception):
    """A request refused in MLflow's terms: `error_code` (databricks.proto's ErrorCode) and a message."""

    STATUS = {
        "INVALID_PARAMETER_VALUE": 400,
        "BAD_REQUEST": 400,
        "RESOURCE_ALREADY_EXISTS": 400,
        "UNAUTHENTICATED": 401,
        "PERMISSION_DENIED": 403,
        "RESOURCE_DOES_NOT_EXIST": 404,
        "ENDPOINT_NOT_FOUND": 404,
        "REQUEST_LIMIT_EXCEEDED": 429,
        "INTERNAL_ERROR": 500,
        "TEMPORARILY_UNAVAILABLE": 503,
    }

    def __init__(self, error_code: str, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.STATUS.get(self.error_code, 400)


def invalid(message: str) -> MlflowError:
    return MlflowError("INVALID_PARAMETER_VALUE", message)


def from_tracking_error(exc: TrackingError) -> MlflowError:
    """A domain refusal in MLflow's terms (the message names the field)."""
    if isinstance(exc, InvalidEvents):
        return invalid("; ".join(describe([e]) for e in exc.errors) or exc.message)
    if exc.status == 403:
        return MlflowError("PERMISSION_DENIED", exc.message)
    if exc.status == 413:
        return MlflowError("INVALID_PARAMETER_VALUE", exc.message)
    field = getattr(exc, "field", "")
    return invalid(f"{field}: {exc.message}" if field else exc.message)


# --- reading request fields ------------------------------------------------------------------------------


def text_field(body: dict, name: str, *, required: bool = True, default: str = "") -> str:
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise invalid(f"Missing value for required parameter '{name}'.")
        return default
    if not isinstance(value, str):
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a string.")
    return value


def int_field(body: dict, name: str, *, required: bool = False, default: int | None = None) -> int | None:
    """An int64 field: protobuf's JSON sends them as numbers or as decimal strings."""
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise invalid(f"Missing value for required parameter '{name}'.")
        return default
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a 64-bit integer.")
    return value


def run_id_of(body: dict) -> str:
    """The run named by `run_id` (or the older `run_uuid`)."""
    return text_field(body, "run_id", required=False) or text_field(body, "run_uuid")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def _ms(dt: datetime | None) -> int | None:
    """Milliseconds since 1970, in integers (a float round trip can lose the last millisecond)."""
    return None if dt is None else (dt - _EPOCH) // _MS


def _iso(ms: int) -> str:
    if not 0 <= ms <= 253_370_764_800_000:  # 1970 … 9999
        raise invalid(f"Invalid timestamp {ms}: expected milliseconds since 1970 before the year 9999.")
    return (_EPOCH + ms * _MS).isoformat().replace("+00:00", "Z")


# --- experiments -----------------------------------------------------------------------------------------


def experiment_json(project: Project) -> dict:
    return {
        "experiment_id": str(project.pk),
        "name": project.slug,
        "artifact_location": f"mlflow-artifacts:/{project.pk}",
        "lifecycle_stage": "active",
        "creation_time": _ms(project.created),
        "last_update_time": _ms(getattr(project, "updated", None) or project.created),
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


def search_experiments(projects: QuerySet[Project], body: dict) -> dict:
    """Every visible project; `filter` of the form `name = '…'` or `name LIKE '…'` narrows them."""
    max_results = int_field(body, "max_results", default=1000)
    if not 1 <= max_results <= 50_000:
        raise invalid("max_results must be between 1 and 50000.")
    offset = _offset(body.get("page_token"))
    view = body.get("view_type") or "ACTIVE_ONLY"
    if view == "DELETED_ONLY" or view == 2:
        return {"experiments": []}
    found = projects.order_by("pk")
    for clause in _clauses(text_field(body, "filter", required=False)):
        if clause.entity != "attributes" or clause.name not in ("name", "experiment_id"):
            raise invalid(f"Experiments can be searched by name or id only, not {clause.name!r}.")
        field = "slug" if clause.name == "name" else "pk"
        found = _narrow(found, field, clause)
    page = list(found[offset : offset + max_results + 1])
    answer: dict[str, Any] = {"experiments": [experiment_json(p) for p in page[:max_results]]}
    if len(page) > max_results:
        answer["next_page_token"] = _token(offset + max_results)
    return answer


# --- runs: create, update, read --------------------------------------------------------------------------


def artifact_uri(run: Run) -> str:
    return f"mlflow-artifacts:/{run.project_id}/{run.external_id}/artifacts"


def status_of(run: Run) -> str:
    return _STATE_TO_STATUS.get(run.state, "RUNNING")


def _latest_metrics(run: Run) -> list[dict]:
    """Each key's latest point as MLflow picks it: the highest step, then time, then value."""
    keys = MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct().order_by("key")
    latest = []
    for key in keys:
        point = MetricPoint.objects.filter(run=run, key=key).order_by("-step", "-ts", "-value").first()
        latest.append(_metric_json(point))
    return latest


def _metric_json(point: MetricPoint) -> dict:
    return {"key": point.key, "value": point.value, "timestamp": _ms(point.ts), "step": point.step}


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
        "start_time": _ms(run.started_at),
        "artifact_uri": artifact_uri(run),
        "lifecycle_stage": "active",
    }
    if run.finished_at is not None:
        info["end_time"] = _ms(run.finished_at)
    return {
        "info": info,
        "data": {
            "metrics": _latest_metrics(run),
            "params": [{"key": p.key, "value": p.value} for p in RunParam.objects.filter(run=run)],
            "tags": tags,
        },
        "inputs": {},
    }


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
    started = _iso(start) if start is not None else None
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
        ts = _iso(end_time) if end_time is not None else timezone.now().isoformat().replace("+00:00", "Z")
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
        ts = _iso(timestamp)
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


def metric_history(run: Run, key: str) -> dict:
    points = MetricPoint.objects.filter(run=run, key=key).order_by("step", "ts", "id")
    return {"metrics": [_metric_json(p) for p in points]}


# --- search-runs -----------------------------------------------------------------------------------------


LIKE_OPS = ("LIKE", "ILIKE", "NOT LIKE", "NOT ILIKE")


@dataclass(frozen=True)
class Clause:
    entity: str  # attributes, metrics, params, tags
    name: str
    op: str
    value: Any

    @cached_property
    def like(self) -> Like:
        """The LIKE/ILIKE pattern, checked (core/patterns.py: bounded, matched without backtracking)."""
        try:
            return Like(str(self.value), ignore_case="ILIKE" in self.op, field=f"{self.entity}.{self.name}")
        except PatternRefused as exc:
            raise invalid(f"Filter {exc.field}: {exc.message}") from None


_ENTITIES = {
    "attribute": "attributes",
    "attributes": "attributes",
    "attr": "attributes",
    "run": "attributes",
    "metric": "metrics",
    "metrics": "metrics",
    "param": "params",
    "params": "params",
    "parameter": "params",
    "parameters": "params",
    "tag": "tags",
    "tags": "tags",
}
_IDENT = r"(?:`[^`]+`|\"[^\"]+\"|[\w.:/-]+)"
_CLAUSE = re.compile(
    rf"\s*(?:(?P<entity>\w+)\.)?(?P<name>{_IDENT})\s*"
    r"(?P<op>>=|<=|!=|=|>|<|NOT\s+IN\b|IN\b|NOT\s+ILIKE\b|NOT\s+LIKE\b|ILIKE\b|LIKE\b|IS\s+NOT\s+NULL\b|IS\s+NULL\b)\s*"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\((?:[^)'\"]|'[^']*'|\"[^\"]*\")*\)|-?[\d.]+(?:[eE][-+]?\d+)?)?\s*",
    re.IGNORECASE,
)
_AND = re.compile(r"\s*AND\s+", re.IGNORECASE)


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    return text


def _clauses(filter_string: str) -> list[Clause]:
    """MLflow's search filter: clauses joined by AND (`params.lr = '0.1' AND metrics.loss < 1`)."""
    clauses: list[Clause] = []
    rest = filter_string.strip()
    while rest:
        if len(clauses) == MAX_FILTER_CLAUSES:
            raise invalid(f"A filter holds at most {MAX_FILTER_CLAUSES} clauses joined by AND.")
        match = _CLAUSE.match(rest)
        if match is None:
            raise invalid(f"Cannot read the filter at {rest[:80]!r}.")
        entity_word, name = match["entity"], _unquote(match["name"])
        if entity_word is None:
            entity = "attributes"
        elif entity_word.lower() in _ENTITIES:
            entity = _ENTITIES[entity_word.lower()]
        else:  # a dotted key without an entity, such as `mlflow.runName`: not a search identifier
            raise invalid(
                f"Invalid entity type {entity_word!r}: expected attributes, metrics, params or tags."
            )
        op = " ".join(match["op"].upper().split())
        raw = match["value"]
        if raw is None and not op.startswith("IS"):
            raise invalid(f"Missing value after {match.group(0).strip()!r}.")
        if raw is None:
            value = None
        elif raw.startswith("("):
            value = [_unquote(v.strip()) for v in re.findall(r"'[^']*'|\"[^\"]*\"|[^,()\s]+", raw)]
            if len(value) > MAX_IN_VALUES:
                raise invalid(f"An IN list holds at most {MAX_IN_VALUES} values ({len(value)} given).")
        elif raw[0] in "'\"":
            value = _unquote(raw)
        elif entity in ("metrics", "attributes"):
            try:
                value = float(raw)
            except ValueError:  # `1.2.3`, `.`: the value pattern reads digits and dots (review N8)
                raise invalid(f"Invalid number {raw!r} in {match.group(0).strip()[:200]!r}.") from None
        else:
            value = raw
        clause = Clause(entity, name, op, value)
        if op in LIKE_OPS:
            clause.like  # noqa: B018 — checked now: a refused pattern is a 400 before any query runs
        clauses.append(clause)
        rest = rest[match.end() :]
        if rest:
            joiner = _AND.match(rest)
            if joiner is None:
                raise invalid(
                    f"Expected AND at {rest[:80]!r} (OR is not supported by MLflow's search either)."
                )
            rest = rest[joiner.end() :]
    return clauses


def _narrow(qs: QuerySet, field: str, clause: Clause) -> QuerySet:
    op, value = clause.op, clause.value
    if op == "=":
        return qs.filter(**{field: value})
    if op == "!=":
        return qs.exclude(**{field: value})
    if op in ("IN", "NOT IN"):
        return qs.filter(**{f"{field}__in": value}) if op == "IN" else qs.exclude(**{f"{field}__in": value})
    if op in LIKE_OPS:  # in Python, not as a database regex (SQLite's REGEXP is Python's backtracking re)
        rows = qs.values_list("pk", field)
        return qs.filter(pk__in=[pk for pk, text in rows if _matches(str(text), clause)])
    lookups = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
    if op in lookups:
        return qs.filter(**{f"{field}__{lookups[op]}": value})
    raise invalid(f"Operator {op!r} is not supported here.")


_ATTRIBUTES = {
    "run_id": "external_id",
    "run_name": "display_name",
    "status": "state",
    "start_time": "started_at",
    "end_time": "finished_at",
}


def _attribute_filter(runs: QuerySet[Run], clause: Clause) -> QuerySet[Run]:
    name = {"runName": "run_name", "run_uuid": "run_id", "created": "start_time"}.get(
        clause.name, clause.name
    )
    if name not in _ATTRIBUTES:
        raise invalid(f"Invalid attribute key {clause.name!r}: expected one of {', '.join(_ATTRIBUTES)}.")
    if name in ("start_time", "end_time"):
        if clause.op not in ("=", "!=", ">", ">=", "<", "<="):
            raise invalid(f"{name} is compared with =, !=, <, <=, > or >= and a number of milliseconds.")
        try:
            moment = datetime.fromtimestamp(float(clause.value) / 1000, tz=UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            raise invalid(
                f"{name} is compared with a number of milliseconds, not {clause.value!r}."
            ) from None
        return _narrow(runs, _ATTRIBUTES[name], replace(clause, name=name, value=moment))
    if clause.op in (">", ">=", "<", "<="):
        raise invalid(f"{name} is compared with =, !=, IN, NOT IN, LIKE or ILIKE.")
    if name == "status":
        statuses = clause.value if isinstance(clause.value, list) else [clause.value]
        states = [s for st in statuses for s, status in _all_states() if status == str(st).upper()]
        if clause.op in ("=", "IN"):
            return runs.filter(state__in=states)
        if clause.op in ("!=", "NOT IN"):
            return runs.exclude(state__in=states)
        raise invalid("status is compared with =, !=, IN or NOT IN.")
    if name == "run_name":  # the display name, or the external id where it has none
        matching = [
            pk
            for pk, shown, ext in runs.values_list("pk", "display_name", "external_id")
            if _matches(shown or ext, clause)
        ]
        return runs.filter(pk__in=matching)
    return _narrow(runs, _ATTRIBUTES[name], replace(clause, name=name, value=_text(clause.value)))


def _text(value: Any) -> Any:
    if isinstance(value, list):
        return [str(v) for v in value]
    return value if isinstance(value, str) else str(value)


def _all_states() -> Iterable[tuple[str, str]]:
    for state in RunState:
        yield state.value, _STATE_TO_STATUS.get(state, "RUNNING")


def _matches(text: str | None, clause: Clause) -> bool:
    op, value = clause.op, clause.value
    if op == "IS NULL":
        return text is None
    if op == "IS NOT NULL":
        return text is not None
    if text is None:
        return False
    if op == "=":
        return text == str(value)
    if op == "!=":
        return text != str(value)
    if op in ("IN", "NOT IN"):
        return (text in [str(v) for v in value]) == (op == "IN")
    if op in LIKE_OPS:
        return clause.like.matches(text) != op.startswith("NOT")
    raise invalid(f"Operator {op!r} compares numbers; params and tags are text.")


def _compare(number: float | None, clause: Clause) -> bool:
    if clause.op == "IS NULL":
        return number is None
    if clause.op == "IS NOT NULL":
        return number is not None
    if number is None:
        return False
    try:
        value = float(clause.value)
    except (TypeError, ValueError):
        raise invalid(f"Metric {clause.name!r} is compared with a number, not {clause.value!r}.") from None
    ops = {
        "=": number == value,
        "!=": number != value,
        ">": number > value,
        ">=": number >= value,
        "<": number < value,
        "<=": number <= value,
    }
    if clause.op not in ops:
        raise invalid(f"Metric {clause.name!r} is compared with =, !=, <, <=, > or >=.")
    return ops[clause.op]


def _offset(token: Any) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(str(token).encode()))["offset"]
    except Exception:  # noqa: BLE001 — any malformed token is the client's error
        raise invalid("Invalid page token.") from None
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_PAGE_OFFSET:
        raise invalid("Invalid page token.")
    return offset


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def search_runs(projects: list[Project], body: dict) -> dict:
    """MLflow's SearchRuns over the given projects: the filter (attributes, metrics' latest values, params,
    tags; clauses joined by AND), order_by (attributes and metrics; start time, newest first, by default)
    and paging with page tokens."""
    max_results = int_field(body, "max_results", default=1000)
    if not 1 <= max_results <= MAX_SEARCH_RESULTS:
        raise invalid(f"max_results must be between 1 and {MAX_SEARCH_RESULTS}.")
    offset = _offset(body.get("page_token"))
    view = body.get("run_view_type") or "ACTIVE_ONLY"
    runs = Run.objects.filter(project__in=projects).select_related("project__scenario")
    if view in ("DELETED_ONLY", 2):
        runs = runs.none()
    metric_clauses = []
    for clause in _clauses(text_field(body, "filter", required=False)):
        if clause.entity == "attributes":
            runs = _attribute_filter(runs, clause)
        elif clause.entity == "metrics":
            metric_clauses.append(clause)
        else:
            model = RunParam if clause.entity == "params" else RunTag
            if clause.entity == "tags" and clause.name == RUN_NAME_TAG:
                runs = _attribute_filter(runs, replace(clause, entity="attributes", name="run_name"))
                continue
            rows = model.objects.filter(run__in=runs, key=clause.name).values_list("run_id", "value")
            if clause.op == "IS NULL":
                runs = runs.exclude(pk__in=[r for r, _ in rows])
                continue
            runs = runs.filter(pk__in=[r for r, value in rows if _matches(value, clause)])
    order = body.get("order_by") or []
    if not isinstance(order, list):
        raise invalid("order_by must be a list.")
    runs = runs.order_by("-started_at", "external_id")
    found = list(runs[: MAX_SEARCH_RESULTS + 1]) if (metric_clauses or order) else None
    if found is None:
        page = list(runs[offset : offset + max_results + 1])
    else:
        latest = _latest_values(found) if metric_clauses or any("metric" in str(o) for o in order) else {}
        found = [
            r for r in found if all(_compare(latest.get(r.pk, {}).get(c.name), c) for c in metric_clauses)
        ]
        for spec in reversed(order):
            found = _sorted(found, str(spec), latest)
        page = found[offset : offset + max_results + 1]
    answer: dict[str, Any] = {"runs": [run_json(r) for r in page[:max_results]]}
    if len(page) > max_results:
        answer["next_page_token"] = _token(offset + max_results)
    return answer


def _latest_values(runs: list[Run]) -> dict[int, dict[str, float]]:
    latest: dict[int, dict[str, float]] = {}
    rows = (
        MetricPoint.objects.filter(run__in=[r.pk for r in runs])
        .order_by("run_id", "key", "step", "ts", "value")
        .values_list("run_id", "key", "value")
    )
    for run_id, key, value in rows.iterator(chunk_size=5000):
        latest.setdefault(run_id, {})[key] = value  # the last of each key's order is the latest
    return latest


def _sorted(runs: list[Run], spec: str, latest: dict[int, dict[str, float]]) -> list[Run]:
    words = spec.split()
    descending = len(words) > 1 and words[-1].upper() == "DESC"
    if len(words) > 1 and words[-1].upper() in ("ASC", "DESC"):
        words = words[:-1]
    ident = " ".join(words)
    entity, _, name = ident.partition(".")
    if not name:
        entity, name = "attributes", ident
    entity = _ENTITIES.get(entity.lower())
    name = _unquote(name)
    if entity == "metrics":
        present = [r for r in runs if name in latest.get(r.pk, {})]
        missing = [r for r in runs if name not in latest.get(r.pk, {})]
        return sorted(present, key=lambda r: latest[r.pk][name], reverse=descending) + missing
    keys = {
        "start_time": lambda r: r.started_at,
        "end_time": lambda r: r.finished_at or datetime.max.replace(tzinfo=UTC),
        "run_name": lambda r: r.name,
        "status": status_of,
        "run_id": lambda r: r.external_id,
    }
    if entity != "attributes" or name not in keys:
        raise invalid(f"Runs are ordered by attributes ({', '.join(keys)}) or metrics, not {spec!r}.")
    return sorted(runs, key=keys[name], reverse=descending)


# --- artifacts (MLflow's artifact proxy) -----------------------------------------------------------------


def split_artifact_path(path: str) -> tuple[str, str, str]:
    """`<experiment id>/<run id>/artifacts[/<path>]` → (experiment id, run id, path in the run)."""
    parts = path.strip("/").split("/", 3)
    if len(parts) < 3 or parts[2] != "artifacts":
        raise MlflowError(
            "RESOURCE_DOES_NOT_EXIST",
            f"No artifact location {path[:200]!r}: expected <experiment>/<run>/artifacts/…",
        )
    inner = parts[3] if len(parts) == 4 else ""
    if inner:
        try:
            services.check_artifact_path(inner)
        except TrackingError as exc:
            raise invalid(f"Invalid artifact path {inner[:200]!r}: {exc.message}") from None
    normal = posixpath.normpath(inner) if inner else ""
    if normal in (".",):
        normal = ""
    if normal.startswith("/"):
        raise invalid(f"Invalid artifact path {inner[:200]!r}: it is absolute.")
    if any(_decoded(part) in (".", "..") for part in normal.split("/")):
        # `..` left after normalizing, or `%2e%2e` (sent as `%252e%252e`), which was kept as a directory:
        # a client that decodes it once more would walk up (review N10)
        raise invalid(
            f"Invalid artifact path {inner[:200]!r}: a part is, or percent-decodes to, '.' or '..'."
        )
    return parts[0], parts[1], normal


def _decoded(part: str) -> str:
    """`part` percent-decoded until nothing changes (each round shortens it, so this ends)."""
    while "%" in part and (decoded := unquote(part)) != part:
        part = decoded
    return part


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
