"""The spend guards on pages: the settings card (saved, refused field by field, previewed over the
project's history before it is saved), the run page's line (what the rule would do to this run), and the
inbox row a guard's act leaves to the project's reviewers and admins."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Project, Run
from smrweb.tracking.services.alerts import evaluation as alert_evaluation

pytestmark = pytest.mark.django_db

FORM = {
    "action": "spend_guard",
    "spend_stop": "pause",
    "spend_stop_usd": "2",
    "spend_stop_turns": "",
    "spend_stop_tokens": "",
    "spend_stop_usd_per_point": "",
    "spend_stop_window": "50",
    "day_budget_usd": "",
    "day_zone": "UTC",
}


def push(project, run_id: str, *events: dict) -> Run:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))
    return Run.objects.get(project=project, external_id=run_id)


@pytest.fixture
def history(project):
    """r1 spent $4 after its best score (past $2 at its 5th turn) and is still running."""
    events = [
        {"type": "state", "state": "running", "ts": "2026-01-01T00:00:00Z"},
        {"type": "score", "score": 0.5, "ts": "2026-01-01T00:00:30Z"},
    ]
    events += [
        {"type": "agent.turn", "turn": n, "cost_usd": 0.5, "ts": f"2026-01-01T00:{n:02d}:00Z"}
        for n in range(1, 9)
    ]
    return push(project, "r1", *events)


def test_the_settings_card_previews_the_rule_over_history_before_it_is_saved(client, alice, project, history):
    client.force_login(alice)
    page = client.get("/projects/hill/settings/").content.decode()
    assert "data-spend-guard-form" in page and "Set a limit or a day budget and preview it" in page
    answer = client.post("/projects/hill/settings/", {**FORM, "action": "spend_guard_preview"})
    page = answer.content.decode()
    assert answer.status_code == 200 and "data-previewing" in page
    assert 'data-dry-act="r1:5"' in page and "$2.50 spent since its best score (the limit is $2.00)" in page
    assert "It would act now on r1." in page
    project.refresh_from_db()
    assert project.spend_stop == "off" and project.spend_stop_usd is None  # a preview saves nothing


def test_the_settings_card_saves_and_audits_and_refuses_bad_values_by_field(client, alice, project):
    client.force_login(alice)
    for field, value, words in [
        ("spend_stop_usd", "-3", "More than $0"),
        ("spend_stop_usd", "abc", "Enter a number"),
        ("spend_stop_window", "0", "greater than or equal to 1"),
        ("day_zone", "Mars/Olympus", "An IANA time zone"),
        ("spend_stop", "maybe", "Select a valid choice"),
    ]:
        answer = client.post("/projects/hill/settings/", {**FORM, field: value})
        page = answer.content.decode()
        assert answer.status_code == 400, field
        assert f'data-field-error="{field}"' in page and words in page, (field, page[:200])
    assert Project.objects.get(pk=project.pk).spend_stop == "off"
    answer = client.post(
        "/projects/hill/settings/", {**FORM, "day_budget_usd": "25", "day_zone": "Europe/Paris"}
    )
    assert answer.status_code == 302 and answer["Location"].endswith("#spend-guards")
    project.refresh_from_db()
    assert (project.spend_stop, project.spend_stop_usd, project.day_budget_usd, project.day_zone) == (
        "pause",
        Decimal(2),
        Decimal(25),
        "Europe/Paris",
    )
    audit = AuditEvent.objects.filter(verb="project.settings_changed").latest("id")
    assert audit.detail["spend_stop"] == "pause" and audit.detail["day_zone"] == "Europe/Paris"


def test_a_reviewer_cannot_change_the_spend_guards(client, bob, project):
    client.force_login(bob)
    assert client.post("/projects/hill/settings/", FORM).status_code == 403
    assert Project.objects.get(pk=project.pk).spend_stop == "off"


def test_the_run_page_says_what_the_rule_would_do_and_what_it_did(
    client, alice, bob, victor, project, history
):
    client.force_login(alice)
    assert "data-spend-outlook" not in client.get("/projects/hill/runs/r1/").content.decode()  # no limit
    Project.objects.filter(pk=project.pk).update(spend_stop_usd=Decimal(2))
    page = client.get("/projects/hill/runs/r1/").content.decode()
    assert "off (a dry run)" in page and "This rule would pause this run now:" in page
    assert 'data-outlook-act="5"' in page and "after turn 5, $2.50 since its best" in page
    assert "It can neither pause nor stop this run: This project has no webhook URL" in page
    # Switched on, the next batch's evaluation pauses it (the push harness has a webhook URL).
    Project.objects.filter(pk=project.pk).update(
        spend_stop="pause", rollback_webhook_url="http://127.0.0.1:9/x"
    )
    run = push(
        project, "r1", {"type": "agent.turn", "turn": 9, "cost_usd": 0.5, "ts": "2026-01-01T00:09:00Z"}
    )
    assert len(alert_evaluation.evaluate_run(run.pk).controls) == 1
    page = client.get("/projects/hill/runs/r1/").content.decode()
    assert "data-outlook-cannot" not in page
    assert "data-outlook-acted" in page and "Spend guard\n      paused" in page
    # The inbox: alice (admin) and bob (reviewer) read it; victor (viewer) has nothing.
    inbox = client.get("/inbox/").content.decode()
    assert "Hill climb: run r1 paused by the spend guard" in inbox and "data-guard" in inbox
    assert "r1 paused by the spend guard" in client.get("/inbox/?kind=guard").content.decode()
    client.force_login(victor)
    assert "paused by the spend guard" not in client.get("/inbox/").content.decode()
    client.force_login(bob)
    assert "paused by the spend guard" in client.get("/inbox/?project=hill").content.decode()
