"""Issue 13, against the simulator with the world advanced by hand: what the poller cannot read is counted
and shown (run page, API, source health), never a silent $0; every run of a 1,000-run project is seen;
messages beyond one window and results beyond the project-wide window are not lost; the score metric
comes from the experiments (and an admin picks when they disagree); per-actor downgrades show; a run's
usage list is not downloaded again when nothing changed, and a long run's at a bounded rate."""

from __future__ import annotations

from decimal import Decimal

import pytest

from smrweb.sources.smr import connector_for
from smrweb.tracking.models import AgentTurn, Project, Run, RuntimeMessage, SourceHealth, Submission
from tests.api.helpers import session_client
from tests.factories import admin_project
from tests.sources.smr_project import bind_to, simulator_factory, synced

API_KEY, PID = "truth-key", "truth-proj"
USAGE = "GET /smr/runs/{run_id}/usage"


@pytest.fixture
def sim(start_sim):
    return simulator_factory(
        start_sim, api_key=API_KEY, project_ids=[PID], runs=4, auto_tick=False, seed=5, warmup=50
    )


def bind(sim, alice, slug="truth") -> Project:
    return bind_to(sim, alice, slug=slug, smr_project=PID, api_key=API_KEY)


def truth(sim) -> dict[str, dict]:
    return {r["run_id"]: r for r in sim.world.state()["projects"][PID]["runs"]}


def test_unreadable_entries_are_counted_and_the_gap_is_shown_never_a_silent_zero(sim, alice):
    backend = sim(shapes=("a", "b"), unreadable_every=4)
    project = bind(backend, alice)
    synced(project)
    world = truth(backend)
    flagged = 0
    for run in Run.objects.filter(project=project):
        w = world[run.external_id]
        missing = w["unreadable"]
        # The billed total is the source's own, to the cent, whatever the turns show.
        assert round(run.source_total_usd, 2) == Decimal(w["usage"]["total_cents"]) / 100
        assert run.entries_unreadable == missing["entries"]
        if not missing["entries"]:
            assert not run.spend_unaccounted
            continue
        flagged += 1
        assert run.spend_unaccounted
        gap = run.unaccounted
        assert gap["tokens_in"] == missing["input_tokens"] and gap["tokens_out"] == missing["output_tokens"]
        # Shape b bills in cents only: the gap is then known to the cent (half a cent of rounding).
        slack = Decimal("0.000001") * run.turn_count + (Decimal("0.005") if w["shape"] == "b" else 0)
        assert abs(Decimal(gap["usd"]) - Decimal(missing["pico_usd"]) / 10**12) <= slack
        assert run.reported_tokens == (w["usage"]["input_tokens"], w["usage"]["output_tokens"])
        # Σ turns = driver + child still holds for what the turns account for.
        assert run.cost_usd == run.driver_cost_usd + run.child_cost_usd
        assert run.tokens_in == w["usage"]["input_tokens"] - missing["input_tokens"]
    assert flagged
    health = SourceHealth.objects.get(project=project)
    assert not health.ok and "not understood" in health.warning and "opaque" in health.warning

    run = Run.objects.filter(project=project, entries_unreadable__gt=0).first()
    page = session_client(alice).get(run.get_absolute_url()).content.decode()
    page = " ".join(page.split())  # as a browser shows it: template lines break between words
    assert "spend unaccounted" in page and "that no turn accounts for" in page and "could not be read" in page
    overview = session_client(alice).get(project.get_absolute_url()).content.decode()
    assert "Not everything could be read" in overview and "not understood" in overview
    api = session_client(alice).get(f"/api/v1/projects/{project.slug}/runs/{run.external_id}").json()
    assert api["spend"]["unaccounted"]["tokens_in"] == str(run.unaccounted["tokens_in"])
    assert api["spend"]["billed_usd"] == str(run.source_total_usd)
    assert api["spend"]["source"]["entries_unreadable"] == run.entries_unreadable


