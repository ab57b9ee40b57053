"""Polling a project's source: list its runs, bring each changed or live run up to date through the
tracking services, and keep the project's source health. Called by the Celery tasks; safe to repeat.

One project is synced by one worker at a time (a lease on its SourceHealth row); inside that lease its
runs are synced one after another, which also makes "pull each artifact digest once" race-free.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass

from django.conf import settings

from smrweb.sources.base import Connector, Malformed, RunSnapshot, SourceError
from smrweb.sources.smr import connector_for
from smrweb.tracking import services
from smrweb.tracking.errors import DigestMismatch, InvalidEvents
from smrweb.tracking.events import MAX_EVENTS, parse_events
from smrweb.tracking.models import Project, Run, RunState, SourceHealth

log = logging.getLogger(__name__)


@dataclass
class SyncReport:
    listed: int = 0
    synced: int = 0
    events_accepted: int = 0
    artifacts_pulled: int = 0
    busy: bool = False
    error: str = ""


def sync_project(project: Project, *, owner: str, connector: Connector | None = None) -> SyncReport:
    """List the project's runs and sync every run that is live or changed since the last sync."""
    report = SyncReport()
    if not services.claim_source_lease(project, owner=owner, seconds=settings.SMR_LEASE_SECONDS):
        report.busy = True
        return report
    try:
        connector = connector or connector_for(project)
        snapshots = connector.list_runs()
        report.listed = len(snapshots)
        known = {r.external_id: r for r in Run.objects.filter(project=project)}
        for snapshot in snapshots:
            run = known.get(snapshot.external_id)
            if run is not None and snapshot.is_terminal and run.is_terminal and run.source_updated_at == snapshot.updated_at:
                continue  # finished and unchanged: nothing to fetch
            sync_run(project, snapshot, connector=connector, run=run, report=report)
            report.synced += 1
        active = sum(not s.is_terminal for s in snapshots)
        interval = settings.SMR_ACTIVE_INTERVAL if active else settings.SMR_IDLE_INTERVAL
        services.record_source_success(project, active_runs=active, next_in=interval)
    except SourceError as exc:
        report.error = f"{exc.kind}: {exc}"
        services.record_source_failure(project, kind=exc.kind, message=str(exc), retry_in=_backoff(project, exc))
        log.warning("sync of %s failed (%s): %s", project.slug, exc.kind, exc)
    finally:
        services.release_source_lease(project, owner=owner)
    return report


def _backoff(project: Project, exc: SourceError) -> float:
    """The server's Retry-After when it gave one, else exponential backoff with jitter."""
    if exc.retry_after is not None:
        return exc.retry_after
    failures = SourceHealth.objects.filter(project=project).values_list("consecutive_failures", flat=True).first() or 0
    delay = min(settings.SMR_BACKOFF_MAX, settings.SMR_BACKOFF_BASE * 2 ** min(failures, 10))
    return delay * random.uniform(0.5, 1.5)


def sync_run(project: Project, snapshot: RunSnapshot, *, connector: Connector, run: Run | None,
             report: SyncReport) -> None:
    """Fetch what is new for one run and apply it; the cursor is saved last, so a sync cut short
    is simply repeated (every event has an id, every artifact a digest)."""
    cursor = dict(run.source_cursor) if run else {}
    data = connector.fetch_run(snapshot, cursor)
    events = list(data.events)
    if state_event := _state_event(snapshot, run):
        events.append(state_event)
    for start in range(0, len(events), MAX_EVENTS):
        try:
            batch = parse_events(json.dumps(events[start:start + MAX_EVENTS], default=str))
        except InvalidEvents as exc:
            raise Malformed(f"run {snapshot.external_id}: the source sent data outside the contract: "
                            f"{exc.errors[:3]}") from exc
        report.events_accepted += services.ingest_events(project, snapshot.external_id, batch).accepted
    pulled = set(cursor.get("artifacts", []))
    for ref in data.artifacts:
        if ref.artifact_id in pulled:
            continue
        if services.store_known_artifact(project, snapshot.external_id, sha256=ref.sha256, path=ref.path,
                                         kind=ref.kind, content_type=ref.content_type) is None:
            content = connector.pull_artifact(ref)  # bytes not stored yet: the one download of this digest
            report.artifacts_pulled += 1
            try:
                services.store_artifact(project, snapshot.external_id, path=ref.path, content=_bytes_io(content),
                                        kind=ref.kind, content_type=ref.content_type, claimed_sha256=ref.sha256)
            except DigestMismatch as exc:
                raise Malformed(f"artifact {ref.artifact_id}: {exc.message}") from exc
        pulled.add(ref.artifact_id)
    services.record_poll(
        project, snapshot.external_id,
        live_phase=snapshot.live_phase[:100], terminal_outcome=snapshot.terminal_outcome[:50],
        requested_profile=snapshot.requested_profile[:200], actual_profile=snapshot.actual_profile[:200],
        budget_usd=snapshot.budget_usd, other_meters_usd=data.other_meters_usd, source_total_usd=data.total_usd,
        source_updated_at=snapshot.updated_at, source_cursor={**data.cursor, "artifacts": sorted(pulled)},
    )


def _state_event(snapshot: RunSnapshot, run: Run | None) -> dict | None:
    """A state event when the backend's state or failure differs from ours."""
    if snapshot.state not in RunState.values:
        return None
    failure = snapshot.failure
    same = run is not None and run.state == snapshot.state and (
        failure is None or (run.failure_family, run.failure_detail) == (failure.family, failure.detail))
    if same:
        return None
    stamp = snapshot.updated_at.isoformat() if snapshot.updated_at else "unknown"
    event = {"id": f"state:{snapshot.state}:{stamp}", "type": "state", "state": snapshot.state}
    if snapshot.updated_at:
        event["ts"] = stamp
    if failure:
        event["failure"] = {"family": failure.family[:100], "detail": failure.detail[:20000], "source": failure.source[:200]}
    return event


def _bytes_io(content: bytes):
    import io

    return io.BytesIO(content)
