"""The second-person rule is about approvers (issue 33, P0-B): with "Require a second person to
approve" on, a submission is approved by two distinct people whatever verified it (auto-verify has no
proposer); the proposer's own approval never counts, a person counts once; with the rule off one approval
suffices. Approved submissions that would not pass are listed, never changed. Bulk verify / approve
and auto-verify catching up on the candidates already waiting."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Review, Role, Submission, SubmissionStatus
from smrweb.tracking.services import handoff
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
S = SubmissionStatus


def scored(project, value=0.5, run="r1") -> Submission:
    services.ingest_events(project, run, parse_events(json.dumps([{"type": "score", "score": value}])))
    return Submission.objects.filter(project=project).order_by("-id").first()


def passed(sub):
    return lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "ok", "exited 0"))


def auto_verified(project, value=0.5) -> Submission:
    """Verified by the system, as with the project's auto-verify setting: nobody proposed it."""
    sub = lifecycle.request_verification(scored(project, value), by=None, automatic=True)
    return passed(sub)


@pytest.fixture
def rule(project, alice):
    return services.update_project(project, require_second_reviewer=True, by=alice)


@pytest.fixture
def dave(project):
    dave = UserFactory(username="dave")
    services.add_member(project, dave, role=Role.REVIEWER)
    return dave


def test_an_auto_verified_submission_needs_two_distinct_approvers(rule, alice, bob):
    sub = auto_verified(rule)
    assert sub.proposed_by is None
    first = lifecycle.review(sub, by=alice, verdict="approve")
    assert first.counted and first.submission.status == S.VERIFIED  # not approved by one person
    assert first.message == (
        "Approval 1 of 2 recorded: it needs one more approval by someone other than alice."
    )
    sub.refresh_from_db()
    assert lifecycle.approvals(sub).as_dict() == {
        "counted": 1,
        "needed": 2,
        "by": ["alice"],
        "still_needed": "one more approval by someone other than alice",
    }
    assert lifecycle.allowed_actions(sub, bob) == {"review"}  # no "mark_uploaded" yet
    recorded = AuditEvent.objects.get(verb="review.approval_recorded")
    assert recorded.actor_label == "alice"
    assert recorded.detail["counted"] == 1 and recorded.detail["needed"] == 2
    assert [label for _, label in lifecycle.approval_log(sub)] == ["approval 1 of 2"]

    second = lifecycle.review(sub, by=bob, verdict="approve", comment="checked")
    assert second.submission.status == S.APPROVED
    move = second.submission.transitions.get(to_status=S.APPROVED)
    assert move.by_label == "bob" and move.reason == "approval 2 of 2 · alice, bob: checked"
    audit = AuditEvent.objects.get(verb="submission.approved")
    assert audit.detail["approvers"] == ["alice", "bob"]


def test_the_same_person_twice_counts_once(rule, alice):
    sub = auto_verified(rule)
    lifecycle.review(sub, by=alice, verdict="approve")
    again = lifecycle.review(sub, by=alice, verdict="approve")
    assert not again.counted and "You approved it already (1 of 2)" in again.message
    sub.refresh_from_db()
    assert sub.status == S.VERIFIED and lifecycle.approvals(sub).counted == 1
    assert "someone other than alice" in lifecycle.approval_refusal(sub, alice)


def test_the_proposers_approval_never_counts(rule, alice, bob, dave):
    sub = passed(lifecycle.request_verification(scored(rule), by=bob))  # bob proposed it
    assert lifecycle.review(sub, by=bob, verdict="approve").counted is False
    assert lifecycle.review(sub, by=alice, verdict="approve").submission.status == S.VERIFIED
    sub.refresh_from_db()
    left = lifecycle.approvals(sub)
    assert (left.counted, left.needed) == (1, 2)
    assert left.still_needed() == "one more approval by someone other than alice or bob (the proposer)"
    assert lifecycle.review(sub, by=dave, verdict="approve").submission.status == S.APPROVED
    assert [label for _, label in lifecycle.approval_log(sub)] == [
        "not counted — the proposer's own",
        "approval 1 of 2",
        "approval 2 of 2",
    ]


def test_without_the_rule_one_approval_suffices(project, alice, bob):
    sub = auto_verified(project)
    outcome = lifecycle.review(sub, by=alice, verdict="approve", comment="fine")
    assert outcome.submission.status == S.APPROVED and outcome.message == "Submission approved."
    assert outcome.submission.transitions.get(to_status=S.APPROVED).reason == "fine"
    # A proposer may approve their own, too.
    sub = passed(lifecycle.request_verification(scored(project, 0.6), by=bob))
    assert lifecycle.review(sub, by=bob, verdict="approve").submission.status == S.APPROVED


def test_one_rejection_still_rejects(rule, alice):
    sub = auto_verified(rule)
    outcome = lifecycle.review(sub, by=alice, verdict="reject", comment="overfits")
    assert outcome.submission.status == S.REJECTED