def test_a_1000_run_project_is_seen_whole_then_kept_current_without_walking_every_page(
    start_sim, alice, settings
):
    from smrweb.simulator.world import World

    # The next full walk is due SMRWEB_SMR_FULL_LIST_EVERY after the first: on a busy machine syncing
    # 1,000 runs can take longer than the default 300 s, so give this test an hour.
    settings.SMRWEB_SMR_FULL_LIST_EVERY = 3600

    world = World(seed=9, project_ids=[PID], runs=1000, stagger_ticks=1)
    for planned in world.runs.values():
        planned.run_ticks = 1  # short runs: 1,000 of them, not 100,000 turns
    world.tick(1000)  # a run starts every tick: all but the newest few have finished
    backend = start_sim(api_key=API_KEY, world=world, auto_tick=False)
    project = bind(backend, alice, slug="big")
    synced(project)
    states = truth(backend)
    assert Run.objects.filter(project=project).count() == len(states) >= 1000
    requests = backend.stats.snapshot()["requests"]
    assert (
        requests["GET /smr/projects/{project_id}/runs"] == 6
    )  # 200 per page: five full, one empty (the end)
    for run in Run.objects.filter(project=project).only("external_id", "state", "turn_count"):
        w = states[run.external_id]
        assert (
            run.state == w["state"]
            and run.turn_count == w["usage"]["orchestrator_turns"] + w["usage"]["worker_turns"]
        )
    assert not SourceHealth.objects.get(project=project).warning
    # Next cycles: the first page (new runs) and the live runs, not every page; nothing finished is read
    # again.
    world.tick(5)
    backend.stats.reset()
    synced(project)
    requests = backend.stats.snapshot()["requests"]
    assert requests["GET /smr/projects/{project_id}/runs"] == 1
    live = [w for w in truth(backend).values() if w["state"] in ("running", "queued")]
    assert requests.get(USAGE, 0) <= len(live) + 5  # the live and the just-finished, not 1,000
    states = truth(backend)
    assert Run.objects.filter(project=project).count() == len(states)
    for run in Run.objects.filter(project=project).only("external_id", "state"):
        assert run.state == states[run.external_id]["state"]


def test_runtime_messages_beyond_one_window_are_all_read(sim, alice, settings):
    settings.SMRWEB_SMR_MESSAGE_WINDOW = 5  # a chatty (shape b) run posts a message every tick
    backend = sim(shapes=("b",), runs=2, warmup=40)
    project = bind(backend, alice)
    synced(project)
    backend.world.tick(20)
    synced(project)
    for run_id, w in truth(backend).items():
        assert RuntimeMessage.objects.filter(run__external_id=run_id).count() == w["messages"]["count"] > 5
        assert not Run.objects.get(external_id=run_id).source_cursor.get("messages_missed")


def test_messages_no_window_can_reach_are_counted_not_hidden(sim, alice, settings):
    settings.SMRWEB_SMR_MESSAGE_WINDOW, settings.SMRWEB_SMR_MESSAGE_WINDOW_MAX = 3, 6
    backend = sim(shapes=("b",), runs=1, warmup=40)
    project = bind(backend, alice)
    synced(project)
    run = Run.objects.get(project=project)
    w = truth(backend)[run.external_id]
    missed = run.source_cursor["messages_missed"]
    assert missed == w["messages"]["count"] - RuntimeMessage.objects.filter(run=run).count() > 0
    assert "could not be read" in SourceHealth.objects.get(project=project).warning
    assert f"{missed} runtime message" in session_client(alice).get(run.get_absolute_url()).content.decode()


def test_results_outside_the_project_wide_window_are_read_per_experiment(sim, alice, settings):
    settings.SMRWEB_SMR_RESULTS_WINDOW = 3
    backend = sim(runs=3, warmup=60)
    project = bind(backend, alice)
    backend.stats.reset()
    synced(project)
    for run_id, w in truth(backend).items():
        scores = sorted(Submission.objects.filter(run__external_id=run_id).values_list("score", flat=True))
        assert scores == sorted(s["value"] for s in w["scores"])
    assert backend.stats.snapshot()["requests"][
        "GET /smr/projects/{project_id}/experiments/{experiment_id}/results"
    ]


