"""Issue 33 §5, an inbox a team can live in (services/alerts/, queries/alerts.py): score.new_best waits
for a verified score unless the rule asks for candidates, one budget notification per crossing, duplicate
rules refused naming the existing one, email digests for the busy triggers (held, due after their
window, claimed once), and the inbox grouped per rule and hour with unread mentions first, filtered by
kind and project, marked read per filter up to what the reader saw."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.errors import DuplicateRule, InvalidInput
from smrweb.tracking.models import Channel, Notification, NotificationStatus, Run, Trigger
from smrweb.tracking.queries import alerts as reads
from smrweb.tracking.services import submissions as lifecycle
from smrweb.tracking.services.alerts import delivery as alert_delivery
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from tests.tracking.test_alerts import evaluate, push, rule, sent

pytestmark = pytest.mark.django_db
N = NotificationStatus


def candidate(project, run_id: str, value: float):
    push(project, run_id, {"type": "score", "score": value})
    return project.submissions.order_by("-id").first()


def verify(sub, by):
    lifecycle.request_verification(sub, by=by)
    return lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "ok", "ok"))


def needs_review(project, bob, n: int) -> list:
    subs = []
    start = project.submissions.count()  # a new score each time (a repeated one is the same event)
    for i in range(start, start + n):
        sub = verify(candidate(project, f"s{i % 3}", 0.1 + i / 100), bob)
        alert_evaluation.evaluate_submission(sub.pk)
        subs.append(sub)
    return subs


# --- score.new_best: verified scores (P2-6) ---------------------------------------------------------


def test_new_best_waits_for_the_score_to_be_verified(project, alice, bob):
    """The walkthrough's P2-6: "New best" announced an unverified score while the project's best counts
    verified submissions only. Now the candidate announces nothing; its verification does."""
    r = rule(project, alice, Trigger.SCORE_NEW_BEST)
    sub = candidate(project, "r1", 0.7)
    evaluate(Run.objects.get(external_id="r1"))
    assert sent(r) == []  # old code: "New best … Not verified yet"
    verify(sub, bob)
    alert_evaluation.evaluate_submission(sub.pk)
    evaluate(Run.objects.get(external_id="r1"))
    [n] = sent(r)
    assert "0.7" in n.title and "Not verified yet" not in n.body and n.submission_id == sub.pk


def test_an_invalid_best_score_never_announces_a_new_best(project, alice, bob):
    r = rule(project, alice, Trigger.SCORE_NEW_BEST)
    verify(candidate(project, "r1", 0.5), bob)
    bad = candidate(project, "r2", 0.9)
    lifecycle.request_verification(bad, by=bob)
    lifecycle.record_verification(bad.pk, lifecycle.VerificationResult("failed", 1, "no step()", "bad"))
    evaluate(Run.objects.get(external_id="r2"))
    alert_evaluation.evaluate_submission(bad.pk)
    assert [n.submission_id for n in sent(r)] == []  # 0.5 predates nothing: it was the first, before r2


def test_a_rule_can_ask_for_candidates_and_then_announces_once(project, alice, bob):
    r = rule(project, alice, Trigger.SCORE_NEW_BEST, include_candidates=True)
    sub = candidate(project, "r1", 0.7)
    evaluate(Run.objects.get(external_id="r1"))
    [n] = sent(r)
    assert "Not verified yet" in n.body
    verify(sub, bob)
    alert_evaluation.evaluate_submission(
        sub.pk
    )  # the same submission verified: the same episode, nothing more
    assert len(sent(r)) == 1


def test_include_candidates_is_for_new_best_only(project, alice):
    with pytest.raises(InvalidInput) as err:
        rule(project, alice, Trigger.RUN_FAILED, include_candidates=True)
    assert err.value.field == "include_candidates" and not project.alert_rules.exists()


# --- one notification per crossing (P3) -----------------------------------------------------------------


def test_a_batch_past_80_and_100_percent_is_one_notification(project, alice):
    """The walkthrough: a run that jumped past 80 % and 100 % in one batch got two identical "at 121 %"
    notifications."""
    r = rule(project, alice, Trigger.RUN_BUDGET)
    services.update_run_settings(project, "r1", budget_usd=Decimal("1.00"))
    run = push(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 1.21})
    evaluate(run)
    evaluate(run)
    [n] = sent(r)
    assert n.episode == "budget:1" and "at 121% of its budget" in n.title
    assert "this rule notifies at 100%" in n.body


def test_crossings_in_separate_batches_still_notify_each(project, alice):
    r = rule(project, alice, Trigger.RUN_BUDGET)
    services.update_run_settings(project, "r1", budget_usd=Decimal("1.00"))
    evaluate(push(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 0.85}))
    evaluate(push(project, "r1", {"type": "agent.turn", "turn": 2, "cost_usd": 0.3}))
    assert [n.episode for n in sent(r)] == ["budget:0.8", "budget:1"]


# --- duplicate rules (P3) -------------------------------------------------------------------------------


def test_a_duplicate_rule_is_refused_naming_the_existing_one(project, alice):
    first = rule(
        project, alice, Trigger.SUBMISSION_NEEDS_REVIEW, channel=Channel.EMAIL, target="Team@example.com"
    )
    with pytest.raises(DuplicateRule) as err:
        rule(
            project, alice, Trigger.SUBMISSION_NEEDS_REVIEW, channel=Channel.EMAIL, target="team@example.com"
        )
    assert f"rule #{first.pk}" in err.value.message and "email Team@example.com" in err.value.message
    assert err.value.existing == first and err.value.as_dict()["code"] == "duplicate_rule"
    inbox = rule(project, alice, Trigger.RUN_BUDGET)
    with pytest.raises(DuplicateRule):
        rule(project, alice, Trigger.RUN_BUDGET)
    assert project.alert_rules.count() == 2
    # Another option, recipient or channel is another rule.
    rule(project, alice, Trigger.RUN_BUDGET, threshold=0.5)
    rule(project, alice, Trigger.RUN_BUDGET, recipient="bob")
    rule(project, alice, Trigger.RUN_BUDGET, channel=Channel.EMAIL, target="team@example.com")
    assert project.alert_rules.count() == 5 and inbox.pk


# --- email digests (P2-1) -------------------------------------------------------------------------------


def test_busy_triggers_email_a_digest_by_default_and_failures_go_at_once(project, alice):
    review = rule(
        project, alice, Trigger.SUBMISSION_NEEDS_REVIEW, channel=Channel.EMAIL, target="r@example.com"
    )
    best = rule(project, alice, Trigger.SCORE_NEW_BEST, channel=Channel.EMAIL, target="r@example.com")
    failed = rule(project, alice, Trigger.RUN_FAILED, channel=Channel.EMAIL, target="r@example.com")
    hourly = rule(
        project,
        alice,
        Trigger.SUBMISSION_APPROVED,
        channel=Channel.EMAIL,
        target="r@example.com",
        digest_minutes=60,
    )
    now_ = rule(
        project,
        alice,
        Trigger.SUBMISSION_NEEDS_REVIEW,
        channel=Channel.EMAIL,
        target="other@example.com",
        delivery="immediate",
    )
    assert (review.delivery, review.digest_minutes) == ("digest", 30)
    assert best.delivery == "digest" and failed.delivery == "immediate" and failed.digest_minutes is None
    assert (hourly.delivery, hourly.digest_minutes) == ("digest", 60) and now_.delivery == "immediate"
    inbox = rule(project, alice, Trigger.SUBMISSION_NEEDS_REVIEW)
    assert inbox.delivery == "immediate"  # the inbox groups by itself


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"channel": Channel.INBOX, "recipient": "alice", "delivery": "digest"}, "delivery"),
        ({"channel": Channel.EMAIL, "target": "a@example.com", "delivery": "weekly"}, "delivery"),
        ({"channel": Channel.EMAIL, "target": "a@example.com", "digest_minutes": 2}, "digest_minutes"),
        ({"channel": Channel.EMAIL, "target": "a@example.com", "digest_minutes": 10**6}, "digest_minutes"),
        ({"channel": Channel.EMAIL, "target": "a@example.com", "digest_minutes": 7.5}, "digest_minutes"),
        (
            {
                "channel": Channel.EMAIL,
                "target": "a@example.com",
                "delivery": "immediate",
                "digest_minutes": 30,
            },
            "digest_minutes",
        ),
    ],
)
def test_a_bad_delivery_is_refused_with_its_field(project, alice, fields, field):
    with pytest.raises(InvalidInput) as err:
        services.create_alert_rule(project, by=alice, trigger=Trigger.SUBMISSION_NEEDS_REVIEW, **fields)
    assert err.value.field == field and not project.alert_rules.exists()


def test_a_digest_holds_its_notifications_until_its_window_and_is_claimed_once(project, alice, bob):
    r = rule(
        project,
        alice,
        Trigger.SUBMISSION_NEEDS_REVIEW,
        channel=Channel.EMAIL,
        target="r@example.com",
        digest_minutes=10,
    )
    to_deliver = []
    for i in range(3):
        sub = verify(candidate(project, "s", 0.1 * (i + 1)), bob)
        to_deliver += alert_evaluation.evaluate_submission(sub.pk).to_deliver
    assert to_deliver == []  # nothing queued one by one (old code: 3 emails)
    held = list(r.notifications.all())
    assert {(n.status, n.in_digest) for n in held} == {(N.HELD, True)}
    assert alert_delivery.due_deliveries(timezone.now() + timedelta(hours=1)) == []  # never sent on its own
    assert alert_delivery.digests_due() == []  # the window is not over
    later = timezone.now() + timedelta(minutes=11)
    assert alert_delivery.digests_due(later) == [r.pk]
    batch = alert_delivery.claim_digest(r.pk, later)
    assert [n.pk for n in batch] == sorted((n.pk for n in held), reverse=True)  # newest first
    assert alert_delivery.claim_digest(r.pk, later) == []  # a redelivered task sends nothing more
    alert_delivery.finish_digest(batch)
    assert set(r.notifications.values_list("status", flat=True)) == {N.SENT}
    # A failed attempt holds them again for the next digest.
    sub = verify(candidate(project, "s", 0.9), bob)
    alert_evaluation.evaluate_submission(sub.pk)
    batch = alert_delivery.claim_digest(r.pk, later + timedelta(minutes=11))
    alert_delivery.finish_digest(batch, error="the mail server: timeout", retry=True)
    assert r.notifications.get(submission=sub).status == N.HELD


# --- the inbox: groups, mentions first, filters, mark read (P2-1) -------------------------------------


def test_the_inbox_groups_a_rules_notifications_and_puts_mentions_first(project, alice, bob):
    rule(project, alice, Trigger.SUBMISSION_NEEDS_REVIEW)
    subs = needs_review(project, bob, 12)
    run = Run.objects.get(external_id="s0")
    services.add_comment(by=bob, body="@alice can you look? **#approach** smaller net", run=run)
    filt = reads.InboxFilter()
    [mention] = reads.pinned_mentions(alice, filt)
    assert mention.kind == "mention"
    rows = reads.inbox_groups(alice, filt)
    [group] = reads.fill_groups(alice, rows, filt)  # the pinned mention is not repeated below
    assert (group.count, group.unread) == (12, 12)
    assert group.label == "12 submissions waiting for review · Hill climb"
    assert [n.submission_id for n in group.items] == [s.pk for s in reversed(subs)]  # newest first
    # Read, the mention takes its place in time among the rows.
    services.mark_read(alice, [mention.pk])
    assert reads.pinned_mentions(alice, filt) == []
    assert len(reads.fill_groups(alice, reads.inbox_groups(alice, filt), filt)) == 2


def test_filters_by_kind_and_project_and_mark_read_per_filter_up_to_what_was_seen(
    project, other_project, alice, bob, carol
):
    rule(project, alice, Trigger.SUBMISSION_NEEDS_REVIEW)
    failures = rule(project, alice, Trigger.RUN_FAILED)
    needs_review(project, bob, 4)
    evaluate(push(project, "f", {"type": "state", "state": "failed", "failure": {"family": "oom"}}))
    kind = reads.inbox_filter(alice, {"kind": "submission.needs_review"})
    assert reads.inbox(alice).filter(kind.q()).count() == 4
    assert reads.inbox(alice).filter(reads.inbox_filter(alice, {"kind": "alert"}).q()).count() == 5
    assert reads.inbox(alice).filter(reads.inbox_filter(alice, {"project": "hill"}).q()).count() == 5
    seen = reads.inbox(alice).filter(kind.q()).first().pk
    needs_review(project, bob, 1)  # arrives after the page was shown
    assert services.mark_read(alice, where=kind.q(), upto=seen) == 4
    assert reads.unread_count(alice) == 2  # the late one and the failure
    assert failures.notifications.get().read_at is None


@pytest.mark.parametrize(
    ("params", "field"),
    [({"kind": "pager"}, "kind"), ({"project": "other"}, "project"), ({"unread": "maybe"}, "unread")],
)
def test_a_bad_filter_is_refused_with_its_field(project, other_project, alice, params, field):
    with pytest.raises(InvalidInput) as err:
        reads.inbox_filter(alice, params)  # "other" is carol's: alice cannot see it
    assert err.value.field == field


def test_a_group_key_marks_only_its_group(project, alice, bob):
    rule(project, alice, Trigger.SUBMISSION_NEEDS_REVIEW)
    rule(project, alice, Trigger.SUBMISSION_APPROVED)
    needs_review(project, bob, 3)
    filt = reads.InboxFilter()
    [group] = reads.fill_groups(alice, reads.inbox_groups(alice, filt), filt)
    assert services.mark_read(alice, where=reads.group_q(group.key), upto=group.top) == 3
    with pytest.raises(InvalidInput) as err:
        reads.group_q("1:x:notanumber")
    assert err.value.field == "group"
    assert Notification.objects.filter(recipient=alice, read_at__isnull=True).count() == 0
