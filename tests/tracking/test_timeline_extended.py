"""Issue 36, item 5: a live run's timeline after new turns is the kept one with the turns since added to its
bars (one cache read, no query of its own), while it keeps its shape; whatever arrives — turns of any kind,
in or out of time order, scores, turns that change the shape — it equals the timeline built from scratch."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from smrweb.tracking.models import Run
from smrweb.tracking.queries import timeline
from tests.factories import push

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 23, 9, 30, 7, tzinfo=UTC)
START = NOW - timedelta(hours=3)
KINDS = ({}, {"actor": "worker-1", "parent_actor": "driver"}, {"actor": "helper", "kind": "role_unknown"})


def a_turn(rng: random.Random, n: int, ts: datetime) -> dict:
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": "driver",
        **rng.choice(KINDS),
        "tokens_in": rng.randint(0, 5000),
        "tokens_out": rng.randint(0, 900),
        **({"cost_usd": round(rng.random() / 50, 6)} if rng.random() < 0.8 else {}),
        "ts": ts.isoformat(),
    }


def scratch(run_id: str, now: datetime, version: str) -> timeline.Timeline:
    run = Run.objects.select_related("project__scenario").get(external_id=run_id)
    timeline.forget_turn_aggregates(run)
    return timeline._built(run, now, version)


def shown(t: timeline.Timeline) -> tuple:
    return (t.start, t.end, t.bin_width, t.bins, t.cumulative, t.scores, t.frontier, t.turn_total, t.hwm)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_extended_timeline_equals_one_built_from_scratch_after_random_turns(project, seed, monkeypatch):
    rng = random.Random(seed)
    built = []
    real = timeline._built
    monkeypatch.setattr(timeline, "_built", lambda *a: built.append(1) or real(*a))
    horizon = NOW + timedelta(minutes=10)
    with time_machine.travel(START, tick=False):
        push(project, "r1", {"type": "state", "state": "running"}, {"type": "score", "score": 0.5})
    n, scores = 0, 1
    events = [a_turn(rng, i, START + timedelta(seconds=20 * i)) for i in range(400)]
    push(project, "r1", *events)
    n = len(events)
    extended = 0
    for step in range(25):
        what = rng.random()
        if what < 0.1:
            push(
                project,
                "r1",
                {"type": "score", "score": rng.random(), "ts": (NOW - timedelta(minutes=5)).isoformat()},
            )
            scores += 1
        else:
            batch = []
            for _ in range(rng.randint(1, 6)):
                at = NOW - timedelta(seconds=rng.randint(0, 3 * 3600))  # anywhere in the run, any order
                if rng.random() < 0.05:
                    at = START - timedelta(minutes=30)  # before the first bar: the shape moves
                batch.append(a_turn(rng, n, at))
                n += 1
            push(project, "r1", *batch)
        version = f"scores-{scores}"
        run = Run.objects.select_related("project__scenario").get(external_id="r1")
        before = len(built)
        got = timeline.run_timeline(run, now=horizon, scores_version=version)
        extended += len(built) == before
        assert shown(got) == shown(scratch("r1", horizon, version)), step
    assert extended >= 10  # most reads added the turns since instead of building the timeline again
