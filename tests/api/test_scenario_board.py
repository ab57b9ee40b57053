"""Issue 39, item 3: a scenario's leaderboard across projects (API and page): each project's best verified
submission ranked in the scenario's direction, its arena rank where recorded, only the projects the caller
may read, in a fixed number of queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import services
from smrweb.tracking.models import ArenaResult, Role, Submission, SubmissionStatus
from smrweb.tracking.queries.scenario_board import scenario_board
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 20, tzinfo=UTC)


def score(value: float, minutes: int, sid: str) -> dict:
    return {"type": "score", "id": sid, "score": value, "ts": (T0 + timedelta(minutes=minutes)).isoformat()}


def verify(project, sid: str) -> Submission:
    sub = Submission.objects.get(project=project, event_id=sid)
    Submission.objects.filter(pk=sub.pk).update(status=SubmissionStatus.VERIFIED)
    services.figures.rebuild_project_figures(project.pk)
    return Submission.objects.get(pk=sub.pk)


@pytest.fixture
def arena(alice, bob, project):
    """Three projects on the generic scenario (maximize) besides `project` (hill, no scores): alice reads a,
    b and hill; c is bob's alone."""
    scenario = services.generic_scenario()
    made = {}
    for slug, owner in (("a", alice), ("b", alice), ("c", bob)):
        made[slug] = services.create_project(slug=slug, name=f"Team {slug.upper()}", scenario=scenario)
        services.add_member(made[slug], owner, role=Role.ADMIN)
    push(made["a"], "a1", score(0.7, 1, "a-s1"), score(0.9, 2, "a-s2"))
    push(made["b"], "b1", score(0.8, 1, "b-s1"))
    push(made["c"], "c1", score(0.95, 1, "c-s1"))
    verify(made["a"], "a-s1")  # a's 0.9 stays a candidate: its verified best is 0.7
    best_b = verify(made["b"], "b-s1")
    verify(made["c"], "c-s1")
    ArenaResult.objects.create(submission=best_b, arena="kaggle", rank=4, arena_score=0.79, recorded_by=alice)
    return scenario, made, bob


def test_best_verified_first_with_arena_ranks_and_only_readable_projects(client_alice, arena):
    scenario, made, _ = arena
    body = client_alice.get(f"/api/v1/scenarios/{scenario.key}/leaderboard").json()
    assert body["direction"] == "maximize"
    rows = [
        (r["place"], r["project"], r["best"] and r["best"]["score"], r["arena"] and r["arena"]["rank"])
        for r in body["projects"]
    ]
    # c (0.95) is bob's: not listed; hill has no verified score: last, no place.
    assert rows[:2] == [(1, "b", 0.8, 4), (2, "a", 0.7, None)]
    assert [(r["place"], r["project"], r["best"]) for r in body["projects"][2:]] == [(None, "hill", None)]
    assert body["projects"][1]["best"]["status"] == "verified"  # not the 0.9 candidate


def test_minimize_ranks_lower_first_ties_share_a_place_and_projects_without_scores_come_last(alice, arena):
    scenario, made, _ = arena
    scenario.direction = "minimize"
    scenario.save()
    empty = services.create_project(slug="d", name="Team D", scenario=scenario)
    push(made["c"], "c2", score(0.7, 5, "c-s2"))
    verify(made["c"], "c-s2")
    projects = [*made.values(), empty]
    for p in projects:
        p.refresh_from_db()
    board = scenario_board(scenario, projects)
    assert [(r.place, r.project.slug, r.best and r.best.score) for r in board] == [
        (1, "a", 0.7),  # a reached 0.7 first (minute 1), c later (minute 5): same place
        (1, "c", 0.7),
        (3, "b", 0.8),
        (None, "d", None),
    ]


def test_the_best_arena_rank_of_another_submission_is_shown_apart(alice, arena):
    scenario, made, _ = arena
    other = Submission.objects.get(project=made["a"], event_id="a-s2")
    ArenaResult.objects.create(submission=other, arena="kaggle", rank=2, recorded_by=alice)
    row = next(r for r in scenario_board(scenario, list(made.values())) if r.project.slug == "a")
    assert (row.arena, row.best_arena_rank) == (None, 2)


def test_queries_do_not_grow_with_projects_or_submissions(alice, arena):
    scenario, made, _ = arena

    def count() -> int:
        projects = list(scenario.projects.all())
        with CaptureQueriesContext(connection) as queries:
            scenario_board(scenario, projects)
        return len(queries)

    count()  # the figure rows written once
    before = count()
    for n in range(12):
        p = services.create_project(slug=f"x{n}", name=f"X{n}", scenario=scenario)
        push(p, "r", *(score(0.1 * k, k, f"x{n}-{k}") for k in range(5)))
        verify(p, f"x{n}-3")
    count()
    assert count() == before


def test_the_page_lists_the_board_and_a_token_reads_its_own_project_only(client_alice, alice, arena):
    scenario, made, _ = arena
    page = client_alice.get(f"/scenarios/{scenario.key}/").content.decode()
    board = page.split('id="scenario-board"', 1)[1]
    assert board.index('data-project="b"') < board.index('data-project="a"')
    assert 'data-project="c"' not in board
    assert f"/projects/b/submissions/{Submission.objects.get(event_id='b-s1').pk}/" in board
    _, secret = services.create_api_token(made["c"], name="ci", by=alice)
    client_alice.logout()
    answer = client_alice.get(
        f"/api/v1/scenarios/{scenario.key}/leaderboard", HTTP_AUTHORIZATION=f"Bearer {secret}"
    ).json()
    assert [r["project"] for r in answer["projects"]] == ["c"]


def test_an_unknown_or_unreadable_scenario_is_a_json_404(client_alice, arena):
    answer = client_alice.get("/api/v1/scenarios/no-such/leaderboard")
    assert answer.status_code == 404 and answer.json()["code"]