def test_approvals_given_before_the_rule_held_are_listed_not_changed(project, alice, bob, dave):
    one = auto_verified(project, 0.5)
    lifecycle.review(one, by=alice, verdict="approve")  # alone, before the rule
    proposed = passed(lifecycle.request_verification(scored(project, 0.6), by=bob))
    lifecycle.review(proposed, by=alice, verdict="approve")  # proposer + one approver: one approval
    shipped = auto_verified(project, 0.7)
    lifecycle.review(shipped, by=alice, verdict="approve")
    handoff.mark_uploaded(Submission.objects.get(pk=shipped.pk), by=alice)
    waiting = auto_verified(project, 0.8)  # verified, not approved: nothing to list
    assert not lifecycle.approved_below_rule(project).exists()  # the rule is off: all pass

    services.update_project(project, require_second_reviewer=True, by=alice)
    two = auto_verified(project, 0.9)
    lifecycle.review(two, by=alice, verdict="approve")
    lifecycle.review(two, by=dave, verdict="approve")
    listed = lifecycle.approved_below_rule(project)
    assert {s.pk: s.approvers for s in listed} == {one.pk: 1, proposed.pk: 1, shipped.pk: 1}
    assert Submission.objects.get(pk=shipped.pk).status == S.UPLOADED  # listed, not changed
    assert Submission.objects.get(pk=waiting.pk).status == S.VERIFIED
    assert Review.objects.filter(submission=two, counted=True).count() == 2


def test_bulk_approve_skips_what_the_person_may_not_approve_and_says_why(rule, alice, bob):
    mine = [passed(lifecycle.request_verification(scored(rule, 0.1 * i), by=bob)) for i in range(2)]
    others = [auto_verified(rule, 1 + i) for i in range(3)]
    lifecycle.review(others[0], by=alice, verdict="approve")  # needs one more: bob's approves it
    candidate = scored(rule, 9.0)
    ids = [s.pk for s in [*others, *mine, candidate]] + [987654]
    results = lifecycle.bulk_act(rule, by=bob, action="approve", ids=ids)
    by_id = {r.id: r for r in results}
    assert by_id[others[0].pk].outcome == "approved"
    assert [by_id[s.pk].outcome for s in others[1:]] == ["approval_recorded"] * 2
    assert [by_id[s.pk].why for s in mine] == ["proposed", "proposed"]
    assert by_id[candidate.pk].why == "status" and by_id[987654].why == "missing"
    assert not Review.objects.filter(submission__in=mine).exists()  # skipped, not recorded
    assert lifecycle.bulk_summary("approve", results) == (
        "1 approved, 2 approvals recorded (waiting for a second approver), "
        "4 skipped: 2 you proposed them, 1 not in a status for this, 1 not in this project"
    )
    assert (
        lifecycle.bulk_summary("approve", [r for r in results if r.why in ("", "proposed")])
        == "1 approved, 2 approvals recorded (waiting for a second approver), 2 skipped: you proposed them"
    )
    # Audited per submission.
    assert AuditEvent.objects.filter(verb="review.approval_recorded", actor_label="bob").count() == 2


def test_bulk_is_bounded_and_refuses_bad_input(project, bob, victor):
    with pytest.raises(lifecycle.InvalidInput, match="At most 200"):
        lifecycle.bulk_act(project, by=bob, action="approve", ids=list(range(1, 202)))
    with pytest.raises(lifecycle.InvalidInput):
        lifecycle.bulk_act(project, by=bob, action="delete", ids=[1])
    with pytest.raises(lifecycle.InvalidInput):
        lifecycle.bulk_act(project, by=bob, action="verify", ids=[])
    with pytest.raises(lifecycle.NotAllowed):
        lifecycle.bulk_act(project, by=victor, action="verify", ids=[1])


def test_bulk_verify_puts_candidates_up_and_skips_the_rest(project, bob):
    subs = [scored(project, 0.1 * i) for i in range(3)]
    done = auto_verified(project, 5.0)
    results = lifecycle.bulk_act(project, by=bob, action="verify", ids=[*(s.pk for s in subs), done.pk])
    assert [r.outcome for r in results] == ["verifying"] * 3 + ["skipped"]
    assert set(Submission.objects.filter(pk__in=[s.pk for s in subs]).values_list("status", flat=True)) == {
        S.VERIFYING
    }
    assert lifecycle.bulk_summary("verify", results).startswith("3 put up for verification, 1 skipped")


def test_switching_auto_verify_on_records_the_backlog_and_progress_follows(project, alice):
    subs = [scored(project, 0.1 * i, run=f"r{i % 2}") for i in range(5)]
    assert lifecycle.catch_up_progress(project) is None
    services.update_project(project, auto_verify=True, by=alice)
    assert AuditEvent.objects.get(verb=lifecycle.CATCH_UP_VERB).detail == {"backlog": 5}
    progress = lifecycle.catch_up_progress(project)
    assert (progress.done, progress.total) == (0, 5)
    started, left = lifecycle.catch_up_verifications(project.pk, limit=2)
    assert [s.pk for s in started] == [subs[0].pk, subs[1].pk] and left == 3  # oldest first, bounded
    progress = lifecycle.catch_up_progress(project)
    assert (progress.done, progress.total) == (2, 5)
    services.update_project(project, auto_verify=False, by=alice)
    assert lifecycle.catch_up_verifications(project.pk, limit=10) == ([], 0)  # off: stops


@pytest.mark.parametrize(
    ("counted", "by", "proposer", "words"),
    [
        (0, (), "", "two approvals by different people"),
        (0, (), "bob", "two approvals by different people other than bob (the proposer)"),
        (1, ("alice",), "", "one more approval by someone other than alice"),
        (2, ("alice", "dave"), "bob", ""),
    ],
)
def test_who_is_still_needed_in_words(counted, by, proposer, words):
    assert lifecycle.Approvals(counted, 2, by, proposer).still_needed() == words
