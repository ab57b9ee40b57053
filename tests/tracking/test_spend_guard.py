"""The spend guards (services/alerts/guards.py): the spend-aware stop acts once per episode (since this
best score), a person's Resume is not paused again in the same episode, a new best starts a new one; the
marginal $ per point; the day budget in the project's clock; what the rule cannot do is said; the dry run
is the rule over history and agrees with the live guard; the settings are checked field by field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    AuditEvent,
    GuardEpisode,
    Notification,
    Project,
    Run,
    RunControl,
)
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from smrweb.tracking.services.alerts import guards, spend_rule

pytestmark = pytest.mark.django_db


def push(project, run_id: str, *events: dict) -> Run:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))
    return Run.objects.get(project=project, external_id=run_id)


def turns(first: int, last: int, usd: float = 0.5, minute: int = 0) -> list[dict]:
    return [
        {"type": "agent.turn", "turn": n, "cost_usd": usd, "ts": f"2026-01-01T{minute:02d}:{n % 60:02d}:00Z"}
        for n in range(first, last + 1)
    ]


@pytest.fixture
def guarded(project):
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="http://127.0.0.1:9/unset")
    project.refresh_from_db()
    return services.update_project(project, spend_stop="pause", spend_stop_usd=Decimal("2"))


def evaluate(run):
    return alert_evaluation.evaluate_run(run.pk)


def test_off_by_default_nothing_acts(project):
    assert project.spend_stop == "off" and project.day_budget_usd is None
    run = push(project, "r1", {"type": "state", "state": "running"}, *turns(1, 20, usd=5))
    result = evaluate(run)
    assert (result.controls, result.stops) == ([], [])
    assert not GuardEpisode.objects.exists() and not RunControl.objects.exists()


def test_spend_since_best_pauses_once_per_episode_and_a_resume_is_not_paused_again(guarded, alice, bob):
    run = push(
        guarded,
        "r1",
        {"type": "state", "state": "running", "ts": "2026-01-01T00:00:00Z"},
        {"type": "score", "score": 0.5, "ts": "2026-01-01T00:00:30Z"},
        *turns(1, 4),  # $2.00 since the best: at the limit, not past it
    )
    assert evaluate(run).controls == []
    run = push(guarded, "r1", *turns(5, 5))  # $2.50
    result = evaluate(run)
    [pause] = RunControl.objects.filter(run=run)
    assert result.controls == [pause.pk] and result.stops == []
    assert (pause.kind, pause.guard, pause.requested_by, pause.by_label) == (
        "pause",
        "spend",
        None,
        "smrweb (spend guard)",
    )
    [episode] = GuardEpisode.objects.all()
    best = run.submissions.get()
    assert (episode.guard, episode.episode, episode.action, episode.control_id) == (
        "spend",
        f"best:{best.pk}",
        "pause",
        pause.pk,
    )
    assert (
        Decimal(episode.reading["usd_since_best"]) == Decimal("2.5")
        and episode.reading["turns_since_best"] == 5
    )
    audit = AuditEvent.objects.get(verb="run.guard_paused")
    assert audit.actor is None and audit.detail["guard"] == "spend"
    assert "$2.50 spent since its best score (the limit is $2.00)" in audit.detail["reason"]
    # Announced in the inbox of the reviewers and admins (who can Resume), not the viewer's.
    notes = Notification.objects.filter(kind="guard").order_by("recipient__username")
    assert [n.recipient.username for n in notes] == ["alice", "bob"]
    assert "paused by the spend guard" in notes[0].title
    assert "5 turns" in notes[0].body and "$2.50" in notes[0].body and "Resume" in notes[0].body
    # Evaluated again (a redelivery, the next batch): nothing more.
    run = push(guarded, "r1", *turns(6, 6))
    assert evaluate(run).controls == []
    # The harness reports the pause; a person resumes: the same episode is not paused again.
    run = push(guarded, "r1", {"type": "state", "state": "paused", "ts": "2026-01-01T00:07:00Z"})
    pause.refresh_from_db()
    assert pause.status == "requested"  # not dispatched in this test: the state still confirms nothing sent
    push(guarded, "r1", {"type": "state", "state": "running", "ts": "2026-01-01T00:08:00Z"})
    run = push(guarded, "r1", *turns(7, 12, minute=1))
    assert evaluate(run).controls == [] and GuardEpisode.objects.count() == 1
    # A new best score starts a new episode: past the limit again, paused again.
    RunControl.objects.update(status="confirmed")  # the first pause went out and was reported back
    run = push(guarded, "r1", {"type": "score", "score": 0.7, "ts": "2026-01-01T01:30:00Z"})
    run = push(guarded, "r1", *turns(31, 34, minute=2))
    assert evaluate(run).controls == []  # $2.00 since the new best
    run = push(guarded, "r1", *turns(35, 35, minute=2))
    result = evaluate(run)
    assert len(result.controls) == 1 and GuardEpisode.objects.count() == 2
    assert Notification.objects.filter(kind="guard").count() == 4


def test_a_project_that_chose_stop_asks_the_stop_task(guarded):
    services.update_project(guarded, spend_stop="stop")
    run = push(guarded, "r1", {"type": "state", "state": "running"}, *turns(1, 5))
    result = evaluate(run)
    assert result.controls == [] and result.stops == [
        (run.pk, "spend guard: $2.50 spent since it started (no score yet) (the limit is $2.00)")
    ]
    assert AuditEvent.objects.filter(verb="run.stop_requested", detail__guard="spend").count() == 1
    assert evaluate(run).stops == []


def test_a_source_that_can_neither_pause_nor_stop_is_said_so(project, alice):
    services.update_project(project, spend_stop="pause", spend_stop_turns=3)  # no webhook URL
    run = push(project, "r1", {"type": "state", "state": "running"}, *turns(1, 4))
    result = evaluate(run)
    assert (result.controls, result.stops) == ([], [])
    [episode] = GuardEpisode.objects.all()
    assert episode.action == "none" and "no webhook URL" in episode.reason
    note = Notification.objects.get(kind="guard", recipient=alice)
    assert (
        "not stopped" in note.title and "could not act on r1" in note.body and "no webhook URL" in note.body
    )
    assert AuditEvent.objects.filter(verb="run.guard_unable").count() == 1


def test_marginal_usd_per_point_over_the_window(guarded):
    services.update_project(
        guarded, spend_stop_usd=None, spend_stop_usd_per_point=Decimal("10"), spend_stop_window=4
    )
    events = [
        {"type": "state", "state": "running", "ts": "2026-01-01T00:00:00Z"},
        {"type": "score", "score": 0.5, "ts": "2026-01-01T00:00:01Z"},
        *turns(1, 2, usd=1),
        {"type": "score", "score": 0.9, "ts": "2026-01-01T00:02:30Z"},  # +0.4 for $2: $5 a point
        *turns(3, 4, usd=1),
    ]
    run = push(guarded, "r1", *events)
    reading = spend_rule.reading_now(run, 4)
    assert (reading.window_turns, reading.window_usd, reading.window_gain) == (
        4,
        Decimal(4),
        pytest.approx(0.4),
    )
    assert reading.usd_per_point == Decimal(10)  # $4 over the window for 0.4: at the ceiling
    assert evaluate(run).controls == []
    run = push(guarded, "r1", *turns(5, 5, usd=1))  # the window: turns 2-5, $4, since 0.5 → 0.9 still
    assert spend_rule.reading_now(run, 4).window_gain == pytest.approx(0.4)
    run = push(guarded, "r1", *turns(6, 6, usd=1.5))  # turns 3-6: the best came before turn 3
    assert len(evaluate(run).controls) == 1
    assert "$4.50 over its last 4 turns gained no score (the ceiling is $10.00 a point)" in (
        GuardEpisode.objects.get().reason
    )


def test_the_dry_run_is_the_rule_over_history_and_agrees_with_the_live_guard(guarded):
    events = [
        {"type": "state", "state": "running", "ts": "2026-01-01T00:00:00Z"},
        {"type": "score", "score": 0.5, "ts": "2026-01-01T00:00:30Z"},
        *turns(1, 8),  # $4 after the best: past $2 at turn 5
        {"type": "score", "score": 0.8, "ts": "2026-01-01T00:08:30Z"},
        *turns(9, 11),  # $1.50 since the new best
    ]
    run = push(guarded, "r1", *events)
    history = spend_rule.run_history(run, spend_rule.Limits.of(guarded))
    [act] = history.acts
    assert (act.turn, act.reading.usd, act.spent_after, act.improved_after) == (
        5,
        Decimal("2.5"),
        Decimal("3"),
        True,
    )
    assert history.now == ""  # $1.50 since the new best: the live rule would not act now either
    assert evaluate(run).controls == []
    run = push(guarded, "r1", *turns(12, 13))  # $2.50 since the new best
    assert spend_rule.run_history(run, spend_rule.Limits.of(guarded)).now
    assert len(evaluate(run).controls) == 1
    # The project's dry run with other limits, before they are saved, and the day budget's days.
    dry = spend_rule.project_dry_run(guarded, spend_rule.Limits(turns=3))
    assert [(a.run, a.turn) for a in dry.acts] == [("r1", 12), ("r1", 4)]  # the 4th turn since each best
    assert dry.runs_read == 1 and dry.live_now == ["r1"]


def test_the_day_budget_pauses_every_live_run_once_a_day_in_the_projects_clock(project, alice):
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="http://127.0.0.1:9/unset")
    project.refresh_from_db()
    services.update_project(project, day_budget_usd=Decimal("10"), day_zone="America/New_York")
    # 2026-01-02 03:00 UTC is still January 1st in New York.
    now = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    a = push(
        project,
        "a",
        {"type": "state", "state": "running"},
        *[
            {"type": "agent.turn", "turn": n, "cost_usd": 3, "ts": f"2026-01-01T{14 + n}:00:00Z"}
            for n in range(3)
        ],
    )
    b = push(project, "b", {"type": "state", "state": "running"})
    done = push(project, "c", {"type": "state", "state": "done"})
    out = guards.Acted()
    assert guards.guard_day_budget(project, out, now=now) == []  # $9 of $10
    push(project, "a", {"type": "agent.turn", "turn": 9, "cost_usd": 2, "ts": "2026-01-02T02:00:00Z"})
    rows = guards.guard_day_budget(project, out, now=now)
    assert sorted(r.run.external_id for r in rows) == ["a", "b"] and len(out.controls) == 2
    assert {r.episode for r in rows} == {"day:2026-01-01"}
    assert not RunControl.objects.filter(run=done).exists()
    note = Notification.objects.get(kind="guard", recipient=alice)
    assert note.subject == f"project:{project.pk}"
    assert "day budget reached, 2 live runs paused" in note.title
    assert "$11.00 today (2026-01-01, America/New_York), 110% of its day budget of $10.00" in note.body
    assert guards.guard_day_budget(project, guards.Acted(), now=now) == []  # once a day
    # The dry run finds the same day.
    [day] = spend_rule.day_history(project, Decimal("10"), "America/New_York", days=400)
    assert (day.day.isoformat(), day.spent, day.spent_after) == ("2026-01-01", Decimal(11), Decimal(0))
    del a, b


@pytest.mark.parametrize(
    "field, value",
    [
        ("spend_stop", "maybe"),
        ("spend_stop_usd", Decimal("-1")),
        ("spend_stop_usd", "NaN"),
        ("spend_stop_turns", 0),
        ("spend_stop_window", None),
        ("day_budget_usd", Decimal("1e12")),
        ("day_zone", "Mars/Olympus"),
        ("day_zone", "../etc"),
    ],
)
def test_bad_settings_are_refused_by_field(project, field, value):
    with pytest.raises(InvalidInput) as refused:
        services.update_project(project, **{field: value})
    assert refused.value.field == field


def test_the_sweep_evaluates_runs_of_guarded_projects_without_alert_rules(project):
    from django.utils import timezone

    since = timezone.now()
    run = push(project, "r1", {"type": "state", "state": "running"})
    assert run.pk not in alert_evaluation.changed_since(since)["run"]  # no rule, no guard
    services.update_project(project, day_budget_usd=Decimal("5"))
    assert run.pk in alert_evaluation.changed_since(since)["run"]


def test_the_dry_run_names_the_runs_too_long_to_replay(guarded, monkeypatch):
    push(guarded, "long", {"type": "state", "state": "running"}, *turns(1, 6))
    push(guarded, "short", {"type": "state", "state": "running"}, *turns(1, 5))
    monkeypatch.setattr(spend_rule, "HISTORY_TURNS_MAX", 5)
    dry = spend_rule.project_dry_run(guarded)
    assert dry.runs_skipped == ["long"] and dry.runs_read == 1
    assert [(a.run, a.turn) for a in dry.acts] == [("short", 5)]
