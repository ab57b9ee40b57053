"""The spend guards over the API: read by whoever reaches the project, changed by its admins (a bad value
is a 400 naming the field, an unknown field too), and the dry run with the saved or the given values."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Project
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/projects/hill/spend-guard"


def test_the_defaults_are_read_by_a_token_and_the_guard_is_off(api):
    answer = api.get(URL)
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "spend_stop": "off",
        "spend_stop_usd": None,
        "spend_stop_turns": None,
        "spend_stop_tokens": None,
        "spend_stop_usd_per_point": None,
        "spend_stop_window": 50,
        "day_budget_usd": None,
        "day_zone": "UTC",
        "day_spend_usd": "0.000000",
    }


def test_admins_change_it_and_nobody_else(api, alice, bob, project):
    change = {
        "spend_stop": "pause",
        "spend_stop_usd": "20",
        "day_budget_usd": "100",
        "day_zone": "Europe/Paris",
    }
    assert_json_error(api.patch(URL, change, format="json"), 403)
    assert_json_error(session_client(bob).patch(URL, change, format="json"), 403)
    answer = session_client(alice).patch(URL, change, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["spend_stop"], body["spend_stop_usd"], body["day_budget_usd"], body["day_zone"]) == (
        "pause",
        "20.000000",
        "100.000000",
        "Europe/Paris",
    )
    project.refresh_from_db()
    assert project.spend_stop_usd == Decimal(20) and project.day_zone == "Europe/Paris"
    assert AuditEvent.objects.filter(verb="project.settings_changed", actor=alice).exists()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"spend_stop": "sometimes"}, "spend_stop"),
        ({"spend_stop_usd": "-1"}, "spend_stop_usd"),
        ({"spend_stop_usd": "0"}, "spend_stop_usd"),
        ({"spend_stop_turns": 0}, "spend_stop_turns"),
        ({"spend_stop_window": "many"}, "spend_stop_window"),
        ({"day_zone": "Mars/Olympus"}, "day_zone"),
        ({"budget": 5}, "budget"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field(alice, project, change, field):
    body = assert_json_error(session_client(alice).patch(URL, change, format="json"), 400)
    assert field in {e["field"] for e in body["errors"]} or body.get("field") == field, body
    assert Project.objects.get(pk=project.pk).spend_stop == "off"


def test_the_dry_run_with_the_saved_or_the_given_values(api, project):
    events = [{"type": "state", "state": "running", "ts": "2026-01-01T00:00:00Z"}]
    events += [
        {"type": "agent.turn", "turn": n, "cost_usd": 1, "ts": f"2026-01-01T00:{n:02d}:00Z"}
        for n in range(1, 6)
    ]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    empty = api.get(f"{URL}/dry-run").json()
    assert (empty["acts"], empty["runs_read"], empty["limits"]) == ([], 0, "no limit set")
    given = api.get(f"{URL}/dry-run", {"spend_stop_turns": "3"}).json()
    [act] = given["acts"]
    assert (act["run"], act["turn"], act["turns_since_best"], act["spent_after"]) == ("r1", 4, 4, "1.000000")
    assert given["live_now"] == ["r1"] and given["spent_after"] == "1.000000"
    assert_json_error(api.get(f"{URL}/dry-run", {"spend_stop_turns": "x"}), 400)
    assert_json_error(api.get(f"{URL}/dry-run", {"day_zone": "Nowhere/Here"}), 400)


def test_a_guards_act_is_in_the_inbox_api_of_the_deciders_only(alice, bob, victor, project):
    Project.objects.filter(pk=project.pk).update(
        spend_stop="pause", spend_stop_turns=2, rollback_webhook_url="http://127.0.0.1:9/x"
    )
    events = [{"type": "state", "state": "running"}, *[{"type": "agent.turn", "turn": n} for n in (1, 2, 3)]]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    from smrweb.tracking.models import Run
    from smrweb.tracking.services.alerts import evaluation

    evaluation.evaluate_run(Run.objects.get(external_id="r1").pk)
    [item] = session_client(alice).get("/api/v1/inbox", {"kind": "guard"}).json()["results"]
    assert (item["kind"], item["trigger"], item["project"], item["read"]) == ("guard", None, "hill", False)
    assert item["title"] == (
        "Hill climb: run r1 paused by the spend guard: "
        "3 turns since it started (no score yet) (the limit is 2)"
    )
    assert len(session_client(bob).get("/api/v1/inbox").json()["results"]) == 1
    assert session_client(victor).get("/api/v1/inbox").json()["results"] == []
    read = session_client(alice).post("/api/v1/inbox/read", {"kind": "guard"}, format="json")
    assert read.status_code == 200, read.content
    assert session_client(alice).get("/api/v1/inbox", {"kind": "guard"}).json()["results"][0]["read"] is True
