"""Polling a project's source: list its runs, bring each changed or live run up to date through the
tracking services, and keep the project's source health. Called by the Celery tasks; safe to repeat.

One project is synced by one worker at a time (a lease on its SourceHealth row); inside that lease its
runs are synced one after another, which also makes "pull each artifact digest once" race-free.
"""

from __future__ import annotations

import io
import logging
import random
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone

from smrweb.core import logcontext
from smrweb.sources import git
from smrweb.sources.apply import apply_events
from smrweb.sources.base import Connector, Malformed, QuotaExceeded, RunSnapshot, SourceError
from smrweb.sources.smr import connector_for
from smrweb.sources.smr_usage import reconcile
from smrweb.tracking import services
from smrweb.tracking.errors import (
    ArtifactTooLarge,
    DigestMismatch,
    InvalidEvents,
    InvalidInput,
    StorageQuotaExceeded,
    TrackingError,
)
from smrweb.tracking.models import TERMINAL_STATES, Project, Run, RunState, SourceHealth, SourceKind

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
    """List the project's runs and sync every run that is live or changed since the last sync.

    A fault while syncing one run is recorded and the next run is synced all the same; the failed
    run resumes from its saved cursor next cycle.
    """
    report = SyncReport()
    logcontext.bind(project=project.slug)  # every line this sync logs names the project
    if not services.claim_source_lease(project, owner=owner, seconds=settings.SMRWEB_SMR_LEASE_SECONDS):
        report.busy = True
        return report
    try:
        if project.source == SourceKind.GIT and connector is None:
            _sync_git(project, report)  # one branch of a local repository
        else:
            _sync_listed(project, report, connector)
    finally:
        services.release_source_lease(project, owner=owner)
    return report


def _sync_listed(project: Project, report: SyncReport, connector: Connector | None) -> None:
    """A source that lists runs (SMR): sync each live or changed one, then record the project's health."""
    errors: list[SourceError] = []
    known = {r.external_id: r for r in Run.objects.filter(project=project)}
    health = services.source_health(project)
    full = (
        health.full_list_at is None
        or (timezone.now() - health.full_list_at).total_seconds() >= settings.SMRWEB_SMR_FULL_LIST_EVERY
    )
    try:
        connector = connector or connector_for(project)
        snapshots = connector.list_runs(
            known=set(known), live={k for k, r in known.items() if not r.is_terminal}, full=full
        )
        if full:
            services.record_full_listing(project)
    except SourceError as exc:
        errors.append(exc)
        snapshots = []
    if snapshots:
        try:
            project = _adopt_metric(project, connector)
        except SourceError as exc:  # the results window: runs still sync (their results retry it)
            errors.append(exc)
    report.listed = len(snapshots)
    for snapshot in snapshots:
        run = known.get(snapshot.external_id)
        if run is not None and run.archived_at is not None:
            continue  # archived: read-only until restored (services.archive)
        if (
            run is not None
            and snapshot.is_terminal
            and run.is_terminal
            and run.source_updated_at == snapshot.updated_at
        ):
            continue  # finished and unchanged since its last complete sync
        try:
            sync_run(project, snapshot, connector=connector, run=run, report=report)
            report.synced += 1
        except SourceError as exc:
            errors.append(exc)
    if errors:
        first = errors[0]
        report.error = f"{first.kind}: {first}"
        detail = str(first) + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
        services.record_source_failure(
            project, kind=first.kind, message=detail, retry_in=_backoff(project, errors)
        )
        log.warning("sync of %s: %d fault(s), first %s: %s", project.slug, len(errors), first.kind, first)
    else:
        active = sum(not s.is_terminal for s in snapshots)
        if not full:  # an incremental listing holds only new and live runs: count every live one
            active = Run.objects.filter(project=project).exclude(state__in=TERMINAL_STATES).count()
        interval = settings.SMRWEB_SMR_ACTIVE_INTERVAL if active else settings.SMRWEB_SMR_IDLE_INTERVAL
        services.record_source_success(
            project, active_runs=active, next_in=interval, warning=data_warning(project)
        )


def _sync_git(project: Project, report: SyncReport) -> None:
    """A git project: its branch is its one run. A missing repository or branch, a bad scores line,
    anything git refuses: a recorded failure."""
    try:
        git.sync_branch(project, report=report)
    except (SourceError, TrackingError) as exc:
        error = exc if isinstance(exc, SourceError) else Malformed(getattr(exc, "message", str(exc)))
        report.error = f"{error.kind}: {error}"
        services.record_source_failure(
            project, kind=error.kind, message=str(error), retry_in=_backoff(project, [error])
        )
    else:
        services.record_source_success(project, active_runs=1, next_in=settings.SMRWEB_SMR_ACTIVE_INTERVAL)


def _adopt_metric(project: Project, connector: Connector) -> Project:
    """An SMR project that listens to its experiments (`score_metric: auto`) takes the metric and
    direction they declare; with several, it waits for an admin to pick one (the project page asks)."""
    if not project.source_settings.get("score_metric"):
        return project  # an admin chose the scenario
    declared = connector.declared_metrics()
    if declared:
        project = services.note_declared_metrics(project, declared)
        if hasattr(connector, "project"):
            connector.project = project
    return project


