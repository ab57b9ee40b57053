"""The timeline's bars made from the first one that changed (issue 36, item 5): after any sequence of new
turns (in the newest bar, a new bar, an old bar), moves of the timeline's end (forward, and back within a
bar) and new edges, the bars and the spend line are those made from scratch."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from smrweb.core import localcache
from smrweb.tracking.models import TurnKind
from smrweb.tracking.queries import timeline

START = datetime(2026, 11, 1, tzinfo=UTC)
KINDS = (TurnKind.DRIVER_INFERENCE, TurnKind.CHILD_WORK, TurnKind.ROLE_UNKNOWN)


def from_scratch(merged, start, width, end):
    localcache.forget(("timeline-binned", 7))
    try:
        return timeline._binned(7, merged, start, width, end)
    finally:
        localcache.forget(("timeline-binned", 7))


@pytest.mark.parametrize("seed", range(20))
def test_the_bars_made_from_where_they_changed_are_the_bars_made_whole(seed):
    rng = random.Random(seed)
    width = timedelta(seconds=rng.choice([1, 60, 3600]))
    merged: dict = {}
    bars = rng.randint(1, 40)
    for index in range(bars):
        for kind in rng.sample(KINDS, rng.randint(1, 3)):
            merged[(index, kind)] = [1, 10, 2, rng.randint(0, 10**6)]
    end = START + width * bars
    reused = 0
    for _ in range(60):
        move = rng.random()
        merged = {k: list(v) for k, v in merged.items()}  # as _bars does: a new dict, new lists
        if move < 0.4:  # a turn in the newest bar, or in a new one
            index = max(i for i, _ in merged) + rng.choice([0, 0, 1])
            key = (index, rng.choice(KINDS))
            n, tin, tout, micro = merged.get(key, [0, 0, 0, 0])
            merged[key] = [n + 1, tin + 5, tout + 1, micro + rng.randint(0, 5000)]
            end = max(end, START + width * (index + 1) - width * rng.random())
        elif move < 0.6:  # a late turn in an old bar
            key = rng.choice(sorted(merged))
            merged[key] = [merged[key][0] + 1, *merged[key][1:3], merged[key][3] + 7]
        elif move < 0.8:  # the clock: the end moves forward, or back within the newest bar
            end = end + width * rng.choice([-0.5, 0.3, 2])
        elif move < 0.9:  # new edges: everything is made again
            width = width * 2
            merged = {(i // 2, kind): v for (i, kind), v in merged.items()}
        was = localcache.get(("timeline-binned", 7))
        bins, cumulative = timeline._binned(7, merged, START, width, end)
        if was is not None and bins and was[3] and bins[0] is was[3][0]:
            reused += 1
        expected = from_scratch(merged, START, width, end)
        assert bins == expected[0]
        assert cumulative == expected[1]
        timeline._binned(7, merged, START, width, end)  # kept again for the next step
    assert reused > 10  # the incremental path was taken, not only the whole one


@pytest.mark.parametrize("seed", range(8))
def test_the_figure_drawn_from_the_reused_bars_is_the_figure_drawn_whole(seed, settings):
    """The timeline figure draws only the bars and spend points the timeline did not reuse
    (charts.run._reusing): after each step it equals the figure drawn with nothing kept."""
    from smrweb.dashboard.charts.run import run_timeline_figure

    rng = random.Random(seed)
    width = timedelta(minutes=rng.choice([1, 7]))
    merged = {(0, TurnKind.DRIVER_INFERENCE): [1, 10, 2, 500]}
    end = START + width
    zones = ["UTC", "Asia/Kolkata"]

    def figure(zone):
        bins, cumulative = timeline._binned(7, merged, START, width, end)
        tl = timeline.Timeline(START, end, width, bins, cumulative, [], [], 0, sum(b.count for b in bins))
        settings.TIME_ZONE = zone
        from django.utils import timezone

        with timezone.override(zone):
            return run_timeline_figure(
                tl, maximize=True, metric="score", budget_usd=None, burn=None, uirevision="run-7"
            )

    for step in range(40):
        merged = {k: list(v) for k, v in merged.items()}
        index = max(i for i, _ in merged) + rng.choice([0, 1, 1])
        key = (index if rng.random() < 0.8 else rng.randrange(index + 1), rng.choice(KINDS))
        n, tin, tout, micro = merged.get(key, [0, 0, 0, 0])
        merged[key] = [n + 1, tin + 3, tout + 1, micro + rng.randint(1, 9000)]
        end = max(end, START + width * (index + 1)) - width * rng.random() / 2
        zone = zones[step % 7 == 6]  # now and then the viewer's zone changes
        drawn = figure(zone)
        for name in ("bars", "spend"):
            localcache.forget(("timeline-drawn", name, "run-7"))
        assert drawn == figure(zone)
