"""POST /api/v1/projects/{slug}/runs/{run}/events: the push ingest contract over HTTP, and PATCH of
run settings."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.conf import settings as django_settings
from django.db.models import Sum

from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, AuditEvent, MetricPoint, Run, Submission
from tests.api.helpers import assert_json_error
from tests.factories import admin_project

EVENTS_URL = "/api/v1/projects/{slug}/runs/{run}/events"


def events_url(run: str = "r1", slug: str = "hill") -> str:
    return EVENTS_URL.format(slug=slug, run=run)


def post_raw(client, raw: bytes | str, run: str = "r1", slug: str = "hill"):
    return client.generic("POST", events_url(run, slug), raw, content_type="application/json")


def post(client, events: list, run: str = "r1", slug: str = "hill"):
    return post_raw(client, json.dumps(events), run, slug)


def nothing_written() -> bool:
    return not Run.objects.exists() and not MetricPoint.objects.exists() and not AgentTurn.objects.exists()


METRIC = {"type": "metric", "id": "m1", "key": "loss", "value": 0.5, "step": 1}
TURN = {"type": "agent.turn", "id": "t1", "turn": 1, "tokens_in": 100, "tokens_out": 20, "cost_usd": 0.05}


# --- the answer -------------------------------------------------------------------------------------


def test_a_batch_is_answered_with_run_accepted_and_duplicates(api):
    response = post(api, [METRIC, TURN, METRIC])
    assert response.status_code == 200
    assert response.json() == {"run": "r1", "accepted": 2, "duplicates": 1}
    run = Run.objects.get(external_id="r1")
    assert (run.project.slug, run.turn_count, run.tokens_in) == ("hill", 1, 100)


def test_replaying_a_batch_over_http_is_all_duplicates(api):
    post(api, [METRIC, TURN])
    response = post(api, [METRIC, TURN])
    assert response.json() == {"run": "r1", "accepted": 0, "duplicates": 2}
    assert MetricPoint.objects.count() == 1 and AgentTurn.objects.count() == 1


def test_an_empty_batch_is_accepted_as_nothing(api):
    response = post(api, [])
    assert response.json() == {"run": "r1", "accepted": 0, "duplicates": 0}


def test_a_project_admin_may_push_with_a_session(client, alice, project):
    client.force_login(alice)
    response = client.post(events_url(), json.dumps([METRIC]), content_type="application/json")
    assert response.status_code == 200
    assert response.json()["accepted"] == 1


@pytest.mark.parametrize(("user", "status"), [("bob", 403), ("victor", 403), ("carol", 404)])
def test_non_admins_cannot_push_with_a_session(client, project, carol, user, status):
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username=user))
    response = client.post(events_url(), json.dumps([METRIC]), content_type="application/json")
    assert_json_error(response, status)
    assert nothing_written()


# --- invalid batches ----------------------------------------------------------------------------------


INVALID = {
    "malformed json": (b'[{"type": "metric", "key": ', None, ""),
    "not a list": (json.dumps(METRIC).encode(), None, ""),
    "unknown type": (json.dumps([METRIC, {"type": "log", "line": "x"}]).encode(), 1, "type"),
    "missing type": (json.dumps([{"key": "loss", "value": 1}]).encode(), 0, "type"),
    "missing field": (json.dumps([METRIC, {"type": "metric", "id": "m2", "value": 1}]).encode(), 1, "key"),
    "string for a number": (json.dumps([{**METRIC, "value": "0.5"}]).encode(), 0, "value"),
    "NaN": (b'[{"type": "metric", "key": "loss", "value": NaN}]', 0, "value"),
    "Infinity": (b'[{"type": "score", "score": Infinity}]', 0, "score"),
    "1e999": (b'[{"type": "metric", "key": "loss", "value": 1e999}]', 0, "value"),
    "negative tokens": (json.dumps([METRIC, {**TURN, "tokens_out": -1}]).encode(), 1, "tokens_out"),
    "extra field": (json.dumps([{**TURN, "price": 3}]).encode(), 0, "price"),
    "NaN in details": (b'[{"type": "score", "score": 1, "details": {"loss": NaN}}]', 0, "details"),
    "Infinity in tool calls": (
        b'[{"type": "agent.turn", "turn": 1, "tool_calls": [{"ms": Infinity}]}]',
        0,
        "tool_calls",
    ),
}


@pytest.mark.parametrize("case", INVALID, ids=list(INVALID))
def test_an_invalid_batch_is_refused_whole_with_field_errors(api, case):
    raw, index, field = INVALID[case]
    response = post_raw(api, raw)
    body = assert_json_error(response, 400, "invalid_events")
    assert body["errors"], body
    error = body["errors"][0]
    assert set(error) == {"index", "field", "message"}
    assert (error["index"], error["field"]) == (index, field)
    assert error["message"]
    assert nothing_written()


def test_an_invalid_event_in_a_valid_runs_batch_writes_nothing(api):
    post(api, [METRIC])
    response = post(api, [{**METRIC, "id": "m2"}, {**TURN, "turn": "one"}])
    body = assert_json_error(response, 400, "invalid_events")
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(1, "turn")]
    assert MetricPoint.objects.count() == 1
    assert not AgentTurn.objects.exists()


def test_a_score_outside_the_scenarios_bounds_is_refused(alice, anon_api):
    scenario = services.create_scenario(key="unit", name="Unit interval", score_min=0, score_max=1)
    project = admin_project("unit", scenario=scenario, by=alice)
    _, raw = services.create_api_token(project, name="ci")
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = post(
        anon_api, [METRIC, {"type": "score", "score": 0.5}, {"type": "score", "score": 2}], slug="unit"
    )
    body = assert_json_error(response, 400, "invalid_events")
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(2, "score")]
    assert nothing_written()


def test_5001_events_are_refused(api):
    response = post(api, [{"type": "metric", "key": "k", "value": i, "step": i} for i in range(5001)])
    body = assert_json_error(response, 400, "invalid_events")
    assert "5000" in body["errors"][0]["message"]
    assert nothing_written()


def test_5000_events_are_accepted(api):
    response = post(api, [{"type": "metric", "key": "k", "value": i, "step": i} for i in range(5000)])
    assert response.json()["accepted"] == 5000


def test_a_body_over_10_mb_is_refused_with_413_json(api):
    raw = b"[" + b" " * django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b"]"
    body = assert_json_error(post_raw(api, raw), 413, "batch_too_large")
    assert "10 MB" in body["message"]
    assert nothing_written()


def test_a_run_id_over_200_characters_is_refused(api):
    body = assert_json_error(post(api, [METRIC], run="r" * 201), 400)
    assert body["errors"][0]["field"] == "run"
    assert nothing_written()


# --- authentication on the ingest endpoint ------------------------------------------------------------


def test_another_projects_token_is_refused_with_403(other_project, anon_api, project):
    _, raw = services.create_api_token(other_project, name="theirs")
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = assert_json_error(post(anon_api, [METRIC]), 403)
    assert "scoped to project 'other'" in body["message"]
    assert nothing_written()


def test_a_revoked_token_is_refused_with_401(project, anon_api):
    token, raw = services.create_api_token(project, name="old")
    services.revoke_api_token(token)
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert_json_error(post(anon_api, [METRIC]), 401)
    assert nothing_written()


def test_a_request_without_credentials_is_refused_with_json(anon_api, project):
    response = post(anon_api, [METRIC])
    assert_json_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert nothing_written()


@pytest.mark.parametrize("header", ["Bearer", "Bearer two parts", "Bearer smr_nope"])
def test_a_malformed_or_unknown_bearer_header_is_refused_with_401(anon_api, project, header):
    anon_api.credentials(HTTP_AUTHORIZATION=header)
    assert_json_error(post(anon_api, [METRIC]), 401, "authentication_failed")
    assert nothing_written()


# --- PATCH run settings --------------------------------------------------------------------------------


def run_url(run: str = "r1", slug: str = "hill") -> str:
    return f"/api/v1/projects/{slug}/runs/{run}"


def test_patching_run_settings_sets_budget_and_profiles(api):
    post(api, [TURN])
    response = api.patch(
        run_url(),
        {"budget_usd": "0.5", "budget_tokens": 1000, "requested_profile": "opus", "actual_profile": "haiku"},
        format="json",
    )
    assert response.status_code == 200
    data = response.json()
    assert Decimal(data["budget_usd"]) == Decimal("0.5")
    assert (data["budget_tokens"], data["requested_profile"], data["actual_profile"], data["downgraded"]) == (
        1000,
        "opus",
        "haiku",
        True,
    )
    assert data["budget_used_fraction"] == pytest.approx(0.12)  # max(0.05/0.5, 120/1000)
    run = Run.objects.get(external_id="r1")
    assert (run.budget_usd, run.budget_tokens) == (Decimal("0.5"), 1000)
    assert AuditEvent.objects.get(verb="run.settings_changed").actor_label == "token:ci"


def test_patching_settings_of_a_new_run_creates_it(api):
    response = api.patch(run_url("fresh"), {"git_branch": "main", "git_commit": "abc123"}, format="json")
    assert response.status_code == 200
    assert (response.json()["external_id"], response.json()["git_branch"]) == ("fresh", "main")
    assert Run.objects.filter(external_id="fresh", git_commit="abc123").exists()


def test_a_budget_can_be_cleared_with_null(api):
    api.patch(run_url(), {"budget_usd": "3"}, format="json")
    response = api.patch(run_url(), {"budget_usd": None}, format="json")
    assert response.json()["budget_usd"] is None
    assert Run.objects.get(external_id="r1").budget_usd is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"budget_usd": "-1"}, "budget_usd"),
        ({"budget_usd": "lots"}, "budget_usd"),
        ({"budget_usd": "1.1234567"}, "budget_usd"),
        ({"budget_tokens": -5}, "budget_tokens"),
        ({"budget_tokens": "many"}, "budget_tokens"),
        ({"requested_profile": "p" * 201}, "requested_profile"),
        ({"git_commit": "c" * 65}, "git_commit"),
    ],
)
def test_invalid_run_settings_are_refused_with_field_errors(api, payload, field):
    post(api, [METRIC])
    body = assert_json_error(api.patch(run_url(), payload, format="json"), 400, "invalid")
    assert [e["field"] for e in body["errors"]] == [field]
    run = Run.objects.get(external_id="r1")
    assert (run.budget_usd, run.budget_tokens, run.requested_profile, run.git_commit) == (None, None, "", "")


def test_a_viewer_cannot_patch_run_settings(client, victor, project):
    client.force_login(victor)
    response = client.patch(run_url(), json.dumps({"budget_usd": "1"}), content_type="application/json")
    assert_json_error(response, 403)
    assert not Run.objects.exists()


# --- 10,000 events in batches ---------------------------------------------------------------------------


def ten_thousand_events() -> list[dict]:
    events = []
    for i in range(10_000):
        kind = i % 10
        if kind < 3:  # 3,000 turns, split between the driver and a child
            child = kind == 2
            events.append(
                {
                    "type": "agent.turn",
                    "id": f"e{i}",
                    "turn": i,
                    "actor": "w1" if child else "driver",
                    **({"parent_actor": "driver"} if child else {}),
                    "tokens_in": i,
                    "tokens_out": i // 2,
                    "cost_usd": (i % 13) / 1000,
                }
            )
        elif kind < 9:  # 6,000 metric points
            events.append({"type": "metric", "id": f"e{i}", "key": "loss", "value": 1 / (i + 1), "step": i})
        else:  # 1,000 scores
            events.append({"type": "score", "id": f"e{i}", "score": i / 10_000})
    return events


def test_ten_thousand_events_in_batches_are_stored_exactly_once_and_replays_change_nothing(api):
    events = ten_thousand_events()
    batches = [events[i : i + 1000] for i in range(0, len(events), 1000)]
    assert sum(post(api, b).json()["accepted"] for b in batches) == 10_000

    def read_back() -> tuple:
        run = api.get(run_url()).json()
        series = api.get(run_url() + "/metrics", {"key": "loss", "points": 100}).json()
        submissions = api.get("/api/v1/projects/hill/submissions", {"page_size": 1}).json()
        turns = api.get(run_url() + "/turns", {"page_size": 1}).json()
        return run, series["total_points"], len(series["points"]), submissions["count"], turns["count"]

    run, total_points, shown_points, submission_count, turn_rows = read_back()
    turns = [e for e in events if e["type"] == "agent.turn"]
    assert run["turn_count"] == turn_rows == 3000
    assert (total_points, submission_count) == (6000, 1000)
    assert shown_points <= 100
    assert run["score_count"] == 1000 and run["best_score"] == 0.9999

    spend = run["spend"]
    expected_usd = sum((Decimal(str(e["cost_usd"])) for e in turns), Decimal(0))
    assert spend["tokens_in"] == sum(e["tokens_in"] for e in turns)
    assert spend["tokens_out"] == sum(e["tokens_out"] for e in turns)
    assert Decimal(spend["usd"]) == expected_usd
    assert Decimal(spend["usd"]) == AgentTurn.objects.aggregate(s=Sum("cost_usd"))["s"]
    parts = spend["driver_inference"], spend["child_work"]
    assert spend["tokens_in"] == sum(p["tokens_in"] for p in parts)
    assert Decimal(spend["usd"]) == sum(Decimal(p["usd"]) for p in parts)
    assert spend["child_work"]["tokens_in"] == sum(e["tokens_in"] for e in turns if e["actor"] == "w1")

    replays = [post(api, b).json() for b in reversed(batches)]
    assert sum(r["accepted"] for r in replays) == 0
    assert sum(r["duplicates"] for r in replays) == 10_000
    assert read_back() == (run, total_points, shown_points, submission_count, turn_rows)
    assert Submission.objects.count() == 1000 and MetricPoint.objects.count() == 6000
