"""Runs: find-or-create under a lock, settings, the summaries recomputed from rows, stalls and stops."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, DecimalField, ExpressionWrapper, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from smrweb.tracking import pricing, signals
from smrweb.tracking.errors import CloseRefused, InvalidInput, NotAllowed, StopRefused
from smrweb.tracking.models import (
    RUN_RULE,
    TERMINAL_STATES,
    AgentTurn,
    AuditEvent,
    AuditVerb,
    Project,
    Role,
    Run,
    RunState,
    StateChange,
    Submission,
    TurnKind,
    counted_q,
)
from smrweb.tracking.queries.turn_memo import forget_turn_aggregates
from smrweb.tracking.services import capabilities, figures
from smrweb.tracking.services.archive import check_writable
from smrweb.tracking.services.audit import _only, record_audit
from smrweb.tracking.services.capabilities import Action
from smrweb.tracking.services.figures import queue_counts_q
from smrweb.tracking.services.launches import link_new_run
from smrweb.tracking.services.prices import current_prices
from smrweb.tracking.services.rollups import rebuild_turn_rollups

RUN_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@+=~-]{0,199}\Z")


def _check_run_id(external_id: str) -> None:
    # A run id goes into URLs as one path segment: no "/", "?", "#", spaces, or "."/".." tricks.
    if not RUN_ID_RE.match(external_id or ""):
        raise InvalidInput(
            "run",
            "A run id is 1 to 200 of A-Z a-z 0-9 . _ : @ + = ~ -, starting with a letter, "
            "digit or underscore.",
        )


def _run_for_update_sql(for_update: bool) -> str:
    """SELECT one run by (project, external_id), every column, its row locked where the database can."""
    q = connection.ops.quote_name
    columns = ", ".join(q(f.column) for f in Run._meta.concrete_fields)
    lock = " FOR UPDATE" if for_update else ""
    where = "WHERE project_id = %s AND external_id = %s LIMIT 1"
    return f"SELECT {columns} FROM {q(Run._meta.db_table)} {where}{lock}"


_RUN_FOR_UPDATE_SQL: dict[tuple[str, bool], str] = {}


def _select_run_for_update(project: Project, external_id: str) -> Run | None:
    """The run, its row locked for this transaction, or None. What
    `Run.objects.select_for_update().filter(project=…, external_id=…).first()` does, through a
    statement written once: compiling that queryset for the run's 52 columns was most of the ORM's
    time on every ingest batch."""
    key = (connection.vendor, connection.features.has_select_for_update)
    if key not in _RUN_FOR_UPDATE_SQL:
        _RUN_FOR_UPDATE_SQL[key] = _run_for_update_sql(key[1])
    return next(iter(Run.objects.raw(_RUN_FOR_UPDATE_SQL[key], [project.pk, external_id])), None)


def _locked_run(project: Project, external_id: str, first_seen: datetime) -> Run:
    """Get or create the run and lock its row for this transaction (one writer per run at a time)."""
    _check_run_id(external_id)
    check_writable(project)  # an archived project takes nothing new, a new run neither
    run = _select_run_for_update(project, external_id)
    if run is not None:
        check_writable(project, run)
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
    run = _select_run_for_update(project, external_id)
    if created:  # the one place runs are born: a launch waiting for this id links it to its parent
        link_new_run(run)
        figures.move(project, run, figures.NO_SHARE)  # one more run on the overview
    return run


RUN_SETTINGS = (
    "budget_usd",
    "budget_tokens",
    "requested_profile",
    "actual_profile",
    "git_branch",
    "git_commit",
)


def _set_run_fields(
    project: Project, external_id: str, changes: dict[str, Any], *, run: Run | None = None
) -> Run:
    """Write some fields of a run (created on first sight) under its row lock; call inside atomic()
    (`run`: already locked by this transaction)."""
    run = run or _locked_run(project, external_id, timezone.now())
    before = figures.share(run)
    for field, value in changes.items():
        # Typed as the row will read (a budget given as "4.5" is a Decimal): the figures' move reads them.
        setattr(run, field, Run._meta.get_field(field).to_python(value))
    run.save(update_fields=[*changes, "updated"])
    figures.move(project, run, before)  # a budget, the source's totals, its results gap
    signals.announce_alerts_due("run", run.pk)  # a budget, a profile (downgrade), a phase
    return run


def update_run_settings(project: Project, external_id: str, *, by: Any = None, **changes: Any) -> Run:
    """Set a run's budget, model profiles or git position (creating the run on first sight)."""
    _only(changes, RUN_SETTINGS, "a run setting")
    with transaction.atomic():
        run = _set_run_fields(project, external_id, changes)
        record_audit(
            by,
            AuditVerb.RUN_SETTINGS_CHANGED,
            run,
            project=project,
            **{k: str(v) for k, v in changes.items()},
        )
    return run


