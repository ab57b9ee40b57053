"""Rows for exports that no API list serializes: a run's raw metric points, the compare table. Each is a
lazy iterator over a chunked query, so a long export never holds its rows in memory."""

from __future__ import annotations

from collections.abc import Iterator

from smrweb.tracking.models import MetricPoint, Run

CHUNK_SIZE = 5000


def metric_point_rows(run: Run, *, key: str | None = None) -> Iterator[tuple]:
    """(key, step, value, ts) of every stored point of `run` (of `key` only, when given), in key, step
    and arrival order."""
    points = MetricPoint.objects.filter(run=run)
    if key is not None:
        points = points.filter(key=key)
    return points.order_by("key", "step", "id").values_list("key", "step", "value", "ts").iterator(CHUNK_SIZE)
