"""The Managed Research (SMR) connector, on the real `managed-research` SDK.

Which SDK call feeds what (field conventions in docs/smr.md):
  runs.list(pid)                 → run snapshots: state, live phase, failure, profiles, budget
  runs.get_usage(rid)            → `entries` with meter_kind "inference" → agent turns
  runs.cost_summary(rid)         → the billed total and the non-inference meters (sandbox time…)
  runs.artifact_manifest(rid)    → artifacts with their digests; bytes via get_artifact_content
  runs.list_checkpoints(rid)     → checkpoints with their failure reasons
  list_project_run_runtime_messages(pid, rid) → runtime messages, the kickoff included
  GET …/experiment-results (no SDK method: the SDK's own transport; once per cycle) → metric points, scores
  runs.stop / runs.restore_checkpoint → actions

The SDK never retries and drops Retry-After; its parsers raise ValueError on bad shapes. Every
call goes through `_call`, which turns all of that into `sources.base` errors with a retry hint.
"""

from __future__ import annotations

import base64
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx
from django.conf import settings
from managed_research import ManagedResearchClient
from managed_research.errors import SmrApiError

from smrweb.core import outbound
from smrweb.sources.base import (
    ArtifactRef,
    AuthFailed,
    Blocked,
    Denied,
    Failure,
    Malformed,
    NotPossible,
    RateLimited,
    RunGone,
    RunSnapshot,
    ServerError,
    SourceError,
    TimedOut,
    Unreachable,
)
from smrweb.tracking.models import ArtifactKind, Project

PICO = Decimal(10) ** 12
_warm_backends: set[str] = set()  # backends this process has already reached once


def _call(what: str, fn, *args, **kwargs):
    """Call the SDK; translate every way it fails into a SourceError."""
    try:
        return fn(*args, **kwargs)
    except SmrApiError as exc:
        raise _translate(what, exc) from exc
    except outbound.Unresolvable as exc:  # before ValueError: the guard's errors are not shape errors
        raise Unreachable(f"{what}: {exc}") from exc
    except outbound.Refused as exc:
        raise Blocked(f"{what}: not sent: {exc}") from exc
    except ValueError as exc:  # the SDK's typed parsers on an unexpected shape
        raise Malformed(f"{what}: unexpected answer ({exc})") from exc
    except httpx.TimeoutException as exc:  # artifact content bypasses the SDK's error mapping
        raise TimedOut(f"{what}: timed out") from exc
    except httpx.HTTPError as exc:
        raise Unreachable(f"{what}: {exc!r}") from exc


def _translate(what: str, exc: SmrApiError) -> SourceError:
    detail = getattr(exc, "detail", None) or (exc.body.get("detail") if isinstance(exc.body.get("detail"), dict) else {})
    retry_after = _seconds(detail.get("retry_after_seconds")) if isinstance(detail, dict) else None
    status, message = exc.status_code, f"{what}: {exc}"
    if status == 429:
        return RateLimited(message, retry_after=retry_after)
    if detail and detail.get("error_code"):
        code = str(detail.get("error_code"))
        if status == 409 or code in {"terminal_run", "already_in_state", "runtime_not_live", "project_archived"}:
            return NotPossible(message)
        if code == "run_not_found":
            return RunGone(message)
        return Denied(message, retry_after=retry_after)
    if status in (401, 403):
        return AuthFailed(message)
    if status == 404:
        return RunGone(message)
    if status is not None and status >= 500:
        return ServerError(message, retry_after=retry_after)
    text = str(exc)
    if "timed out" in text:
        return TimedOut(message)
    if "network error" in text:
        return Unreachable(message)
    if "non-JSON" in text or text.startswith("Expected "):  # the SDK's own shape checks ("Expected list …")
        return Malformed(message)
    return ServerError(message)


