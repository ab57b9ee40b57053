"""search-runs and search-experiments: MLflow's filter language (attributes, metrics, params, tags;
LIKE and comparisons) and ordering over a token's projects and runs, paged by an opaque token."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from django.db.models import QuerySet

from smrweb.core.patterns import Like, PatternRefused
from smrweb.sources.mlflow.read import experiment_json, run_json, status_of
from smrweb.sources.mlflow.wire import RUN_NAME_TAG, STATE_TO_STATUS, int_field, invalid, text_field
from smrweb.tracking.models import MetricPoint, Project, Run, RunParam, RunState, RunTag

MAX_SEARCH_RESULTS = 50_000
# A page token's offset: far past any project's runs, and small enough that offset + max_results stays a
# 64-bit integer for the database (an offset of 2**63 was a 500, review N8).
MAX_PAGE_OFFSET = 1_000_000_000
# A filter's size: each clause is a query and a pass over its rows, and an IN list is one SQL variable per
# value (SQLite's and PostgreSQL's limits are 32,766 and 65,535 in common builds): bounded work per search.
MAX_FILTER_CLAUSES = 50
MAX_IN_VALUES = 10_000


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
        yield state.value, STATE_TO_STATUS.get(state, "RUNNING")


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