_ZERO_USD = Value(Decimal(0), output_field=DecimalField(max_digits=18, decimal_places=6))


def recompute_spend(run: Run) -> list[str]:
    """Set the run's spend totals to the sum of its turns, split by kind, and count its unpriced turns
    by model. Returns changed fields."""

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
        tokens_in=total("tokens_in"),
        tokens_out=total("tokens_out"),
        cost_usd=total("cost_usd"),
        unpriced_turns=Count("id", filter=Q(cost_origin=pricing.Origin.UNPRICED)),
        failed_turns=Count("id", filter=Q(failed=True)),
    )
    sums["unpriced_models"] = (
        dict(
            AgentTurn.objects.filter(run=run, cost_origin=pricing.Origin.UNPRICED)
            .values_list("model")
            .annotate(n=Count("id"))
            .order_by("model")
        )
        if sums["unpriced_turns"]
        else {}
    )
    # Totals are every turn's: driver + child + role unknown (turns of actors whose role no source
    # states, `Run.unknown_*`), so the split never hides a turn.
    sums["cost_usd"] = Decimal(sums["cost_usd"])
    for field, value in sums.items():
        setattr(run, field, value)
    return list(sums)


def attribute_turns(run: Run, sides: dict[str, str]) -> int:
    """Put each named actor's turns on the side its source states (actor id -> TurnKind): a turn read
    before its actor's role was known (or guessed by older code) moves; the spend split and the kept
    turn aggregates follow. Returns how many turns moved."""
    by_kind: dict[str, list[str]] = {}
    for actor, kind in sides.items():
        by_kind.setdefault(TurnKind(kind), []).append(actor)
    moved = 0
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        turns = AgentTurn.objects.filter(run=run)
        for kind, actors in by_kind.items():
            for start in range(0, len(actors), 500):  # bounded IN lists on every database
                chunk = actors[start : start + 500]
                moved += turns.filter(actor__in=chunk).exclude(kind=kind).update(kind=kind)
        if moved:
            run.save(update_fields=[*recompute_spend(run), "updated"])
            rebuild_turn_rollups([run.pk])
    if moved:  # the kept aggregates (cache) hold the old sides: now and once the write is committed
        forget_turn_aggregates(run)
        transaction.on_commit(lambda: forget_turn_aggregates(run))
    return moved


def reprice_turns(run: Run, table: pricing.PriceTable | None = None) -> int:
    """Price the run's unpriced turns with the price table as it is now (a price added since they were
    stored): their cost, the run's spend, its kept turn aggregates, its days of spend and the project's
    figures follow. Returns how many turns were priced; the others stay unpriced."""
    table = table or current_prices()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        turns = list(
            AgentTurn.objects.filter(run=run, cost_origin=pricing.Origin.UNPRICED).only(
                "pk",
                "ts",
                "model",
                *("tokens_in", "tokens_out", "tokens_cached_in", "tokens_cache_write", "tokens_reasoning"),
            )
        )
        priced = []
        for turn in turns:
            usage = pricing.Usage(
                turn.tokens_in,
                turn.tokens_out,
                turn.tokens_cached_in,
                turn.tokens_cache_write,
                turn.tokens_reasoning,
            )
            cost = table.cost(turn.model, usage, turn.ts)
            if cost is not None:
                turn.cost_usd, turn.cost_origin = cost, pricing.Origin.COMPUTED
                priced.append(turn)
        if not priced:
            return 0
        AgentTurn.objects.bulk_update(priced, ["cost_usd", "cost_origin"], batch_size=500)
        run.save(update_fields=[*recompute_spend(run), "updated"])
        rebuild_turn_rollups([run.pk])
        figures.rebuild_day_spend([run.pk])
        figures.refresh_project_figures(run.project_id, best=False)
    forget_turn_aggregates(run)  # the kept aggregates hold the old costs: now and once committed
    transaction.on_commit(lambda: forget_turn_aggregates(run))
    return len(priced)


