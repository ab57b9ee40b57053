"""Read-side queries: downsampled metric series, score histories and project summaries, each in a
fixed number of queries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import events as ev
from smrweb.tracking import queries, services
from smrweb.tracking.models import Project, Run, Submission
from smrweb.tracking.queries import summary_reference
from smrweb.tracking.services.figures import rebuild_project_figures
from tests.factories import admin_project

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def ingest(project, run_id: str, *events: dict) -> services.IngestResult:
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events))))


def metrics(project, run_id: str, key: str, values: list[float], first_step: int = 0) -> Run:
    """Store a series through the write path, in batches of the contract's maximum."""
    batch = [
        ev.MetricEvent(type="metric", id=f"{key}-{i}", key=key, value=v, step=first_step + i)
        for i, v in enumerate(values)
    ]
    for start in range(0, len(batch), ev.MAX_EVENTS):
        services.ingest_events(project, run_id, batch[start : start + ev.MAX_EVENTS])
    return Run.objects.get(project=project, external_id=run_id)


# --- metric series --------------------------------------------------------------------------------


def test_metric_series_downsamples_10000_points_to_at_most_the_asked_number(project):
    values = [float(i % 97) for i in range(10_000)]
    values[4321], values[777] = -1000.0, 1000.0  # spikes a chart must not lose
    run = metrics(project, "r1", "loss", values)
    total, series = queries.metric_series(run, "loss", 100)
    assert total == 10_000
    assert 50 <= len(series) <= 100
    assert min(p.min for p in series) == -1000.0
    assert max(p.max for p in series) == 1000.0
    assert sum(p.count for p in series) == 10_000
    steps = [p.step for p in series]
    assert steps == sorted(steps) and steps[0] == 0
    for p in series:
        assert p.min <= p.value <= p.max


def test_downsampled_buckets_hold_the_mean_of_their_points(project):
    # Read from the metric rollups (issue 36): a bucket is whole rollup buckets, its mean theirs.
    run = metrics(project, "r1", "acc", [float(i) for i in range(1000)])
    total, series = queries.metric_series(run, "acc", 10)
    assert total == 1000 and 5 <= len(series) <= 10
    ends = [p.step for p in series[1:]] + [1000]
    for p, end in zip(series, ends, strict=True):  # value i at step i: a bucket holds steps [step, end)
        assert (p.count, p.min, p.max) == (end - p.step, float(p.step), float(end - 1))
        assert p.value == pytest.approx((p.step + end - 1) / 2)


def test_a_series_with_at_most_the_asked_points_is_returned_raw(project):
    values = [0.5, -2.0, 3.25, 1.0]
    run = metrics(project, "r1", "loss", values, first_step=10)
    total, series = queries.metric_series(run, "loss", 4)
    assert total == 4
    assert [(p.step, p.value, p.min, p.max, p.count) for p in series] == [
        (10 + i, v, v, v, 1) for i, v in enumerate(values)
    ]


@pytest.mark.parametrize("points", [2, 10, 10_000])
def test_downsampling_survives_steps_near_the_contracts_maximum(project, points):
    # Nanosecond timestamps as steps, and the contract's largest step: no bigint overflow (PostgreSQL).
    steps = [1_700_000_000_000_000_000 + i * 1_000_000_000 for i in range(points + 5)] + [2**62]
    batch = [ev.MetricEvent(type="metric", key="t", value=float(i), step=s) for i, s in enumerate(steps)]
    services.ingest_events(project, "r1", batch)
    run = Run.objects.get(external_id="r1")
    total, series = queries.metric_series(run, "t", points)
    assert total == len(steps)
    assert len(series) <= points
    assert sum(p.count for p in series) == len(steps)
    assert (series[0].step, series[0].min) == (steps[0], 0.0)
    assert series[-1].max == float(len(steps) - 1)


def test_metric_series_of_a_missing_key_is_empty(project):
    run = metrics(project, "r1", "loss", [1.0])
    assert queries.metric_series(run, "nope", 100) == (0, [])


def test_metric_series_reads_only_its_run_and_key(project):
    metrics(project, "r1", "loss", [1.0, 2.0])
    metrics(project, "r1", "acc", [9.0])
    run2 = metrics(project, "r2", "loss", [5.0, 6.0, 7.0])
    total, series = queries.metric_series(run2, "loss", 100)
    assert total == 3 and [p.value for p in series] == [5.0, 6.0, 7.0]