def data_warning(project: Project) -> str:
    """What source health says about data a sync could not fully read ("" when it read everything)."""
    runs = Run.objects.filter(project=project)
    unreadable = runs.filter(entries_unreadable__gt=0)
    unaccounted = runs.filter(spend_unaccounted=True).exclude(pk__in=unreadable.values("pk"))
    parts = []
    counts = unreadable.aggregate(n=Sum("entries_unreadable"), runs=Count("pk"))
    if counts["n"]:
        example = next(
            (
                r.source_spend.get("entries", {}).get("example", "")
                for r in unreadable.only("source_spend")[:1]
            ),
            "",
        )
        parts.append(
            f"{counts['n']} usage entr{'y' if counts['n'] == 1 else 'ies'} in {counts['runs']} "
            f"run{'s' if counts['runs'] != 1 else ''} not understood"
            + (f", e.g. {example}" if example else "")
        )
    # A run whose timeline is only catching up (a long run's usage is re-read less often) is not a fault.
    lagging = unaccounted.exclude(source_spend__timeline_current=False)
    first = lagging.values_list("external_id", flat=True).first()
    if first is not None:
        n = lagging.count()
        parts.append(
            f"{n} run{'s' if n != 1 else ''} whose turns do not add up to the source's totals (e.g. {first})"
        )
    missed = runs.filter(Q(source_cursor__messages_missed__gt=0) | Q(source_cursor__results_unreadable__gt=0))
    first = missed.values_list("external_id", flat=True).first()
    if first is not None:
        n = missed.count()
        parts.append(
            f"{n} run{'s' if n != 1 else ''} with runtime messages or results that could not be read "
            f"(e.g. {first})"
        )
    return "; ".join(parts)


def _backoff(project: Project, errors: list[SourceError]) -> float:
    """The server's retry hint when it gave one (capped), else exponential backoff with jitter."""
    hints = [e.retry_after for e in errors if e.retry_after is not None]
    if hints:
        return min(max(hints), settings.SMRWEB_SMR_RETRY_AFTER_MAX)
    failures = (
        SourceHealth.objects.filter(project=project).values_list("consecutive_failures", flat=True).first()
        or 0
    )
    delay = min(settings.SMRWEB_SMR_BACKOFF_MAX, settings.SMRWEB_SMR_BACKOFF_BASE * 2 ** min(failures, 10))
    return delay * random.uniform(0.5, 1.5)


def sync_run(
    project: Project, snapshot: RunSnapshot, *, connector: Connector, run: Run | None, report: SyncReport
) -> None:
    """Bring one run up to date, one kind of data per request; each kind is applied and its cursor
    saved as soon as it arrives, so a fault costs only what was not fetched yet (and a repeat of a
    step writes nothing twice: every event has an id, every artifact a digest)."""
    rid = snapshot.external_id
    cursor = dict(run.source_cursor) if run else {}

    def apply(events: list[dict], cursor_part: dict) -> None:
        try:
            report.events_accepted += apply_events(project, rid, [(None, event) for event in events]).accepted
        except InvalidEvents as exc:
            raise Malformed(
                f"run {rid}: the source sent data outside the contract: {exc.errors[:3]}"
            ) from exc
        if cursor_part and any(cursor.get(k) != v for k, v in cursor_part.items()):
            cursor.update(cursor_part)
            services.record_poll(project, rid, source_cursor=dict(cursor))

    apply([e for e in [_state_event(snapshot, run)] if e], {})
    services.record_poll(
        project,
        rid,
        live_phase=snapshot.live_phase[:100],
        terminal_outcome=snapshot.terminal_outcome[:50],
        requested_profile=snapshot.requested_profile[:200],
        actual_profile=snapshot.actual_profile[:200],
        budget_usd=snapshot.budget_usd,
        actor_profiles=list(snapshot.actor_profiles),
    )
    reading = connector.fetch_spend(rid, cursor, final=snapshot.is_terminal)
    apply(reading.turns, {})
    _record_spend(project, rid, reading, cursor)
    artifacts = connector.fetch_artifacts(rid)
    _store_artifacts(project, rid, artifacts, connector=connector, cursor=cursor, report=report)
    apply(*connector.fetch_results(rid, artifacts, cursor, created_at=snapshot.created_at))
    reach = getattr(connector, "results_reach", {}).get(rid)
    if reach is not None and not (reach["proven"] and (run is None or run.results_complete)):
        services.record_results_reach(project, rid, **reach)  # results no way reached: the run says so
    # Results name experiments by id: ask for their titles when new ones appear (one request), not every
    # cycle.
    unnamed = services.unnamed_experiments(project, rid)
    if unnamed and unnamed != cursor.get("unnamed_experiments"):
        named = services.name_experiments(project, rid, connector.experiment_names(rid))
        cursor["unnamed_experiments"] = unnamed - named
        services.record_poll(project, rid, source_cursor=dict(cursor))
    apply(*connector.fetch_checkpoints(rid, cursor))
    apply(*connector.fetch_messages(rid, cursor))
    # Only a complete sync marks the run as seen at this version (finished runs are then skipped).
    services.record_poll(project, rid, source_updated_at=snapshot.updated_at)


