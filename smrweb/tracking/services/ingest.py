"""Event ingest: the one way tracked events (metrics, turns, scores, checkpoints, messages, states)
become rows, idempotent per event key and atomic per batch."""

from __future__ import annotations

import functools
import operator
import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from smrweb.core import turn_bodies
from smrweb.tracking import events as ev
from smrweb.tracking import pricing, signals
from smrweb.tracking.errors import (
    EventError,
    InvalidEvents,
)
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    Checkpoint,
    Experiment,
    MetricPoint,
    Project,
    Run,
    RuntimeMessage,
    Scenario,
    StateChange,
    Submission,
    TurnBody,
)
from smrweb.tracking.services import figures, metric_copy, metric_rollups
from smrweb.tracking.services.artifacts import SHA256_RE
from smrweb.tracking.services.control import confirm_reported
from smrweb.tracking.services.prices import current_prices
from smrweb.tracking.services.rollups import advance_turn_rollup
from smrweb.tracking.services.rows import write_instances
from smrweb.tracking.services.runs import (
    _check_run_id,
    _locked_run,
    recompute_scores,
    recompute_spend,
    recompute_state,
)


@dataclass(frozen=True)
class IngestResult:
    run: Run | None  # None for an empty batch
    accepted: int
    duplicates: int
    # Turns whose prompt or response was dropped, not stored: the project does not capture bodies.
    bodies_dropped: int = 0


_EVENT_MODELS = {
    "metric": MetricPoint,
    "score": Submission,
    "agent.turn": AgentTurn,
    "state": StateChange,
    "message": RuntimeMessage,
}


_METRIC_TYPES = (ev.MetricEvent, ev.PlainMetric)


def ingest_events(
    project: Project, run_external_id: str, events: Sequence[ev._Event], *, savepoint: bool = True
) -> IngestResult:
    """Apply a validated batch to one run: all of it or nothing, replays counted as duplicates.

    Each event is keyed by its client id (or a digest of its content); a key the run already has,
    or one repeated inside the batch, is a duplicate and writes nothing. Agent turns are also keyed
    by (actor, turn). Summaries (spend, scores, state) are recomputed from rows, so the result is
    the same whatever order, retries or duplicates the events arrive with.

    `savepoint=False`: the caller's transaction is the batch's (a run sync's one write: a failure
    undoes all of it), so no savepoint of its own.
    """
    if type(events) is not ev.PlainMetrics:  # (metrics only: no score to check)
        _check_scores_in_bounds(project.scenario, events)
    _check_run_id(run_external_id)
    if not events:
        return IngestResult(run=None, accepted=0, duplicates=0)  # nothing to do: not even create the run
    now = timezone.now()
    # Metrics are the high-volume type: they skip the key lookup of `_new_events` and go straight to
    # one INSERT … ON CONFLICT DO NOTHING, whose row count says how many were new.
    metrics: list[ev.MetricEvent | ev.PlainMetric] = []
    others: list[ev._Event] = []
    first_seen: datetime | None = None
    if type(events) is ev.PlainMetrics:  # the fast path's batch: sorted and scanned already
        metrics, first_seen = events, events.earliest
    else:
        for event in events:
            (metrics if type(event) in _METRIC_TYPES else others).append(event)
            ts = event.ts
            if ts is not None and (first_seen is None or ts < first_seen):
                first_seen = ts
    with transaction.atomic(savepoint=savepoint):
        run = _locked_run(project, run_external_id, first_seen or now)
        before = figures.share(run)  # what the run adds to the overview's figures, as the batch finds it
        fresh = _new_events(run, others) if others else []
        by_type: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for key, event in fresh:
            by_type[event.type].append((key, event))
        changed: list[str] = []
        accepted = len(fresh)
        if metrics:
            accepted += _insert_metrics(run, metrics, now)
        bodies_dropped = 0
        turns: list[AgentTurn] = []
        scores: list[Submission] = []
        if by_type["agent.turn"]:
            turns = _insert_turns(run, by_type["agent.turn"], now)
            bodies_dropped = _insert_bodies(project, turns, [e for _, e in by_type["agent.turn"]])
            changed += recompute_spend(run)
            advance_turn_rollup(run, turns)
        if by_type["checkpoint"]:
            _insert_checkpoints(run, by_type["checkpoint"], now)
        if by_type["message"]:
            _insert_messages(run, by_type["message"], now)
        if by_type["score"]:
            scores = _insert_scores(run, by_type["score"], now)
            changed += recompute_scores(run)
            if project.auto_verify:
                signals.announce_scores_to_verify(run.pk)
        if by_type["state"]:
            _insert_states(run, by_type["state"], now)
            changed += recompute_state(run)
        if by_type["message"] or by_type["state"]:  # a steering request the source reports back
            confirm_reported(
                run,
                messages=[(k, e.body) for k, e in by_type["message"]],
                state_changed=bool(by_type["state"]),
            )
        if accepted:
            run.last_progress_at = now
            run.stalled_since = None  # news arrived: not stalled any more
            changed += ["last_progress_at", "stalled_since"]
        if changed:
            run.save(update_fields=[*dict.fromkeys(changed), "updated"])
        if accepted:
            figures.after_ingest(project, run, before, turns, scores)
            signals.announce_alerts_due("run", run.pk)
    return IngestResult(
        run=run, accepted=accepted, duplicates=len(events) - accepted, bodies_dropped=bodies_dropped
    )


