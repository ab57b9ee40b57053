"""Issue 34: a project first seen with many finished runs whose results all belong to one experiment, more
than the spec's 500-result window on experiment results. Every run's best is either the world's, or the
run (and the project best, the leaderboard, the API) says its results are incomplete — never silently
wrong. The simulator serves the other ways the spec offers (`experiment-results/top`, the run's result
summary, submission artifacts naming their result), in both wire shapes of the free-form summary."""

from __future__ import annotations

import pytest
from django.urls import reverse

from smrweb.simulator.server import start_simulator
from smrweb.simulator.world import World
from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.models import MetricPoint, Run
from tests.factories import admin_project
from tests.simulator.conftest import START

pytestmark = pytest.mark.django_db

API_KEY, RUNS = "test-key", 40


@pytest.fixture(scope="module")
def wide_world():
    """40 runs, all finished before smrweb looks, ~900 results in one shared experiment."""
    world = World(
        seed=34, runs=RUNS, stagger_ticks=2, shared_experiment=True, shapes=("a", "b"), start_time=START
    )
    world.tick(240)
    world.freeze()
    sim = start_simulator(world=world, auto_tick=False, api_key=API_KEY)
    yield sim
    sim.stop()


def truth(sim) -> dict[str, tuple[float | None, int, str]]:
    """Run id -> (its best score, how many results it holds, its wire shape), from the world itself."""
    world = sim.world
    return {
        r.run_id: (None if not r.results else world._score(r, r.best), len(r.results), r.shape)
        for r in world.runs_by_project[sim.project_id]
    }


def synced_project(sim, alice):
    scenario = services.create_scenario(
        key="wide", name="wide", score_metric="val_loss", direction="minimize"
    )
    project = admin_project(
        "wide",
        scenario=scenario,
        source="smr",
        smr_project_id=sim.project_id,
        smr_backend_base=sim.url,
        smr_api_key=API_KEY,
        by=alice,
    )
    sim.stats.reset()
    for _ in range(3):  # the first sync, and two more cycles (finished, unchanged runs are skipped)
        report = sync.sync_project(project, owner="test")
        assert not report.error, report.error
    return project


def test_every_run_best_is_exact_or_marked_incomplete_past_the_500_result_window(wide_world, alice):
    world_truth = truth(wide_world)
    assert sum(n for _, n, _ in world_truth.values()) > 500  # more than the window holds
    assert all(
        r.terminal or r.wedged for r in wide_world.world.runs.values()
    )  # finished before smrweb looked
    project = synced_project(wide_world, alice)

    silently_wrong, exact, incomplete = [], 0, []
    for run in Run.objects.filter(project=project):
        best, held, shape = world_truth[run.external_id]
        stored = MetricPoint.objects.filter(run=run, event_id__startswith="result:").count()
        if run.results_complete:
            # Complete means every result of the run is stored: its best is then the world's.
            assert stored == held, run.external_id
            assert run.results_missing is None
        else:
            incomplete.append(run)
            # The summary of shape "a" says how many results the run holds: the gap is counted exactly;
            # shape "b" does not say, and the run says it does not know how many.
            assert run.results_missing == (held - stored if shape == "a" else None), run.external_id
        if run.best_score == best:
            exact += 1
        elif run.results_complete:
            silently_wrong.append((run.external_id, run.best_score, best))
    assert silently_wrong == []
    assert len(world_truth) == Run.objects.filter(project=project).count() == RUNS
    assert incomplete  # the world is built so that some results are out of every reach
    # The other ways (top results, the summary's best, submission artifacts) still give the exact best of
    # every run that scored, complete or not.
    assert exact == RUNS
    # One request per run for its result summary at most, and the shared experiment's 500 results read
    # once per cycle, not once per run.
    requests = wide_world.stats.snapshot()["requests"]
    assert requests.get("GET /smr/projects/{project_id}/runs/{run_id}/results", 0) <= RUNS
    assert requests.get("GET /smr/projects/{project_id}/experiments/{experiment_id}/results", 0) <= 3


def test_incomplete_results_are_said_on_the_pages_and_in_the_api(wide_world, alice, client):
    project = synced_project(wide_world, alice)
    counted = Run.objects.filter(project=project, results_complete=False, results_missing__gt=0).first()
    unknown = Run.objects.filter(project=project, results_complete=False, results_missing=None).first()
    assert counted is not None and unknown is not None
    client.force_login(alice)

    page = client.get(counted.get_absolute_url()).content.decode()
    assert f"incomplete: {counted.results_missing:,} results not readable from the source" in page
    page = client.get(unknown.get_absolute_url()).content.decode()
    assert "incomplete: results not readable from the source (it does not say how many)" in page
    board = client.get(project.get_absolute_url()).content.decode()
    assert "data-results-gap" in board and "Project best and leaderboard:" in board
    # Some runs say how many results they miss, others do not: the project says "at least" their sum.
    gap = sum(
        Run.objects.filter(project=project, results_missing__gt=0).values_list("results_missing", flat=True)
    )
    assert f"incomplete: at least {gap:,} results not readable from the source" in board
    # The runs table's best cell: "incomplete (N)", the sentence on hover.
    assert f'data-results-incomplete="{counted.results_missing}"' in board
    assert f"incomplete ({counted.results_missing:,})" in board
    overview = client.get(reverse("dashboard:project-list")).content.decode()
    assert "not readable from the source" in overview  # the project best on its card

    api = client.get(reverse("api:run-detail", args=[project.slug, counted.external_id])).json()
    assert (api["results_complete"], api["results_missing"]) == (False, counted.results_missing)
    api = client.get(reverse("api:run-detail", args=[project.slug, unknown.external_id])).json()
    assert (api["results_complete"], api["results_missing"]) == (False, None)
    complete = Run.objects.filter(project=project, results_complete=True).first()
    if complete is not None:
        api = client.get(reverse("api:run-detail", args=[project.slug, complete.external_id])).json()
        assert (api["results_complete"], api["results_missing"]) == (True, None)


def test_a_backend_without_the_other_ways_marks_runs_incomplete_rather_than_failing(wide_world, alice):
    """A backend that does not serve `experiment-results/top` or the run's result summary (404): the
    sync still succeeds, and what it could not reach is marked, not guessed."""
    wide_world.set_faults("experiment_results_top:denial=1,run_results:denial=1,denial_status=404")
    try:
        project = synced_project(wide_world, alice)
    finally:
        wide_world.set_faults("")
    world_truth = truth(wide_world)
    runs = list(Run.objects.filter(project=project))
    assert len(runs) == RUNS
    assert not [
        r.external_id for r in runs if r.results_complete and r.best_score != world_truth[r.external_id][0]
    ]
    assert any(not r.results_complete and r.results_missing is None for r in runs)
    assert wide_world.stats.snapshot()["faults"].get("denial")  # the ways were asked, and refused
