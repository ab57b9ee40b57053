"""A short run of the load driver of `bench/load.py` (`make bench` runs it for a minute with timings):
ingest clients and signed-in pollers at once against a real HTTP server on the test database — no
request fails, every batch is stored exactly once (replays all duplicates), summaries equal rows.
No timings are asserted here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, MetricPoint, Run, RuntimeMessage, Submission

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from load import count_stored, run_load  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_ingest_and_polling_at_once_lose_and_duplicate_nothing(live_server, project, alice):
    # alice, the project's admin, signs in through the login form like a person
    alice.set_password("load-pass-123")
    alice.save(update_fields=["password"])
    token = services.create_api_token(project, name="load")[1]

    result = run_load(
        live_server.url,
        token,
        project.slug,
        "alice",
        "load-pass-123",
        seconds=8,
        ingest_clients=3,
        pollers=2,
        points=200,
        turns=8,
    )

    stats, totals = result["stats"], result["totals"]
    assert stats.error_count() == 0, dict(stats.errors)
    assert result["problems"] == []
    # Not vacuous: every client sent batches and replays, the pollers polled.
    # (Counts are kept low: a loaded CI machine may manage only a few requests per client.)
    assert len(totals) == 3 and all(s.scores >= 1 for s in totals.values()), totals
    assert sum(s.replays for s in totals.values()) >= 1, totals
    assert sum(len(v) for k, v in stats.latencies.items() if k.endswith("poll")) >= 3
    # The database agrees with what the API said, row by row.
    for run_id, sent in totals.items():
        run = Run.objects.get(project=project, external_id=run_id)
        assert MetricPoint.objects.filter(run=run).count() == sum(sent.points.values())
        assert AgentTurn.objects.filter(run=run).count() == run.turn_count == sent.turns
        assert Submission.objects.filter(run=run).count() == sent.scores
        assert RuntimeMessage.objects.filter(run=run).count() == sent.messages


def test_the_final_check_names_the_batch_whose_rows_are_missing(live_server, project):
    # The check a rare mismatch depends on: not only "1,350 turns stored, 1,360 sent" but which batch,
    # with what the server answered it.
    token = services.create_api_token(project, name="load")[1]
    result = run_load(
        live_server.url,
        token,
        project.slug,
        "",
        "",
        seconds=3,
        ingest_clients=2,
        pollers=0,
        points=30,
        turns=4,
    )
    assert result["problems"] == [] and result["stats"].error_count() == 0, result
    totals = result["totals"]
    lost = next(r for r in totals["load-1"].log if r.seq == 1 and not r.replay)
    assert lost.status == 200 and lost.turn_ids == tuple(f"c1-b1-t{t}" for t in range(4))
    run = Run.objects.get(project=project, external_id="load-1")
    assert AgentTurn.objects.filter(run=run, event_id__in=lost.turn_ids).delete()[0] == 4

    problems = count_stored(live_server.url, token, project.slug, totals)

    sent = totals["load-1"].turns
    assert problems[0] == f"load-1: {sent - 4} turn rows stored, {sent} sent"
    named = [p for p in problems if "MISSING" in p]
    assert len(named) == 1, problems
    assert named[0].startswith("load-1: MISSING rows of client 1 batch 1 (ids c1-b1-*, 36 events, sent at ")
    assert "answered 200 at " in named[0] and '{"run":"load-1","accepted":36,"duplicates":0}' in named[0]
    assert ": 4 of 4 turns and 0 of 30 points are not stored" in named[0]
