"""The one loop every way in shares: event dicts → the ingest contract (`events.parse_events`) →
the write path (`services.ingest_events`), in batches of at most `MAX_EVENTS`.

What happens to events the contract or the domain refuses is the caller's policy:
- "raise": the first refused batch raises `InvalidEvents` (pollers turn it into their own source error:
  a source that sends data outside the contract is a fault to show, not data to drop);
- "skip": refused events are set aside with their reasons and the rest is written; a batch refused
  without naming an event is split until the refused ones are found (file imports, OTLP spans).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from django.db import transaction

from smrweb.core import opsmetrics
from smrweb.tracking import services
from smrweb.tracking.errors import EventError, InvalidEvents
from smrweb.tracking.events import MAX_EVENTS, parse_events
from smrweb.tracking.models import Project

_encode = msgspec.json.Encoder(enc_hook=str).encode


@dataclass
class Applied:
    accepted: int = 0
    duplicates: int = 0
    # (the caller's tag of the event — a line number, a span id — and every problem found with it)
    refused: list[tuple[Any, list[EventError]]] = field(default_factory=list)
    written: list[Any] = field(default_factory=list)  # tags of the events written or found duplicate


def apply_events(
    project: Project,
    run_id: str,
    items: Sequence[tuple[Any, dict]],
    *,
    on_refused: Literal["raise", "skip"] = "raise",
    batch_size: int = MAX_EVENTS,
    via: str | None = None,
) -> Applied:
    """Apply `items` — (tag, event dict) pairs, in order — to the run; see the module for `on_refused`.
    Each batch is one transaction: a refused batch writes nothing of itself. What happened is counted for
    /metrics under `via` (the way in: "otlp", "jsonl", …; the project's source by default)."""
    applied = Applied()
    items = list(items)
    raised = 0
    try:
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            try:
                _apply_batch(project, run_id, batch, on_refused, applied)
            except InvalidEvents:
                raised = len(batch)
                raise
    finally:
        count_events(
            via or project.source,
            accepted=applied.accepted,
            duplicates=applied.duplicates,
            refused=len(applied.refused) + raised,
        )
    return applied


def count_events(via: str, *, accepted: int, duplicates: int, refused: int) -> None:
    """Add one ingest's outcome to the shared counters /metrics reports. Refused events count at once;
    written ones when the transaction commits (an outer transaction that rolls back wrote nothing)."""
    opsmetrics.count("ingest_events", refused, via=via, outcome="refused")

    def written() -> None:
        for outcome, n in (("accepted", accepted), ("duplicate", duplicates)):
            opsmetrics.count("ingest_events", n, via=via, outcome=outcome)

    transaction.on_commit(written)  # at once outside a transaction


def _apply_batch(project, run_id, batch, on_refused, applied: Applied) -> None:
    while batch:
        try:
            result = services.ingest_events(
                project, run_id, parse_events(_encode([event for _, event in batch]))
            )
        except InvalidEvents as exc:
            if on_refused == "raise":
                raise
            named: dict[int, list[EventError]] = {}
            for error in exc.errors:
                if error.index is not None and 0 <= error.index < len(batch):
                    named.setdefault(error.index, []).append(error)
            if named and len(named) == len({e.index for e in exc.errors}):
                applied.refused += [(batch[index][0], errors) for index, errors in sorted(named.items())]
                batch = [item for index, item in enumerate(batch) if index not in named]
                continue
            if len(batch) == 1:  # refused as a whole, no event named: this one is the bad one
                applied.refused.append((batch[0][0], list(exc.errors)))
                return
            middle = len(batch) // 2
            _apply_batch(project, run_id, batch[:middle], on_refused, applied)
            _apply_batch(project, run_id, batch[middle:], on_refused, applied)
            return
        applied.accepted += result.accepted
        applied.duplicates += result.duplicates
        applied.written += [tag for tag, _ in batch]
        return


def describe(errors: list[EventError]) -> str:
    """`field: message; …` of one refused event."""
    return "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in errors)
