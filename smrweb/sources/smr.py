"""The Managed Research (SMR) connector, on the real `managed-research` SDK.

Which SDK call feeds what (field conventions in docs/smr.md):
  runs.list(pid, cursor=…)       → run snapshots, page by page (newest first); runs/active for live runs
                                   older than the pages walked; runs.get for a live run that left both
  runs.cost_summary(rid)         → the billed total, per meter (typed): every cycle, and the gate below
  runs.get_actor_usage(rid)      → per-actor billed cents and tokens: the source's driver/child split
  runs.get_usage(rid)            → typed totals (tokens, cost) and free-form `entries` → agent turns,
                                   read tolerantly (sources/smr_usage.py); re-downloaded only when the
                                   cost changed, and for long runs at most SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE
                                   entries per cycle on average
  runs.artifact_manifest(rid)    → artifacts with their digests; bytes via get_artifact_content
  runs.list_checkpoints(rid)     → checkpoints with their failure reasons
  list_project_run_runtime_messages(pid, rid, limit=…) → runtime messages: a small newest window,
                                   widened when it does not reach back to the last one seen
  GET …/experiment-results (no SDK method: the SDK's own transport; once per cycle, newest N of the
  project) → metric points, scores; for a run the window does not reach back to: its experiments'
  own results, then experiment-results/top, its result summary (…/runs/{rid}/results) and its
  artifacts' result metadata; what none reaches is marked on the run (Run.results_complete)
  runs.stop / runs.restore_checkpoint / trigger_run → actions; enqueue_runtime_message, pause_run,
                                   resume_run → steering (outbound/dispatch.py)

The SDK never retries and drops Retry-After; its parsers raise ValueError on bad shapes. Every
call goes through `_call`, which turns all of that into `sources.base` errors with a retry hint.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import math
import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
from django.conf import settings
from django.utils import timezone
from managed_research import ManagedResearchClient
from managed_research.errors import SmrApiError
from managed_research.models.run_control import ManagedResearchRunControlError
from managed_research.transport.http import _raise_for_error_response as sdk_error_of  # the SDK's mapping

from smrweb.client import retry_after_seconds
from smrweb.core import outbound
from smrweb.sources import smr_logs
from smrweb.sources.base import (
    ArtifactRef,
    AuthFailed,
    Blocked,
    Denied,
    Failure,
    Malformed,
    NotPossible,
    QuotaExceeded,
    RateLimited,
    RunGone,
    RunSnapshot,
    ServerError,
    SourceError,
    SpendReading,
    TimedOut,
    Unreachable,
)
from smrweb.sources.smr_usage import (
    UNKNOWN,
    read_entries,
    read_spend,
    roles_from_actor_usage,
    roles_from_poll_summary,
    roles_from_run,
)
from smrweb.tracking.models import ArtifactKind, Project

log = logging.getLogger(__name__)

PICO = Decimal(10) ** 12
STEER_TOPIC = "smrweb.steer"  # the topic of a message a person sends from smrweb
USAGE_MARGIN = timedelta(minutes=10)  # entries recorded this late after their own time are still read
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


# The SDK's errors keep the body but not the headers: a response hook notes the last answer's
# Retry-After here (per thread and context, so concurrent syncs never read each other's).
_last_retry_after: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "smr_last_retry_after", default=None
)


def _note_retry_after(response: httpx.Response) -> None:
    _last_retry_after.set(retry_after_seconds(response.headers.get("Retry-After")))


def _optional(what: str, fn, *args, **kwargs):
    """`_call` for a way the spec offers that a backend may not serve (404, 405, 422, 501): None then,
    so the run is marked incomplete rather than its sync failing; every other fault is raised."""
    try:
        return _call(what, fn, *args, **kwargs)
    except SourceError as exc:
        if getattr(exc.__cause__, "status_code", None) in (404, 405, 422, 501):
            return None
        raise


def _translate(what: str, exc: SmrApiError) -> SourceError:
    detail = getattr(exc, "detail", None) or (
        exc.body.get("detail") if isinstance(exc.body.get("detail"), dict) else {}
    )
    retry_after = _seconds(detail.get("retry_after_seconds")) if isinstance(detail, dict) else None
    if retry_after is None:
        retry_after = _last_retry_after.get()  # the header, when the body did not say
    status, message = exc.status_code, f"{what}: {exc}"
    if status == 429:
        return RateLimited(message, retry_after=retry_after, status=status)
    if detail and detail.get("error_code"):
        code = str(detail.get("error_code"))
        if status == 409 or code in {
            "terminal_run",
            "already_in_state",
            "runtime_not_live",
            "project_archived",
        }:
            return NotPossible(message)
        if code == "run_not_found":
            return RunGone(message)
        return Denied(message, retry_after=retry_after)
    if status in (401, 403):
        return AuthFailed(message)
    if status == 404:
        return RunGone(message)
    if status is not None and status >= 500:
        return ServerError(message, retry_after=retry_after, status=status)
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


def _fingerprint(summary, actors) -> str:
    """What changes whenever the run spends anything: its billed amounts and quantities per meter, and
    each actor's event count (a usage entry at no cost still moves these)."""
    parts = [
        summary.total_pico_usd,
        summary.total_cents,
        summary.total_usd,
        *[
            (m.meter_kind, m.billed_amount_pico_usd, m.billed_amount_cents, m.quantity)
            for m in summary.by_meter
        ],
    ]
    if actors is not None:
        parts += [(a.actor_id, a.event_count, a.billed_amount_cents) for a in actors.actors]
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


