"""Runs: find-or-create under a lock, settings, the summaries recomputed from rows, stalls and stops."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, DecimalField, ExpressionWrapper, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from smrweb.tracking import signals
from smrweb.tracking.errors import (
    InvalidInput,
)
from smrweb.tracking.models import (
    NEVER_COUNTED,
    TERMINAL_STATES,
    AgentTurn,
    AuditEvent,
    Project,
    Run,
    RunState,
    StateChange,
    Submission,
    TurnKind,
)
from smrweb.tracking.services.audit import _only, record_audit
from smrweb.tracking.services.launches import link_new_run

RUN_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@+=~-]{0,199}\Z")


def _check_run_id(external_id: str) -> None:
    # A run id goes into URLs as one path segment: no "/", "?", "#", spaces, or "."/".." tricks.
    if not RUN_ID_RE.match(external_id or ""):
        raise InvalidInput(
            "run",
            "A run id is 1 to 200 of A-Z a-z 0-9 . _ : @ + = ~ -, starting with a letter, "
            "digit or underscore.",
        )


def _locked_run(project: Project, external_id: str, first_seen: datetime) -> Run:
    """Get or create the run and lock its row for this transaction (one writer per run at a time)."""
    _check_run_id(external_id)
    run = Run.objects.select_for_update().filter(project=project, external_id=external_id).first()
    if run is not None:
        return run
    try:
        with transaction.atomic():  # savepoint: a concurrent creator may win the unique constraint
            Run.objects.create(
                project=project,
                external_id=external_id,
                started_at=first_seen,
                last_progress_at=timezone.now(),
            )
    except IntegrityError:
        created = False
    else:
        created = True
    run = Run.objects.select_for_update().get(project=project, external_id=external_id)
    if created:  # the one place runs are born: a launch waiting for this id links it to its parent
        link_new_run(run)
    return run


RUN_SETTINGS = (
    "budget_usd",
    "budget_tokens",
    "requested_profile",
    "actual_profile",
    "git_branch",
    "git_commit",
)


def _set_run_fields(project: Project, external_id: str, changes: dict[str, Any]) -> Run:
    """Write some fields of a run (created on first sight) under its row lock; call inside atomic()."""
    run = _locked_run(project, external_id, timezone.now())
    for field, value in changes.items():
        setattr(run, field, value)
    run.save(update_fields=[*changes, "updated"])
    signals.announce_alerts_due("run", run.pk)  # a budget, a profile (downgrade), a phase
    return run


def update_run_settings(project: Project, external_id: str, *, by: Any = None, **changes: Any) -> Run:
    """Set a run's budget, model profiles or git position (creating the run on first sight)."""
    _only(changes, RUN_SETTINGS, "a run setting")
    with transaction.atomic():
        run = _set_run_fields(project, external_id, changes)
        record_audit(
            by, "run.settings_changed", run, project=project, **{k: str(v) for k, v in changes.items()}
        )
    return run


_ZERO_USD = Value(Decimal(0), output_field=DecimalField(max_digits=18, decimal_places=6))


def recompute_spend(run: Run) -> list[str]:
    """Set the run's spend totals to the sum of its turns, split by kind. Returns changed fields."""

    def total(field: str, kind: str | None = None):
        zero = _ZERO_USD if field == "cost_usd" else Value(0)
        return Coalesce(Sum(field, filter=Q(kind=kind) if kind else None), zero)

    sums = AgentTurn.objects.filter(run=run).aggregate(
        turn_count=Count("id"),
        driver_tokens_in=total("tokens_in", TurnKind.DRIVER_INFERENCE),
        driver_tokens_out=total("tokens_out", TurnKind.DRIVER_INFERENCE),
        driver_cost_usd=total("cost_usd", TurnKind.DRIVER_INFERENCE),
        child_tokens_in=total("tokens_in", TurnKind.CHILD_WORK),
        child_tokens_out=total("tokens_out", TurnKind.CHILD_WORK),
        child_cost_usd=total("cost_usd", TurnKind.CHILD_WORK),
    )
    # Totals are the sum of the two parts, so the invariant holds by construction.
    sums["tokens_in"] = sums["driver_tokens_in"] + sums["child_tokens_in"]
    sums["tokens_out"] = sums["driver_tokens_out"] + sums["child_tokens_out"]
    sums["cost_usd"] = Decimal(sums["driver_cost_usd"]) + Decimal(sums["child_cost_usd"])
    for field, value in sums.items():
        setattr(run, field, value)
    return list(sums)


def recompute_scores(run: Run) -> list[str]:
    """Set the run's best (of the submissions that count: not invalid, rejected or excluded), latest
    (not excluded) and count of scores from its submissions."""
    maximize = run.project.scenario.maximize
    counted = Q(excluded_at__isnull=True) & ~Q(status__in=NEVER_COUNTED)
    best = Max("score", filter=counted) if maximize else Min("score", filter=counted)
    agg = Submission.objects.filter(run=run).aggregate(n=Count("id"), best=best)
    latest = (
        Submission.objects.filter(run=run, excluded_at__isnull=True)
        .order_by("-ts", "-id")
        .values_list("score", flat=True)
        .first()
    )
    run.score_count, run.best_score, run.latest_score = agg["n"], agg["best"], latest
    return ["score_count", "best_score", "latest_score"]


def recompute_state(run: Run) -> list[str]:
    """Set the run's state and failure from its latest state change by timestamp."""
    change = StateChange.objects.filter(run=run).order_by("-ts", "-id").first()
    if change is None:
        return []
    run.state = change.state
    run.failure_family, run.failure_detail, run.failure_source = (
        change.failure_family,
        change.failure_detail,
        change.failure_source,
    )
    run.finished_at = change.ts if change.state in TERMINAL_STATES else None
    return ["state", "failure_family", "failure_detail", "failure_source", "finished_at"]


def flag_stalled_runs(now: datetime | None = None) -> list[Run]:
    """Mark live runs with no progress for their project's stall_after as stalled; return them."""
    now = now or timezone.now()
    deadline = ExpressionWrapper(
        Value(now) - F("project__stall_after"), output_field=Run._meta.get_field("last_progress_at")
    )
    candidates = list(
        Run.objects.select_related("project")
        .exclude(state__in=[*TERMINAL_STATES, RunState.PAUSED])  # a paused run is quiet on purpose
        .filter(stalled_since__isnull=True, last_progress_at__lt=deadline)
    )
    flagged = []
    for run in candidates:
        with transaction.atomic():
            # Claim the row: ingest may have brought news since the query above.
            claimed = Run.objects.filter(
                pk=run.pk, stalled_since__isnull=True, last_progress_at=run.last_progress_at
            ).update(stalled_since=now, updated=now)  # `updated` versions the dashboard's polls
            if claimed:
                run.stalled_since = now
                record_audit(
                    None,
                    "run.stalled",
                    run,
                    project=run.project,
                    last_progress_at=run.last_progress_at.isoformat(),
                )
                flagged.append(run)
                signals.announce_alerts_due("run", run.pk)
    return flagged


def request_stop(run: Run, *, by: Any) -> AuditEvent:
    """Record that someone asked to stop a run; the caller dispatches the stop after commit."""
    if run.is_terminal:
        raise InvalidInput("run", f"The run is already {run.state}.")
    return record_audit(by, "run.stop_requested", run, project=run.project)


def record_stop_result(run: Run, *, ok: bool, detail: str) -> AuditEvent:
    return record_audit(
        None, "run.stopped" if ok else "run.stop_failed", run, project=run.project, detail=detail
    )