def _seconds(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _sha256(digest: str | None) -> str:
    digest = (digest or "").lower().removeprefix("sha256:")
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else ""


ARTIFACT_KINDS = {"submission": ArtifactKind.FILE, "model": ArtifactKind.ONNX_MODEL, "log": ArtifactKind.LOG,
                  "archive": ArtifactKind.ARCHIVE}


class SmrConnector:
    """A project's SMR backend. Address and key: the project's own setting, else the environment."""

    def __init__(self, project: Project, *, api_key: str, backend_base: str, guarded: bool = False):
        self.project = project
        self.pid = project.source_settings.get("smr_project_id", "")
        self.backend_base = backend_base
        # The first call after a (backend or worker) restart may be slow: give it longer.
        timeout = settings.SMR_TIMEOUT if backend_base in _warm_backends else settings.SMR_FIRST_CALL_TIMEOUT
        self.client = ManagedResearchClient(api_key=api_key, backend_base=backend_base, timeout_seconds=timeout)
        if guarded:
            # A project's own backend address is user-given: every SDK call goes through the outbound
            # guard (public addresses only, vetted once per request, no redirects, no env proxies).
            sdk_http = self.client._transport
            sdk_http.client.close()
            sdk_http.client = outbound.client(timeout=timeout, base_url=sdk_http.client.base_url,
                                              headers=sdk_http.client.headers)
        self._results_by_run: dict[str, list[dict]] | None = None

    def _mark_warm(self) -> None:
        _warm_backends.add(self.backend_base)

    # --- reads --------------------------------------------------------------------------------

    def list_runs(self) -> list[RunSnapshot]:
        rows = _call("list runs", self.client.runs.list, self.pid, limit=200)
        self._mark_warm()
        snapshots = []
        for row in rows:
            if not isinstance(row, dict) or not row.get("run_id") or not row.get("state"):
                raise Malformed("list runs: a run without run_id or state")
            snapshots.append(self._snapshot(row))
        return snapshots

    def _snapshot(self, row: dict[str, Any]) -> RunSnapshot:
        lifecycle = row.get("lifecycle") if isinstance(row.get("lifecycle"), dict) else {}
        failure = lifecycle.get("failure") if isinstance(lifecycle.get("failure"), dict) else None
        roles = row.get("roles") if isinstance(row.get("roles"), dict) else {}
        orchestrator = roles.get("orchestrator") if isinstance(roles.get("orchestrator"), dict) else {}
        limit = row.get("limit") if isinstance(row.get("limit"), dict) else {}
        budget = limit.get("budget_usd")
        return RunSnapshot(
            external_id=str(row["run_id"]),
            state=str(row["state"]),
            updated_at=_when(row.get("updated_at")),
            live_phase=str(row.get("live_phase") or ""),
            terminal_outcome=str(row.get("terminal_outcome") or ""),
            failure=Failure(
                family=str(failure.get("family") or ""),
                detail=str(failure.get("detail") or failure.get("reason") or ""),
                source=str(failure.get("source") or ""),
            ) if failure else None,
            started_at=_when(row.get("started_at")),
            finished_at=_when(row.get("finished_at")),
            requested_profile=str(orchestrator.get("requested_profile_id") or ""),
            actual_profile=str(orchestrator.get("resolved_profile_id") or ""),
            budget_usd=Decimal(str(budget)) if isinstance(budget, (int, float)) else None,
            raw=row,
        )

    # One method per kind of data, each one request: a sync applies each as soon as it arrives, so a
    # fault in one request costs only that kind's news, not the whole run's.

    def fetch_turns(self, rid: str, cursor: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        usage = _call("usage", self.client.runs.get_usage, rid)
        new_cursor: dict[str, Any] = {}
        return self._turns(usage.entries, cursor, new_cursor), new_cursor

    def fetch_meters(self, rid: str) -> tuple[Decimal, Decimal]:
        """(other meters, billed total) in USD: sandbox time and the like apart from inference."""
        cost = _call("cost summary", self.client.runs.cost_summary, rid)
        other = sum((Decimal(m.billed_amount_pico_usd) for m in cost.by_meter if m.meter_kind != "inference"),
                    Decimal(0)) / PICO
        total = Decimal(cost.total_pico_usd) / PICO if cost.total_pico_usd else Decimal(cost.total_cents) / 100
        return other.quantize(Decimal("0.000001")), total.quantize(Decimal("0.000001"))

    def fetch_artifacts(self, rid: str) -> list[ArtifactRef]:
        manifest = _call("artifact manifest", self.client.runs.artifact_manifest, rid, project_id=self.pid)
        return self._artifacts(manifest)

    def fetch_results(self, rid: str, artifacts: list[ArtifactRef], cursor: dict[str, Any]) -> tuple[list[dict], dict]:
        new_cursor: dict[str, Any] = {}
        mine = self._project_results().get(rid, [])
        return self._results(mine, artifacts, cursor, new_cursor), new_cursor

    def _project_results(self) -> dict[str, list[dict]]:
        """The project's newest results, fetched once per connector (one sync cycle) and split by run:
        the endpoint has no run filter, so one request serves every run of the cycle."""
        if self._results_by_run is None:
            results = _call("experiment results", self.client._request_json, "GET",
                            f"/smr/projects/{self.pid}/experiment-results", params={"limit": 500})  # the spec's cap
            if not isinstance(results, list):
                raise Malformed("experiment results: expected a list")
            by_run: dict[str, list[dict]] = {}
            for r in results:
                if isinstance(r, dict) and r.get("run_id"):
                    by_run.setdefault(str(r["run_id"]), []).append(r)
            self._results_by_run = by_run
        return self._results_by_run

    def fetch_checkpoints(self, rid: str, cursor: dict[str, Any]) -> tuple[list[dict], dict]:
        checkpoints = _call("checkpoints", self.client.runs.list_checkpoints, rid, project_id=self.pid)
        new_cursor: dict[str, Any] = {}
        return self._checkpoints(checkpoints, cursor, new_cursor), new_cursor

    def fetch_messages(self, rid: str, cursor: dict[str, Any]) -> tuple[list[dict], dict]:
        messages = _call("runtime messages", self.client.list_project_run_runtime_messages, self.pid, rid, limit=1000)
        self._mark_warm()
        new_cursor: dict[str, Any] = {}
        return self._messages(messages, cursor, new_cursor), new_cursor

    @staticmethod
    def _since(items: list, key, cursor: dict, name: str, new_cursor: dict) -> list:
        """Items at or after the kind's cursor (ties re-sent; ids make them no-ops), advancing it."""
        mark = cursor.get(name)
        keyed = [(key(item), item) for item in items]
        fresh = [item for k, item in keyed if k is not None and (mark is None or k >= mark)]
        marks = [k for k, _ in keyed if k is not None]
        if marks:
            new_cursor[name] = max([*marks, *([mark] if mark is not None else [])])
        return fresh

    def _turns(self, entries: list[dict], cursor: dict, new_cursor: dict) -> list[dict]:
        inference = [e for e in entries if str(e.get("meter_kind") or "inference") == "inference"]
        events = []
        for e in self._since(inference, lambda e: str(e.get("created_at") or ""), cursor, "usage", new_cursor):
            if not e.get("entry_id"):
                raise Malformed("usage: an entry without entry_id")
            parent = e.get("parent_actor_id")
            events.append({
                "id": f"usage:{e['entry_id']}", "type": "agent.turn", "ts": e.get("created_at"),
                "turn": int(e.get("turn_index") or 0), "actor": str(e.get("actor_id") or "orchestrator"),
                "parent_actor": str(parent) if parent else None,
                "kind": "driver_inference" if e.get("actor_role") == "orchestrator" or not parent else "child_work",
                "model": str(e.get("model") or ""),
                "tokens_in": int(e.get("input_tokens") or 0), "tokens_out": int(e.get("output_tokens") or 0),
                "cost_usd": float(Decimal(int(e.get("cost_pico_usd") or 0)) / PICO),
                "tool_calls": [str(t) for t in e.get("tool_calls") or []],
                "duration_ms": int(e["duration_ms"]) if e.get("duration_ms") is not None else None,
            })
        return events

    def _results(self, results: list[dict], artifacts: list[ArtifactRef], cursor: dict,
                 new_cursor: dict) -> list[dict]:
        ordered = sorted(results, key=lambda r: (str(r.get("created_at") or ""), str(r.get("result_id") or "")))
        by_experiment = {a.experiment_id: a for a in artifacts if a.experiment_id}
        score_metric = self.project.scenario.score_metric
        events = []
        for r in self._since(ordered, lambda r: str(r.get("created_at") or ""), cursor, "results", new_cursor):
            rid, metric, value = str(r.get("result_id") or ""), str(r.get("metric") or ""), r.get("value")
            if not rid or not metric or not isinstance(value, (int, float)):
                raise Malformed("experiment results: a result without result_id, metric or value")
            # The step is the result's time in milliseconds: stable whatever window of results a poll
            # sees (the endpoint returns only the newest 500 of the whole project).
            created = _when(r.get("created_at"))
            step = int(created.timestamp() * 1000) if created else 0
            events.append({"id": f"result:{rid}", "type": "metric", "key": metric, "value": value,
                           "step": max(step, 0), "ts": r.get("created_at")})
            if metric == score_metric:
                artifact = by_experiment.get(str(r.get("experiment_id") or ""))
                events.append({
                    "id": f"score:{rid}", "type": "score", "score": value, "ts": r.get("created_at"),
                    "harness_id": str(r.get("comparison_cohort_key") or metric)[:200],
                    "experiment": str(r.get("experiment_id") or "")[:200] or None,
                    "artifact": artifact.sha256 if artifact else None,
                    "details": {k: r.get(k) for k in ("baseline_value", "delta", "metric_direction", "truth_status")
                                if r.get(k) is not None},
                })
        return events

    def _checkpoints(self, checkpoints: list, cursor: dict, new_cursor: dict) -> list[dict]:
        events = []
        for c in self._since(checkpoints, lambda c: _iso(c.captured_at), cursor, "checkpoints", new_cursor):
            meta = c.metadata or {}
            failed = c.state == "failed"
            events.append({
                "id": c.checkpoint_id, "type": "checkpoint", "ts": _iso(c.captured_at),
                "label": str(meta.get("label") or c.checkpoint_id)[:500], "commit": str(meta.get("commit") or "")[:64],
                "restorable": bool(c.restorable) and not failed,
                "failure_reason": str(meta.get("failure_reason") or (c.error_code or "failed" if failed else ""))[:20000],
            })
        return events

    def _messages(self, messages: list[dict], cursor: dict, new_cursor: dict) -> list[dict]:
        events = []
        for m in self._since(messages, lambda m: m.get("seq") if isinstance(m.get("seq"), int) else None,
                             cursor, "message_seq", new_cursor):
            payload = m.get("payload") if isinstance(m.get("payload"), dict) else {}
            body = m.get("body") or payload.get("body") or m.get("action") or ""
            if not body:
                continue
            events.append({
                "id": f"message:{m.get('message_id') or m['seq']}", "type": "message", "ts": m.get("created_at"),
                "body": str(body)[:100_000], "topic": str(payload.get("topic") or m.get("action") or "")[:200],
                "target": str(m.get("target") or "")[:200], "mode": str(m.get("mode") or "")[:50],
            })
        return events

    def _artifacts(self, manifest) -> list[ArtifactRef]:
        refs: dict[str, ArtifactRef] = {}
        for a in [*manifest.artifacts, *manifest.output_files, *manifest.result_outputs, *manifest.reports]:
            sha = _sha256(a.digest)
            if not sha or a.artifact_id in refs:
                continue  # nothing to verify the bytes against: not pulled
            meta = a.metadata or {}
            refs[a.artifact_id] = ArtifactRef(
                artifact_id=a.artifact_id, path=(a.path or a.title or a.artifact_id)[:500], sha256=sha,
                size=a.size_bytes, content_type=(a.content_type or "application/octet-stream")[:200],
                kind=ARTIFACT_KINDS.get(a.artifact_type or "", ArtifactKind.FILE), created_at=_when(a.created_at),
                experiment_id=str(meta.get("experiment_id") or ""),
            )
        return list(refs.values())

    def pull_artifact(self, artifact: ArtifactRef) -> bytes:
        answer = _call("artifact content", self.client.get_artifact_content, artifact.artifact_id)
        content = answer.get("content") or ""
        return base64.b64decode(content) if answer.get("encoding") == "base64" else str(content).encode("utf-8")

    # --- actions ------------------------------------------------------------------------------

    def stop_run(self, external_id: str) -> None:
        try:
            _call("stop run", self.client.runs.stop, external_id, project_id=self.pid)
        except Malformed:
            pass  # a spec-strict backend answers a receipt without `state`; the next sync re-reads the run

    def roll_back(self, external_id: str, *, checkpoint_id: str, reason: str) -> dict[str, Any]:
        return _call("restore checkpoint", self.client.runs.restore_checkpoint, external_id, project_id=self.pid,
                     checkpoint_id=checkpoint_id, mode="in_place", reason=reason)


def connector_for(project: Project) -> SmrConnector:
    """The connector of a project whose source is SMR: its own key and address, else the environment's —
    the operator's key only for projects the operator or staff bound (red-team finding 1)."""
    from smrweb.core.secrets import reveal

    own = project.source_settings
    if own.get("api_key_sealed"):
        api_key = reveal(own["api_key_sealed"])
    elif project.uses_operator_smr_key and not own.get("backend_base"):
        api_key = settings.SMR_API_KEY  # and only to the operator's own backend
    else:
        raise AuthFailed("This project has no SMR API key of its own, and the operator's key is only used for "
                         "projects staff bound, with the operator's backend; set one with "
                         "`manage.py create_project … --smr-api-key-env`.")
    backend = own.get("backend_base") or settings.SMR_BACKEND_BASE
    if not api_key or not backend:
        raise AuthFailed("No SMR backend address or API key: set SMRWEB_SMR_BACKEND_BASE and SMRWEB_SMR_API_KEY.")
    return SmrConnector(project, api_key=api_key, backend_base=backend, guarded=bool(own.get("backend_base")))
