"""Runs with turns, metric points, scores and artifacts, for the archive, deletion and retention tests."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import Run

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def ingest(project, run_id: str, events: list[dict]) -> services.IngestResult:
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(events)))


def metrics(key: str, values: list[float], *, prefix: str = "") -> list[dict]:
    return [
        {"type": "metric", "id": f"{prefix}{key}-{i}", "key": key, "value": v, "step": i, "ts": at(i / 100)}
        for i, v in enumerate(values)
    ]


def finished_run(project, run_id: str, *, points: int = 0, turns: int = 2, done_at: float = 60) -> Run:
    """A run that finished at minute `done_at` with `turns` turns, one score and `points` loss points."""
    events = [
        {"type": "agent.turn", "id": f"t{i}", "turn": i, "tokens_in": 10, "cost_usd": 0.01, "ts": at(i)}
        for i in range(turns)
    ]
    events += [{"type": "score", "id": "s1", "score": 0.5, "ts": at(5)}]
    events += metrics("loss", [((i * 7919) % 1000) / 1000 for i in range(points)])
    events += [{"type": "state", "id": "end", "state": "done", "ts": at(done_at)}]
    ingest(project, run_id, events)
    return Run.objects.get(project=project, external_id=run_id)


def upload(project, run_id: str, data: bytes, path: str = "model.bin"):
    return services.store_artifact(project, run_id, path=path, content=io.BytesIO(data))[0]
