"""Downsampling for charts: a chart ships at most a few thousand points whatever the series length.

LTTB (Largest-Triangle-Three-Buckets, Steinarsson 2013) keeps the points that shape a line; it is
used for score series read whole. Metric series are bucketed in SQL instead (`queries.metric_series`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

P = TypeVar("P", bound=Sequence)


def lttb(points: Sequence[P], threshold: int) -> list[P]:
    """At most `threshold` of `points` ((x, y, ...) tuples sorted by x), first and last always kept.

    Extra tuple fields ride along untouched, so callers can carry ids for click-through.
    """
    n = len(points)
    if threshold >= n:
        return list(points)
    if threshold < 3:
        return [points[0], points[-1]][: max(threshold, 1)]
    sampled = [points[0]]
    every = (n - 2) / (threshold - 2)
    a = 0
    for i in range(threshold - 2):
        # The next bucket's average is the third corner of the triangle.
        nxt_start, nxt_end = int((i + 1) * every) + 1, min(int((i + 2) * every) + 1, n)
        span = nxt_end - nxt_start or 1
        avg_x = sum(float(p[0]) for p in points[nxt_start:nxt_end]) / span
        avg_y = sum(float(p[1]) for p in points[nxt_start:nxt_end]) / span
        start, end = int(i * every) + 1, int((i + 1) * every) + 1
        ax, ay = float(points[a][0]), float(points[a][1])
        best, best_area = start, -1.0
        for j in range(start, end):
            x, y = float(points[j][0]), float(points[j][1])
            area = abs((ax - avg_x) * (y - ay) - (ax - x) * (avg_y - ay))
            if area > best_area:
                best, best_area = j, area
        sampled.append(points[best])
        a = best
    sampled.append(points[-1])
    return sampled
