"""Polling a project's source: list its runs, bring each changed or live run up to date through the
tracking services, and keep the project's source health. Called by the Celery tasks; safe to repeat.

One project is listed by one worker at a time (a lease on its SourceHealth row). Its runs are synced
each under a lease of its own (issue 34), so several workers can share one large project: the Celery
task lists the runs and hands them to per-run sync tasks (`fan_out`); called without one, the runs are
synced here, one after another. A run sync asks for everything first and writes it in one transaction
(`services.record_sync`); a live run whose spend fingerprint and run row are unchanged costs its two
small spend requests and no write beyond its poll time.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Q, Sum
from django.utils import timezone

from smrweb.core import cachekeys, logcontext
from smrweb.sources import smr_logs
from smrweb.sources.apply import count_events
from smrweb.sources.base import Connector, Malformed, QuotaExceeded, RunSnapshot, SourceError
from smrweb.sources.git.sync import sync_branch
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
from smrweb.tracking.models import (
    TERMINAL_STATES,
    LogSource,
    Project,
    Run,
    RunControl,
    RunLogBatch,
    RunState,
    SourceHealth,
    SourceKind,
)
from smrweb.tracking.services import logs as log_service
from smrweb.tracking.services.control import PENDING

log = logging.getLogger(__name__)

LOG_BATCH_PREFIX = "smr:"  # an SMR log archive's batch id: smr:<archive key>


@dataclass
class SyncReport:
    listed: int = 0
    synced: int = 0
    events_accepted: int = 0
    artifacts_pulled: int = 0
    log_archives_read: int = 0
    log_archives_unreadable: int = 0  # recorded on their run, with why (RunLogBatch.problem)
    unchanged: int = 0  # of `synced`: found unchanged by the cheap check (nothing else asked or written)
    busy_runs: int = 0  # another worker held their lease: left to it
    queued: int = 0  # handed to per-run sync tasks (`fan_out`)
    busy: bool = False
    error: str = ""


# fan_out(project, snapshots, owner): hand the runs to sync this cycle to per-run sync tasks, which sync
# them under the leases this cycle took for them (`owner`: pass it on to sync_runs).
FanOut = Callable[[Project, list[RunSnapshot], str], None]


def sync_project(
    project: Project, *, owner: str, connector: Connector | None = None, fan_out: FanOut | None = None
) -> SyncReport:
    """List the project's runs and sync every run that is live or changed since the last sync (here, or
    through `fan_out` on other workers).

    A fault while syncing one run is recorded and the next run is synced all the same; the failed
    run resumes from its saved cursor next cycle, and its fault stays on the project's source health
    until it syncs cleanly.
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
            _sync_listed(project, report, connector, owner=owner, fan_out=fan_out)
    finally:
        services.release_source_lease(project, owner=owner)
    return report


def _sync_listed(
    project: Project, report: SyncReport, connector: Connector | None, *, owner: str, fan_out: FanOut | None
) -> None:
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
    due = []
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
        due.append(snapshot)
    if fan_out is not None:
        # Each run is queued under its lease, taken now for the task that will sync it: a run whose last
        # sync is still queued or running is not queued again.
        queued = [s for s in due if RunLease(project, s.external_id, owner).claim()]
        report.busy_runs = len(due) - len(queued)
        fan_out(project, queued, owner)
        report.queued = len(queued)
        # Their faults come back on the runs (`run_faults`): shown from the cycle after theirs.
        errors += run_faults(project)
    else:
        errors += sync_runs(project, due, connector=connector, owner=owner, report=report)
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
        sync_branch(project, report=report)
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


# --- runs: each under a lease of its own, asked first, written in one transaction ------------------------


def sync_runs(
    project: Project,
    snapshots: list[RunSnapshot],
    *,
    connector: Connector,
    owner: str,
    report: SyncReport,
) -> list[SourceError]:
    """Sync each run whose lease this worker can take (another worker's run is left to it); a fault in
    one run is kept on the run (`run_faults`) and returned, and the next run is synced all the same."""
    errors: list[SourceError] = []
    unchanged: list[str] = []
    for snapshot in snapshots:
        rid = snapshot.external_id
        lease = RunLease(project, rid, owner)
        if not lease.claim():
            report.busy_runs += 1
            continue
        started = time.perf_counter()
        log.debug("run %s: sync started", rid)
        try:
            # Read after the lease is taken: the row as the last holder left it.
            run = Run.objects.filter(project=project, external_id=rid).first()
            if run is not None and run.archived_at is not None:
                continue
            if sync_run(project, snapshot, connector=connector, run=run, report=report, lease=lease):
                unchanged.append(rid)
                report.unchanged += 1
            report.synced += 1
        except SourceError as exc:
            exc.run_id = rid
            errors.append(exc)
        finally:
            lease.release()
            log.debug("run %s: sync ended in %.3f s", rid, time.perf_counter() - started)
    services.record_polled_unchanged(project, unchanged)
    return errors