def recompute_scores(run: Run) -> list[str]:
    """Set the run's best and latest of the submissions that count in its own figures (`RUN_RULE`: not
    invalid, rejected or excluded) and its count of scores (every one). Latest reads the same rule as
    best, so the two side by side never contradict (a newer score that does not count is shown beside
    it, marked, from the score history)."""
    maximize = run.project.scenario.maximize
    counted = counted_q(**RUN_RULE)
    best = Max("score", filter=counted) if maximize else Min("score", filter=counted)
    agg = Submission.objects.filter(run=run).aggregate(n=Count("id"), best=best, **queue_counts_q())
    latest = (
        Submission.objects.filter(run=run)
        .filter(counted)
        .order_by("-ts", "-id")
        .values_list("score", flat=True)
        .first()
    )
    run.score_count, run.best_score, run.latest_score = agg["n"], agg["best"], latest
    run.queue_waiting, run.queue_pending = agg["queue_waiting"], agg["queue_pending"]
    return ["score_count", "best_score", "latest_score", "queue_waiting", "queue_pending"]


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
                figures.refresh_project_figures(run.project, best=False)
                record_audit(
                    None,
                    AuditVerb.RUN_STALLED,
                    run,
                    project=run.project,
                    last_progress_at=run.last_progress_at.isoformat(),
                )
                flagged.append(run)
                signals.announce_alerts_due("run", run.pk)
    return flagged


def request_stop(run: Run, *, by: Any) -> AuditEvent:
    """Record that someone asked to stop a run; the caller dispatches the stop after commit."""
    if refusal := capabilities.refusal(run.project, Action.STOP, run=run):
        raise StopRefused(refusal)
    return record_audit(by, AuditVerb.RUN_STOP_REQUESTED, run, project=run.project)


def record_stop_result(run: Run, *, ok: bool, detail: str) -> AuditEvent:
    return record_audit(
        None,
        AuditVerb.RUN_STOPPED if ok else AuditVerb.RUN_STOP_FAILED,
        run,
        project=run.project,
        detail=detail,
    )


# --- closing a silent run as abandoned -------------------------------------------------------------------

CLOSED_FAMILY = "closed"  # the failure family of a close, so pages tell it from a harness's own word
CLOSE_REASON_MAX = 5000


def close_run(run: Run, *, by: Any, reason: str, now: datetime | None = None) -> Run:
    """Close a silent push or git run as `abandoned` (reviewers and admins), with the reason why: recorded
    as a state change like any other (so the run's state stays derived from its history), audited, the
    stall flag cleared, pages and alert rules told. Later events are still recorded; a `state` event the
    harness sends afterwards is newer than the close and wins (it reopens the run), as state always does."""
    project = run.project
    if not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"Closing a run needs the reviewer role in {project.slug}.")
    reason = (reason or "").replace("\x00", "").strip()
    if not reason:
        raise InvalidInput("reason", "Say why the run is abandoned (what happened to its harness).")
    if len(reason) > CLOSE_REASON_MAX:
        raise InvalidInput("reason", f"At most {CLOSE_REASON_MAX} characters.")
    with transaction.atomic():
        # Under the run's lock, so news that ingest brought meanwhile is seen (and wins).
        run = Run.objects.select_for_update().select_related("project__scenario").get(pk=run.pk)
        now = now or timezone.now()
        if refusal := capabilities.refusal(run.project, Action.CLOSE, run=run, now=now):
            raise CloseRefused(refusal)
        before, silent_since = run.state, run.last_progress_at
        latest = StateChange.objects.filter(run=run).aggregate(ts=Max("ts"))["ts"]
        # The close must be the run's latest state change even if a harness stamped one in the future.
        ts = max(now, latest + timedelta(milliseconds=1)) if latest else now
        who = by.get_username() if hasattr(by, "get_username") else str(by)
        StateChange.objects.create(
            run=run,
            event_id=f"smrweb-close-{uuid.uuid4().hex}",
            state=RunState.ABANDONED,
            ts=ts,
            failure_family=CLOSED_FAMILY,
            failure_detail=reason,
            failure_source=who[:200],
        )
        changed = recompute_state(run)
        run.stalled_since = None
        run.save(update_fields=[*changed, "stalled_since", "updated"])  # `updated` versions the polls
        figures.refresh_project_figures(run.project, best=False)
        record_audit(
            by,
            AuditVerb.RUN_CLOSED,
            run,
            project=project,
            state=RunState.ABANDONED,
            reason=reason[:500],
            was=before,
            silent_since=silent_since.isoformat(),
        )
        signals.announce_alerts_due("run", run.pk)
    return run
