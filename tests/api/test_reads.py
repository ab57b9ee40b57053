"""Read endpoints (and project/scenario creation) under /api/v1/, for tokens and session users."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import Membership, Project, Role, Run, Scenario
from tests.api.helpers import assert_json_error, session_client
from tests.factories import UserFactory, admin_project, grant

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def ingest(project, run_id: str, *events: dict) -> Run:
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events)))).run


# --- projects -----------------------------------------------------------------------------------------


def test_a_token_lists_only_its_own_project(api, project, other_project):
    response = api.get("/api/v1/projects/")
    assert response.status_code == 200
    assert [p["slug"] for p in response.json()] == ["hill"]


def test_a_session_user_lists_the_projects_they_are_a_member_of(project, other_project, alice, bob, carol):
    assert [p["slug"] for p in session_client(alice).get("/api/v1/projects/").json()] == ["hill"]
    assert [p["slug"] for p in session_client(bob).get("/api/v1/projects/").json()] == ["hill"]
    assert [p["slug"] for p in session_client(carol).get("/api/v1/projects/").json()] == ["other"]


def test_a_superuser_lists_every_project(project, other_project):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    assert [p["slug"] for p in session_client(root).get("/api/v1/projects/").json()] == ["hill", "other"]


def test_a_project_is_described_with_its_scenario_and_source(api, project):
    data = api.get("/api/v1/projects/hill/").json()
    assert (data["slug"], data["name"], data["scenario"], data["source"]) == (
        "hill",
        "Hill climb",
        "generic",
        "push",
    )
    assert data["stall_after_seconds"] == int(project.stall_after.total_seconds())


def test_an_outsider_gets_404_json_for_a_project(project, carol):
    body = assert_json_error(session_client(carol).get("/api/v1/projects/hill/"), 404)
    assert body["code"] == "not_found"


def test_a_user_given_the_permission_creates_a_project_and_becomes_its_admin(carol):
    grant(carol, "add_project")
    response = session_client(carol).post(
        "/api/v1/projects/", {"slug": "new-one", "name": "New"}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["slug"] == "new-one" and response.json()["scenario"] == "generic"
    project = Project.objects.get(slug="new-one")
    assert Membership.objects.get(project=project, user=carol).role == Role.ADMIN


def test_staff_create_a_project_with_any_scenario_and_an_smr_source_on_the_operators_key(
    carol, start_sim, settings
):
    sim = start_sim(api_key="operator-key", project_ids=["p-42"], runs=1, auto_tick=False)
    settings.SMRWEB_SMR_BACKEND_BASE, settings.SMRWEB_SMR_API_KEY = (
        sim.url,
        "operator-key",
    )  # checked against it before saving
    carol.is_staff = True
    carol.save()
    services.create_scenario(key="tsp", name="TSP", direction="minimize")
    response = session_client(carol).post(
        "/api/v1/projects/",
        {"slug": "tour", "scenario": "tsp", "source": "smr", "smr_project_id": "p-42"},
        format="json",
    )
    assert response.status_code == 201
    assert (response.json()["scenario"], response.json()["smr_project_id"]) == ("tsp", "p-42")
    assert Project.objects.get(slug="tour").source_settings == {
        "smr_project_id": "p-42",
        "operator_key": True,
    }


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"slug": "hill"}, "slug"),  # taken
        ({"slug": "not a slug"}, "slug"),
        ({"slug": "x", "scenario": "nope"}, "scenario"),
        ({"slug": "x", "source": "smr"}, "smr_project_id"),
        ({"slug": "x", "source": "carrier-pigeon"}, "source"),
    ],
)
def test_invalid_project_creation_is_refused_with_a_field_error(project, alice, payload, field):
    grant(alice, "add_project", "bind_source")
    body = assert_json_error(session_client(alice).post("/api/v1/projects/", payload, format="json"), 400)
    assert [e["field"] for e in body["errors"]] == [field]
    assert Project.objects.count() == 1


def test_a_token_cannot_create_a_project(api):
    body = assert_json_error(api.post("/api/v1/projects/", {"slug": "sneaky"}, format="json"), 403)
    assert "token" in body["message"].lower()
    assert not Project.objects.filter(slug="sneaky").exists()


# --- scenarios ----------------------------------------------------------------------------------------


def test_scenarios_are_listed_to_whoever_may_use_them(api, project, alice, carol):
    """Red-team finding 9: a token sees its project's scenario; a user the shared presets and those of
    their projects; staff every one. A scenario made for another team (with its validator) is a 404."""
    services.create_scenario(key="tsp", name="TSP", direction="minimize")
    services.create_scenario(key="ours", name="Ours", validator_command=["python3", "{artifact}"])
    admin_project("team", scenario=Scenario.objects.get(key="ours"), by=carol)
    staff = UserFactory(username="sam", is_staff=True)

    def keys(client):
        return [s["key"] for s in client.get("/api/v1/scenarios/").json()["results"]]

    assert keys(api) == ["generic"]  # hill's scenario
    assert keys(session_client(alice)) == ["generic"]
    assert keys(session_client(carol)) == ["generic", "ours"]
    assert keys(session_client(staff)) == ["generic", "ours", "tsp"]
    for client in (api, session_client(alice)):
        assert_json_error(client.get("/api/v1/scenarios/ours/"), 404)
    detail = session_client(staff).get("/api/v1/scenarios/tsp/").json()
    assert (detail["direction"], detail["name"], detail["shared"]) == ("minimize", "TSP", False)


def test_staff_create_scenarios(db):
    staff = UserFactory(username="sam", is_staff=True)
    payload = {
        "key": "sort",
        "name": "Sorting",
        "direction": "minimize",
        "score_min": 0,
        "score_max": 100,
        "scoring_command": ["python", "score.py"],
        "required_toolchains": ["python3.12"],
    }
    response = session_client(staff).post("/api/v1/scenarios/", payload, format="json")
    assert response.status_code == 201, response.content
    scenario = Scenario.objects.get(key="sort")
    assert (scenario.direction, scenario.score_max, scenario.scoring_command) == (
        "minimize",
        100,
        ["python", "score.py"],
    )


def test_non_staff_users_and_tokens_cannot_create_scenarios(api, alice):
    payload = {"key": "sort", "name": "Sorting"}
    for client in (api, session_client(alice)):
        assert_json_error(client.post("/api/v1/scenarios/", payload, format="json"), 403)
    assert not Scenario.objects.filter(key="sort").exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"key": "bad", "name": "Bad", "score_min": 5, "score_max": 1}, "score_min"),
        ({"key": "bad", "name": "Bad", "direction": "sideways"}, "direction"),
        ({"key": "generic", "name": "Dup"}, "key"),
        ({"key": "bad", "name": "Bad", "scoring_command": "rm -rf /"}, "scoring_command"),
    ],
)
def test_invalid_scenarios_are_refused_with_field_errors(db, payload, field):
    staff = UserFactory(username="sam", is_staff=True)
    body = assert_json_error(session_client(staff).post("/api/v1/scenarios/", payload, format="json"), 400)
    assert [e["field"] for e in body["errors"]] == [field]
    assert not Scenario.objects.filter(key="bad").exists()


# --- runs ---------------------------------------------------------------------------------------------


@pytest.fixture
def runs(project):
    """Four runs: live, failed (with a detail), done, and one stalled."""
    ingest(project, "alpha-live", {"type": "state", "id": "s", "state": "running"})
    ingest(
        project,
        "beta-failed",
        {
            "type": "state",
            "id": "s",
            "state": "failed",
            "failure": {"family": "oom", "detail": "CUDA out of memory"},
        },
    )
    ingest(project, "gamma-done", {"type": "state", "id": "s", "state": "done"})
    ingest(project, "delta-quiet", {"type": "state", "id": "s", "state": "executing"})
    Run.objects.filter(external_id="delta-quiet").update(last_progress_at=T0)
    services.flag_stalled_runs(now=T0 + timedelta(days=1))
    return project


def run_ids(client, **params) -> set[str]:
    response = client.get("/api/v1/projects/hill/runs", params)
    assert response.status_code == 200, response.content
    return {r["external_id"] for r in response.json()["results"]}


def test_runs_are_listed_with_filters(api, runs):
    assert run_ids(api) == {"alpha-live", "beta-failed", "gamma-done", "delta-quiet"}
    assert run_ids(api, state="running") == {"alpha-live"}
    assert run_ids(api, state=["done", "failed"]) == {"beta-failed", "gamma-done"}
    assert run_ids(api, stalled="true") == {"delta-quiet"}
    assert run_ids(api, stalled="false") == {"alpha-live", "beta-failed", "gamma-done"}
    assert run_ids(api, failed="true") == {"beta-failed"}
    assert run_ids(api, failed="false") == {"alpha-live", "gamma-done", "delta-quiet"}
    assert run_ids(api, q="ALPHA") == {"alpha-live"}
    assert run_ids(api, q="out of memory") == {"beta-failed"}


def test_an_invalid_state_filter_is_refused(api, runs):
    body = assert_json_error(api.get("/api/v1/projects/hill/runs", {"state": "exploded"}), 400)
    assert body["errors"][0]["field"] == "state"


def test_runs_are_paginated_most_recent_first(api, project):
    for i in range(5):
        ingest(project, f"run-{i}", {"type": "metric", "id": "m", "key": "k", "value": i})
    first = api.get("/api/v1/projects/hill/runs", {"page_size": 2}).json()
    assert first["count"] == 5
    assert [r["external_id"] for r in first["results"]] == ["run-4", "run-3"]
    last = api.get("/api/v1/projects/hill/runs", {"page_size": 2, "page": 3}).json()
    assert [r["external_id"] for r in last["results"]] == ["run-0"]
    assert last["next"] is None and last["previous"]


def test_runs_of_another_project_are_not_listed(api, project, other_project):
    ingest(other_project, "theirs", {"type": "metric", "id": "m", "key": "k", "value": 1})
    ingest(project, "ours", {"type": "metric", "id": "m", "key": "k", "value": 1})
    assert run_ids(api) == {"ours"}


def test_run_detail_has_state_scores_and_spend(api, project):
    ingest(
        project,
        "r1",
        {"type": "agent.turn", "id": "d", "turn": 1, "tokens_in": 1000, "tokens_out": 100, "cost_usd": 0.25},
        {
            "type": "agent.turn",
            "id": "c",
            "turn": 1,
            "actor": "sub",
            "parent_actor": "driver",
            "tokens_in": 10,
            "tokens_out": 1,
            "cost_usd": 0.005,
        },
        {"type": "score", "id": "s1", "score": 0.7, "ts": at(1)},
        {"type": "score", "id": "s2", "score": 0.6, "ts": at(2)},
        {
            "type": "state",
            "id": "st",
            "state": "failed",
            "ts": at(3),
            "failure": {"family": "timeout", "detail": "no answer", "source": "harness"},
        },
    )
    data = api.get("/api/v1/projects/hill/runs/r1").json()
    assert (data["external_id"], data["state"], data["turn_count"]) == ("r1", "failed", 2)
    assert (data["best_score"], data["latest_score"], data["score_count"]) == (0.7, 0.6, 2)
    assert data["failure"] == {"family": "timeout", "detail": "no answer", "source": "harness"}
    assert data["finished_at"] is not None and data["stalled"] is False
    spend = data["spend"]
    assert (spend["tokens_in"], spend["tokens_out"], Decimal(spend["usd"])) == (1010, 101, Decimal("0.255"))
    assert spend["driver_inference"] == {"tokens_in": 1000, "tokens_out": 100, "usd": "0.250000"}
    assert spend["child_work"] == {"tokens_in": 10, "tokens_out": 1, "usd": "0.005000"}


def test_a_run_without_failure_has_a_null_failure(api, project):
    ingest(project, "r1", {"type": "state", "id": "s", "state": "running"})
    data = api.get("/api/v1/projects/hill/runs/r1").json()
    assert data["failure"] is None and data["finished_at"] is None


def test_unknown_runs_and_projects_are_404_json_not_html(api, project, alice):
    assert assert_json_error(api.get("/api/v1/projects/hill/runs/nope"), 404)["code"] == "not_found"
    assert assert_json_error(api.get("/api/v1/projects/hill/runs/nope/turns"), 404)["code"] == "not_found"
    assert assert_json_error(api.get("/api/v1/projects/hill/runs/nope/metrics"), 404)["code"] == "not_found"
    assert (
        assert_json_error(session_client(alice).get("/api/v1/projects/nope/runs"), 404)["code"] == "not_found"
    )
    assert assert_json_error(session_client(alice).get("/api/v1/projects/nope/"), 404)["code"] == "not_found"
    assert assert_json_error(api.get("/api/v1/no-such-endpoint"), 404)["code"] == "not_found"


# --- turns ----------------------------------------------------------------------------------------------


def test_turns_are_listed_in_time_order(api, project):
    ingest(
        project,
        "r1",
        {"type": "agent.turn", "id": "late", "turn": 2, "ts": at(2), "model": "big", "tool_calls": ["bash"]},
        {
            "type": "agent.turn",
            "id": "early",
            "turn": 1,
            "ts": at(1),
            "tokens_in": 5,
            "cost_usd": 0.5,
            "duration_ms": 1200,
        },
    )
    data = api.get("/api/v1/projects/hill/runs/r1/turns").json()
    assert data["count"] == 2
    first, second = data["results"]
    assert (first["event_id"], first["turn"], first["tokens_in"], first["duration_ms"]) == (
        "early",
        1,
        5,
        1200,
    )
    assert Decimal(first["cost_usd"]) == Decimal("0.5")
    assert (second["event_id"], second["model"], second["tool_calls"], second["kind"]) == (
        "late",
        "big",
        ["bash"],
        "driver_inference",
    )


# --- metrics ----------------------------------------------------------------------------------------------


@pytest.fixture
def metric_run(project):
    batch = [ev.MetricEvent(type="metric", key="loss", value=float(i % 50), step=i) for i in range(1200)]
    batch += [ev.MetricEvent(type="metric", key="acc", value=0.5, step=1)]
    services.ingest_events(project, "r1", batch)
    return project


def test_metrics_without_a_key_list_the_keys(api, metric_run):
    assert api.get("/api/v1/projects/hill/runs/r1/metrics").json() == {"keys": ["acc", "loss"]}


def test_a_metric_series_is_downsampled_to_the_asked_points(api, metric_run):
    data = api.get("/api/v1/projects/hill/runs/r1/metrics", {"key": "loss", "points": 100}).json()
    assert (data["key"], data["total_points"], data["downsampled"]) == ("loss", 1200, True)
    assert len(data["points"]) <= 100
    assert set(data["points"][0]) == {"step", "value", "min", "max", "count"}
    assert min(p["min"] for p in data["points"]) == 0.0 and max(p["max"] for p in data["points"]) == 49.0


def test_a_short_series_is_returned_raw(api, metric_run):
    data = api.get("/api/v1/projects/hill/runs/r1/metrics", {"key": "acc"}).json()
    assert data == {
        "key": "acc",
        "total_points": 1,
        "downsampled": False,
        "points": [{"step": 1, "value": 0.5, "min": 0.5, "max": 0.5, "count": 1}],
    }


def test_the_default_points_cap_is_1000(api, metric_run):
    data = api.get("/api/v1/projects/hill/runs/r1/metrics", {"key": "loss"}).json()
    assert data["downsampled"] is True and len(data["points"]) <= 1000


@pytest.mark.parametrize("points", ["abc", "1", "0", "-5", "10001", "2.5"])
def test_bad_points_are_refused(api, metric_run, points):
    body = assert_json_error(
        api.get("/api/v1/projects/hill/runs/r1/metrics", {"key": "loss", "points": points}), 400
    )
    assert body["errors"][0]["field"] == "points"


# --- submissions ------------------------------------------------------------------------------------------


def test_submissions_are_sorted_best_first_for_a_maximize_scenario(api, project):
    ingest(project, "r1", *[{"type": "score", "id": f"s{v}", "score": v} for v in (0.2, 0.9, 0.5)])
    data = api.get("/api/v1/projects/hill/submissions").json()
    assert [s["score"] for s in data["results"]] == [0.9, 0.5, 0.2]
    assert data["results"][0]["run"] == "r1"


def test_submissions_are_sorted_best_first_for_a_minimize_scenario(alice):
    scenario = services.create_scenario(key="speed", name="Speed", direction="minimize")
    project = admin_project("speedy", scenario=scenario, by=alice)
    ingest(project, "r1", *[{"type": "score", "id": f"s{v}", "score": v} for v in (3.0, 1.5, 9.0)])
    data = session_client(alice).get("/api/v1/projects/speedy/submissions").json()
    assert [s["score"] for s in data["results"]] == [1.5, 3.0, 9.0]


def test_a_submission_names_its_artifact_and_experiment(api, project):
    import io

    artifact, _ = services.store_artifact(project, "r1", path="sol.py", content=io.BytesIO(b"x = 1"))
    ingest(
        project,
        "r1",
        {
            "type": "score",
            "id": "s",
            "score": 1,
            "artifact": "sol.py",
            "experiment": "exp-1",
            "harness_id": "h",
            "details": {"k": 1},
        },
    )
    [sub] = api.get("/api/v1/projects/hill/submissions").json()["results"]
    assert (
        sub["artifact_sha256"],
        sub["artifact_ref"],
        sub["experiment"],
        sub["harness_id"],
        sub["details"],
    ) == (artifact.sha256, "sol.py", "exp-1", "h", {"k": 1})
