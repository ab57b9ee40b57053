"""The submission lifecycle — part of the one write path (with `services`).

candidate → verifying → verified | invalid → approved | rejected → uploaded → ranked

Every move goes through `_move`, which locks the row, refuses illegal moves with a message fit to
show a person, and records a `SubmissionTransition` (who, when, why) and an audit event. Callers
(views, tasks) check roles first for a fast answer; the rules are re-checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from smrweb.tracking.errors import InvalidInput, NotAllowed, TrackingError
from smrweb.tracking.models import (
    ArenaResult,
    KnowledgeEntry,
    KnowledgeKind,
    Review,
    Role,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
    Verdict,
    VerificationOutcome,
)
from smrweb.tracking.services import record_audit

S = SubmissionStatus

# Legal moves. Re-verifying is allowed from invalid (after a fixed validator) and from candidate
# (after "cannot verify" sent it back); ranked → ranked is a later arena result for the same upload.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.CANDIDATE: frozenset({S.VERIFYING}),
    S.VERIFYING: frozenset({S.VERIFIED, S.INVALID, S.CANDIDATE}),
    S.VERIFIED: frozenset({S.APPROVED, S.REJECTED}),
    S.INVALID: frozenset({S.VERIFYING}),
    S.APPROVED: frozenset({S.UPLOADED}),
    S.REJECTED: frozenset(),
    S.UPLOADED: frozenset({S.RANKED}),
    S.RANKED: frozenset({S.RANKED}),
}

# What a person must do to move on from each status (for refusals that explain themselves).
NEXT_STEP = {
    S.CANDIDATE: "verify it first",
    S.VERIFYING: "wait for the verification to finish",
    S.VERIFIED: "approve or reject it",
    S.INVALID: "verify it again once the artifact or validator is fixed",
    S.APPROVED: "mark it uploaded",
    S.REJECTED: "nothing: a rejected submission stays rejected",
    S.UPLOADED: "record its arena result",
    S.RANKED: "record a newer arena result",
}


class IllegalTransition(TrackingError):
    status = 409
    code = "illegal_transition"


def _label(user: Any) -> str:
    return user.get_username() if getattr(user, "is_authenticated", False) else "system"


def _move(submission: Submission, to: str, *, by: Any, reason: str = "", **fields: Any) -> Submission:
    """Lock, check, update, record. Returns the fresh row."""
    with transaction.atomic():
        locked = Submission.objects.select_for_update(of=("self",)).select_related("project__scenario", "run").get(
            pk=submission.pk)
        if to not in TRANSITIONS[locked.status]:
            raise IllegalTransition(
                f"A {locked.status} submission cannot become {to}; next: {NEXT_STEP[locked.status]}.")
        before = locked.status
        locked.status = to
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.save()
        SubmissionTransition.objects.create(submission=locked, from_status=before, to_status=to,
                                            by=by if getattr(by, "is_authenticated", False) else None,
                                            by_label=_label(by), reason=reason[:5000])
        record_audit(by, f"submission.{to}", locked, project=locked.project, from_status=before, reason=reason[:500])
        locked.run.save(update_fields=["updated"])  # the run page shows submission statuses: a new version
    return locked


def _require(submission: Submission, user: Any, role: str, action: str) -> None:
    if not submission.project.allows(user, role):
        raise NotAllowed(f"To {action} you need the {role} role in {submission.project.slug}.")


# --- verification ---------------------------------------------------------------------------------


def request_verification(submission: Submission, *, by: Any) -> Submission:
    """Put a candidate (or an invalid one, again) up for verification; the caller dispatches the task
    on commit. The first person to do so is its proposer."""
    _require(submission, by, Role.REVIEWER, "verify a submission")
    fields: dict[str, Any] = {"verification_outcome": "", "verification_output": "", "verification_exit_code": None}
    if submission.proposed_by_id is None and getattr(by, "is_authenticated", False):
        fields["proposed_by"] = by
    return _move(submission, S.VERIFYING, by=by, reason="verification requested", **fields)


def record_progress(submission_id: int, line: str) -> None:
    """The validator's latest output line, shown live while it runs (only while still verifying)."""
    Submission.objects.filter(pk=submission_id, status=S.VERIFYING).update(
        verification_output=line[-2000:], updated=timezone.now())


@dataclass(frozen=True)
class VerificationResult:
    outcome: str  # a VerificationOutcome value
    exit_code: int | None
    output_tail: str
    detail: str


def record_verification(submission_id: int, result: VerificationResult) -> Submission | None:
    """Store a finished verification. Idempotent: a task that runs again after the result was stored
    (a redelivered message) changes nothing and returns None."""
    submission = Submission.objects.select_related("project").get(pk=submission_id)
    if submission.status != S.VERIFYING:
        return None
    to = {VerificationOutcome.PASSED: S.VERIFIED, VerificationOutcome.FAILED: S.INVALID,
          VerificationOutcome.TIMED_OUT: S.INVALID}.get(result.outcome, S.CANDIDATE)  # cannot verify → back
    try:
        return _move(submission, to, by=None, reason=result.detail, verification_outcome=result.outcome,
                     verification_exit_code=result.exit_code, verification_output=result.output_tail,
                     verified_at=timezone.now())
    except IllegalTransition:
        return None  # another delivery got there first