class RunLease:
    """One worker syncs a run at a time: a key in the cache (Redis) taken with add, renewed during a long
    sync and released at its end. The project's task takes it when it queues the run (so a run is not
    queued again while its sync waits or runs) and the sync task holding the same owner token carries
    it on. A killed worker's lease lapses after SMRWEB_SMR_RUN_LEASE_SECONDS, under one active cycle,
    and the next cycle queues the run again. A cache that cannot be reached does not stop polling: the
    run is synced (every write is idempotent)."""

    def __init__(self, project: Project, rid: str, owner: str):
        self.key = cachekeys.run_lease(settings.DATABASES["default"]["NAME"], project.pk, rid)
        self.owner = owner
        self.seconds = max(1, int(settings.SMRWEB_SMR_RUN_LEASE_SECONDS))
        self.renewed = 0.0

    def claim(self) -> bool:
        """Take the lease, or carry on the one taken under this owner token (by the project's task)."""
        try:
            if cache.add(self.key, self.owner, timeout=self.seconds) or (
                cache.get(self.key) == self.owner and cache.touch(self.key, timeout=self.seconds)
            ):
                self.renewed = time.monotonic()
                return True
            return False
        except Exception:  # noqa: BLE001
            log.warning("run lease %s: the cache cannot be reached; syncing without it", self.key)
            return True

    def renew(self) -> None:
        if time.monotonic() - self.renewed < self.seconds / 3:
            return  # (a cache round trip per step would cost more than the steps of a short sync)
        try:
            cache.touch(self.key, timeout=self.seconds)
            self.renewed = time.monotonic()
        except Exception:  # noqa: BLE001
            pass

    def release(self) -> None:
        try:
            if cache.get(self.key) == self.owner:
                cache.delete(self.key)
        except Exception:  # noqa: BLE001
            pass  # it lapses on its own


def run_faults(project: Project) -> list[SourceError]:
    """The faults of the project's runs whose last sync did not complete (kept on the run until one
    does): what a per-run task found shows on the project's source health."""
    faults = []
    for rid, cursor in (
        Run.objects.filter(project=project, archived_at__isnull=True, source_cursor__has_key="fault")
        .values_list("external_id", "source_cursor")
        .order_by("external_id")[:100]
    ):
        fault = cursor.get("fault") or {}
        error = SourceError(str(fault.get("message") or "")[:2000], retry_after=fault.get("retry_after"))
        error.kind, error.run_id = str(fault.get("kind") or "error"), rid
        faults.append(error)
    return faults