def unnamed_experiments(project: Project, external_id: str) -> int:
    """How many of the run's experiments are known by their id alone (a polled source names them later)."""
    return Experiment.objects.filter(
        run__project=project, run__external_id=external_id, title="", hypothesis=""
    ).count()


def experiments_named(project: Project, external_id: str) -> dict[str, bool]:
    """The run's experiments by id: whether each has a title or hypothesis yet."""
    return {
        eid: bool(title or hypothesis)
        for eid, title, hypothesis in Experiment.objects.filter(
            run__project=project, run__external_id=external_id
        ).values_list("external_id", "title", "hypothesis")
    }


def name_experiments(project: Project, external_id: str, names: dict[str, dict[str, str]]) -> int:
    """Fill in the title and hypothesis of the run's experiments still known by id only (a source's
    answer never overwrites what was already written). Returns how many were named."""
    named = 0
    with transaction.atomic():
        for experiment in Experiment.objects.select_for_update().filter(
            run__project=project,
            run__external_id=external_id,
            external_id__in=list(names),
            title="",
            hypothesis="",
        ):
            name = names[experiment.external_id]
            experiment.title, experiment.hypothesis = name.get("title", "")[:500], name.get("hypothesis", "")
            experiment.save(update_fields=["title", "hypothesis", "updated"])
            named += 1
    return named


def _check_scores_in_bounds(scenario: Scenario, events: Sequence[ev._Event]) -> None:
    errors = []
    for index, event in enumerate(events):
        if event.type != "score":
            continue
        if scenario.score_min is not None and event.score < scenario.score_min:
            errors.append(
                EventError(index, "score", f"Below the scenario's minimum of {scenario.score_min:g}.")
            )
        if scenario.score_max is not None and event.score > scenario.score_max:
            errors.append(
                EventError(index, "score", f"Above the scenario's maximum of {scenario.score_max:g}.")
            )
    if errors:
        raise InvalidEvents(errors)


def _new_events(run: Run, events: Sequence[ev._Event]) -> list[tuple[str, Any]]:
    """The events of the batch that the run has not seen, each with its idempotency key."""
    keyed = [(e.idempotency_key(), e) for e in events]
    keys_by_type: dict[str, set[str]] = defaultdict(set)
    for key, event in keyed:
        keys_by_type[event.type].add(key)
    known: set[tuple[str, str]] = set()
    for etype, keys in keys_by_type.items():
        if etype == "checkpoint":
            rows = Checkpoint.objects.filter(run=run, external_id__in=keys).values_list(
                "external_id", flat=True
            )
        else:
            rows = (
                _EVENT_MODELS[etype]
                .objects.filter(run=run, event_id__in=keys)
                .values_list("event_id", flat=True)
            )
        known.update((etype, k) for k in rows)
    turn_numbers = {e.turn for _, e in keyed if e.type == "agent.turn"}
    known_turns = (
        set(AgentTurn.objects.filter(run=run, turn__in=turn_numbers).values_list("actor", "turn"))
        if turn_numbers
        else set()
    )

    fresh = []
    for key, event in keyed:
        if (event.type, key) in known:
            continue
        known.add((event.type, key))
        if event.type == "agent.turn":
            if (event.actor, event.turn) in known_turns:
                continue
            known_turns.add((event.actor, event.turn))
        fresh.append((key, event))
    return fresh


