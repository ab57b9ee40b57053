"""The submission lifecycle: every legal and illegal move, roles, the second-reviewer rule, verification
results (idempotent), the arena handoff's deltas and the knowledge entry it writes."""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import pytest

from smrweb.tracking import services
from smrweb.tracking.errors import IllegalTransition
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    AuditEvent,
    KnowledgeEntry,
    KnowledgeKind,
    Role,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
    VerificationOutcome,
)
from smrweb.tracking.services import handoff
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
S = SubmissionStatus


def scored(project, value=0.5, run="r1") -> Submission:
    services.ingest_events(project, run, parse_events(json.dumps([{"type": "score", "score": value}])))
    return Submission.objects.filter(project=project).order_by("-id").first()


def result(outcome, detail="done", code=0):
    return lifecycle.VerificationResult(outcome, code, "validator output", detail)


def verified(project, bob, value=0.5) -> Submission:
    sub = scored(project, value)
    lifecycle.request_verification(sub, by=bob)
    return lifecycle.record_verification(sub.pk, result(VerificationOutcome.PASSED))


def test_every_move_in_the_table_is_legal_and_every_other_is_refused(project, bob):
    sub = scored(project)
    for start, to in product(S.values, S.values):
        Submission.objects.filter(pk=sub.pk).update(status=start)
        sub.refresh_from_db()
        if to in lifecycle.TRANSITIONS[start]:
            assert lifecycle._move(sub, to, by=bob).status == to
        else:
            with pytest.raises(IllegalTransition) as refused:
                lifecycle._move(sub, to, by=bob)
            assert f"A {start} submission cannot become {to}; next: " in refused.value.message
            sub.refresh_from_db()
            assert sub.status == start  # nothing half-written


def test_the_whole_loop_records_who_when_and_why(project, alice, bob):
    sub = scored(project, 0.8)
    assert sub.status == S.CANDIDATE
    sub = lifecycle.request_verification(sub, by=bob)
    assert sub.status == S.VERIFYING and sub.proposed_by == bob
    sub = lifecycle.record_verification(sub.pk, result(VerificationOutcome.PASSED, "exited 0"))
    assert sub.status == S.VERIFIED and sub.verification_outcome == "passed" and sub.verified_at
    sub = lifecycle.review(sub, by=alice, verdict="approve", comment="looks right").submission
    sub = handoff.mark_uploaded(sub, by=alice)
    assert sub.uploaded_by == alice and sub.uploaded_at
    handoff.record_arena_result(sub, by=alice, rank=12, arena_score=1234.0, note="beat the baseline")
    sub.refresh_from_db()
    assert sub.status == S.RANKED
    history = list(
        SubmissionTransition.objects.filter(submission=sub).values_list(
            "from_status", "to_status", "by_label", "reason"
        )
    )
    assert history == [
        ("candidate", "verifying", "bob", "verification requested"),
        ("verifying", "verified", "system", "exited 0"),
        ("verified", "approved", "alice", "looks right"),
        ("approved", "uploaded", "alice", "uploaded to the arena by hand"),
        ("uploaded", "ranked", "alice", "beat the baseline"),
    ]
    verbs = list(AuditEvent.objects.filter(object_type="submission").values_list("verb", flat=True))
    assert {
        "submission.verifying",
        "submission.verified",
        "submission.approved",
        "submission.uploaded",
        "submission.ranked",
    } <= set(verbs)


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (VerificationOutcome.PASSED, S.VERIFIED),
        (VerificationOutcome.FAILED, S.INVALID),
        (VerificationOutcome.TIMED_OUT, S.INVALID),
        (VerificationOutcome.CANNOT_VERIFY, S.CANDIDATE),
    ],
)
def test_verification_outcomes_move_the_submission(project, bob, outcome, status):
    sub = lifecycle.request_verification(scored(project), by=bob)
    done = lifecycle.record_verification(sub.pk, result(outcome, "why it ended", code=3))
    assert done.status == status
    assert done.verification_outcome == outcome and done.verification_exit_code == 3
    assert done.verification_output == "validator output"


