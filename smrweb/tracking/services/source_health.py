"""Polled sources (SMR and git): what a poll records, the sync lease, health and backoff, and the
score metric a source declares."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from smrweb.tracking import signals
from smrweb.tracking.errors import (
    InvalidInput,
)
from smrweb.tracking.events import MAX_EVENTS, parse_events
from smrweb.tracking.models import (
    POLLED_SOURCES,
    AuditVerb,
    Direction,
    MetricPoint,
    Project,
    Run,
    Scenario,
    SourceHealth,
    SourceKind,
)
from smrweb.tracking.services.artifacts import store_artifact, store_known_artifact
from smrweb.tracking.services.audit import _only, record_audit
from smrweb.tracking.services.ingest import ingest_events, name_experiments
from smrweb.tracking.services.runs import _locked_run, _set_run_fields

POLL_FIELDS = (
    "live_phase",
    "terminal_outcome",
    "requested_profile",
    "actual_profile",
    "budget_usd",
    "other_meters_usd",
    "source_total_usd",
    "source_updated_at",
    "source_cursor",
    "git_branch",
    "git_commit",
    "source_spend",
    "spend_unaccounted",
    "entries_unreadable",
    "actor_profiles",
    "results_complete",
    "results_missing",
)


def record_poll(project: Project, external_id: str, **fields: Any) -> Run:
    """Store what a poll saw of a run beyond its events: phase, profiles, budget, meters, cursor."""
    return record_sync(project, external_id, **fields).run


@dataclass
class SyncWrite:
    run: Run
    accepted: int = 0
    duplicates: int = 0
    # artifacts whose bytes were known when asked but gone by the write (the collector): pull them
    not_stored: list[str] = field(default_factory=list)


_encode = msgspec.json.Encoder(enc_hook=str).encode


def record_sync(
    project: Project,
    external_id: str,
    *,
    events: Sequence[dict] = (),
    artifacts: Sequence[dict] = (),
    derive: Callable[[Run], dict[str, Any]] | None = None,
    experiment_names: dict[str, dict[str, str]] | None = None,
    **fields: Any,
) -> SyncWrite:
    """Everything one poll of a run saw, in one transaction (issue 34: one per run per cycle, not one per
    kind of data): its new artifacts (`artifact_id`, `path`, `sha256`, `kind`, `content_type`, and
    `content`: the bytes, or None when they are stored already), its events through the ingest
    contract and `ingest_events`, then its poll fields,
    then the fields `derive(run)` computes from the run as those events left it (the source's totals
    beside the turns' sums); `experiment_names` fills in the titles of experiments known by id only
    (`name_experiments`). A refused event writes nothing of it (InvalidEvents)."""
    _only(fields, POLL_FIELDS, "a polled run field")
    write = SyncWrite(run=None)  # type: ignore[arg-type]
    with transaction.atomic():
        for a in artifacts:
            if a["content"] is None:
                stored = store_known_artifact(
                    project,
                    external_id,
                    sha256=a["sha256"],
                    path=a["path"],
                    kind=a["kind"],
                    content_type=a["content_type"],
                )
                if stored is None:
                    write.not_stored.append(a["artifact_id"])
            else:
                store_artifact(
                    project,
                    external_id,
                    path=a["path"],
                    content=io.BytesIO(a["content"]),
                    kind=a["kind"],
                    content_type=a["content_type"],
                    claimed_sha256=a["sha256"],
                )
        run = None
        for start in range(0, len(events), MAX_EVENTS):
            result = ingest_events(
                project,
                external_id,
                parse_events(_encode(list(events[start : start + MAX_EVENTS]))),
                savepoint=False,
            )
            write.accepted += result.accepted
            write.duplicates += result.duplicates
            run = result.run or run  # locked by this transaction, as the events left it
        if experiment_names:
            name_experiments(project, external_id, experiment_names)
        run = run or _locked_run(project, external_id, timezone.now())
        derived = derive(run) if derive else {}
        _only(derived, POLL_FIELDS, "a polled run field")
        write.run = _set_run_fields(
            project, external_id, {**fields, **derived, "last_polled_at": timezone.now()}, run=run
        )
    return write


def record_polled_unchanged(project: Project, external_ids: Sequence[str]) -> int:
    """Runs a poll found unchanged (their cheap check): only their last poll time moves, one statement."""
    if not external_ids:
        return 0
    return Run.objects.filter(project=project, external_id__in=list(external_ids)).update(
        last_polled_at=timezone.now()
    )


def source_health(project: Project):
    """The project's source-health row (created on first use)."""

    health, _ = SourceHealth.objects.get_or_create(project=project)
    return health


def claim_source_lease(project: Project, *, owner: str, seconds: float) -> bool:
    """Take the project's polling lease unless another worker holds a live one."""

    source_health(project)
    now = timezone.now()
    claimed = (
        SourceHealth.objects.filter(project=project)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner))
        .update(lease_until=now + timedelta(seconds=seconds), lease_owner=owner, last_attempt_at=now)
    )
    return claimed == 1