def test_experiments_that_declare_two_metrics_wait_for_an_admin_to_pick_one(sim, alice):
    backend = sim(runs=4, metrics=(("val_loss", "lower_is_better"), ("accuracy", "higher_is_better")))
    project = bind(backend, alice)
    synced(project)
    project.refresh_from_db()
    assert project.source_settings["declared_metrics"] == {
        "val_loss": "lower_is_better",
        "accuracy": "higher_is_better",
    }
    assert (
        project.scenario.score_metric == "score" and not Submission.objects.filter(project=project).exists()
    )
    page = session_client(alice).get(project.get_absolute_url()).content.decode()
    assert "Which metric is the score?" in page and "accuracy" in page

    client = session_client(alice)
    refused = client.post(
        f"/projects/{project.slug}/settings/", {"action": "score_metric", "score_metric": "nope"}
    )
    assert refused.status_code == 400 and "Choose one of the metrics" in refused.content.decode()
    assert (
        client.post(
            f"/projects/{project.slug}/settings/", {"action": "score_metric", "score_metric": "accuracy"}
        ).status_code
        == 302
    )
    synced(project)
    project.refresh_from_db()
    assert (project.scenario.score_metric, project.scenario.direction) == ("accuracy", "maximize")
    world = truth(backend)
    for run in Run.objects.filter(project=project):
        w = world[run.external_id]
        expected = len(w["scores"]) if w["metric"] == "accuracy" else 0
        assert Submission.objects.filter(run=run).count() == expected
        if expected:
            assert run.best_score == w["best_score"]
    assert (
        "Which metric is the score?"
        not in session_client(alice).get(project.get_absolute_url()).content.decode()
    )


def test_a_worker_that_got_another_model_than_it_asked_for_shows(sim, alice):
    backend = sim(runs=6, worker_downgrades=True)
    project = bind(backend, alice)
    synced(project)
    world = truth(backend)
    downgraded = [w for w in world.values() if w["worker_downgraded"]]
    assert downgraded
    for w in downgraded:
        run = Run.objects.get(project=project, external_id=w["run_id"])
        assert run.is_downgraded and run.downgraded_actors
        page = session_client(alice).get(run.get_absolute_url()).content.decode()
        assert "Model profile downgraded" in page and run.downgraded_actors[0]["actual"] in page
    for w in world.values():
        if not w["worker_downgraded"] and not w["downgraded"]:
            assert not Run.objects.get(project=project, external_id=w["run_id"]).is_downgraded


def test_an_unchanged_run_is_not_downloaded_again_and_a_long_ones_timeline_is_read_at_a_bounded_rate(
    sim, alice, settings
):
    backend = sim(runs=1, warmup=30)
    project = bind(backend, alice)
    synced(project)
    backend.stats.reset()
    synced(project)  # nothing moved
    assert backend.stats.snapshot()["requests"].get(USAGE, 0) == 0
    # A long run: its usage list is re-read at most every (entries / per-cycle) cycles; meanwhile the
    # totals stay the source's and the run page says the timeline is catching up.
    settings.SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE = 5  # a run of ~100 entries: read every ~20 cycles
    backend.world.tick(3)
    backend.stats.reset()
    synced(project)
    run = Run.objects.get(project=project)
    w = truth(backend)[run.external_id]
    assert backend.stats.snapshot()["requests"].get(USAGE, 0) == 0
    assert round(run.source_total_usd, 2) == Decimal(w["usage"]["total_cents"]) / 100
    assert run.unaccounted and not run.source_spend["timeline_current"] and not run.spend_unaccounted
    assert "catching up" in session_client(alice).get(run.get_absolute_url()).content.decode()
    assert "not add up" not in SourceHealth.objects.get(project=project).warning  # lagging is not an error
    settings.SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE = 300
    synced(project)
    run.refresh_from_db()
    assert (
        not run.spend_unaccounted
        and AgentTurn.objects.filter(run=run).count()
        == w["usage"]["orchestrator_turns"] + w["usage"]["worker_turns"]
    )