def _seen(snapshot: RunSnapshot) -> str:
    """What the run list said of a run: when it changes, the run is synced whatever its spend says."""
    failure = snapshot.failure
    parts = (
        snapshot.state,
        snapshot.updated_at.isoformat() if snapshot.updated_at else "",
        snapshot.live_phase,
        snapshot.terminal_outcome,
        snapshot.requested_profile,
        snapshot.actual_profile,
        str(snapshot.budget_usd),
        snapshot.actor_profiles,
        (failure.family, failure.detail) if failure else None,
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


def _unchanged(project: Project, snapshot: RunSnapshot, run: Run | None, cursor: dict, probe) -> bool:
    """The cheap check: a live run whose spend fingerprint (every billed amount and each actor's event
    count: any turn moves it) and run-list row are as its last complete sync left them, and which was
    read whole within SMRWEB_SMR_RUN_REFRESH_SECONDS (what moves no money: a message, a checkpoint),
    has nothing new to ask for. A run with a steering request waiting to be seen is always read."""
    if probe is None or run is None or snapshot.is_terminal or "fault" in cursor:
        return False
    if run.source_updated_at != snapshot.updated_at:
        return False  # a sync did not complete at this version, or the run is to be read anew
    if probe[2] != cursor.get("spend_fp") or _seen(snapshot) != cursor.get("seen"):
        return False
    if cursor.get("entries_fp") != probe[2]:
        return False  # its timeline is still catching up with its usage list
    full_at = cursor.get("full_at")
    if (
        not isinstance(full_at, (int, float))
        or time.time() - full_at > settings.SMRWEB_SMR_RUN_REFRESH_SECONDS
    ):
        return False
    return not RunControl.objects.filter(run=run, status__in=PENDING).exists()


def sync_run(
    project: Project,
    snapshot: RunSnapshot,
    *,
    connector: Connector,
    run: Run | None,
    report: SyncReport,
    lease: RunLease | None = None,
) -> bool:
    """Bring one run up to date: one request per kind of data, then everything written in one
    transaction (`services.record_sync`: its events, poll fields, cursor and spend). A fault mid-way
    still writes what arrived before it (with its cursor), so it costs only what was not fetched yet,
    and a repeat writes nothing twice (every event has an id, every artifact a digest). Returns True
    when the cheap check found the run unchanged (nothing but its two spend requests)."""
    rid = snapshot.external_id
    cursor = dict(run.source_cursor) if run else {}
    events: list[dict] = []
    fields: dict = {}
    reading = names = handled = None
    new_artifacts: list[dict] = []
    renew = lease.renew if lease is not None else (lambda: None)

    def apply(new_events: list[dict], cursor_part: dict) -> None:
        events.extend(new_events)
        cursor.update(cursor_part)
        renew()

    try:
        probe = connector.spend_probe(rid) if hasattr(connector, "spend_probe") else None
        if _unchanged(project, snapshot, run, cursor, probe):
            return True
        apply([e for e in [_state_event(snapshot, run)] if e], {})
        fields.update(
            live_phase=snapshot.live_phase[:100],
            terminal_outcome=snapshot.terminal_outcome[:50],
            requested_profile=snapshot.requested_profile[:200],
            actual_profile=snapshot.actual_profile[:200],
            budget_usd=snapshot.budget_usd,
            actor_profiles=list(snapshot.actor_profiles),
        )
        if probe is not None:
            reading = connector.fetch_spend(rid, cursor, final=snapshot.is_terminal, probe=probe)
        else:
            reading = connector.fetch_spend(rid, cursor, final=snapshot.is_terminal)
        apply(reading.turns, reading.cursor)
        artifacts = connector.fetch_artifacts(rid)
        handled = list(cursor.get("artifacts", []))
        _new_artifacts(
            project, rid, artifacts, connector=connector, cursor=cursor, report=report, into=new_artifacts
        )
        apply(*connector.fetch_results(rid, artifacts, cursor, created_at=snapshot.created_at))
        names = _experiment_names(project, rid, events, cursor, connector)
        apply(*connector.fetch_checkpoints(rid, cursor))
        apply(*connector.fetch_messages(rid, cursor))
    except Exception as exc:  # what arrived before the fault is kept (an unexpected one too)
        _write(
            project,
            rid,
            events,
            fields,
            reading,
            cursor,
            report,
            names=names,
            artifacts=(new_artifacts, handled),
            fault=exc if isinstance(exc, SourceError) else None,
        )
        raise
    # Only a complete sync marks the run as seen at this version (finished runs are then skipped).
    cursor.pop("fault", None)
    if cursor.pop("deferred", None):
        cursor.pop("seen", None)  # an artifact left to another worker: not skipped as unchanged
    else:
        cursor.update(seen=_seen(snapshot), full_at=time.time())
    fields["source_updated_at"] = snapshot.updated_at
    _write(
        project, rid, events, fields, reading, cursor, report, names=names, artifacts=(new_artifacts, handled)
    )
    try:  # after the run's write: the run exists now, and its log archives are read into it
        _read_log_archives(project, rid, connector, report)
    except SourceError as exc:  # retried next cycle: the run is not marked seen at this version
        for key in ("seen", "full_at"):
            cursor.pop(key, None)
        cursor["fault"] = {"kind": exc.kind, "message": str(exc)[:2000], "retry_after": exc.retry_after}
        services.record_poll(project, rid, source_cursor=dict(cursor))
        raise
    # Results no way reached: the run says so (a write only when what it says changes; it counts the
    # results this sync stored, so after the run's write).
    reach = getattr(connector, "results_reach", {}).get(rid)
    if reach is not None and not (reach["proven"] and (run is None or run.results_complete)):
        services.record_results_reach(project, rid, **reach)
    return False


def _write(
    project: Project,
    rid: str,
    events: list[dict],
    fields: dict,
    reading,
    cursor: dict,
    report: SyncReport,
    *,
    names: dict | None = None,
    artifacts: tuple[list[dict], list | None] = ([], None),
    fault: SourceError | None = None,
) -> None:
    """One transaction for all a run sync read; a refused event writes none of it (a fault to show).
    An artifact the store refuses (quota, size, digest) is left out and its fault shown: the rest of
    the run's news is written all the same (a second transaction, on that fault only)."""
    if fault is not None:
        cursor["fault"] = {"kind": fault.kind, "message": str(fault)[:2000], "retry_after": fault.retry_after}
    derive = (lambda run: _spend_fields(run, reading, cursor)) if reading is not None else None
    new_artifacts, handled = artifacts
    try:
        try:
            write = services.record_sync(
                project,
                rid,
                events=events,
                artifacts=new_artifacts,
                derive=derive,
                experiment_names=names,
                **fields,
                source_cursor=dict(cursor),
            )
        finally:
            for a in new_artifacts:
                if a["content"] is not None:
                    _pull_lease(a["sha256"], claim=False)
    except (DigestMismatch, StorageQuotaExceeded, ArtifactTooLarge) as exc:
        error = (
            Malformed(f"run {rid}: an artifact: {exc.message}")
            if isinstance(exc, DigestMismatch)
            else QuotaExceeded(f"run {rid}: an artifact not stored: {exc.message}")
        )
        if handled is None:
            cursor.pop("artifacts", None)
        else:
            cursor["artifacts"] = handled
        _write(project, rid, events, fields, reading, cursor, report, names=names, fault=fault or error)
        raise error from exc
    except InvalidEvents as exc:
        error = Malformed(f"run {rid}: the source sent data outside the contract: {exc.errors[:3]}")
        # Nothing of this cycle was written: keep the fault on the run, with its last cursor, and the
        # new artifacts (their bytes were downloaded once: not again next cycle).
        run = Run.objects.filter(project=project, external_id=rid).only("source_cursor").first()
        kept = dict(run.source_cursor) if run else {}
        kept["fault"] = {"kind": error.kind, "message": str(error)[:2000], "retry_after": None}
        if new_artifacts:
            kept["artifacts"] = cursor.get("artifacts", [])
        try:
            services.record_sync(project, rid, artifacts=new_artifacts, source_cursor=kept)
        except TrackingError:
            kept.pop("artifacts", None) if handled is None else kept.update(artifacts=handled)
            services.record_poll(project, rid, source_cursor=kept)
        raise error from exc
    count_events(project.source, accepted=write.accepted, duplicates=write.duplicates, refused=0)
    report.events_accepted += write.accepted
    if write.not_stored:  # their bytes went (the collector) between the question and the write: pull next
        cursor["artifacts"] = [a for a in cursor.get("artifacts", []) if a not in write.not_stored]
        services.record_poll(project, rid, source_cursor=dict(cursor))


def _read_log_archives(project: Project, rid: str, connector, report: SyncReport) -> None:
    """The run's SMR log archives not read yet, each once, through the log write path (batch id
    `smr:<archive key>`): live runs on every full sync, and a finished run on its last one. An archive
    that cannot be read is recorded with why (never silently skipped); a transient fault is raised."""
    if not hasattr(connector, "list_log_archives"):
        return
    entries = connector.list_log_archives(rid)
    if not entries:
        return  # the common case: no statement for it
    run = Run.objects.filter(project=project, external_id=rid, archived_at__isnull=True).first()
    if run is None:
        return
    done = set(
        RunLogBatch.objects.filter(run=run, batch_id__startswith=LOG_BATCH_PREFIX).values_list(
            "batch_id", flat=True
        )
    )
    for entry in entries:
        batch_id = LOG_BATCH_PREFIX + smr_logs.archive_key(
            entry if isinstance(entry, dict) else {"entry": entry}
        )
        if batch_id in done:
            continue
        try:
            lines = connector.read_log_archive(entry)
            log_service.append_lines(
                run, batch_id, lines, source=LogSource.SMR, stream=smr_logs.archive_name(entry), limit=None
            )
            report.log_archives_read += 1
        except smr_logs.Unreadable as exc:
            log_service.record_unreadable_archive(run, batch_id, str(exc))
            report.log_archives_unreadable += 1
        except InvalidEvents as exc:  # lines the write path refuses: the archive is recorded as unreadable
            log_service.record_unreadable_archive(run, batch_id, f"lines refused: {exc.errors[:2]}")
            report.log_archives_unreadable += 1
        done.add(batch_id)


def _experiment_names(project: Project, rid: str, events: list[dict], cursor: dict, connector) -> dict | None:
    """Results name experiments by id: ask for their titles (one request) when this cycle's scores bring
    new ones, or the count still unnamed changed, not every cycle; written with the run's transaction."""
    referenced = {str(e["experiment"]) for e in events if e.get("type") == "score" and e.get("experiment")}
    if not referenced and cursor.get("unnamed_experiments") == 0:
        return None  # every experiment it has is named, and this cycle brings none (no query)
    known = services.experiments_named(project, rid)
    unnamed = {eid for eid, named in known.items() if not named} | (referenced - known.keys())
    if not unnamed:
        cursor["unnamed_experiments"] = 0
        return None
    if not referenced - known.keys() and len(unnamed) == cursor.get("unnamed_experiments"):
        return None
    names = connector.experiment_names(rid)
    cursor["unnamed_experiments"] = len(unnamed - names.keys())
    return names


def _spend_fields(run: Run, reading, cursor: dict) -> dict:
    """The source's own totals beside the turns (as this transaction's events left them), and what the
    turns do not account for."""
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
    # A long run's timeline between two reads of its usage is behind, not wrong: the flag (badge, ⚠,
    # health) keeps what the last read found; the run page still says what the turns do not show yet.
    flagged = bool(unaccounted) if reading.timeline_current else run.spend_unaccounted
    fields = {
        "source_spend": source_spend,
        "spend_unaccounted": flagged,
        "entries_unreadable": int(entries.get("unreadable") or 0),
        "other_meters_usd": spend.other_usd.quantize(Decimal("0.000001")),
    }
    if spend.total_usd is not None:
        fields["source_total_usd"] = spend.total_usd.quantize(Decimal("0.000001"))
    return fields


def _attribute_turns(run: Run, reading) -> None:
    """When the roles the source states changed since the run's last sync (a role became known, or the
    run was booked by older code), its earlier turns move to the side their actor's role now puts them
    on; this cycle's turns (all of them when the usage list was read whole) say their own side."""
    if reading.spend.sides_fp() == (run.source_spend or {}).get("sides_fp"):
        return
    sides = {**{t["actor"]: t["kind"] for t in reading.turns}, **reading.spend.sides()}
    if services.attribute_turns(run, sides):
        run.refresh_from_db(fields=[*Run.SPEND_FIELDS, "turn_count"])


def _new_artifacts(
    project: Project,
    rid: str,
    artifacts: list,
    *,
    connector: Connector,
    cursor: dict,
    report: SyncReport,
    into: list[dict],
) -> None:
    """The run's artifacts not handled yet, each with its bytes when smrweb does not hold them (each
    digest pulled once: once per sync, and not while another worker pulls it), for the run's one write.
    Added to `into` and marked handled in the cursor as each arrives (a fault on the next keeps them)."""
    handled = set(cursor.get("artifacts", []))
    new, pulled = into, {}
    for ref in artifacts:
        if ref.artifact_id in handled:
            continue
        try:
            services.check_artifact_path(ref.path)
        except InvalidInput as exc:  # a backend's path smrweb will not hand to MLflow clients (review N10)
            raise Malformed(f"artifact {ref.artifact_id} ({ref.path[:200]!r}): {exc.message}") from exc
        content = None
        if ref.sha256 in pulled:
            content = pulled[ref.sha256]
        elif not services.blob_stored(ref.sha256):
            if not _pull_lease(ref.sha256, claim=True):
                cursor["deferred"] = True  # another worker is pulling these bytes: read whole next cycle
                continue
            try:
                content = connector.pull_artifact(ref)  # bytes not stored yet: the one download of them
                if hashlib.sha256(content).hexdigest() != ref.sha256:
                    # Refused here, not in the run's write: the artifacts pulled before it are kept.
                    raise Malformed(
                        f"artifact {ref.artifact_id}: the bytes' sha256 is not the manifest's {ref.sha256}"
                    )
            except SourceError:
                _pull_lease(ref.sha256, claim=False)
                raise
            pulled[ref.sha256] = content
            report.artifacts_pulled += 1
        new.append(
            {
                "artifact_id": ref.artifact_id,
                "path": ref.path,
                "sha256": ref.sha256,
                "kind": ref.kind,
                "content_type": ref.content_type,
                "content": content,
            }
        )
        handled.add(ref.artifact_id)
        cursor["artifacts"] = sorted(handled)


def _pull_lease(sha256: str, *, claim: bool) -> bool:
    """Two workers syncing two runs that hold the same new bytes download them once: the first takes
    this lease until its run's write has stored them."""
    key = cachekeys.blob_pull(settings.DATABASES["default"]["NAME"], sha256)
    try:
        if claim:
            return bool(cache.add(key, 1, timeout=max(60, int(settings.SMRWEB_SMR_RUN_LEASE_SECONDS) * 4)))
        cache.delete(key)
    except Exception:  # noqa: BLE001
        return True
    return True


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
