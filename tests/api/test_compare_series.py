"""Compare's series over the API (`GET …/compare/series`): any metric of any runs against any axis, the
spend axes reading what each run had spent by each point (driver and child work), each trace ending at the
run's own total, and runs of other projects only where the caller can read them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.models import Role, Run
from smrweb.tracking.queries import series
from tests.factories import admin_project, push

pytestmark = pytest.mark.django_db

URL = "/api/v1/projects/hill/compare/series"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def climb(project, run_id: str, *, turns: int, cost: float, seed: int, scores: int = 5, child_every: int = 3):
    """A run of `turns` turns one second apart (every `child_every`-th child work), a loss logged every
    other second and `scores` scores spread over it."""
    rng = random.Random(seed)
    events = [{"type": "state", "state": "running", "ts": at(0)}]
    for i in range(turns):
        child = i % child_every == 0
        events.append(
            {
                "id": f"t{i}",
                "type": "agent.turn",
                "turn": i,
                "ts": at(i + 1),
                "tokens_in": rng.randint(10, 99),
                "tokens_out": rng.randint(1, 9),
                "cost_usd": round(cost * rng.uniform(0.5, 1.5), 6),
                **({"actor": "worker", "parent_actor": "driver"} if child else {}),
            }
        )
    for step in range(0, turns, 2):
        events.append(
            {"type": "metric", "key": "loss", "step": step, "value": rng.random(), "ts": at(step + 1.5)}
        )
    for k in range(scores):
        events.append(
            {"id": f"s{k}", "type": "score", "score": rng.random(), "ts": at((k + 1) * turns / scores)}
        )
    push(project, run_id, *events)
    return Run.objects.get(project=project, external_id=run_id)


def get(client, **params):
    return client.get(URL, params)


@pytest.fixture
def runs(project):
    return [climb(project, f"r{i}", turns=40 + 15 * i, cost=0.01 * (i + 1), seed=i) for i in range(3)]


@pytest.mark.parametrize("x", ["usd", "tokens", "turns"])
@pytest.mark.parametrize("metric", ["score", "loss"])
def test_each_trace_ends_at_what_its_run_has_spent(api, runs, metric, x):
    answer = get(api, runs=",".join(r.external_id for r in runs), metric=metric, x=x)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [t["run"] for t in body["runs"]] == ["r0", "r1", "r2"] and body["missing"] == []
    for trace, run in zip(body["runs"], runs, strict=True):
        run.refresh_from_db()
        own = {"usd": float(run.cost_usd), "tokens": run.tokens_in + run.tokens_out, "turns": run.turn_count}[
            x
        ]
        assert trace["x_total"] == pytest.approx(own)
        assert trace["points"][-1][0] == pytest.approx(own)  # the last x is the run's own spend
        xs = [p[0] for p in trace["points"]]
        assert xs == sorted(xs) and xs[0] >= 0
        if metric == "score":
            assert trace["best"][-1][0] == pytest.approx(own)


def test_a_points_spend_is_what_the_run_had_spent_by_its_time(api, project):
    """A short run is read whole: each score's x is exactly the turns, tokens and USD of the turns at or
    before it (driver and child work), computed here from the pushed events."""
    run = climb(project, "short", turns=30, cost=0.02, seed=7, scores=6)
    turns = list(run.turns.order_by("ts").values_list("ts", "tokens_in", "tokens_out", "cost_usd", "kind"))
    assert {kind for *_, kind in turns} == {"driver_inference", "child_work"}
    scores = list(run.submissions.order_by("ts").values_list("ts", "score"))
    for x in ("turns", "tokens", "usd"):
        points = get(api, runs="short", metric="score", x=x).json()["runs"][0]["points"]
        for (ts, score), (px, py) in zip(scores, points, strict=False):
            before = [t for t in turns if t[0] <= ts]
            want = {
                "turns": len(before),
                "tokens": sum(t[1] + t[2] for t in before),
                "usd": float(sum(t[3] for t in before)),
            }[x]
            assert py == score and px == pytest.approx(want), (x, ts)


def test_time_wall_and_step_axes(api, runs):
    body = get(api, runs="r0", metric="loss", x="step").json()
    steps = [p[0] for p in body["runs"][0]["points"]]
    assert steps == [float(s) for s in range(0, 40, 2)] and body["runs"][0]["x_total"] is None
    since = [p[0] for p in get(api, runs="r0", metric="loss", x="time").json()["runs"][0]["points"]]
    assert since[0] == pytest.approx(1.5) and since[-1] == pytest.approx(39.5)
    wall = get(api, runs="r0", metric="score", x="wall").json()["runs"][0]["points"]
    assert wall[0][0] == at(8) and body["x_label"] == "Step"
    ordinal = get(api, runs="r0", metric="score", x="step").json()["runs"][0]["points"]
    assert [p[0] for p in ordinal] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_long_series_are_thinned_to_the_budget_and_keep_both_ends(api, project):
    run = climb(project, "long", turns=3000, cost=0.001, seed=3, scores=3)
    trace = get(api, runs="long", metric="loss", x="usd").json()["runs"][0]
    assert trace["points_read"] <= series.POINTS_PER_CHART * series.OVERSAMPLE
    assert len(trace["points"]) <= series.POINTS_PER_CHART
    run.refresh_from_db()
    assert trace["points"][-1][0] == pytest.approx(float(run.cost_usd))
    many = get(api, runs=[f"r{i}" for i in range(3)] + ["long"], metric="loss", x="turns").json()
    assert sum(len(t["points"]) for t in many["runs"]) <= series.POINTS_PER_CHART + len(many["runs"])


def test_bad_parameters_are_named(api, runs):
    bad = get(api, runs="r0", x="furlongs", metric="")
    assert bad.status_code == 400
    assert {e["field"] for e in bad.json()["errors"]} == {"x", "metric"}
    none = get(api, metric="score")
    assert none.status_code == 400 and [e["field"] for e in none.json()["errors"]] == ["runs"]
    many = get(api, runs=",".join(f"r{i}" for i in range(series.MAX_RUNS + 1)))
    assert many.status_code == 400 and f"at most {series.MAX_RUNS}" in str(many.json())


def test_a_metric_no_run_logged_and_unknown_runs_are_listed_not_dropped(api, runs):
    body = get(api, runs="r0,nope,r1", metric="accuracy", x="usd").json()
    assert [t["run"] for t in body["runs"]] == ["r0", "r1"]
    assert body["missing"] == ["nope"] and body["without_metric"] == ["r0", "r1"]
    assert all(t["points"] == [] for t in body["runs"])


def test_runs_of_other_projects_only_where_the_caller_can_read_them(client, alice, carol, project, runs):
    """`project:run` names a run of another project: read where the user is a member, and where not,
    reported as missing exactly like a project that does not exist (nothing says it exists)."""
    mine = admin_project("mine", by=alice)
    climb(mine, "m1", turns=20, cost=0.05, seed=11)
    theirs = admin_project("theirs", by=carol)
    climb(theirs, "t1", turns=20, cost=0.05, seed=12)
    client.force_login(alice)
    body = get(client, runs="r0,mine:m1,theirs:t1,ghost:t1,theirs:nope", metric="score", x="usd").json()
    assert [(t["run"], t["project"]) for t in body["runs"]] == [("r0", "hill"), ("mine:m1", "mine")]
    assert body["missing"] == ["theirs:t1", "ghost:t1", "theirs:nope"]
    services.add_member(theirs, alice, role=Role.VIEWER)
    body = get(client, runs="r0,theirs:t1", metric="score", x="usd").json()
    assert [t["project"] for t in body["runs"]] == ["hill", "theirs"] and body["missing"] == []


def test_a_project_token_reads_its_own_project_alone(api, alice, project, runs):
    other = admin_project("mine", by=alice)
    climb(other, "m1", turns=10, cost=0.05, seed=13)
    body = get(api, runs="r0,mine:m1", metric="score", x="usd").json()
    assert [t["run"] for t in body["runs"]] == ["r0"] and body["missing"] == ["mine:m1"]
    assert APIClient().get(URL, {"runs": "r0"}).status_code in (401, 403)


def test_the_queries_do_not_grow_with_runs_or_points(api, project):
    def count(n_runs: int, turns: int) -> int:
        names = [f"q{n_runs}-{i}" for i in range(n_runs)]
        for i, name in enumerate(names):
            climb(project, name, turns=turns, cost=0.01, seed=i, scores=3)
        with CaptureQueriesContext(connection) as q:
            assert get(api, runs=",".join(names), metric="loss", x="usd").status_code == 200
        return len(q)

    count(1, 5)  # the token's first use is remembered: not what is measured
    assert count(2, 20) == count(12, 200) <= 5


def test_kept_traces_are_reused_and_a_changed_run_is_read_alone(api, runs):
    names = ",".join(r.external_id for r in runs)

    def reads() -> list[str]:
        with CaptureQueriesContext(connection) as q:
            assert get(api, runs=names, metric="loss", x="usd").status_code == 200
        return [
            s["sql"]
            for s in q.captured_queries
            if "tracking_metricpoint" in s["sql"] or "agentturn" in s["sql"]
        ]

    first = get(api, runs=names, metric="loss", x="usd").json()
    assert reads() == []  # every trace kept
    push(
        runs[1].project,
        "r1",
        {"id": "late", "type": "agent.turn", "turn": 999, "ts": at(500), "cost_usd": 1.5},
    )
    again = reads()
    assert len(again) == 2 and all(f"IN ({runs[1].pk})" in sql for sql in again), again
    body = get(api, runs=names, metric="loss", x="usd").json()
    assert body["runs"][0] == first["runs"][0] and body["runs"][2] == first["runs"][2]
    runs[1].refresh_from_db()
    assert body["runs"][1]["x_total"] == pytest.approx(float(runs[1].cost_usd))