def release_source_lease(project: Project, *, owner: str) -> None:

    SourceHealth.objects.filter(project=project, lease_owner=owner).update(lease_until=None, lease_owner="")


def record_source_success(project: Project, *, active_runs: int, next_in: float, warning: str = "") -> None:
    """A sync worked: clear the failure streak and schedule the next one. `warning` says what it read
    but could not fully trust (health is amber while it is set)."""

    now = timezone.now()
    SourceHealth.objects.filter(project=project).update(
        last_success_at=now,
        consecutive_failures=0,
        active_runs=active_runs,
        next_attempt_at=now + timedelta(seconds=next_in),
        updated=now,
        warning=warning[:2000].replace("\x00", "\ufffd"),
    )


def record_full_listing(project: Project) -> None:
    """A sync walked every page of the project's runs (the next walks may stop at known runs)."""

    SourceHealth.objects.filter(project=project).update(full_list_at=timezone.now())


SOURCE_DIRECTIONS = {
    "higher_is_better": Direction.MAXIMIZE,
    "maximize": Direction.MAXIMIZE,
    "max": Direction.MAXIMIZE,
    "higher": Direction.MAXIMIZE,
    "lower_is_better": Direction.MINIMIZE,
    "minimize": Direction.MINIMIZE,
    "min": Direction.MINIMIZE,
    "lower": Direction.MINIMIZE,
}


def note_declared_metrics(project: Project, declared: dict[str, str]) -> Project:
    """Remember the metrics a project's SMR experiments declare; a project that listens to them
    (`score_metric` "auto", or the name an admin picked) scores the one metric they declare, or the
    picked one, in its declared direction. Earlier results of it become scores on the next read."""
    with transaction.atomic():
        project = Project.objects.select_for_update(no_key=True).get(pk=project.pk)  # (see launches)
        settings_ = dict(project.source_settings)
        known = dict(settings_.get("declared_metrics") or {})
        for metric, direction in declared.items():
            known.setdefault(str(metric)[:200], str(direction)[:50])
        if len(known) > 50:  # a source that names a metric per result is not declaring a score
            known = dict(sorted(known.items())[:50])
        choice = settings_.get("score_metric")
        target = (
            next(iter(known))
            if choice == "auto" and len(known) == 1
            else (choice if choice in known else None)
        )
        changed = known != settings_.get("declared_metrics")
        if changed:
            settings_["declared_metrics"] = known
            project.source_settings = settings_
            project.save(update_fields=["source_settings", "updated"])
        if target is not None:
            direction = SOURCE_DIRECTIONS.get(str(known[target]).lower(), Direction.MAXIMIZE)
            if (project.scenario.score_metric, project.scenario.direction) != (target, direction):
                _adopt_scenario(project, target, direction)
    return project


def _adopt_scenario(project: Project, metric: str, direction: str) -> None:
    """Point the project at the scenario "SMR experiments: <direction> <metric>" (made once, not shared)
    and have every run's results read again so earlier results of that metric become scores."""
    from django.utils.text import slugify

    digest = hashlib.blake2b(f"{metric}|{direction}".encode(), digest_size=4).hexdigest()
    key = f"smr-{slugify(metric)[:60] or 'metric'}-{direction}-{digest}"
    scenario, _ = Scenario.objects.get_or_create(
        key=key,
        defaults={
            "name": f"SMR experiments: {direction} {metric}"[:200],
            "score_metric": metric,
            "direction": direction,
            "description": "Adopted from the metric and direction the SMR project's experiments declare.",
        },
    )
    before = project.scenario.key
    project.scenario = scenario
    project.save(update_fields=["scenario", "updated"])
    for run in Run.objects.filter(project=project).only("pk", "source_cursor"):
        cursor = dict(run.source_cursor or {})
        cursor.pop("results", None)
        cursor.pop("seen", None)  # and not skipped as unchanged by the next cycle's cheap check
        # source_updated_at cleared: a finished run is synced again too (its results are read anew).
        Run.objects.filter(pk=run.pk).update(source_cursor=cursor, source_updated_at=None)
    record_audit(
        None,
        AuditVerb.PROJECT_METRIC_ADOPTED,
        project,
        project=project,
        scenario=key,
        before=before,
        metric=metric,
        direction=direction,
    )