# SQLite inserts a batch's points this many to a statement: one INSERT … VALUES (…), (…), … runs about
# 40 % faster than executemany of a one-row INSERT (whose per-row reset and bind is most of its time).
_METRIC_ROWS_PER_STATEMENT = 500


@functools.cache
def _metric_insert_sql(rows: int) -> str:
    q = connection.ops.quote_name
    table = q(MetricPoint._meta.db_table)
    columns = ", ".join(q(c) for c in ("run_id", "key", "step", "value", "ts", "event_id"))
    # The conflict target is the unique constraint metric_run_event_uniq: a key the run already has,
    # or one repeated inside the batch (the later row), inserts nothing and is not counted.
    return (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join(['(?, ?, ?, ?, ?, ?)'] * rows)} "
        f"ON CONFLICT ({q('run_id')}, {q('event_id')}) DO NOTHING"
    )


@functools.cache
def _metric_since_sql() -> tuple[str, str]:
    q = connection.ops.quote_name
    table = q(MetricPoint._meta.db_table)
    return (
        f"SELECT max({q('id')}) FROM {table}",
        f"SELECT {q('key')}, {q('step')}, {q('value')} FROM {table} "
        f"WHERE {q('id')} > ? AND {q('run_id')} = ? ORDER BY {q('id')}",
    )


def _insert_rows_sqlite(flat: list) -> int:
    """INSERT the rows (run_id, key, step, value, ts, event_id, one after the other in `flat`) in order,
    a statement per _METRIC_ROWS_PER_STATEMENT (within SQLite's limit on bound variables); how many
    were new. Those go into the run's metric rollups: the rows themselves when every one was new, else
    the rows past the table's highest id before the batch (SQLite has one writer; RETURNING made the
    inserts ~5x slower).

    Straight through the DB-API connection, in the caller's transaction: Django's cursor would rewrite
    each statement's 3,000 "%s" into "?" with a regular expression first (~0.5 ms a statement)."""
    connection.ensure_connection()
    db = connection.connection
    size = max(1, min(_METRIC_ROWS_PER_STATEMENT, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 6))
    top_sql, since_sql = _metric_since_sql()
    inserted, rows = 0, len(flat) // 6
    with connection.wrap_database_errors:
        top = db.execute(top_sql).fetchone()[0] or 0
        for start in range(0, rows, size):
            n = min(size, rows - start)
            count = db.execute(_metric_insert_sql(n), flat[6 * start : 6 * (start + n)]).rowcount
            if count < 0:  # every supported driver reports it; never guess the duplicate count
                raise RuntimeError("The database driver did not report how many metric points were inserted.")
            inserted += count
        if inserted == rows:
            metric_rollups.record(flat[0], flat[1::6], flat[2::6], flat[3::6])
        elif inserted:
            new = db.execute(since_sql, (top, flat[0])).fetchall()
            metric_rollups.record(flat[0], *metric_rollups.columns(new))
    return inserted