def test_metric_series_is_a_fixed_number_of_queries(project, django_assert_max_num_queries):
    run = metrics(project, "r1", "loss", [float(i) for i in range(3000)])
    with django_assert_max_num_queries(2):
        total, series = queries.metric_series(run, "loss", 50)
    assert total == 3000 and len(series) == 50


def test_metric_keys_are_distinct_and_sorted(project):
    run = metrics(project, "r1", "loss", [1.0, 2.0])
    metrics(project, "r1", "accuracy", [1.0])
    metrics(project, "r2", "other", [1.0])
    assert queries.metric_keys(run) == ["accuracy", "loss"]


# --- score histories ------------------------------------------------------------------------------


def scores(project, run_id: str, values: list[float]) -> Run:
    """Scores at increasing timestamps, sent in reverse so arrival order is not time order."""
    events = [
        {"type": "score", "id": f"{run_id}-{i}", "score": v, "ts": (T0 + timedelta(minutes=i)).isoformat()}
        for i, v in enumerate(values)
    ]
    ingest(project, run_id, *reversed(events))
    return Run.objects.get(project=project, external_id=run_id)


def test_score_histories_return_the_last_n_scores_per_run_in_time_order_in_one_query(
    project, django_assert_num_queries
):
    a = scores(project, "a", [1, 2, 3, 4, 5, 6])
    b = scores(project, "b", [10, 20])
    c = Run.objects.create(project=project, external_id="c")
    with django_assert_num_queries(1):
        history = queries.score_histories([a.pk, b.pk, c.pk], per_run=4)
    # Each score with why it does not count in the run's figures ("" : it counts; candidates count there).
    assert history == {a.pk: [(s, "") for s in (3, 4, 5, 6)], b.pk: [(10, ""), (20, "")]}


def test_score_histories_of_no_runs_make_no_query(django_assert_num_queries, db):
    with django_assert_num_queries(0):
        assert queries.score_histories([]) == {}


def test_project_score_histories_span_all_runs_in_time_order(project, other_project):
    scores(project, "a", [1, 2])
    ingest(
        project, "b", {"type": "score", "id": "x", "score": 9, "ts": (T0 + timedelta(seconds=30)).isoformat()}
    )
    scores(other_project, "z", [100])
    history = summary_reference.project_score_histories([project, other_project], per_project=2)
    # By the project's rule (the headline best's): verified ones unless unverified ones are asked for.
    assert history == {
        project.pk: [(9, "candidate"), (2, "candidate")],
        other_project.pk: [(100, "candidate")],
    }
    history = summary_reference.project_score_histories([project], per_project=2, unverified=True)
    assert history == {project.pk: [(9, ""), (2, "")]}


# --- project summaries ----------------------------------------------------------------------------


def test_project_summaries_count_runs_by_condition(project):
    ingest(project, "live", {"type": "state", "id": "s", "state": "running"})
    ingest(project, "failed", {"type": "state", "id": "s", "state": "failed"})
    ingest(project, "done", {"type": "state", "id": "s", "state": "done"})
    ingest(
        project,
        "quiet",
        {"type": "state", "id": "s", "state": "executing"},
        {"type": "agent.turn", "id": "t", "turn": 1, "cost_usd": 1.25},
        {"type": "agent.turn", "id": "t2", "turn": 2, "cost_usd": 0.5, "ts": "2001-01-01T00:00:00Z"},
    )
    Run.objects.filter(external_id="quiet").update(last_progress_at=T0)
    services.flag_stalled_runs(now=T0 + timedelta(days=1))
    [summary] = queries.project_summaries([project])
    assert (summary.runs, summary.active, summary.stalled, summary.failed) == (4, 1, 1, 1)
    assert summary.spend_usd == Decimal("1.75")
    assert summary.spend_today_usd == Decimal("1.25")  # the 2001 turn is not today's


