"""Issue 39, item 2 (its chart): a project's arena history — each recorded result's rank and arena score, over
time and against what the project's turns had cost by then — on the knowledge page."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from smrweb.dashboard.charts.arena import arena_figure
from smrweb.tracking.models import AgentTurn, ArenaResult, Submission
from smrweb.tracking.queries.arena import arena_history
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def at(hours: float) -> str:
    return (T0 + timedelta(hours=hours)).isoformat()


def record(sub: Submission, hours: float, by, *, rank=None, arena_score=None) -> ArenaResult:
    result = ArenaResult.objects.create(
        submission=sub, arena="dogfight", rank=rank, arena_score=arena_score, recorded_by=by
    )
    ArenaResult.objects.filter(pk=result.pk).update(created=T0 + timedelta(hours=hours))
    return ArenaResult.objects.get(pk=result.pk)


def spent_by(project, moment: datetime) -> Decimal:
    """From scratch: every turn of the project stamped at or before `moment`."""
    return (
        AgentTurn.objects.filter(run__project=project, ts__lte=moment).aggregate(s=Sum("cost_usd"))["s"] or 0
    )


def test_each_point_is_a_result_in_time_order_with_the_projects_spend_by_then(project, alice):
    rng = random.Random(39)
    for run in ("r1", "r2"):
        turns = [
            {
                "type": "agent.turn",
                "turn": i,
                "cost_usd": round(rng.uniform(0.01, 2), 4),
                "ts": at(rng.uniform(0, 60)),
            }
            for i in range(60)
        ]
        push(project, run, *turns, {"type": "score", "id": f"{run}-s", "score": rng.random(), "ts": at(1)})
    subs = list(Submission.objects.filter(project=project).order_by("pk"))
    # Results over three days, two on one day, one before any turn, recorded out of order.
    hours = [30.5, -1, 50, 30.25, 59.9]
    for i, h in enumerate(hours):
        record(subs[i % 2], h, alice, rank=10 - i, arena_score=0.5 + i / 10)
    points = arena_history(project)
    assert [p.result.created for p in points] == sorted(T0 + timedelta(hours=h) for h in hours)
    for p in points:
        assert p.spent_usd == spent_by(project, p.result.created), p.result.created
    assert points[0].spent_usd == 0


def test_the_figure_reverses_the_rank_axis_and_draws_against_time_or_spend(project, alice):
    push(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 3.0, "ts": at(0)})
    push(project, "r1", {"type": "score", "id": "s1", "score": 0.4, "ts": at(1)})
    sub = Submission.objects.get(project=project)
    record(sub, 2, alice, rank=7, arena_score=0.41)
    record(sub, 3, alice, arena_score=0.43)  # a result with a score and no rank: on the score line only
    points = arena_history(project)
    by_time = arena_figure(points)
    assert by_time["layout"]["yaxis"]["autorange"] == "reversed"
    rank, score = by_time["data"]
    assert (rank["y"], score["y"]) == ([7], [0.41, 0.43])
    assert score["yaxis"] == "y2" and by_time["layout"]["xaxis"]["type"] == "date"
    by_spend = arena_figure(points, against="spend")
    assert by_spend["data"][1]["x"] == [3.0, 3.0]


def test_the_knowledge_page_shows_the_card_and_its_axis_switch(client_alice, project, alice):
    page = client_alice.get("/projects/hill/knowledge/").content.decode()
    assert 'id="arena-history"' in page and "No arena results yet" in page
    push(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 1.5, "ts": at(0)})
    push(project, "r1", {"type": "score", "id": "s1", "score": 0.4, "ts": at(1)})
    record(Submission.objects.get(project=project), 2, alice, rank=3, arena_score=0.5)
    page = client_alice.get("/projects/hill/knowledge/?arena_x=spend").content.decode()
    card = page.split('id="arena-history"', 1)[1].split("</section>", 1)[0]
    assert '<b aria-current="true">spend</b>' in card and 'href="?arena_x=time#arena-history"' in card
    figure = json.loads(re.search(r'<script id="arena-history-data"[^>]*>(.*?)</script>', page, re.S)[1])
    assert figure["data"][0]["x"] == [1.5] and figure["data"][0]["y"] == [3]
    # A hand-typed axis falls back to time.
    assert (
        '<b aria-current="true">time</b>'
        in client_alice.get("/projects/hill/knowledge/?arena_x=x").content.decode()
    )


def test_queries_do_not_grow_with_results_on_one_day(project, alice, django_assert_max_num_queries):
    push(project, "r1", {"type": "score", "id": "s1", "score": 0.4, "ts": at(1)})
    sub = Submission.objects.get(project=project)
    for i in range(30):
        record(sub, 2 + i / 100, alice, rank=30 - i)
    with django_assert_max_num_queries(3):  # the results, the days' spend, the turns of their one day
        assert len(arena_history(project)) == 30
