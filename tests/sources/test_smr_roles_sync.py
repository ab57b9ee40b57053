"""Issue 34, item 1, against the simulator: shape "c" serves usage entries that name only the actor id with
the roles in per-actor usage; shape "d" types none there, the orchestrator's only in the run's actors
list, the workers' only in poll-summary, and the last worker's nowhere. Each turn must land on the side
of its actor's stated role (or "role unknown"), and the split must add up to the source's own per-actor
totals (seed 003: driver + child (+ unknown) = total, per turn and per run); runs booked by the older
poller are re-attributed."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, Project, Run, TurnKind
from tests.api.helpers import session_client
from tests.factories import admin_project

API_KEY, PID = "roles-key", "roles-proj"
# Spelt out (not TurnKind.ROLE_UNKNOWN) so these tests run, and fail, against the code before the fix.
ROLE_UNKNOWN = "role_unknown"
POLL_SUMMARY = "GET /smr/projects/{project_id}/runs/{run_id}/poll-summary"


@pytest.fixture
def sim(start_sim):
    def _start(shapes):
        return start_sim(
            api_key=API_KEY, project_ids=[PID], runs=3, auto_tick=False, seed=5, warmup=60, shapes=shapes
        )

    return _start


def bind(sim, alice, slug="roles") -> Project:
    return admin_project(
        slug, source="smr", smr_project_id=PID, smr_backend_base=sim.url, smr_api_key=API_KEY, by=alice
    )


def synced(project) -> None:
    report = sync.sync_project(project, owner="test")
    assert not report.error, report.error


def source_split(world_run: dict, unknown: set[str] = frozenset()) -> dict[str, list[int]]:
    """The source's own per-actor totals, by side: [tokens in, tokens out]."""
    out = {"driver": [0, 0], "child": [0, 0], "unknown": [0, 0]}
    for actor in world_run["actors"]:
        side = (
            "unknown"
            if actor["actor_id"] in unknown
            else ("driver" if actor["role"] == "orchestrator" else "child")
        )
        out[side][0] += actor["input_tokens"]
        out[side][1] += actor["output_tokens"]
    return out


def assert_invariant(run: Run, world_run: dict, unknown: set[str] = frozenset()) -> None:
    split = source_split(world_run, unknown)
    assert [run.driver_tokens_in, run.driver_tokens_out] == split["driver"]
    assert [run.child_tokens_in, run.child_tokens_out] == split["child"]
    # Seed 003: the parts add up to the total, which is the source's own; what neither side holds is
    # exactly the turns of the actor no source types.
    unknown_in = run.tokens_in - run.driver_tokens_in - run.child_tokens_in
    unknown_out = run.tokens_out - run.driver_tokens_out - run.child_tokens_out
    assert [unknown_in, unknown_out] == split["unknown"]
    if not unknown:
        assert run.cost_usd == run.driver_cost_usd + run.child_cost_usd
    assert (run.tokens_in, run.tokens_out) == (
        world_run["usage"]["input_tokens"],
        world_run["usage"]["output_tokens"],
    )
    roles = {a["actor_id"]: a["role"] for a in world_run["actors"]}
    for turn in AgentTurn.objects.filter(run=run):  # per turn: the side of its actor's stated role
        expected = (
            ROLE_UNKNOWN
            if turn.actor in unknown
            else (TurnKind.DRIVER_INFERENCE if roles[turn.actor] == "orchestrator" else TurnKind.CHILD_WORK)
        )
        assert turn.kind == expected, (turn.actor, turn.kind)


def world_runs(backend) -> dict[str, dict]:
    return {r["run_id"]: r for r in backend.world.state()["projects"][PID]["runs"]}