def test_project_summaries_pick_the_best_score_in_each_scenarios_direction(project, alice):
    low = services.create_scenario(key="lower", name="Lower is better", direction="minimize")
    fast = admin_project("fast", scenario=low, by=alice)
    for p in (project, fast):
        scores(p, "r1", [5.0, 2.0])
        scores(p, "r2", [7.0, 9.0])
    by_slug = {s.project.slug: s for s in queries.project_summaries([project, fast], unverified=True)}
    assert by_slug["hill"].best_score == 9.0
    assert by_slug["fast"].best_score == 2.0
    # Verified only (the default): nothing verified yet; the unverified best is named beside it.
    by_slug = {s.project.slug: s for s in queries.project_summaries([project, fast])}
    assert (by_slug["hill"].best_score, by_slug["hill"].unverified_best, by_slug["hill"].unverified) == (
        None,
        9.0,
        4,
    )
    Submission.objects.filter(project=fast, score__in=[5.0, 7.0]).update(status="verified")
    Submission.objects.filter(project=fast, score=2.0).update(status="invalid")
    rebuild_project_figures(fast.pk, runs=True)  # raw UPDATEs: what the services' writes do on their own
    fast_summary = queries.project_summaries([fast])[0]
    assert (fast_summary.best_score, fast_summary.unverified_best) == (
        5.0,
        None,
    )  # 9.0 is unverified but worse


def test_an_empty_project_summary_has_zeros(project):
    [summary] = queries.project_summaries([project])
    assert (summary.runs, summary.active, summary.best_score, summary.spend_usd, summary.history) == (
        0,
        0,
        None,
        Decimal(0),
        [],
    )


def _summaries_query_count(projects) -> int:
    projects = list(projects)  # the caller's own query, as the overview page evaluates it
    with CaptureQueriesContext(connection) as captured:
        summaries = queries.project_summaries(projects)
        [(s.best_score, s.runs, s.history) for s in summaries]
    return len(captured.captured_queries)


def test_project_summaries_take_the_same_number_of_queries_for_1_or_20_projects(alice):
    for i in range(20):
        p = admin_project(f"p{i:02}", by=alice)
        scores(p, "r", [float(i), float(i + 1)])
        ingest(p, "r", {"type": "agent.turn", "id": "t", "turn": 1, "cost_usd": 0.5})
    qs = Project.objects.select_related("scenario").order_by("slug")
    one, twenty = _summaries_query_count(qs[:1]), _summaries_query_count(qs)
    # The kept rows, the sparklines' scores' standing (by id), spend today (issue 36: was 5, over every
    # submission and today's turns).
    assert one == twenty == 3
    assert [s.best_score for s in queries.project_summaries(qs, unverified=True)] == [
        float(i + 1) for i in range(20)
    ]


# --- leaderboard ----------------------------------------------------------------------------------


def test_leaderboard_orders_by_the_scenario_direction(project, alice):
    low = services.create_scenario(key="lower", name="Lower is better", direction="minimize")
    fast = admin_project("fast", scenario=low, by=alice)
    for p in (project, fast):
        scores(p, "r1", [3.0, 1.0, 2.0])
    assert [s.score for s in queries.leaderboard(project)] == [3.0, 2.0, 1.0]
    assert [s.score for s in queries.leaderboard(fast)] == [1.0, 2.0, 3.0]


def _scores(project, run, *values):
    services.ingest_events(
        project,
        run,
        ev.parse_events(
            json.dumps(
                [
                    {"type": "score", "score": v, "ts": f"2026-01-01T00:00:{i:02d}Z"}
                    for i, v in enumerate(values)
                ]
            )
        ),
    )


def test_regressions_need_a_threshold_and_find_runs_worse_than_their_best(project):
    _scores(project, "up", 0.2, 0.9, 0.85)  # 0.05 below its best: within the threshold
    _scores(project, "down", 0.3, 0.8, 0.5)  # 0.3 below its best
    _scores(project, "single", 0.1)
    assert queries.regressions(project) == []  # no threshold: detection off
    project.regression_threshold = 0.1
    project.save()
    found = queries.regressions(project)
    assert [(r.run.external_id, r.best, r.target.score, round(r.gap, 6)) for r in found] == [
        ("down", 0.8, 0.8, 0.3)
    ]


def test_regressions_of_a_minimize_scenario_are_scores_going_up(project):
    project.scenario.direction = "minimize"
    project.scenario.save()
    project.regression_threshold = 0.5
    project.save()
    _scores(project, "loss", 3.0, 1.0, 2.0)  # best 1.0, latest 2.0: 1.0 worse
    _scores(project, "fine", 3.0, 1.0, 1.2)
    found = queries.regressions(project)
    assert [(r.run.external_id, r.best, r.target.score, r.gap) for r in found] == [("loss", 1.0, 1.0, 1.0)]