def test_a_redelivered_verification_result_changes_nothing(project, bob):
    sub = lifecycle.request_verification(scored(project), by=bob)
    assert lifecycle.record_verification(sub.pk, result(VerificationOutcome.PASSED)) is not None
    assert lifecycle.record_verification(sub.pk, result(VerificationOutcome.FAILED)) is None
    sub.refresh_from_db()
    assert sub.status == S.VERIFIED
    assert SubmissionTransition.objects.filter(submission=sub).count() == 2


def test_progress_is_written_only_while_verifying(project, bob):
    sub = lifecycle.request_verification(scored(project), by=bob)
    lifecycle.record_progress(sub.pk, "checked 3 of 5 layers")
    sub.refresh_from_db()
    assert sub.verification_output == "checked 3 of 5 layers"
    lifecycle.record_verification(sub.pk, result(VerificationOutcome.PASSED))
    lifecycle.record_progress(sub.pk, "late line")
    sub.refresh_from_db()
    assert sub.verification_output == "validator output"


def test_viewers_cannot_verify_review_upload_or_record(project, victor, bob):
    sub = scored(project)
    with pytest.raises(lifecycle.NotAllowed, match="reviewer role"):
        lifecycle.request_verification(sub, by=victor)
    sub = verified(project, bob)
    with pytest.raises(lifecycle.NotAllowed):
        lifecycle.review(sub, by=victor, verdict="approve")
    Submission.objects.filter(pk=sub.pk).update(status=S.APPROVED)
    sub.refresh_from_db()
    with pytest.raises(lifecycle.NotAllowed):
        handoff.mark_uploaded(sub, by=victor)
    Submission.objects.filter(pk=sub.pk).update(status=S.UPLOADED)
    sub.refresh_from_db()
    with pytest.raises(lifecycle.NotAllowed):
        handoff.record_arena_result(sub, by=victor, rank=1, arena_score=1.0)
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED and not sub.arena_results.exists()


def test_the_proposers_own_approval_does_not_count_when_a_second_person_is_required(project, alice, bob):
    project.require_second_reviewer = True
    project.save()
    sub = verified(project, bob)  # bob proposed it
    own = lifecycle.review(sub, by=bob, verdict="approve")
    assert not own.counted and "does not count" in own.message
    sub.refresh_from_db()
    assert sub.status == S.VERIFIED and sub.reviews.count() == 1
    other = lifecycle.review(sub, by=alice, verdict="approve")
    # Counted, but the rule needs two people other than the proposer (issue 33): one more to go.
    assert other.counted and other.submission.status == S.VERIFIED
    dave = UserFactory(username="dave")
    services.add_member(project, dave, role=Role.REVIEWER)
    third = lifecycle.review(sub, by=dave, verdict="approve")
    assert third.counted and third.submission.status == S.APPROVED


def test_without_the_setting_the_proposer_may_approve_and_anyone_may_reject(project, alice, bob):
    sub = verified(project, bob)
    assert lifecycle.review(sub, by=bob, verdict="approve").submission.status == S.APPROVED
    project.require_second_reviewer = True
    project.save()
    sub = verified(project, bob, value=0.6)
    assert lifecycle.review(sub, by=bob, verdict="reject", comment="overfits").submission.status == S.REJECTED


def test_reviewing_an_unverified_submission_is_refused_with_the_next_step(project, bob):
    sub = scored(project)
    with pytest.raises(IllegalTransition, match="verify it first"):
        lifecycle.review(sub, by=bob, verdict="approve")
    assert not sub.reviews.exists()