def _insert_metrics(run: Run, events: list[ev.MetricEvent | ev.PlainMetric], now: datetime) -> int:
    """Insert the batch's metric points; return how many were new (the rest are duplicates).

    SQLite: multi-row INSERT … ON CONFLICT DO NOTHING statements of 500 rows; PostgreSQL: COPY (see
    metric_copy). No model instances, no per-event lookup, the arrival time adapted once. Call
    inside the batch's transaction, with the run row locked; the database's row count is the number of
    new points, and the first of two rows with one key wins.
    """
    if connection.vendor == "postgresql":
        return metric_copy.insert(run, events, now)
    run_id = run.pk
    if type(events) is ev.PlainMetrics and settings.USE_TZ and connection.timezone_name == "UTC":
        # The fast path's batch: canonical UTC texts, sliced into the stored form (no datetime made).
        # In event id order (a stable sort: of two rows with one id the first still comes first): the
        # unique index (run, event_id) then takes its entries in order, ~15 % less insert time; laid
        # out flat, a column at a time (slice assignment: no tuple per row).
        events = sorted(events, key=_by_id)
        texts = [e.ts_text for e in events]
        if None in texts:
            now_text = now.astimezone(UTC).isoformat()
            texts = [now_text if t is None else t for t in texts]
        flat = [run_id] * (6 * len(events))
        flat[1::6] = [e.key for e in events]
        flat[2::6] = [e.step for e in events]
        flat[3::6] = [e.value for e in events]
        flat[4::6] = ev._naive_utc_texts(texts)
        flat[5::6] = [e.id for e in events]
        return _insert_rows_sqlite(flat)
    adapt = connection.ops.adapt_datetimefield_value
    # SQLite stores a UTC datetime as its naive str(); the validator already converted every ts to
    # UTC, so skip Django's per-value make_naive for those (anything else goes through Django).
    naive_utc = settings.USE_TZ and connection.timezone_name == "UTC"
    now_db = adapt(now)
    rows = []
    append = rows.append
    for e in events:
        ts = e.ts
        if ts is None:
            stamp = now_db
        elif naive_utc and ts.tzinfo is UTC:
            stamp = str(ts)[:-6]  # == str(ts.replace(tzinfo=None)): drop "+00:00"
        else:
            stamp = adapt(ts)
        append((run_id, e.key, e.step, e.value, stamp, e.id if e.id is not None else e.idempotency_key()))
    return _insert_rows_sqlite(list(chain.from_iterable(rows)))


_by_id = operator.attrgetter("id")


def _insert_turns(run: Run, items: list[tuple[str, ev.TurnEvent]], now: datetime) -> list[AgentTurn]:
    """The new turns, each priced (`pricing.price_turn`) when it has tokens and states no cost."""
    table = (
        current_prices()
        if any(e.cost_usd is None and e.usage.any for _, e in items)
        else pricing.PriceTable()  # (unused: every turn states its cost or has no tokens)
    )
    turns = []
    for k, e in items:
        ts = e.ts or now
        priced = pricing.price_turn(table, e.model, e.usage, e.cost_decimal, ts)
        turns.append(
            AgentTurn(
                run=run,
                event_id=k,
                turn=e.turn,
                actor=e.actor,
                parent_actor=e.parent_actor or "",
                kind=e.resolved_kind,
                model=e.model,
                tokens_in=e.tokens_in,
                tokens_out=e.tokens_out,
                tokens_cached_in=e.tokens_cached_in,
                tokens_cache_write=e.tokens_cache_write,
                tokens_reasoning=e.tokens_reasoning,
                cost_usd=priced.cost,
                cost_origin=priced.origin,
                tool_calls=list(e.tool_calls),
                duration_ms=e.duration_ms,
                failed=e.failed,
                error=e.error,
                http_status=e.http_status,
                error_message=e.error_message[: ev.ERROR_MESSAGE_MAX],
                ts=ts,
            )
        )
    write_instances(turns)
    return turns


def _captures_bodies(project: Project) -> bool:
    """The project's setting as committed now, not as the caller's copy says (a poller's project may be
    minutes old). On PostgreSQL the row is read FOR SHARE: turning capture off waits for the batches
    that read it on to commit, and every batch after sees it off, so once the switch is saved no body is
    written. SQLite's writers run one at a time (BEGIN IMMEDIATE) already."""
    table = connection.ops.quote_name(Project._meta.db_table)
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT capture_turn_bodies FROM {table} WHERE id = %s{lock}", [project.pk])
        row = cursor.fetchone()
    return bool(row and row[0])