def test_test_connection_and_a_new_key_are_checked_against_the_backend(sim, alice):
    backend = sim(runs=1)
    project = bind(backend, alice)
    client = session_client(alice)
    url = f"/projects/{project.slug}/settings/"
    ok = client.post(url, {"action": "test"}, follow=True)
    assert "Connected" in ok.content.decode()
    wrong = client.post(url, {"action": "save_key", "smr_api_key": "not-the-key"})
    assert wrong.status_code == 400 and "refused this API key" in wrong.content.decode()
    assert connector_for(Project.objects.get(pk=project.pk)).client  # the old key is kept
    saved = client.post(url, {"action": "save_key", "smr_api_key": API_KEY}, follow=True)
    assert "accepted the new key" in saved.content.decode()
    gone = admin_project(
        "elsewhere",
        source="smr",
        smr_project_id="no-such-project",
        smr_backend_base=backend.url,
        smr_api_key=API_KEY,
        by=alice,
    )
    refused = client.post(f"/projects/{gone.slug}/settings/", {"action": "test"})
    assert refused.status_code == 400 and "does not know project" in refused.content.decode()


def test_the_migration_lets_smr_projects_on_the_generic_scenario_adopt_their_experiments_metric(db):
    import importlib

    from django.apps import apps

    from smrweb.tracking import services

    migration = importlib.import_module("smrweb.tracking.migrations.0009_source_spend_and_reconciliation")
    chosen = services.create_scenario(
        key="chosen", name="chosen", score_metric="val_loss", direction="minimize"
    )
    made = {
        "generic-smr": Project.objects.create(
            slug="generic-smr",
            name="g",
            scenario=services.generic_scenario(),
            source="smr",
            source_settings={"smr_project_id": "a"},
        ),
        "chosen-smr": Project.objects.create(
            slug="chosen-smr",
            name="c",
            scenario=chosen,
            source="smr",
            source_settings={"smr_project_id": "b"},
        ),
        "push": Project.objects.create(slug="push", name="p", scenario=services.generic_scenario()),
    }
    migration.adopt_experiment_metrics(apps, None)
    listening = {slug: Project.objects.get(slug=slug).source_settings.get("score_metric") for slug in made}
    assert listening == {"generic-smr": "auto", "chosen-smr": None, "push": None}


def test_experiments_are_named_from_the_source_once_not_every_cycle(sim, alice):
    """Results name experiments by id; the page shows their titles (walkthrough P3: bare UUIDs)."""
    from smrweb.tracking.models import Experiment

    backend = sim(runs=2, warmup=60)
    project = bind(backend, alice)
    backend.stats.reset()
    synced(project)
    titles = {e["experiment_id"]: e["title"] for run in backend.world.runs.values() for e in run.experiments}
    named = list(Experiment.objects.filter(run__project=project))
    assert named and all(e.title == titles[e.external_id] and e.title.startswith("Attempt ") for e in named)
    asked = backend.stats.snapshot()["requests"].get("GET /smr/projects/{project_id}/experiments", 0)
    assert 1 <= asked <= 2  # at most once per run
    backend.stats.reset()
    synced(project)  # nothing new: nobody is asked again
    assert backend.stats.snapshot()["requests"].get("GET /smr/projects/{project_id}/experiments", 0) == 0
    run = Run.objects.filter(project=project, experiments__isnull=False).first()
    page = session_client(alice).get(run.get_absolute_url()).content.decode()
    assert named[0].title in page or any(e.title in page for e in named)


def test_smr_actors_are_shown_by_role_not_as_bare_ids(sim, alice):
    backend = sim(runs=2, warmup=60)
    project = bind(backend, alice)
    synced(project)
    run = Run.objects.filter(project=project, turns__isnull=False).distinct().first()
    roles = run.actor_roles
    assert roles  # the source named each actor's role
    worker_id = next(a for a, role in roles.items() if role != "orchestrator")
    page = session_client(alice).get(run.get_absolute_url()).content.decode()
    assert f"{roles[worker_id]} {worker_id[:8]}" in page