def _record_spend(project: Project, rid: str, reading, cursor: dict) -> None:
    """Keep the source's own totals beside the turns, and what the turns do not account for."""
    run = Run.objects.get(project=project, external_id=rid)
    spend = reading.spend
    _attribute_turns(run, reading)
    sums = {f: getattr(run, f) for f in (*Run.SPEND_FIELDS, *Run.UNKNOWN_SPEND)}
    unaccounted = reconcile(spend, turns=sums, turn_count=run.turn_count, actors=len(spend.actors))
    previous = run.source_spend or {}
    entries = previous.get("entries", {})
    if reading.entries is not None:
        entries = {
            "turns": len(reading.entries.turns),
            "other_meters": reading.entries.other_meters,
            "unreadable": reading.entries.unreadable,
            "example": reading.entries.example,
        }
    as_of = reading.timeline_as_of.isoformat() if reading.timeline_as_of else previous.get("timeline_as_of")
    source_spend = {
        **spend.as_json(),
        "entries": entries,
        "unaccounted": unaccounted,
        "timeline_as_of": as_of,
        "timeline_current": reading.timeline_current,
        "checked_at": timezone.now().isoformat(),
    }
    cursor.update(reading.cursor)
    # A long run's timeline between two reads of its usage is behind, not wrong: the flag (badge, ⚠,
    # health) keeps what the last read found; the run page still says what the turns do not show yet.
    flagged = bool(unaccounted) if reading.timeline_current else run.spend_unaccounted
    fields = {
        "source_spend": source_spend,
        "spend_unaccounted": flagged,
        "entries_unreadable": int(entries.get("unreadable") or 0),
        "source_cursor": dict(cursor),
        "other_meters_usd": spend.other_usd.quantize(Decimal("0.000001")),
    }
    if spend.total_usd is not None:
        fields["source_total_usd"] = spend.total_usd.quantize(Decimal("0.000001"))
    services.record_poll(project, rid, **fields)


def _attribute_turns(run: Run, reading) -> None:
    """When the roles the source states changed since the run's last sync (a role became known, or the
    run was booked by older code), its earlier turns move to the side their actor's role now puts them
    on; this cycle's turns (all of them when the usage list was read whole) say their own side."""
    if reading.spend.sides_fp() == (run.source_spend or {}).get("sides_fp"):
        return
    sides = {**{t["actor"]: t["kind"] for t in reading.turns}, **reading.spend.sides()}
    if services.attribute_turns(run, sides):
        run.refresh_from_db(fields=[*Run.SPEND_FIELDS, "turn_count"])


def _store_artifacts(
    project: Project, rid: str, artifacts: list, *, connector: Connector, cursor: dict, report: SyncReport
) -> None:
    handled = set(cursor.get("artifacts", []))
    for ref in artifacts:
        if ref.artifact_id in handled:
            continue
        try:
            services.check_artifact_path(ref.path)
        except InvalidInput as exc:  # a backend's path smrweb will not hand to MLflow clients (review N10)
            raise Malformed(f"artifact {ref.artifact_id} ({ref.path[:200]!r}): {exc.message}") from exc
        if (
            services.store_known_artifact(
                project, rid, sha256=ref.sha256, path=ref.path, kind=ref.kind, content_type=ref.content_type
            )
            is None
        ):
            content = connector.pull_artifact(ref)  # bytes not stored yet: the one download of this digest
            report.artifacts_pulled += 1
            try:
                services.store_artifact(
                    project,
                    rid,
                    path=ref.path,
                    content=io.BytesIO(content),
                    kind=ref.kind,
                    content_type=ref.content_type,
                    claimed_sha256=ref.sha256,
                )
            except DigestMismatch as exc:
                raise Malformed(f"artifact {ref.artifact_id}: {exc.message}") from exc
            except (StorageQuotaExceeded, ArtifactTooLarge) as exc:
                raise QuotaExceeded(
                    f"artifact {ref.artifact_id} ({ref.path}) not stored: {exc.message}"
                ) from exc
        handled.add(ref.artifact_id)
        cursor["artifacts"] = sorted(handled)
        services.record_poll(project, rid, source_cursor=dict(cursor))


def _state_event(snapshot: RunSnapshot, run: Run | None) -> dict | None:
    """A state event when the backend's state or failure differs from ours."""
    if snapshot.state not in RunState.values:
        return None
    failure = snapshot.failure
    same = (
        run is not None
        and run.state == snapshot.state
        and (failure is None or (run.failure_family, run.failure_detail) == (failure.family, failure.detail))
    )
    if same:
        return None
    stamp = snapshot.updated_at.isoformat() if snapshot.updated_at else "unknown"
    event = {"id": f"state:{snapshot.state}:{stamp}", "type": "state", "state": snapshot.state}
    if snapshot.updated_at:
        event["ts"] = stamp
    if failure:
        event["failure"] = {
            "family": failure.family[:100],
            "detail": failure.detail[:20000],
            "source": failure.source[:200],
        }
    return event