def _insert_bodies(project: Project, turns: list[AgentTurn], events: list[ev.TurnEvent]) -> int:
    """Store the prompt and response of the new turns that carry them, capped; or, when the project does
    not capture bodies, store nothing and return how many turns' bodies were dropped."""
    pairs = [(turn, event) for turn, event in zip(turns, events, strict=True) if event.has_body]
    if not pairs:
        return 0
    if not _captures_bodies(project):
        return len(pairs)
    limit = settings.SMRWEB_TURN_BODY_MAX_BYTES
    bodies = []
    for turn, event in pairs:
        prompt, prompt_bytes, prompt_cut = turn_bodies.cap(event.prompt_text, limit)
        response, response_bytes, response_cut = turn_bodies.cap(event.response_text, limit)
        bodies.append(
            TurnBody(
                turn=turn,
                run_id=turn.run_id,
                prompt=prompt,
                response=response,
                prompt_bytes=prompt_bytes,
                response_bytes=response_bytes,
                prompt_cut=prompt_cut,
                response_cut=response_cut,
            )
        )
    TurnBody.objects.bulk_create(bodies, batch_size=100)
    return 0


def _insert_checkpoints(run: Run, items: list[tuple[str, ev.CheckpointEvent]], now: datetime) -> None:
    Checkpoint.objects.bulk_create(
        [
            Checkpoint(
                run=run,
                external_id=k,
                label=e.label,
                commit=e.commit,
                restorable=e.restorable,
                failure_reason=e.failure_reason,
                parent_external_id=e.parent,
                ts=e.ts or now,
            )
            for k, e in items
        ]
    )


def _insert_messages(run: Run, items: list[tuple[str, ev.MessageEvent]], now: datetime) -> None:
    # The run row is locked, so max(seq)+1 cannot race with another batch.
    start = (RuntimeMessage.objects.filter(run=run).aggregate(m=Max("seq"))["m"] or 0) + 1
    RuntimeMessage.objects.bulk_create(
        [
            RuntimeMessage(
                run=run,
                seq=start + i,
                event_id=k,
                topic=e.topic,
                target=e.target,
                mode=e.mode,
                body=e.body,
                ts=e.ts or now,
            )
            for i, (k, e) in enumerate(items)
        ]
    )


def _insert_states(run: Run, items: list[tuple[str, ev.StateEvent]], now: datetime) -> None:
    StateChange.objects.bulk_create(
        [
            StateChange(
                run=run,
                event_id=k,
                state=e.state,
                ts=e.ts or now,
                failure_family=e.failure.family if e.failure else "",
                failure_detail=e.failure.detail if e.failure else "",
                failure_source=e.failure.source if e.failure else "",
            )
            for k, e in items
        ]
    )


def _insert_scores(run: Run, items: list[tuple[str, ev.ScoreEvent]], now: datetime) -> list[Submission]:
    experiment_ids = {e.experiment for _, e in items if e.experiment}
    experiments = {
        x.external_id: x for x in Experiment.objects.filter(run=run, external_id__in=experiment_ids)
    }
    for external_id in experiment_ids - experiments.keys():
        experiments[external_id] = Experiment.objects.create(run=run, external_id=external_id)
    artifacts = _artifacts_by_ref(run, {_normal_ref(e.artifact) for _, e in items if e.artifact})
    return Submission.objects.bulk_create(
        [
            Submission(
                project_id=run.project_id,
                run=run,
                event_id=k,
                score=e.score,
                harness_id=e.harness_id,
                artifact_ref=_normal_ref(e.artifact),
                artifact=artifacts.get(_normal_ref(e.artifact)),
                experiment=experiments.get(e.experiment) if e.experiment else None,
                commit=e.commit,
                details=dict(e.details),
                ts=e.ts or now,
            )
            for k, e in items
        ]
    )


def _normal_ref(ref: str | None) -> str:
    """Digests compare in lower case (uploads accept either); paths as given."""
    return ref.lower() if ref and SHA256_RE.match(ref.lower()) else (ref or "")


def _artifacts_by_ref(run: Run, refs: set[str]) -> dict[str, Artifact]:
    """The run's artifacts named by digest or path (a path means its latest version), in two queries."""
    digests = {r for r in refs if SHA256_RE.match(r)}
    paths = refs - digests
    found: dict[str, Artifact] = {}
    if digests:
        for artifact in Artifact.objects.filter(run=run, blob__sha256__in=digests).select_related("blob"):
            found.setdefault(artifact.blob.sha256, artifact)
    if paths:
        for artifact in Artifact.objects.filter(run=run, path__in=paths).order_by("created", "id"):
            found[artifact.path] = artifact  # later versions overwrite earlier ones
    return found