def _actor_profiles(row: dict[str, Any]) -> tuple[dict[str, str], ...]:
    """Requested vs resolved profile of each role and, where the run lists them, of each actor."""
    found: list[dict[str, str]] = []
    roles = row.get("roles") if isinstance(row.get("roles"), dict) else {}
    for role, spec in sorted(roles.items()):
        if isinstance(spec, dict) and (spec.get("requested_profile_id") or spec.get("resolved_profile_id")):
            found.append(
                {
                    "actor": "",
                    "role": str(role)[:100],
                    "requested": str(spec.get("requested_profile_id") or "")[:200],
                    "actual": str(spec.get("resolved_profile_id") or "")[:200],
                }
            )
    listed = [(a, "") for a in (row.get("actors") if isinstance(row.get("actors"), list) else [])]
    listed += [
        (a, "worker") for a in (roles.get("workers") if isinstance(roles.get("workers"), list) else [])
    ]
    for actor, default_role in listed:
        if not isinstance(actor, dict):
            continue
        requested = actor.get("requested_profile_id") or actor.get("requested_model")
        actual = actor.get("resolved_profile_id") or actor.get("resolved_model") or actor.get("actual_model")
        if requested or actual:
            found.append(
                {
                    "actor": str(actor.get("actor_id") or actor.get("id") or "")[:200],
                    "role": str(actor.get("role") or actor.get("participant_role") or default_role)[:100],
                    "requested": str(requested or "")[:200],
                    "actual": str(actual or "")[:200],
                }
            )
    return tuple(found[:200])


ARTIFACT_KINDS = {
    "submission": ArtifactKind.FILE,
    "model": ArtifactKind.ONNX_MODEL,
    "log": ArtifactKind.LOG,
    "archive": ArtifactKind.ARCHIVE,
}


def _result_key(row: dict) -> str:
    return f"id:{row['result_id']}" if row.get("result_id") else f"row:{id(row)}"


def _artifact_results(artifacts: list, result_json) -> list[dict]:
    """Results the run's artifacts describe in their metadata (a submission names the result that
    scored it: `result_id`, `metric`, and `value`, `score` or the metric's own key): read from the
    manifest already fetched, no request of their own."""
    rows = []
    for a in [*artifacts, *([result_json] if result_json is not None else [])]:
        meta = a.metadata or {}
        metric = meta.get("metric")
        value = next((meta[k] for k in ("value", "score", metric) if isinstance(k, str) and k in meta), None)
        if meta.get("result_id") and isinstance(metric, str) and metric and value is not None:
            rows.append(
                {
                    "result_id": str(meta["result_id"]),
                    "metric": metric,
                    "metric_direction": meta.get("metric_direction"),
                    "value": value,
                    "experiment_id": meta.get("experiment_id"),
                    "created_at": a.created_at,
                }
            )
    return rows