# --- review -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewOutcome:
    submission: Submission
    review: Review
    counted: bool  # False: an approval by the proposer where a second person is required
    message: str


def review(submission: Submission, *, by: Any, verdict: str, comment: str = "") -> ReviewOutcome:
    """Approve or reject a verified submission. With `require_second_reviewer`, the proposer's own
    approval is recorded but does not approve it; a rejection by any reviewer counts."""
    _require(submission, by, Role.REVIEWER, "review a submission")
    if verdict not in Verdict.values:
        raise TrackingError(f"A review is {' or '.join(Verdict.values)}, not {verdict!r}.")
    if submission.status != S.VERIFIED:
        raise IllegalTransition(f"Only verified submissions are reviewed; this one is {submission.status} "
                                f"(next: {NEXT_STEP[submission.status]}).")
    own = submission.proposed_by_id is not None and submission.proposed_by_id == by.pk
    counted = not (verdict == Verdict.APPROVE and own and submission.project.require_second_reviewer)
    with transaction.atomic():
        made = Review.objects.create(submission=submission, reviewer=by, verdict=verdict, comment=comment[:5000])
        if counted:
            to = S.APPROVED if verdict == Verdict.APPROVE else S.REJECTED
            submission = _move(submission, to, by=by, reason=comment or f"{verdict}d")
            message = f"Submission {to}."
        else:
            record_audit(by, "submission.review_not_counted", submission, project=submission.project)
            message = ("Your approval is recorded but does not count: this project needs a second person to "
                       "approve a submission they did not propose.")
    return ReviewOutcome(submission, made, counted, message)


# --- the manual arena handoff -----------------------------------------------------------------------


def mark_uploaded(submission: Submission, *, by: Any, note: str = "") -> Submission:
    _require(submission, by, Role.REVIEWER, "mark a submission uploaded")
    return _move(submission, S.UPLOADED, by=by, reason=note or "uploaded to the arena by hand",
                 uploaded_by=by, uploaded_at=timezone.now())


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+g}"


ARENA_SCORE_LIMIT = 1e300


def record_arena_result(submission: Submission, *, by: Any, rank: int | None, arena_score: float | None,
                        note: str = "") -> ArenaResult:
    """Record what the arena said about an uploaded submission: deltas against the project's previous
    recorded result and its best so far (in the scenario's direction), and a knowledge entry."""
    _require(submission, by, Role.REVIEWER, "record an arena result")
    if rank is None and arena_score is None:
        raise TrackingError("Give the arena's rank, its score, or both.")
    if arena_score is not None and not (-ARENA_SCORE_LIMIT <= arena_score <= ARENA_SCORE_LIMIT):
        # Deltas of two scores near the float limit overflow (red-team finding 7): no arena scores that big.
        raise InvalidInput("arena_score", f"A finite number between -{ARENA_SCORE_LIMIT:g} and {ARENA_SCORE_LIMIT:g}.")
    scenario = submission.project.scenario
    with transaction.atomic():
        submission = _move(submission, S.RANKED, by=by, reason=note or "arena result recorded")
        earlier = ArenaResult.objects.select_for_update(of=("self",)).filter(submission__project=submission.project)
        previous = earlier.exclude(arena_score__isnull=True).order_by("-created", "-id").first()
        scores = list(earlier.exclude(arena_score__isnull=True).values_list("arena_score", flat=True))
        best = (max(scores) if scenario.maximize else min(scores)) if scores else None
        delta = arena_score - previous.arena_score if arena_score is not None and previous else None
        delta_best = arena_score - best if arena_score is not None and best is not None else None
        result = ArenaResult.objects.create(
            submission=submission, arena=scenario.arena_name or scenario.key, rank=rank, arena_score=arena_score,
            delta=delta, delta_best=delta_best, note=note[:5000], recorded_by=by)
        title = (f"Arena: rank {rank if rank is not None else '—'}, score "
                 f"{'—' if arena_score is None else f'{arena_score:g}'} "
                 f"({_signed(delta)} vs previous, {_signed(delta_best)} vs best)")
        body = "\n".join(filter(None, [
            f"Submission {submission.score:g} from run {submission.run.external_id}"
            + (f" ({submission.artifact_ref or ''})" if submission.artifact_ref else ""),
            note,
        ]))
        KnowledgeEntry.objects.create(project=submission.project, kind=KnowledgeKind.ARENA_DELTA, title=title[:300],
                                      body=body, submission=submission, created_by=by)
        record_audit(by, "arena_result.recorded", result, project=submission.project, rank=rank,
                     arena_score=arena_score, delta=delta, delta_best=delta_best)
    return result


def review_queue(project):
    """Submissions waiting for someone (to verify, to finish verifying, to review), best first."""
    order = "-score" if project.scenario.maximize else "score"
    return (Submission.objects.filter(project=project, status__in=[S.CANDIDATE, S.VERIFYING, S.VERIFIED])
            .select_related("run__project", "artifact__blob", "proposed_by").order_by(order, "-ts", "-id"))