def test_entries_naming_only_the_actor_id_are_booked_under_the_role_per_actor_usage_states(sim, alice):
    backend = sim(("c",))
    project = bind(backend, alice)
    synced(project)
    world = world_runs(backend)
    checked = 0
    for run in Run.objects.filter(project=project, turn_count__gt=0):
        assert_invariant(run, world[run.external_id])
        assert run.child_tokens_in > 0 and run.driver_tokens_in > 0
        assert not any(k.startswith(("driver_", "child_", "role_unknown")) for k in run.unaccounted)
        checked += 1
    assert checked


def test_roles_from_the_runs_actors_list_and_poll_summary_and_an_actor_no_source_types_is_role_unknown(
    sim, alice
):
    backend = sim(("d",))
    project = bind(backend, alice)
    synced(project)
    asked = backend.stats.snapshot()["requests"].get(POLL_SUMMARY, 0)
    assert 0 < asked <= Run.objects.filter(project=project).count()
    world = world_runs(backend)
    run = Run.objects.filter(project=project, turn_count__gt=0).order_by("-turn_count").first()
    hidden = world[run.external_id]["actors"][-1]["actor_id"]  # shape "d": the last worker
    assert_invariant(run, world[run.external_id], {hidden})
    assert run.unknown_tokens_in > 0 and run.unknown_cost_usd > 0
    # Counted in reconciliation and flagged, with the actor named.
    assert run.unaccounted["role_unknown_tokens_in"] == run.unknown_tokens_in
    assert run.spend_unaccounted and run.source_spend["roles_unknown"] == [hidden]
    page = " ".join(session_client(alice).get(run.get_absolute_url()).content.decode().split())
    assert "role unknown" in page
    api = session_client(alice).get(f"/api/v1/projects/{project.slug}/runs/{run.external_id}").json()
    assert api["spend"]["role_unknown"]["tokens_in"] == run.unknown_tokens_in
    # Poll-summary is asked once for a set of untyped actors, not every cycle.
    backend.stats.reset()
    synced(project)
    assert backend.stats.snapshot()["requests"].get(POLL_SUMMARY, 0) == 0


def test_runs_synced_before_the_fix_are_reattributed(sim, alice):
    backend = sim(("c",))
    project = bind(backend, alice)
    synced(project)
    world = world_runs(backend)
    runs = list(Run.objects.filter(project=project, turn_count__gt=0))
    # As the older poller left them: every turn booked as driver inference.
    for run in runs:
        AgentTurn.objects.filter(run=run).update(kind=TurnKind.DRIVER_INFERENCE)
        run.save(update_fields=services.recompute_spend(run))
        services.rebuild_turn_rollups([run.pk])
        assert run.child_tokens_in == 0
    call_command("reattribute_turns", project=project.slug)
    for run in runs:
        run.refresh_from_db()
        assert_invariant(run, world[run.external_id])
        assert run.source_updated_at is None  # the next poll reads it whole again
    synced(project)  # and that re-sync keeps the split, and reconciles to nothing on driver/child
    for run in runs:
        run.refresh_from_db()
        assert_invariant(run, world_runs(backend)[run.external_id])
        assert not any(k.startswith(("driver_", "child_")) for k in run.unaccounted)


def test_a_resync_alone_reattributes_a_run_the_older_poller_booked_as_driver(sim, alice):
    backend = sim(("d",))
    project = bind(backend, alice)
    synced(project)
    run = Run.objects.filter(project=project, turn_count__gt=0).order_by("-turn_count").first()
    hidden = world_runs(backend)[run.external_id]["actors"][-1]["actor_id"]
    AgentTurn.objects.filter(run=run).update(kind=TurnKind.DRIVER_INFERENCE)
    run.save(update_fields=services.recompute_spend(run))
    # What older code left: no record of the sides it booked the turns under.
    Run.objects.filter(pk=run.pk).update(
        source_updated_at=None, source_spend={k: v for k, v in run.source_spend.items() if k != "sides_fp"}
    )
    synced(project)
    run.refresh_from_db()
    assert_invariant(run, world_runs(backend)[run.external_id], {hidden})
