"""Issue 34, item 1: each turn's driver/child side comes from what the source types (per-actor usage's
`participant_role` / `worker_id`, the run's actors list, poll-summary's actors), joined to the usage
entries by actor id; an actor whose role no source states is "role unknown", shown and counted, never
booked as driver; runs synced by older code are re-attributed (`manage.py reattribute_turns`)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from managed_research.models.run_diagnostics import SmrRunActorUsage
from managed_research.models.run_observability import ActorCollectionSnapshot

from smrweb.sources import sync
from smrweb.sources.smr_usage import (
    read_entries,
    read_spend,
    reconcile,
    roles_from_poll_summary,
    roles_from_run,
)
from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, Project, Run, TurnKind
from tests.api.helpers import session_client
from tests.factories import admin_project

API_KEY, PID = "roles-key", "roles-proj"


def entry(n: int, actor: str, tokens_in: int, **extra) -> dict:
    """A usage entry that names only the actor id (the spec leaves entries free-form)."""
    return {
        "entry_id": f"e{n}",
        "meter_kind": "inference",
        "created_at": f"2026-11-20T10:00:{n:02d}Z",
        "actor_id": actor,
        "input_tokens": tokens_in,
        "output_tokens": tokens_in // 10,
        "cost_pico_usd": tokens_in * 10**6,
        "turn_index": n,
        **extra,
    }


# The reproduction of the issue: an orchestrator that read 450k tokens, a worker 1.35M, entries by id only.
ENTRIES = [entry(1, "a-orch", 450_000), entry(2, "a-work", 900_000), entry(3, "a-work", 450_000)]


def actor_usage(*rows: dict) -> SmrRunActorUsage:
    base = {"org_id": "o", "project_id": PID, "run_id": "r"}
    return SmrRunActorUsage.from_wire(
        {**base, "count": len(rows), "actors": [{**base, "event_count": 1, **row} for row in rows]}
    )


def kinds(reading) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for turn in reading.turns:
        out.setdefault(turn["actor"], set()).add(turn["kind"])
    return out


def test_per_actor_usage_types_the_role_of_entries_that_name_only_the_actor_id():
    usage = actor_usage(
        {"actor_id": "a-orch", "participant_role": "orchestrator", "token_usage": {"input_tokens": 450_000}},
        {"actor_id": "a-work", "participant_role": "worker", "token_usage": {"input_tokens": 1_350_000}},
    )
    spend = read_spend(None, None, usage)
    reading = read_entries(ENTRIES, spend.roles)
    assert kinds(reading) == {"a-orch": {"driver_inference"}, "a-work": {"child_work"}}
    assert spend.driver.tokens_in == 450_000 and spend.child.tokens_in == 1_350_000 and spend.unknown is None


def test_a_worker_id_alone_types_a_worker():
    usage = actor_usage(
        {"actor_id": "a-orch", "participant_role": "lead"}, {"actor_id": "a-work", "worker_id": "a-work"}
    )
    spend = read_spend(None, None, usage)
    assert spend.roles == {"a-orch": "lead", "a-work": "worker"}
    assert kinds(read_entries(ENTRIES, spend.roles))["a-work"] == {"child_work"}


def test_the_runs_actors_list_types_roles_when_per_actor_usage_does_not():
    row = {
        "run_id": "r",
        "actors": [{"actor_id": "a-orch", "participant_role": "orchestrator"}, {"actor_id": "x"}],
        "roles": {"workers": [{"actor_id": "a-work", "requested_profile_id": "p"}]},
    }
    roles = roles_from_run(row)
    assert roles == {"a-orch": "orchestrator", "a-work": "worker"}  # "x" states no role: not guessed
    usage = actor_usage({"actor_id": "a-orch"}, {"actor_id": "a-work"})  # no role in per-actor usage
    spend = read_spend(None, None, usage, roles)
    assert kinds(read_entries(ENTRIES, spend.roles)) == {
        "a-orch": {"driver_inference"},
        "a-work": {"child_work"},
    }
    assert spend.unknown is None


def test_poll_summary_actors_type_roles():
    items = ActorCollectionSnapshot.from_wire(
        {
            "total_count": 2,
            "items": [
                {"actor_id": "a-orch", "actor_type": "orchestrator", "state": "running"},
                {"actor_id": "a-work", "actor_type": "agent", "participant_role": "worker", "state": "done"},
            ],
        }
    ).items
    roles = roles_from_poll_summary(items)
    assert roles == {"a-orch": "orchestrator", "a-work": "worker"}
    assert kinds(read_entries(ENTRIES, roles)) == {"a-orch": {"driver_inference"}, "a-work": {"child_work"}}


def test_an_actor_no_source_types_is_role_unknown_never_driver_and_reconciliation_counts_it():
    usage = actor_usage(
        {"actor_id": "a-orch", "participant_role": "orchestrator", "token_usage": {"input_tokens": 450_000}},
        {"actor_id": "a-work", "token_usage": {"input_tokens": 1_350_000}},  # no role, no worker_id
    )
    spend = read_spend(None, None, usage)
    reading = read_entries(ENTRIES, spend.roles)
    assert kinds(reading) == {"a-orch": {"driver_inference"}, "a-work": {"role_unknown"}}
    assert spend.driver.tokens_in == 450_000 and spend.child.tokens_in == 0
    assert spend.unknown.tokens_in == 1_350_000
    assert spend.as_json()["roles_unknown"] == ["a-work"]
    sums = {
        "tokens_in": 1_800_000,
        "tokens_out": 180_000,
        "cost_usd": Decimal("1.8"),
        "driver_tokens_in": 450_000,
        "driver_tokens_out": 45_000,
        "driver_cost_usd": Decimal("0.45"),
        "child_tokens_in": 0,
        "child_tokens_out": 0,
        "child_cost_usd": Decimal(0),
        "unknown_tokens_in": 1_350_000,
        "unknown_tokens_out": 135_000,
        "unknown_cost_usd": Decimal("1.35"),
    }
    gap = reconcile(spend, turns=sums, turn_count=3, actors=2)
    assert gap["role_unknown_tokens_in"] == 1_350_000 and gap["role_unknown_usd"] == "1.350000"
    assert "driver_tokens_in" not in gap and "child_tokens_in" not in gap
    # With no typed source at all, an entry without role or parent is unknown too (not driver).
    assert kinds(read_entries(ENTRIES)) == {"a-orch": {"role_unknown"}, "a-work": {"role_unknown"}}


# --- against the simulator: shapes "c" (roles only in per-actor usage) and "d" (only in the run's actors
# list, the last worker's nowhere) --------------------------------------------------------------------


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
    assert [run.unknown_tokens_in, run.unknown_tokens_out] == split["unknown"]
    # Seed 003: the parts add up to the total, which is the source's own.
    assert run.tokens_in == run.driver_tokens_in + run.child_tokens_in + run.unknown_tokens_in
    assert run.cost_usd == run.driver_cost_usd + run.child_cost_usd + run.unknown_cost_usd
    assert (run.tokens_in, run.tokens_out) == (
        world_run["usage"]["input_tokens"],
        world_run["usage"]["output_tokens"],
    )
    roles = {a["actor_id"]: a["role"] for a in world_run["actors"]}
    for turn in AgentTurn.objects.filter(run=run):  # per turn: the side of its actor's stated role
        expected = (
            TurnKind.ROLE_UNKNOWN
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


def test_roles_from_the_runs_actors_list_and_an_actor_no_source_types_shows_as_role_unknown(sim, alice):
    backend = sim(("d",))
    project = bind(backend, alice)
    synced(project)
    world = world_runs(backend)
    run = Run.objects.filter(project=project, turn_count__gt=0).order_by("-turn_count").first()
    hidden = world[run.external_id]["actors"][-1]["actor_id"]  # shape "d": the last worker
    assert_invariant(run, world[run.external_id], {hidden})
    assert run.unknown_tokens_in > 0
    # Counted in reconciliation and flagged, with the actor named.
    assert run.unaccounted["role_unknown_tokens_in"] == run.unknown_tokens_in
    assert run.spend_unaccounted and run.source_spend["roles_unknown"] == [hidden]
    page = " ".join(session_client(alice).get(run.get_absolute_url()).content.decode().split())
    assert "role unknown" in page
    api = session_client(alice).get(f"/api/v1/projects/{project.slug}/runs/{run.external_id}").json()
    assert api["spend"]["role_unknown"]["tokens_in"] == run.unknown_tokens_in


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
    Run.objects.filter(pk=run.pk).update(
        source_updated_at=None, source_cursor={k: v for k, v in run.source_cursor.items() if k != "sides_fp"}
    )
    synced(project)
    run.refresh_from_db()
    assert_invariant(run, world_runs(backend)[run.external_id], {hidden})