def test_arena_results_carry_deltas_against_the_previous_and_the_best_and_become_knowledge(
    project, alice, bob
):
    def uploaded(value):
        sub = verified(project, bob, value)
        sub = lifecycle.review(sub, by=alice, verdict="approve").submission
        return handoff.mark_uploaded(sub, by=alice)

    first = handoff.record_arena_result(uploaded(0.5), by=alice, rank=30, arena_score=1000.0)
    assert first.delta is None and first.delta_best is None
    second = handoff.record_arena_result(
        uploaded(0.7), by=alice, rank=12, arena_score=1100.0, note="new opening"
    )
    assert second.delta == 100.0 and second.delta_best == 100.0
    third = handoff.record_arena_result(uploaded(0.6), by=alice, rank=20, arena_score=1050.0)
    assert third.delta == -50.0 and third.delta_best == -50.0
    entries = list(
        KnowledgeEntry.objects.filter(project=project, kind=KnowledgeKind.ARENA_DELTA)
        .order_by("created", "id")
        .values_list("title", flat=True)
    )
    assert entries == [
        "Arena: rank 30, score 1000 (n/a vs previous, n/a vs best)",
        "Arena: rank 12, score 1100 (+100 vs previous, better, +100 vs best, 18 places up)",
        "Arena: rank 20, score 1050 (-50 vs previous, worse, -50 vs best, 8 places down)",
    ]
    assert "new opening" in KnowledgeEntry.objects.get(submission=second.submission).body


def test_an_arena_result_needs_a_rank_or_a_score(project, alice, bob):
    sub = handoff.mark_uploaded(
        lifecycle.review(verified(project, bob), by=alice, verdict="approve").submission, by=alice
    )
    with pytest.raises(Exception, match="rank, its score, or both"):
        handoff.record_arena_result(sub, by=alice, rank=None, arena_score=None)
    sub.refresh_from_db()
    assert sub.status == S.UPLOADED


def test_review_queue_lists_waiting_submissions_best_first(project, alice, bob):
    low, high, mid = scored(project, 0.2), scored(project, 0.9), scored(project, 0.5)
    done = verified(project, bob, 0.95)
    lifecycle.review(done, by=alice, verdict="approve")
    assert [s.pk for s in lifecycle.review_queue(project, per_run=False)] == [high.pk, mid.pk, low.pk]
    [best_of_run] = lifecycle.review_queue(project)  # all in one run: its best, with the others counted
    assert (best_of_run.pk, best_of_run.run_waiting) == (high.pk, 3)


# --- the lifecycle has one home: the page's chain and buttons come from TRANSITIONS ----------------------


def test_the_drawn_chain_and_its_branches_are_legal_moves_covering_every_status():
    chain, branches = lifecycle.MAIN_CHAIN, lifecycle.BRANCHES
    assert all(b in lifecycle.TRANSITIONS[a] for a, b in zip(chain, chain[1:]))
    assert all(branch in lifecycle.TRANSITIONS[parent] for branch, parent in branches.items())
    assert set(chain) | set(branches) == set(SubmissionStatus.values) == set(lifecycle.TRANSITIONS)


@pytest.mark.parametrize("status", list(SubmissionStatus.values))
def test_the_actions_offered_are_exactly_the_legal_moves_a_person_makes(project, bob, victor, status):
    services.ingest_events(project, "r1", parse_events('[{"type": "score", "score": 0.5}]'))
    Submission.objects.update(status=status)
    sub = Submission.objects.select_related("project").get()
    legal = {lifecycle.ACTIONS[to] for to in lifecycle.TRANSITIONS[status] if to in lifecycle.ACTIONS}
    assert lifecycle.allowed_actions(sub, bob) == legal
    assert lifecycle.allowed_actions(sub, victor) == frozenset()


def test_every_person_action_is_a_move_of_the_table_and_has_a_form_on_the_page():
    page = (Path(__file__).resolve().parents[2] / "templates/dashboard/submission_detail.html").read_text()
    for to, action in lifecycle.ACTIONS.items():
        assert any(to in targets for targets in lifecycle.TRANSITIONS.values())
        assert f'"{action}" in actions' in page, f"the page shows no form for {action!r}"