def replace_smr_api_key(
    project: Project, api_key: str, *, by: Any = None, check_binding: Any = None
) -> Project:
    """Give an SMR project a key of its own (sealed), asked of the backend first when `check_binding`."""
    from smrweb.core.secrets import seal

    if project.source != SourceKind.SMR:
        raise InvalidInput("smr_api_key", "Only projects whose source is smr have an SMR API key.")
    if not api_key or len(api_key) > 1000:
        raise InvalidInput("smr_api_key", "Enter the new API key (at most 1000 characters).")
    if check_binding is not None:
        check_binding(
            smr_project_id=project.source_settings.get("smr_project_id", ""),
            api_key=api_key,
            backend_base=project.source_settings.get("backend_base", ""),
            operator=False,
        )
    with transaction.atomic():
        project = Project.objects.select_for_update(no_key=True).get(pk=project.pk)  # (see launches)
        settings_ = {k: v for k, v in project.source_settings.items() if k != "operator_key"}
        settings_["api_key_sealed"] = seal(api_key)
        project.source_settings = settings_
        project.save(update_fields=["source_settings", "updated"])
        record_audit(by, AuditVerb.PROJECT_SMR_KEY_REPLACED, project, project=project)  # never the key itself
    return project


def choose_score_metric(project: Project, metric: str, *, by: Any = None) -> Project:
    """An admin picks which declared metric is the project's score (or "auto": the only one declared)."""
    declared = project.source_settings.get("declared_metrics") or {}
    if metric != "auto" and metric not in declared:
        raise InvalidInput(
            "score_metric",
            f"Choose one of the metrics the SMR experiments declare: "
            f"{', '.join(sorted(declared)) or 'none yet'}.",
        )
    with transaction.atomic():
        project = Project.objects.select_for_update(no_key=True).get(pk=project.pk)  # (see launches)
        project.source_settings = {**project.source_settings, "score_metric": metric}
        project.save(update_fields=["source_settings", "updated"])
        record_audit(by, AuditVerb.PROJECT_SCORE_METRIC_CHOSEN, project, project=project, metric=metric)
    return note_declared_metrics(project, {})


def record_source_failure(project: Project, *, kind: str, message: str, retry_in: float) -> None:
    """A sync failed: keep the error for the page and push the next attempt back."""

    now = timezone.now()
    with transaction.atomic():
        health = SourceHealth.objects.select_for_update().get(project=project)
        # A source's own words (git's stderr, a backend's body) may hold NUL, which PostgreSQL text cannot.
        health.last_error_at, health.last_error, health.last_error_kind = (
            now,
            message[:2000].replace("\x00", "\ufffd"),
            kind,
        )
        health.consecutive_failures += 1
        health.next_attempt_at = now + timedelta(seconds=retry_in)
        health.save()
        signals.announce_alerts_due("source", project.pk)


def claim_due_projects(*, hold_seconds: float, now: datetime | None = None) -> list[int]:
    """Ids of polled projects whose next attempt is due, each pushed `hold_seconds` ahead so that the
    next beat tick does not enqueue it again while its sync is queued or running."""

    now = now or timezone.now()

    for project in Project.objects.filter(source__in=POLLED_SOURCES, source_health__isnull=True):
        source_health(project)
    claimed = []
    for pk in SourceHealth.objects.filter(
        project__source__in=POLLED_SOURCES, project__archived_at__isnull=True, next_attempt_at__lte=now
    ).values_list("project_id", flat=True):
        if SourceHealth.objects.filter(project_id=pk, next_attempt_at__lte=now).update(
            next_attempt_at=now + timedelta(seconds=hold_seconds)
        ):
            claimed.append(pk)
    return claimed


def record_results_reach(
    project: Project, external_id: str, *, proven: bool, whole: bool, total: int | None
) -> Run:
    """Whether every result the source holds for the run has been read (`Run.results_complete`), and
    how many have not (`results_missing`; None when the source does not say). `proven`: this poll's
    results reach back to the last one seen (`whole`: to the run's start); `total`: how many results
    the source says the run holds, compared with the results stored (and those counted unreadable).
    A gap stays until a count closes it: a later window that reaches back does not bring it back."""
    run = Run.objects.get(project=project, external_id=external_id)
    if total is not None:
        held = MetricPoint.objects.filter(run=run, event_id__startswith="result:").count()
        missing = max(0, total - held - int(run.source_cursor.get("results_unreadable") or 0))
        complete, missing = missing == 0, missing or None
    elif proven:
        complete, missing = (True, None) if whole else (run.results_complete, run.results_missing)
    else:
        complete, missing = False, None
    if (complete, missing) == (run.results_complete, run.results_missing):
        return run
    return record_poll(project, external_id, results_complete=complete, results_missing=missing)