class SmrConnector:
    """A project's SMR backend. Address and key: the project's own setting, else the environment."""

    def __init__(self, project: Project, *, api_key: str, backend_base: str, guarded: bool = False):
        self.project = project
        self.pid = project.source_settings.get("smr_project_id", "")
        self.backend_base = backend_base
        # The first call after a (backend or worker) restart may be slow: give it longer.
        timeout = (
            settings.SMRWEB_SMR_TIMEOUT
            if backend_base in _warm_backends
            else settings.SMRWEB_SMR_FIRST_CALL_TIMEOUT
        )
        self.client = ManagedResearchClient(
            api_key=api_key, backend_base=backend_base, timeout_seconds=timeout
        )
        if guarded:
            # A project's own backend address is user-given: every SDK call goes through the outbound
            # guard (public addresses only, vetted once per request, no redirects, no env proxies).
            sdk_http = self.client._transport
            sdk_http.client.close()
            sdk_http.client = outbound.client(
                timeout=timeout, base_url=sdk_http.client.base_url, headers=sdk_http.client.headers
            )
        hooks = self.client._transport.client.event_hooks
        self.client._transport.client.event_hooks = {
            **hooks,
            "response": [*hooks.get("response", []), _note_retry_after],
        }
        self._results_by_run: dict[str, list[dict]] | None = None
        self._results_oldest: str | None = None
        self._results_limit = 0
        self._experiment_results: dict[str, list] = {}  # experiment id -> its results, read this cycle
        self._run_experiments: dict[str, Any] = {}  # run id -> its experiments, read this cycle
        self._top: dict[str, list[dict]] | None = None  # run id -> its rows in the score metric's top 500
        self._artifact_results: dict[str, list[dict]] = {}  # run id -> results its artifacts describe
        self.results_reach: dict[str, dict[str, Any]] = {}  # run id -> what fetch_results could reach
        self._run_roles: dict[str, dict[str, str]] = {}  # run id -> actor roles its listing states

    def _mark_warm(self) -> None:
        _warm_backends.add(self.backend_base)

    # --- reads --------------------------------------------------------------------------------

    def check(self) -> None:
        """One cheap request that proves the address, the key and the project id (creation, settings)."""
        _call("list runs", self.client.runs.list, self.pid, limit=1)
        self._mark_warm()

    def list_runs(
        self, *, known: set[str] = frozenset(), live: set[str] = frozenset(), full: bool = True
    ) -> list[RunSnapshot]:
        """The runs worth looking at this cycle.

        Pages newest first through the run list's cursor. Unless `full`, the walk stops at the first page
        holding a run smrweb already knows (everything older was seen by an earlier walk); live runs
        older than that come from runs/active, and a run smrweb holds as live that is in neither has
        just ended and is read on its own. A full walk (every SMRWEB_SMR_FULL_LIST_EVERY) sees every run."""
        page_size = max(1, min(settings.SMRWEB_SMR_RUNS_PAGE, 200))
        rows: dict[str, dict] = {}
        cursor: str | None = None
        seen_cursors: set[str] = set()
        while True:
            page = _call("list runs", self.client.runs.list, self.pid, limit=page_size, cursor=cursor)
            self._mark_warm()
            for row in page:
                self._check_row(row, "list runs")
                rows.setdefault(str(row["run_id"]), row)
            if len(page) < page_size or (not full and any(str(r["run_id"]) in known for r in page)):
                break
            last = page[-1]
            cursor = (
                f"{last.get('created_at') or ''}|{last['run_id']}"
                if last.get("created_at")
                else str(last["run_id"])
            )
            if cursor in seen_cursors:
                raise Malformed("list runs: the cursor did not advance")
            seen_cursors.add(cursor)
        missing = set(live) - rows.keys()
        if missing and not full:
            for row in _call("active runs", self.client.runs.list_active, self.pid):
                self._check_row(row, "active runs")
                rows.setdefault(str(row["run_id"]), row)
            if len(set(live) - rows.keys()) > page_size:  # the active list is capped: walking is cheaper
                return self.list_runs(known=known, live=live, full=True)
            for rid in sorted(set(live) - rows.keys()):  # ended since the last cycle (or gone)
                try:
                    row = _call("get run", self.client.get_run, rid, project_id=self.pid)
                except RunGone:
                    continue
                self._check_row(row, "get run")
                rows[str(row["run_id"])] = row
        return [self._snapshot(row) for row in rows.values()]

    @staticmethod
    def _check_row(row: Any, what: str) -> None:
        if not isinstance(row, dict) or not row.get("run_id") or not row.get("state"):
            raise Malformed(f"{what}: a run without run_id or state")

    def _snapshot(self, row: dict[str, Any]) -> RunSnapshot:
        self._run_roles[str(row["run_id"])] = roles_from_run(row)
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
            )
            if failure
            else None,
            started_at=_when(row.get("started_at")),
            created_at=_when(row.get("created_at")),
            finished_at=_when(row.get("finished_at")),
            requested_profile=str(orchestrator.get("requested_profile_id") or ""),
            actual_profile=str(orchestrator.get("resolved_profile_id") or ""),
            budget_usd=Decimal(str(budget))
            if isinstance(budget, (int, float)) and not isinstance(budget, bool)
            else None,
            actor_profiles=_actor_profiles(row),
            raw=row,
        )

    # One method per kind of data: a sync applies each as soon as it arrives, so a fault in one request
    # costs only that kind's news, not the whole run's.

    def spend_probe(self, rid: str) -> tuple[Any, Any, str]:
        """The run's two small spend answers and their fingerprint: the sync's unchanged-run check
        (an unchanged fingerprint and run row: nothing else to ask this cycle) and fetch_spend's input."""
        summary = _call("cost summary", self.client.runs.cost_summary, rid)
        try:
            actors = _call("actor usage", self.client.runs.get_actor_usage, rid, project_id=self.pid)
        except RunGone:  # a backend without per-actor usage: the split then comes from the turns only
            actors = None
        return summary, actors, _fingerprint(summary, actors)

    def fetch_spend(
        self, rid: str, cursor: dict[str, Any], *, final: bool = False, probe: tuple | None = None
    ) -> SpendReading:
        """The run's spend from the source's typed aggregates, and its new turns from usage entries.

        cost_summary and per-actor usage are small and asked every cycle; the usage list (every entry
        in one answer) only when the cost changed since it was last read, and for a long live run every
        (entries / SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE) cycles — its totals stay current, its timeline catches
        up. `final`: the run has ended, read everything once more."""
        summary, actors, fingerprint = probe or self.spend_probe(rid)
        new_cursor: dict[str, Any] = {"spend_fp": fingerprint}
        roles = self._typed_roles(rid, actors, cursor, new_cursor)
        last_read = _when(cursor.get("entries_at"))
        # Cycles to wait between two reads of the list: its length over the per-cycle allowance, so the
        # entries downloaded per cycle stay about flat however long the run grows.
        spacing = int(cursor.get("entries_n") or 0) / max(1, settings.SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE)
        waited = int(cursor.get("entries_wait") or 0) + 1
        changed = fingerprint != cursor.get("entries_fp")
        due = last_read is None or final or (changed and waited >= spacing)
        if not due:
            new_cursor["entries_wait"] = waited if changed else 0
            spend = read_spend(None, summary, actors, roles)
            if spend.tokens_in is None and cursor.get("source_tokens") is not None:
                spend.tokens_in, spend.tokens_out = cursor["source_tokens"]  # as of the last usage read
            return SpendReading(
                turns=[],
                spend=spend,
                entries=None,
                timeline_as_of=last_read,
                timeline_current=not changed,
                cursor=new_cursor,
            )
        now = timezone.now()
        usage = _call("usage", self.client.runs.get_usage, rid)
        reading = read_entries(usage.entries, roles)
        untyped = {t["actor"] for t in reading.turns if t["kind"] == UNKNOWN}
        if untyped - roles.keys() and self._ask_poll_summary(rid, untyped, roles, cursor, new_cursor):
            reading = read_entries(usage.entries, roles)  # joined again with the actors it named
        spend = read_spend(usage, summary, actors, roles)
        mark = _when(cursor.get("usage_ts"))
        # Entries may be recorded late: re-send a margin before the mark (their ids make repeats no-ops).
        since = mark - USAGE_MARGIN if mark else None
        fresh = [t for t in reading.turns if since is None or _when(t["ts"]) >= since]
        stamps = [_when(t["ts"]) for t in reading.turns]
        if stamps:
            new_cursor["usage_ts"] = max([*stamps, *([mark] if mark else [])]).isoformat()
        new_cursor.update(
            entries_at=now.isoformat(),
            entries_n=len(usage.entries),
            entries_fp=fingerprint,
            entries_wait=0,
            source_tokens=[spend.tokens_in, spend.tokens_out],
        )
        return SpendReading(
            turns=fresh,
            spend=spend,
            entries=reading,
            timeline_as_of=now,
            timeline_current=True,
            cursor=new_cursor,
        )

    def _typed_roles(self, rid: str, actors, cursor: dict, new_cursor: dict) -> dict[str, str]:
        """Actor id -> role as the source types it: per-actor usage, the run's actors list, and
        poll-summary's actors (asked only for an actor the others leave without a role, once per such
        set: the roles it gave are kept in the cursor)."""
        roles = {**(cursor.get("roles") or {}), **self._run_roles.get(rid, {})}
        roles.update(roles_from_actor_usage(actors))
        untyped = {str(a.actor_id)[:200] for a in (actors.actors if actors else [])} - roles.keys()
        if untyped:
            self._ask_poll_summary(rid, untyped, roles, cursor, new_cursor)
        new_cursor["roles"] = roles
        new_cursor.setdefault("roles_asked", cursor.get("roles_asked") or [])
        return roles

    def _ask_poll_summary(self, rid: str, untyped: set, roles: dict, cursor: dict, new_cursor: dict) -> bool:
        """Ask poll-summary for the roles of actors nothing else types (once per such set); fills
        `roles` in place. A backend without it (404) or whose answer does not parse leaves them
        unknown, which the run page and reconciliation then say."""
        before = set(new_cursor.get("roles_asked", cursor.get("roles_asked") or []))
        if untyped <= before:
            return False
        new_cursor["roles_asked"] = sorted(before | untyped)[-1000:]
        try:
            snapshot = _call(
                "poll summary",
                self.client.runs.get_observability_snapshot,
                self.pid,
                rid,
                event_limit=1,
                actor_limit=200,
                task_limit=1,
                question_limit=1,
                timeline_limit=1,
                message_limit=1,
            )
        except (RunGone, Malformed):
            return False
        found = roles_from_poll_summary([*snapshot.actors.items, *snapshot.actors.latest_transitions])
        roles.update({a: r for a, r in found.items() if a not in roles})
        new_cursor["roles"] = dict(roles)
        return bool(found)

    def fetch_artifacts(self, rid: str) -> list[ArtifactRef]:
        manifest = _call("artifact manifest", self.client.runs.artifact_manifest, rid, project_id=self.pid)
        return self._artifacts(manifest)

    def declared_metrics(self) -> dict[str, str]:
        """The metrics this cycle's experiment results declare, with their direction."""
        declared: dict[str, str] = {}
        for rows in self._project_results(reach="\uffff")[0].values():
            for r in rows:
                if isinstance(r.get("metric"), str) and r["metric"]:
                    declared.setdefault(r["metric"], str(r.get("metric_direction") or "higher_is_better"))
        return declared

    def fetch_results(
        self,
        rid: str,
        artifacts: list[ArtifactRef],
        cursor: dict[str, Any],
        *,
        created_at: datetime | None = None,
    ) -> tuple[list[dict], dict]:
        """The run's new results, by every way the spec offers (docs/smr.md#results), cheapest first:
        the project's newest results (one request per cycle); this run's experiments' own results; and
        when neither reaches back far enough, the project's top results of the score metric, the run's
        result summary and its artifacts' result metadata. Whether that was everything of the run, and
        how many results the source says it holds, is left in `results_reach[rid]` for the sync."""
        mark = cursor.get("results")
        since = str(mark) if mark else None
        reach = since or (_iso(created_at) or "")
        by_run, oldest = self._project_results(reach=reach)
        # By result id (each way may bring the same result); a row without one is kept (and counted).
        rows = {_result_key(r): r for r in by_run.get(rid, [])}
        proven = oldest is None or (bool(reach) and reach >= oldest)
        total = None
        if not proven:
            more, proven = self._run_results(rid, since=since)
            for r in more:
                rows.setdefault(_result_key(r), r)
        if not proven:
            summary, total = self._summary_results(rid)
            for r in [*self._top_results(rid), *summary, *self._artifact_results.get(rid, [])]:
                rows.setdefault(_result_key(r), r)
        self.results_reach[rid] = {"proven": proven, "whole": mark is None, "total": total}
        new_cursor: dict[str, Any] = {}
        return self._results(list(rows.values()), artifacts, cursor, new_cursor), new_cursor

    def _project_results(self, reach: str = "") -> tuple[dict[str, list[dict]], str | None]:
        """The project's newest results, split by run, and the oldest time in the window when it was
        full (None: it holds every result). Fetched small first; fetched once more, as wide as the spec
        allows, when a run needs results older than the small window reaches (`reach`)."""
        widest = max(1, min(settings.SMRWEB_SMR_RESULTS_WINDOW, 500))
        limit = self._results_limit or max(1, min(settings.SMRWEB_SMR_RESULTS_FIRST_WINDOW, widest))
        if self._results_by_run is not None and (
            self._results_oldest is None or reach >= self._results_oldest or limit >= widest
        ):
            return self._results_by_run, self._results_oldest
        if self._results_by_run is not None:
            limit = widest  # the small window did not reach back far enough
        results = _call(
            "experiment results",
            self.client._request_json,
            "GET",
            f"/smr/projects/{self.pid}/experiment-results",
            params={"limit": limit},
        )
        if not isinstance(results, list):
            raise Malformed("experiment results: expected a list")
        by_run: dict[str, list[dict]] = {}
        for r in results:
            if isinstance(r, dict) and r.get("run_id"):
                by_run.setdefault(str(r["run_id"]), []).append(r)
        stamps = [str(r.get("created_at") or "") for r in results if isinstance(r, dict)]
        self._results_by_run, self._results_limit = by_run, limit
        self._results_oldest = min(stamps) if len(results) >= limit and stamps else None
        if self._results_oldest is not None and reach < self._results_oldest and limit < widest:
            return self._project_results(reach)
        return self._results_by_run, self._results_oldest

    def _run_results(self, rid: str, *, since: str | None) -> tuple[list[dict], bool]:
        """The results of the run's experiments (those updated since `since`), and whether they are
        provably all of the run's: every experiment's list reaches back (shorter than the spec's 500,
        or older than `since`) and the run has experiments at all (an experiment shared by many runs
        may be listed under none of them). One request, plus one per experiment not read this cycle."""
        experiments = self._experiments_of(rid)
        experiments = [e for e in experiments if isinstance(e, dict)] if isinstance(experiments, list) else []
        rows: list[dict] = []
        proven = bool(experiments) and len(experiments) < 500
        for experiment in experiments:
            eid = experiment.get("experiment_id")
            if not eid or (
                since and str(experiment.get("updated_at") or experiment.get("created_at") or "") < since
            ):
                continue
            answer = self._experiment_results.get(str(eid))
            if answer is None:
                answer = _call(
                    "experiment results",
                    self.client._request_json,
                    "GET",
                    f"/smr/projects/{self.pid}/experiments/{eid}/results",
                    params={"limit": 500},
                )
                if not isinstance(answer, list):
                    raise Malformed("experiment results: expected a list")
                self._experiment_results[str(eid)] = answer
            stamps = [str(r.get("created_at") or "") for r in answer if isinstance(r, dict)]
            proven = proven and (len(answer) < 500 or bool(since and stamps and min(stamps) <= since))
            rows += [r for r in answer if isinstance(r, dict) and str(r.get("run_id") or rid) == rid]
        return rows, proven

    def _experiments_of(self, rid: str) -> list:
        """The run's experiments (one request, kept for the cycle: results and names both read them)."""
        if rid not in self._run_experiments:
            self._run_experiments[rid] = _call(
                "experiments", self.client.projects.list_experiments, self.pid, run_id=rid, limit=500
            )
        return self._run_experiments[rid]

    def _top_results(self, rid: str) -> list[dict]:
        """The run's results among the project's best 500 of the score metric (one request per cycle,
        `experiment-results/top`): when the run has any there, its best is among them."""
        metric = self.project.scenario.score_metric
        if self._top is None:
            answer = _optional(
                "top experiment results",
                self.client._request_json,
                "GET",
                f"/smr/projects/{self.pid}/experiment-results/top",
                params={"metric": metric, "limit": 500},
            )
            if answer is not None and not isinstance(answer, list):
                raise Malformed("top experiment results: expected a list")
            self._top = {}
            for r in answer or []:
                if isinstance(r, dict) and r.get("run_id") and r.get("metric") == metric:
                    self._top.setdefault(str(r["run_id"]), []).append(r)
        return self._top.get(rid, [])

    def _summary_results(self, rid: str) -> tuple[list[dict], int | None]:
        """The run's result summary (`GET …/runs/{rid}/results`, one request; free-form in the spec):
        result rows it lists (`results`, `experiment_results`, `items`, a `best`/`best_result`) and how
        many results it says the run holds (`count`, `result_count`, `total`, …), read tolerantly."""
        answer = _optional(
            "run results",
            self.client._request_json,
            "GET",
            f"/smr/projects/{self.pid}/runs/{rid}/results",
        )
        if not isinstance(answer, dict):
            return [], None
        rows: list[dict] = []
        total = None
        for holder in (answer, answer.get("results"), answer.get("counts"), answer.get("summary")):
            if isinstance(holder, list):
                rows += [r for r in holder if isinstance(r, dict)]
                continue
            if not isinstance(holder, dict):
                continue
            for key in ("results", "experiment_results", "items"):
                if isinstance(holder.get(key), list):
                    rows += [r for r in holder[key] if isinstance(r, dict)]
            for key in ("best", "best_result"):
                if isinstance(holder.get(key), dict):
                    rows.append(holder[key])
            for key in ("count", "result_count", "results_count", "total", "total_results", "results"):
                value = holder.get(key)
                if total is None and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    total = value
        rows = [r for r in rows if r.get("result_id") and str(r.get("run_id") or rid) == rid]
        return rows, total

    def experiment_names(self, rid: str) -> dict[str, dict[str, str]]:
        """Each of the run's experiments' title and hypothesis (one request; asked only while some
        experiment the results named is still known by its id alone)."""
        experiments = self._experiments_of(rid)
        names = {}
        for e in experiments if isinstance(experiments, list) else []:
            eid = e.get("experiment_id") if isinstance(e, dict) else None
            if eid and (e.get("title") or e.get("hypothesis")):
                names[str(eid)[:200]] = {
                    "title": str(e.get("title") or "")[:500],
                    "hypothesis": str(e.get("hypothesis") or "")[:20000],
                }
        return names

    def fetch_checkpoints(self, rid: str, cursor: dict[str, Any]) -> tuple[list[dict], dict]:
        checkpoints = _call("checkpoints", self.client.runs.list_checkpoints, rid, project_id=self.pid)
        new_cursor: dict[str, Any] = {}
        return self._checkpoints(checkpoints, cursor, new_cursor), new_cursor

    def fetch_messages(self, rid: str, cursor: dict[str, Any]) -> tuple[list[dict], dict]:
        """New runtime messages. The endpoint answers the newest `limit`: ask a small window, and a
        wider one when the window does not reach back to the last message seen; what even the widest
        window cannot reach is counted (`messages_missed`), not silently skipped."""
        mark = cursor.get("message_seq")
        limit = max(1, settings.SMRWEB_SMR_MESSAGE_WINDOW)
        widest = max(limit, settings.SMRWEB_SMR_MESSAGE_WINDOW_MAX)
        while True:
            messages = _call(
                "runtime messages", self.client.list_project_run_runtime_messages, self.pid, rid, limit=limit
            )
            seqs = [m["seq"] for m in messages if isinstance(m.get("seq"), int)]
            reaches = len(messages) < limit or (mark is not None and seqs and min(seqs) <= mark + 1)
            if reaches or limit >= widest:
                break
            limit = widest
        self._mark_warm()
        new_cursor: dict[str, Any] = {}
        if not reaches and seqs:
            gap = min(seqs) - (mark + 1 if mark is not None else 1)
            if gap > 0:
                new_cursor["messages_missed"] = int(cursor.get("messages_missed") or 0) + gap
        return self._messages(messages, cursor, new_cursor), new_cursor

    @staticmethod
    def _since(items: list, key, cursor: dict, name: str, new_cursor: dict, ident) -> list:
        """Items at or after the kind's cursor, advancing it. An item at the mark itself comes again
        unless its id (`ident`) is one the last cycle already took there (kept as `<name>_at_mark`): a
        tie that arrived later still comes, and a quiet run's newest item is not re-sent every cycle
        (a re-sent one would be a no-op, but it costs the write a lookup per kind)."""
        mark = cursor.get(name)
        taken = set(cursor.get(f"{name}_at_mark") or ()) if mark is not None else set()
        keyed = [(key(item), item) for item in items]
        fresh = [
            item
            for k, item in keyed
            if k is not None and (mark is None or k > mark or (k == mark and ident(item) not in taken))
        ]
        marks = [k for k, _ in keyed if k is not None]
        if marks:
            newest = max([*marks, *([mark] if mark is not None else [])])
            at_mark = {ident(item) for k, item in keyed if k == newest} - {""}
            if newest == mark:
                at_mark |= taken
            new_cursor[name] = newest
            new_cursor[f"{name}_at_mark"] = sorted(at_mark)[:100]  # beyond 100 ties: re-sent (no-ops)
        return fresh

    def _results(
        self, results: list[dict], artifacts: list[ArtifactRef], cursor: dict, new_cursor: dict
    ) -> list[dict]:
        ordered = sorted(
            results, key=lambda r: (str(r.get("created_at") or ""), str(r.get("result_id") or ""))
        )
        by_experiment = {a.experiment_id: a for a in artifacts if a.experiment_id}
        score_metric = self.project.scenario.score_metric
        events = []
        for r in self._since(
            ordered,
            lambda r: str(r.get("created_at") or ""),
            cursor,
            "results",
            new_cursor,
            lambda r: str(r.get("result_id") or ""),
        ):
            rid, metric, value = str(r.get("result_id") or ""), str(r.get("metric") or ""), r.get("value")
            if (
                not rid
                or not metric
                or isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                # Counted (once: ties at the mark come again) and shown on the run page; the rest arrive.
                if cursor.get("results") is not None and str(r.get("created_at") or "") <= cursor["results"]:
                    continue
                new_cursor["results_unreadable"] = (
                    int(new_cursor.get("results_unreadable", cursor.get("results_unreadable") or 0)) + 1
                )
                continue
            # The step is the result's time in milliseconds: stable whatever window of results a poll
            # sees (the endpoint returns only the newest 500 of the whole project).
            created = _when(r.get("created_at"))
            step = int(created.timestamp() * 1000) if created else 0
            events.append(
                {
                    "id": f"result:{rid}",
                    "type": "metric",
                    "key": metric,
                    "value": value,
                    "step": max(step, 0),
                    "ts": r.get("created_at"),
                }
            )
            if metric == score_metric:
                artifact = by_experiment.get(str(r.get("experiment_id") or ""))
                events.append(
                    {
                        "id": f"score:{rid}",
                        "type": "score",
                        "score": value,
                        "ts": r.get("created_at"),
                        "harness_id": str(r.get("comparison_cohort_key") or metric)[:200],
                        "experiment": str(r.get("experiment_id") or "")[:200] or None,
                        "artifact": artifact.sha256 if artifact else None,
                        "details": {
                            k: r.get(k)
                            for k in ("baseline_value", "delta", "metric_direction", "truth_status")
                            if r.get(k) is not None
                        },
                    }
                )
        return events

    def _checkpoints(self, checkpoints: list, cursor: dict, new_cursor: dict) -> list[dict]:
        events = []
        for c in self._since(
            checkpoints,
            lambda c: _iso(c.captured_at),
            cursor,
            "checkpoints",
            new_cursor,
            lambda c: str(c.checkpoint_id or ""),
        ):
            meta = c.metadata or {}
            failed = c.state == "failed"
            events.append(
                {
                    "id": c.checkpoint_id,
                    "type": "checkpoint",
                    "ts": _iso(c.captured_at),
                    "label": str(meta.get("label") or c.checkpoint_id)[:500],
                    "commit": str(meta.get("commit") or "")[:64],
                    "restorable": bool(c.restorable) and not failed,
                    # A branched run's first checkpoint names the one of the run it was branched from.
                    "parent": str(c.parent_checkpoint_id or "")[:200],
                    "failure_reason": str(
                        meta.get("failure_reason") or (c.error_code or "failed" if failed else "")
                    )[:20000],
                }
            )
        return events

    def _messages(self, messages: list[dict], cursor: dict, new_cursor: dict) -> list[dict]:
        events = []
        for m in self._since(
            messages,
            lambda m: m.get("seq") if isinstance(m.get("seq"), int) else None,
            cursor,
            "message_seq",
            new_cursor,
            lambda m: str(m.get("message_id") or m.get("seq")),
        ):
            payload = m.get("payload") if isinstance(m.get("payload"), dict) else {}
            body = m.get("body") or payload.get("body") or m.get("action") or ""
            if not body:
                continue
            events.append(
                {
                    "id": f"message:{m.get('message_id') or m['seq']}",
                    "type": "message",
                    "ts": m.get("created_at"),
                    "body": str(body)[:100_000],
                    "topic": str(payload.get("topic") or m.get("action") or "")[:200],
                    "target": str(m.get("target") or "")[:200],
                    "mode": str(m.get("mode") or "")[:50],
                }
            )
        return events

    def _artifacts(self, manifest) -> list[ArtifactRef]:
        refs: dict[str, ArtifactRef] = {}
        listed = [*manifest.artifacts, *manifest.output_files, *manifest.result_outputs, *manifest.reports]
        self._artifact_results[str(manifest.run_id)] = _artifact_results(listed, manifest.result_json)
        for a in listed:
            sha = _sha256(a.digest)
            if not sha or a.artifact_id in refs:
                continue  # nothing to verify the bytes against: not pulled
            meta = a.metadata or {}
            refs[a.artifact_id] = ArtifactRef(
                artifact_id=a.artifact_id,
                path=(a.path or a.title or a.artifact_id)[:500],
                sha256=sha,
                size=a.size_bytes,
                content_type=(a.content_type or "application/octet-stream")[:200],
                kind=ARTIFACT_KINDS.get(a.artifact_type or "", ArtifactKind.FILE),
                created_at=_when(a.created_at),
                experiment_id=str(meta.get("experiment_id") or ""),
            )
        return list(refs.values())

    def pull_artifact(self, artifact: ArtifactRef) -> bytes:
        cap = settings.SMRWEB_MAX_ARTIFACT_BYTES
        if artifact.size is None or artifact.size <= cap:
            content = self.artifact_bytes("artifact content", artifact.artifact_id, cap)
            if content is not None:
                return content
        size = f"{artifact.size} bytes listed" if artifact.size and artifact.size > cap else "its bytes run"
        raise QuotaExceeded(
            f"artifact {artifact.artifact_id} ({artifact.path[:200]!r}): {size} past "
            f"SMRWEB_MAX_ARTIFACT_BYTES ({cap}): not pulled"
        )

    def artifact_bytes(self, what: str, artifact_id: str, cap: int) -> bytes | None:
        """An artifact's bytes, by the request the SDK's `get_artifact_content` makes (redirects followed:
        the real backend answers with a presigned URL), streamed and given up past `cap` bytes (None). The
        SDK reads a body whole and base64s it: an artifact of gigabytes would have taken the worker's
        memory before any size check."""

        def streamed() -> bytes | None:
            with self.client._transport.client.stream(
                "GET",
                f"/smr/artifacts/{artifact_id}/content",
                params={"disposition": "inline"},
                follow_redirects=True,
            ) as response:
                if response.is_error:  # read and raised as the SDK's own call does (`_call` translates)
                    response.read()
                    sdk_error_of(response)
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > cap:
                    return None
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > cap:
                        return None
                    chunks.append(chunk)
                return b"".join(chunks)

        return _call(what, streamed)

    # --- run logs (sources/smr_logs.py) --------------------------------------------------------

    def list_log_archives(self, rid: str) -> list[dict[str, Any]] | None:
        """The run's log archives as the backend lists them; None when it serves no such list."""
        return _optional("log archives", self.client.logs.list_run_archives, self.pid, rid)

    def read_log_archive(self, entry: dict[str, Any]) -> list[dict[str, Any]]:
        """One archive's lines. Raises smr_logs.Unreadable (recorded once) or SourceError (retried)."""

        def artifact_bytes(artifact_id: str, cap: int) -> bytes | None:
            try:
                return self.artifact_bytes("log archive content", artifact_id, cap)
            except SourceError as exc:
                if getattr(exc.__cause__, "status_code", None) in (403, 404, 410):
                    raise smr_logs.Unreadable(f"artifact {artifact_id}: {exc}") from exc
                raise

        http = self.client._transport.client
        return smr_logs.read_archive(
            entry, backend_base=str(http.base_url), http=http, artifact_bytes=artifact_bytes
        )

    # --- actions ------------------------------------------------------------------------------

    def stop_run(self, external_id: str) -> None:
        try:
            _call("stop run", self.client.runs.stop, external_id, project_id=self.pid)
        except Malformed:
            pass  # a spec-strict backend answers a receipt without `state`; the next sync re-reads the run

    def send_message(self, external_id: str, *, body: str, causation_id: str) -> dict[str, Any]:
        """A runtime message to the run's orchestrator; the answer is the message (`message_id`, `seq`)."""
        return _call(
            "runtime message",
            self.client.enqueue_runtime_message,
            external_id,
            body=body,
            topic=STEER_TOPIC,
            mode="steer",
            causation_id=causation_id,
        )

    def find_message(self, external_id: str, *, causation_id: str) -> dict[str, Any] | None:
        """The run's runtime message sent with `causation_id`, if an earlier attempt whose answer was
        lost (a timeout) delivered it: the SDK's enqueue has no idempotency key, so a retry looks first."""
        messages = _call(
            "runtime messages",
            self.client.list_project_run_runtime_messages,
            self.pid,
            external_id,
            limit=200,  # it was sent moments ago: among the newest
        )
        return next((m for m in messages if m.get("causation_id") == causation_id), None)

    def pause_run(self, external_id: str) -> dict[str, Any]:
        return _call("pause run", self._lifecycle, self.client.pause_run, external_id)

    def resume_run(self, external_id: str) -> dict[str, Any]:
        return _call("resume run", self._lifecycle, self.client.resume_run, external_id)

    def _lifecycle(self, call, external_id: str) -> dict[str, Any]:
        """A pause or resume; "already in that state" is an answer (`already_in_state`), not a failure."""
        try:
            return call(external_id, project_id=self.pid)
        except ManagedResearchRunControlError as exc:
            if exc.error_code != "already_in_state":
                raise
            return {"already_in_state": True, "state": exc.current_state, "message": str(exc)}

    def roll_back(self, external_id: str, *, checkpoint_id: str, reason: str) -> dict[str, Any]:
        return _call(
            "restore checkpoint",
            self.client.runs.restore_checkpoint,
            external_id,
            project_id=self.pid,
            checkpoint_id=checkpoint_id,
            mode="in_place",
            reason=reason,
        )

    def trigger_run(
        self,
        *,
        kickoff: str,
        idempotency_key: str,
        agent_profile: str = "",
        budget_usd: Decimal | None = None,
        budget_tokens: int | None = None,
    ) -> dict[str, Any]:
        """Start a new run of the project ("start the next run"): the kickoff as its initial runtime
        message, the budget as its limit, the key so that a retried call starts one run. Returns the
        new run as the backend answers it (`run_id`)."""
        limit: dict[str, Any] = {}
        if budget_usd is not None:
            limit["max_spend_usd"] = float(budget_usd)
        if budget_tokens is not None:
            limit["max_tokens"] = int(budget_tokens)
        answer = _call(
            "trigger run",
            self.client.trigger_run,
            self.pid,
            runbook_preset=settings.SMRWEB_SMR_RUNBOOK_PRESET,
            agent_profile=agent_profile or None,
            limit=limit or None,
            initial_runtime_messages=[{"mode": "queue", "body": kickoff}],
            idempotency_key=idempotency_key,
        )
        if not isinstance(answer, dict) or not answer.get("run_id"):
            raise Malformed("trigger run: the answer names no run_id")
        return answer


def connector_for(project: Project) -> SmrConnector:
    """The connector of a project whose source is SMR: its own key and address, else the environment's —
    the operator's key only for projects the operator or staff bound (red-team finding 1)."""
    from smrweb.core.secrets import reveal

    own = project.source_settings
    if own.get("api_key_sealed"):
        api_key = reveal(own["api_key_sealed"])
    elif project.uses_operator_smr_key and not own.get("backend_base"):
        api_key = settings.SMRWEB_SMR_API_KEY  # and only to the operator's own backend
    else:
        raise AuthFailed(
            "This project has no SMR API key of its own, and the operator's key is only used for "
            "projects staff bound, with the operator's backend; set one with "
            "`manage.py create_project … --smr-api-key-env`."
        )
    backend = own.get("backend_base") or settings.SMRWEB_SMR_BACKEND_BASE
    if not api_key or not backend:
        raise AuthFailed(
            "No SMR backend address or API key: set SMRWEB_SMR_BACKEND_BASE and SMRWEB_SMR_API_KEY."
        )
    return SmrConnector(project, api_key=api_key, backend_base=backend, guarded=bool(own.get("backend_base")))


def check_binding(
    *, smr_project_id: str, api_key: str = "", backend_base: str = "", operator: bool = False
) -> None:
    """Ask the backend whether this key may read this SMR project, before anything is saved (creation,
    the settings page). Raises InvalidInput naming the field at fault; nothing is written here."""
    from smrweb.tracking.errors import InvalidInput
    from smrweb.tracking.models import Project as _Project

    if not api_key and operator:
        api_key = settings.SMRWEB_SMR_API_KEY if not backend_base else ""
    backend = backend_base or settings.SMRWEB_SMR_BACKEND_BASE
    if not backend:
        raise InvalidInput(
            "smr_backend_base", "No SMR backend address: give one, or set SMRWEB_SMR_BACKEND_BASE."
        )
    if not api_key:
        raise InvalidInput("smr_api_key", "No SMR API key to check the project with.")
    probe = _Project(slug="probe", source_settings={"smr_project_id": smr_project_id})
    _check(
        SmrConnector(probe, api_key=api_key, backend_base=backend, guarded=bool(backend_base)),
        smr_project_id,
        backend,
    )


def check_project(project: Project) -> None:
    """The settings page's "Test connection": the project's own binding, as the poller would use it."""
    from smrweb.tracking.errors import InvalidInput

    try:
        connector = connector_for(project)
    except AuthFailed as exc:
        raise InvalidInput("smr_api_key", str(exc)) from None
    _check(connector, connector.pid, connector.backend_base)


# A connection check waits out what a person would retry (docs/smr.md#creating-a-project).
CHECK_TRIES = 4
TRANSIENT_STATUSES = {502, 503, 504}


def _check(connector: SmrConnector, smr_project_id: str, backend: str) -> None:
    """Ask once, and again while the answer is transient (a 429, a 502/503/504, a timeout) within
    SMRWEB_SMR_CHECK_PATIENCE seconds; then name what went wrong as the field at fault."""
    from smrweb.tracking.errors import InvalidInput

    deadline = time.monotonic() + settings.SMRWEB_SMR_CHECK_PATIENCE
    try:
        for attempt in range(1, CHECK_TRIES + 1):
            left = deadline - time.monotonic()
            per_try = min(settings.SMRWEB_SMR_CHECK_TIMEOUT, max(1.0, settings.SMRWEB_SMR_CHECK_PATIENCE / 2))
            connector.client._transport.client.timeout = httpx.Timeout(min(per_try, max(1.0, left)))
            try:
                connector.check()
                return
            except (RateLimited, ServerError, TimedOut) as exc:
                wait = _transient_wait(exc, attempt)
                if wait is None or attempt == CHECK_TRIES or wait > deadline - time.monotonic():
                    raise InvalidInput(
                        "smr_backend_base", _transient_message(exc, backend, attempt)
                    ) from None
                log.info("SMR check of %s: %s; try %d in %.1f s", backend, exc.kind, attempt + 1, wait)
                time.sleep(wait)
    except AuthFailed as exc:
        raise InvalidInput("smr_api_key", f"The SMR backend refused this API key ({exc}).") from None
    except (RunGone, Denied) as exc:
        raise InvalidInput(
            "smr_project_id",
            f"The SMR backend does not know project {smr_project_id!r} for this key ({exc}).",
        ) from None
    except (Unreachable, Blocked) as exc:
        raise InvalidInput(
            "smr_backend_base", f"The SMR backend at {backend} could not be reached: {exc}"
        ) from None
    except SourceError as exc:
        raise InvalidInput(
            "smr_backend_base", f"The SMR backend at {backend} did not answer as SMR does: {exc.kind}: {exc}"
        ) from None
    finally:
        connector.client._transport.client.close()


def _transient_wait(exc: SourceError, attempt: int) -> float | None:
    """How long to wait before the next try, or None when this answer is not worth another."""
    if isinstance(exc, ServerError) and exc.status not in TRANSIENT_STATUSES:
        return None  # a 500 is the backend's own failure, not a passing one
    if exc.retry_after is not None:
        return exc.retry_after
    return 0.5 * 2 ** (attempt - 1)


def _transient_message(exc: SourceError, backend: str, attempts: int) -> str:
    tries = f"{attempts} {'try' if attempts == 1 else 'tries'}"
    if isinstance(exc, RateLimited):
        hint = f", retry in {math.ceil(exc.retry_after)} s" if exc.retry_after is not None else ""
        return f"Rate-limited by SMR at {backend} (429 after {tries}){hint}."
    if isinstance(exc, TimedOut):
        return f"The SMR backend at {backend} did not answer in time ({tries}): {exc}"
    if exc.status in TRANSIENT_STATUSES:
        return f"SMR at {backend} answered {exc.status} ({tries}); try again shortly: {exc}"
    return f"SMR at {backend} answered {exc.status or 'an error'}: {exc}"
