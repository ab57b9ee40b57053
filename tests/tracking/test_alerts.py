"""Alert rules and their evaluation (services/alerts/): each trigger fires once per episode, replays
and repeated evaluations add nothing, a new episode notifies again, what predates a rule is not sent,
muted rules and snoozed runs are recorded but not sent, the budget guard asks for one stop."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    AuditEvent,
    Channel,
    LoopFinding,
    Notification,
    NotificationStatus,
    Run,
    SourceHealth,
    Trigger,
)
from smrweb.tracking.services import handoff
from smrweb.tracking.services import submissions as lifecycle
from smrweb.tracking.services.alerts import evaluation as alert_evaluation

pytestmark = pytest.mark.django_db
N = NotificationStatus


def push(project, run_id: str, *events: dict) -> Run:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))
    return Run.objects.get(project=project, external_id=run_id)


def rule(project, alice, trigger, **kw):
    kw.setdefault("channel", Channel.INBOX)
    if kw["channel"] == Channel.INBOX:
        kw.setdefault("recipient", "alice")
    return services.create_alert_rule(project, by=alice, trigger=trigger, **kw)


def sent(r) -> list[Notification]:
    """What the rule raised for people (not the suppressed), oldest first."""
    return list(r.notifications.exclude(status=N.SUPPRESSED).order_by("created", "id"))


def evaluate(run: Run) -> alert_evaluation.Evaluation:
    return alert_evaluation.evaluate_run(run.pk)


def failed(n: int, detail="CUDA out of memory") -> dict:
    return {"id": f"f{n}", "type": "state", "state": "failed", "failure": {"family": "oom", "detail": detail}}


def test_run_failed_notifies_once_with_family_and_detail_and_again_after_a_new_failure(project, alice):
    r = rule(project, alice, Trigger.RUN_FAILED)
    run = push(project, "r1", {"type": "state", "state": "running"}, failed(1))
    evaluate(run)
    [n] = sent(r)
    assert n.status == N.SENT and n.recipient == alice and n.read_at is None  # the inbox: delivered on write
    assert "failed (oom)" in n.title and "CUDA out of memory" in n.body
    assert n.url == f"http://localhost:8000{run.get_absolute_url()}"
    # A replayed batch and a second evaluation: nothing more.
    push(project, "r1", {"type": "state", "state": "running"}, failed(1))
    evaluate(run)
    evaluate(run)
    assert len(sent(r)) == 1
    # It recovers and fails again: a new episode.
    push(project, "r1", {"id": "back", "type": "state", "state": "running"})
    evaluate(run)
    assert len(sent(r)) == 1
    push(project, "r1", failed(2, "NaN loss"))
    evaluate(run)
    assert [n.body.count("NaN loss") for n in sent(r)] == [0, 1]


def test_what_predates_a_rule_is_recorded_but_never_sent(project, alice):
    push(project, "old", failed(1))
    r = rule(project, alice, Trigger.RUN_FAILED)
    assert sent(r) == []
    [baseline] = r.notifications.all()
    assert baseline.status == N.SUPPRESSED and baseline.suppressed_because == "predates the rule"
    evaluate(Run.objects.get(external_id="old"))
    assert sent(r) == []


def test_stalled_notifies_per_stall_episode(project, alice):
    r = rule(project, alice, Trigger.RUN_STALLED)
    run = push(project, "r1", {"type": "metric", "key": "loss", "value": 1.0})
    later = timezone.now() + timedelta(hours=2)
    assert services.flag_stalled_runs(now=later)
    evaluate(run)
    evaluate(run)
    assert len(sent(r)) == 1 and "stalled" in sent(r)[0].title
    push(project, "r1", {"type": "metric", "key": "loss", "value": 0.9, "step": 1})  # news: recovered
    evaluate(run)
    assert len(sent(r)) == 1
    assert services.flag_stalled_runs(now=later + timedelta(hours=2))
    evaluate(run)
    assert len(sent(r)) == 2


def test_budget_notifies_at_the_threshold_and_again_at_the_whole_budget(project, alice):
    r = rule(project, alice, Trigger.RUN_BUDGET, threshold=0.5)
    services.update_run_settings(project, "r1", budget_usd=Decimal("1.00"))
    run = push(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 0.3})
    evaluate(run)
    assert sent(r) == []
    run = push(project, "r1", {"type": "agent.turn", "turn": 2, "cost_usd": 0.3})
    evaluate(run)
    assert [n.episode for n in sent(r)] == ["budget:0.5"]
    assert "$0.60 of $1.00" in sent(r)[0].body
    run = push(project, "r1", {"type": "agent.turn", "turn": 3, "cost_usd": 0.5})
    evaluate(run)
    evaluate(run)
    assert [n.episode for n in sent(r)] == ["budget:0.5", "budget:1"]


def test_token_budgets_count_too(project, alice):
    r = rule(project, alice, Trigger.RUN_BUDGET)  # default 0.8
    services.update_run_settings(project, "r1", budget_tokens=1000)
    run = push(project, "r1", {"type": "agent.turn", "turn": 1, "tokens_in": 700, "tokens_out": 150})
    evaluate(run)
    assert [n.episode for n in sent(r)] == ["budget:0.8"] and "tokens" in sent(r)[0].body


def test_budget_guard_asks_for_one_audited_stop_and_the_notification_says_so(project, alice):
    services.update_project(project, budget_guard=True)
    r = rule(project, alice, Trigger.RUN_BUDGET)
    services.update_run_settings(project, "r1", budget_usd=Decimal("1.00"))
    run = push(
        project,
        "r1",
        {"type": "state", "state": "running"},
        {"type": "agent.turn", "turn": 1, "cost_usd": 1.2},
    )
    first = evaluate(run)
    second = evaluate(run)
    assert first.stop_requested and not second.stop_requested
    [audit] = AuditEvent.objects.filter(verb="run.stop_requested", object_id=str(run.pk))
    assert audit.actor_label == "system" and audit.detail["budget_guard"] is True
    whole = [n for n in sent(r) if n.episode == "budget:1"][0]
    assert "budget guard asked its source to stop it" in whole.body


def test_without_the_guard_nothing_is_stopped(project, alice):
    services.update_run_settings(project, "r1", budget_usd=Decimal("1.00"))
    run = push(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 5})
    assert not evaluate(run).stop_requested


def test_regression_uses_the_project_threshold_once_per_best(project, alice):
    services.update_project(project, regression_threshold=0.1)
    r = rule(project, alice, Trigger.RUN_REGRESSED)
    run = push(project, "r1", {"type": "score", "score": 0.8, "ts": "2026-01-01T00:00:00Z"})
    evaluate(run)
    run = push(project, "r1", {"type": "score", "score": 0.75, "ts": "2026-01-01T00:01:00Z"})  # within 0.1
    evaluate(run)
    assert sent(r) == []
    run = push(project, "r1", {"type": "score", "score": 0.6, "ts": "2026-01-01T00:02:00Z"})
    evaluate(run)
    run = push(project, "r1", {"type": "score", "score": 0.5, "ts": "2026-01-01T00:03:00Z"})
    evaluate(run)
    [n] = sent(r)
    assert "regressed" in n.title and "0.8" in n.body
    run = push(project, "r1", {"type": "score", "score": 0.9, "ts": "2026-01-01T00:04:00Z"})  # new best
    run = push(project, "r1", {"type": "score", "score": 0.7, "ts": "2026-01-01T00:05:00Z"})
    evaluate(run)
    assert len(sent(r)) == 2


def test_a_regression_rule_needs_a_threshold(project, alice):
    with pytest.raises(InvalidInput) as err:
        rule(project, alice, Trigger.RUN_REGRESSED)
    assert err.value.field == "threshold"
    assert rule(project, alice, Trigger.RUN_REGRESSED, threshold=0.2).threshold == 0.2


def test_new_project_best_notifies_for_each_improvement_after_the_rule(project, alice):
    push(project, "r1", {"type": "score", "score": 0.5})
    # Unverified scores count only for a rule that asks for candidates (tests/tracking/test_inbox.py).
    r = rule(project, alice, Trigger.SCORE_NEW_BEST, include_candidates=True)
    run = push(project, "r2", {"type": "score", "score": 0.4})
    evaluate(run)
    assert sent(r) == []
    run = push(project, "r2", {"type": "score", "score": 0.7})
    evaluate(run)
    evaluate(Run.objects.get(external_id="r1"))
    [n] = sent(r)
    assert (
        "0.7" in n.title
        and "the previous best was 0.5 (+0.2)" in n.body
        and n.subject == f"project:{project.pk}"
    )


def test_no_progress_after_n_turns_without_a_better_score(project, alice):
    r = rule(project, alice, Trigger.RUN_NO_PROGRESS, window=5)
    events = [
        {"type": "state", "state": "running"},
        {"type": "score", "score": 0.5, "ts": "2026-01-01T00:00:00Z"},
    ]
    events += [
        {"type": "agent.turn", "turn": n, "cost_usd": 0.1, "ts": f"2026-01-01T00:01:{n:02d}Z"}
        for n in range(1, 5)
    ]
    run = push(project, "r1", *events)
    evaluate(run)
    assert sent(r) == []
    run = push(
        project, "r1", {"type": "agent.turn", "turn": 5, "cost_usd": 0.1, "ts": "2026-01-01T00:02:00Z"}
    )
    evaluate(run)
    [n] = sent(r)
    assert "no better score for 5 turns" in n.title and "$0.50" in n.body


def test_no_progress_by_the_default_50_turns(project, alice):
    r = rule(project, alice, Trigger.RUN_NO_PROGRESS)
    run = push(
        project,
        "r1",
        {"type": "state", "state": "running"},
        *[{"type": "agent.turn", "turn": n} for n in range(1, 50)],
    )
    evaluate(run)
    assert sent(r) == []
    evaluate(push(project, "r1", {"type": "agent.turn", "turn": 50}))
    assert len(sent(r)) == 1 and "(this rule: 50 turns)" in sent(r)[0].body


def test_no_progress_by_spend_only(project, alice):
    r = rule(project, alice, Trigger.RUN_NO_PROGRESS, threshold=1.0)  # no window: spend only
    run = push(
        project,
        "r1",
        {"type": "state", "state": "running"},
        {"type": "agent.turn", "turn": 1, "cost_usd": 1.5},
    )
    evaluate(run)
    assert len(sent(r)) == 1 and "(this rule: $1.00)" in sent(r)[0].body
    cheap = push(
        project,
        "r2",
        {"type": "state", "state": "running"},
        *[{"type": "agent.turn", "turn": n, "cost_usd": 0.001} for n in range(1, 80)],
    )
    evaluate(cheap)
    assert len(sent(r)) == 1  # 79 cheap turns: not this rule's concern


def grep_turn(n: int, q="needle") -> dict:
    return {
        "type": "agent.turn",
        "turn": n,
        "tokens_in": 500,
        "cost_usd": 0.02,
        "tool_calls": [{"name": "grep", "arguments": {"q": q}}],
    }


def test_a_loop_is_found_kept_for_the_badge_and_notified_once_as_it_grows(project, alice):
    r = rule(project, alice, Trigger.RUN_LOOP, window=4)
    run = push(
        project, "r1", *[grep_turn(n, q=f"q{n}") for n in range(1, 4)], *[grep_turn(n) for n in range(4, 7)]
    )
    evaluate(run)
    finding = LoopFinding.objects.get(run=run)
    assert finding.repeats == 3 and sent(r) == []  # found (the badge's 3), below the rule's 4
    run = push(project, "r1", *[grep_turn(n) for n in range(7, 10)])
    evaluate(run)
    finding.refresh_from_db()
    assert (finding.first_turn, finding.last_turn, finding.repeats) == (4, 9, 6)
    assert finding.wasted_tokens == 2500 and finding.wasted_usd == Decimal("0.1")
    [n] = sent(r)
    assert 'grep({"q":"needle"})' in n.title and "turns 4–9" in n.body
    run = push(project, "r1", grep_turn(10))
    evaluate(run)
    assert len(sent(r)) == 1  # the same stretch, grown


def test_a_healthy_run_raises_no_loop(project, alice):
    r = rule(project, alice, Trigger.RUN_LOOP)
    tools = ["ls", "read", "edit", "test", "read", "grep", "edit", "test", "commit"]
    run = push(
        project,
        "r1",
        *[
            {
                "type": "agent.turn",
                "turn": i,
                "tool_calls": [{"name": t, "arguments": {"path": "src/app.py"}}],
            }
            for i, t in enumerate(tools)
        ],
    )
    evaluate(run)
    assert not LoopFinding.objects.filter(run=run, repeats__gte=3).exists() and sent(r) == []


def test_downgraded_once_per_profile(project, alice):
    r = rule(project, alice, Trigger.RUN_DOWNGRADED)
    run = services.update_run_settings(project, "r1", requested_profile="opus", actual_profile="sonnet")
    evaluate(run)
    evaluate(run)
    [n] = sent(r)
    assert "asked opus, got sonnet" in n.body


def verified(project, bob, value=0.5):
    push(project, "s", {"type": "score", "score": value})
    sub = project.submissions.order_by("-id").first()
    lifecycle.request_verification(sub, by=bob)
    return lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult("passed", 0, "validator output", "ok")
    )


def test_submission_needs_review_then_approved_then_arena_result(project, alice, bob):
    review = rule(project, alice, Trigger.SUBMISSION_NEEDS_REVIEW)
    approved = rule(project, alice, Trigger.SUBMISSION_APPROVED)
    arena = rule(project, alice, Trigger.ARENA_RESULT)
    sub = verified(project, bob)
    alert_evaluation.evaluate_submission(sub.pk)
    alert_evaluation.evaluate_submission(sub.pk)
    assert len(sent(review)) == 1 and "waiting for review" in sent(review)[0].title
    lifecycle.review(sub, by=alice, verdict="approve")
    alert_evaluation.evaluate_submission(sub.pk)
    assert len(sent(approved)) == 1 and "ready to upload" in sent(approved)[0].title
    sub.refresh_from_db()
    handoff.mark_uploaded(sub, by=alice)
    sub.refresh_from_db()
    handoff.record_arena_result(sub, by=alice, rank=3, arena_score=1510.0)
    alert_evaluation.evaluate_submission(sub.pk)
    alert_evaluation.evaluate_submission(sub.pk)
    [n] = sent(arena)
    assert "rank 3" in n.title and "1510" in n.title and n.submission_id == sub.pk


def test_source_failing_after_n_failures_once_per_streak(project, alice):
    r = rule(project, alice, Trigger.SOURCE_FAILING, window=2)
    services.source_health(project)
    services.record_source_failure(project, kind="server_error", message="HTTP 502", retry_in=1)
    alert_evaluation.evaluate_source(project.pk)
    assert sent(r) == []
    services.record_source_failure(project, kind="server_error", message="HTTP 502", retry_in=1)
    services.record_source_failure(project, kind="server_error", message="HTTP 503", retry_in=1)
    alert_evaluation.evaluate_source(project.pk)
    alert_evaluation.evaluate_source(project.pk)
    [n] = sent(r)
    assert "failing (3 in a row)" in n.title and "HTTP 503" in n.body
    services.record_source_success(project, active_runs=0, next_in=1)
    assert SourceHealth.objects.get(project=project).consecutive_failures == 0
    for _ in range(2):
        services.record_source_failure(project, kind="timeout", message="slow", retry_in=1)
    alert_evaluation.evaluate_source(project.pk)
    assert len(sent(r)) == 2


def test_muted_rules_and_snoozed_runs_record_but_do_not_send(project, alice):
    muted = rule(project, alice, Trigger.RUN_FAILED)
    services.update_alert_rule(muted, by=alice, muted=True)
    other = rule(project, alice, Trigger.RUN_FAILED, channel=Channel.EMAIL, target="team@example.com")
    push(project, "r2", {"type": "state", "state": "running"})
    services.snooze_run(Run.objects.get(external_id="r2"), by=alice, hours=2)
    run1 = push(project, "r1", failed(1))
    run2 = push(project, "r2", failed(1))
    evaluate(run1)
    evaluate(run2)
    assert sent(muted) == []
    assert {n.suppressed_because for n in muted.notifications.all()} == {"rule muted"}
    assert [n.run_id for n in sent(other)] == [run1.pk]
    assert other.notifications.get(run=run2).suppressed_because == "run snoozed"
    # Unmuting does not send what happened meanwhile.
    services.update_alert_rule(muted, by=alice, muted=False)
    evaluate(run1)
    assert sent(muted) == []


def test_email_and_webhook_notifications_wait_for_delivery(project, alice):
    mail = rule(project, alice, Trigger.RUN_FAILED, channel=Channel.EMAIL, target="team@example.com")
    hook = rule(project, alice, Trigger.RUN_FAILED, channel=Channel.WEBHOOK, target="https://hooks.example/x")
    assert len(hook.secret) == 64 and mail.secret == ""
    result = evaluate(push(project, "r1", failed(1)))
    assert sorted(result.to_deliver) == sorted(
        n.pk for n in Notification.objects.filter(rule__in=[mail, hook])
    )
    assert {n.status for n in Notification.objects.all()} == {N.PENDING}


def test_an_inbox_for_someone_who_left_the_project_stays_empty(project, alice, bob):
    r = rule(project, alice, Trigger.RUN_FAILED, recipient="bob")
    services.remove_member(project, bob, by=alice)
    evaluate(push(project, "r1", failed(1)))
    assert r.notifications.get().suppressed_because == "recipient no longer a member"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"trigger": "run.exploded"}, "trigger"),
        ({"channel": "pager"}, "channel"),
        ({"trigger": Trigger.RUN_FAILED, "window": 3}, "window"),
        ({"trigger": Trigger.RUN_BUDGET, "threshold": 1.5}, "threshold"),
        ({"trigger": Trigger.RUN_BUDGET, "threshold": float("nan")}, "threshold"),
        ({"trigger": Trigger.RUN_LOOP, "window": 2}, "window"),
        ({"trigger": Trigger.RUN_LOOP, "window": 2.5}, "window"),
        ({"channel": Channel.EMAIL, "target": "not-an-address", "recipient": None}, "target"),
        ({"channel": Channel.WEBHOOK, "target": "ftp://hooks.example/x", "recipient": None}, "target"),
        ({"channel": Channel.WEBHOOK, "target": "http://10.0.0.7/hook", "recipient": None}, "target"),
        ({"channel": Channel.SLACK, "target": "http://169.254.169.254/latest", "recipient": None}, "target"),
        ({"recipient": "carol"}, "recipient"),
        ({"recipient": "nobody"}, "recipient"),
    ],
)
def test_a_bad_rule_is_refused_with_its_field_and_nothing_is_written(project, alice, carol, fields, field):
    args = {"trigger": Trigger.RUN_FAILED, "channel": Channel.INBOX, "recipient": "alice", **fields}
    with pytest.raises(InvalidInput) as err:
        services.create_alert_rule(project, by=alice, **args)
    assert err.value.field == field
    assert not project.alert_rules.exists()


def test_a_test_send_is_its_own_episode_every_time(project, alice):
    r = rule(project, alice, Trigger.RUN_FAILED, channel=Channel.EMAIL, target="team@example.com")
    a, b = services.send_test(r, by=alice), services.send_test(r, by=alice)
    assert a.subject != b.subject and a.status == b.status == N.PENDING
    assert AuditEvent.objects.filter(verb="alert_rule.test_sent").count() == 2


def test_mark_read_touches_only_the_persons_own(project, alice, bob):
    mine = rule(project, alice, Trigger.RUN_FAILED)
    theirs = rule(project, alice, Trigger.RUN_FAILED, recipient="bob")
    evaluate(push(project, "r1", failed(1)))
    assert services.mark_read(alice) == 1
    assert mine.notifications.get().read_at is not None and theirs.notifications.get().read_at is None
    assert services.mark_read(bob, [mine.notifications.get().pk]) == 0


def test_someone_who_left_the_project_no_longer_reads_about_it(project, alice, bob):
    from smrweb.tracking.queries import alerts as alert_reads

    rule(project, alice, Trigger.RUN_FAILED, recipient="bob")
    evaluate(push(project, "r1", failed(1)))
    assert alert_reads.unread_count(bob) == 1 and alert_reads.inbox(bob).count() == 1
    services.remove_member(project, bob, by=alice)
    assert alert_reads.unread_count(bob) == 0 and alert_reads.inbox(bob).count() == 0
