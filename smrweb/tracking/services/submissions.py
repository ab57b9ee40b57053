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
from django.db.models import Count, F, OuterRef, Subquery, Window
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone

from smrweb.tracking import signals
from smrweb.tracking.errors import IllegalTransition, InvalidInput, NotAllowed, TrackingError
from smrweb.tracking.models import (
    NEVER_COUNTED,
    AuditEvent,
    AuditVerb,
    Review,
    Role,
    Submission,
    SubmissionStatus,
    SubmissionTransition,
    Verdict,
    VerificationOutcome,
)
from smrweb.tracking.services import recompute_scores, record_audit
from smrweb.tracking.services.archive import check_writable
from smrweb.tracking.services.artifacts import missing_artifact
from smrweb.tracking.services.figures import refresh_project_figures

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
    S.UPLOADED: frozenset({S.RANKED, S.REFUSED}),
    S.RANKED: frozenset({S.RANKED}),
    S.REFUSED: frozenset({S.UPLOADED}),  # fixed (or the arena was down): uploaded again
}

# The order the submission page draws the lifecycle in: the main chain, and where each side branch
# leaves it (tests/tracking/test_submissions.py checks both against TRANSITIONS).
MAIN_CHAIN = (S.CANDIDATE, S.VERIFYING, S.VERIFIED, S.APPROVED, S.UPLOADED, S.RANKED)
BRANCHES = {S.INVALID: S.VERIFYING, S.REJECTED: S.VERIFIED, S.REFUSED: S.UPLOADED}

# The person's action that makes each move; the other moves are a verification's outcome. The page
# shows an action's form exactly when the move is legal from the submission's status.
ACTIONS = {
    S.VERIFYING: "verify",
    S.APPROVED: "review",
    S.REJECTED: "review",
    S.UPLOADED: "mark_uploaded",
    S.RANKED: "record_arena_result",
    S.REFUSED: "record_refusal",
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
    S.REFUSED: "fix what the arena refused and mark it uploaded again",
}


def allowed_actions(submission: Submission, user: Any) -> frozenset[str]:
    """The actions `user` may take on `submission` now (reviewers and admins; none for viewers)."""
    if not submission.project.allows(user, Role.REVIEWER):
        return frozenset()
    return frozenset(ACTIONS[to] for to in TRANSITIONS[submission.status] if to in ACTIONS)


def lifecycle_steps(status: str) -> list[tuple[str, str]]:
    """The main chain with each step done / now / ahead; a side branch (invalid, rejected) is shown
    after the step it left from, as where the submission is now."""
    if status in BRANCHES:
        last = MAIN_CHAIN.index(BRANCHES[status])
        return [(s, "done") for s in MAIN_CHAIN[: last + 1]] + [(status, "now bad")]
    now = MAIN_CHAIN.index(status)
    return [(s, "done" if i < now else "now" if i == now else "") for i, s in enumerate(MAIN_CHAIN)]


def _label(user: Any) -> str:
    return user.get_username() if getattr(user, "is_authenticated", False) else "system"


def _move(
    submission: Submission, to: str, *, by: Any, reason: str = "", audit: dict | None = None, **fields: Any
) -> Submission:
    """Lock, check, update, record (`audit`: more for the audit event). Returns the fresh row."""
    with transaction.atomic():
        locked = (
            Submission.objects.select_for_update(of=("self",))
            .select_related("project__scenario", "run")
            .get(pk=submission.pk)
        )
        if to not in TRANSITIONS[locked.status]:
            raise IllegalTransition(
                f"A {locked.status} submission cannot become {to}; next: {NEXT_STEP[locked.status]}."
            )
        before = locked.status
        locked.status = to
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.save()
        SubmissionTransition.objects.create(
            submission=locked,
            from_status=before,
            to_status=to,
            by=by if getattr(by, "is_authenticated", False) else None,
            by_label=_label(by),
            reason=reason[:5000],
        )
        record_audit(
            by,
            AuditVerb(f"submission.{to}"),
            locked,
            project=locked.project,
            from_status=before,
            reason=reason[:500],
            **(audit or {}),
        )
        _touch_run(locked.run, rescore=before in NEVER_COUNTED or to in NEVER_COUNTED)
        signals.announce_alerts_due("submission", locked.pk)
    return locked


def _touch_run(run, *, rescore: bool) -> None:
    """A new run page version; its scores (best, queue: moved either way) and project figures again."""
    run.save(update_fields=[*recompute_scores(run), "updated"])
    refresh_project_figures(run.project)


def _require(submission: Submission, user: Any, role: str, action: str) -> None:
    if not submission.project.allows(user, role):
        raise NotAllowed(f"To {action} you need the {role} role in {submission.project.slug}.")
    check_writable(submission.project, submission.run)  # an archived run's submissions are read-only


# --- verification ---------------------------------------------------------------------------------


def request_verification(submission: Submission, *, by: Any, automatic: bool = False) -> Submission:
    """Put a candidate (or an invalid one, again) up for verification; the caller dispatches the task
    on commit. The first person to do so is its proposer. `automatic`: the project's auto-verify
    setting asked (no person, no proposer)."""
    if not automatic:
        _require(submission, by, Role.REVIEWER, "verify a submission")
    fields: dict[str, Any] = {
        "verification_outcome": "",
        "verification_output": "",
        "verification_exit_code": None,
    }
    if submission.proposed_by_id is None and getattr(by, "is_authenticated", False) and not automatic:
        fields["proposed_by"] = by
    reason = (
        "verified automatically: the project verifies every new score"
        if automatic
        else "verification requested"
    )
    return _move(submission, S.VERIFYING, by=None if automatic else by, reason=reason, **fields)


def automatic_verifications(run_id: int, limit: int = 50) -> list[Submission]:
    """Put a run's never-verified candidates up for verification (the project's auto-verify setting);
    a candidate that came back "cannot verify" keeps its outcome and is not asked again. One that names an
    artifact not uploaded yet waits for it (the upload sends the run here again): a harness often logs
    the score a moment before the file."""
    started = []
    for sub in (
        Submission.objects.filter(
            run_id=run_id,
            status=S.CANDIDATE,
            verification_outcome="",
            excluded_at__isnull=True,
            project__auto_verify=True,
        )
        .exclude(artifact__isnull=True, artifact_ref__gt="")
        .select_related("project__scenario", "run")
        .order_by("id")[:limit]
    ):
        try:
            started.append(request_verification(sub, by=None, automatic=True))
        except IllegalTransition:
            continue  # someone else moved it first
    return started


def record_progress(submission_id: int, line: str) -> None:
    """The validator's latest output line, shown live while it runs (only while still verifying)."""
    Submission.objects.filter(pk=submission_id, status=S.VERIFYING).update(
        verification_output=line[-2000:], updated=timezone.now()
    )


class BytesArrivedMeanwhile(Exception):
    """The artifact was linked while its submission was checked without bytes: check it again."""


@dataclass(frozen=True)
class VerificationResult:
    outcome: str  # a VerificationOutcome value
    exit_code: int | None
    output_tail: str
    detail: str


def cannot_verify(submission: Submission) -> VerificationResult | None:
    """Why this submission cannot be verified at all (no validator, no bytes), as the result to record;
    None when a validator can be run."""
    command = submission.project.scenario.validator_command
    if not command:
        detail = f"The scenario {submission.project.scenario.key} has no validator command."
    elif submission.artifact is None:
        detail = missing_artifact(submission)
    else:
        return None
    return VerificationResult(VerificationOutcome.CANNOT_VERIFY, None, "", detail)


def record_verification(
    submission_id: int, result: VerificationResult, *, checked_without_bytes: bool = False
) -> Submission | None:
    """Store a finished verification. Idempotent: a task that runs again after the result was stored
    (a redelivered message) changes nothing and returns None. A check made without bytes whose artifact
    was linked while it ran raises BytesArrivedMeanwhile instead of storing "cannot verify": check again."""
    with transaction.atomic():
        submission = Submission.objects.select_for_update(of=("self",)).get(pk=submission_id)
        if submission.status != S.VERIFYING:
            return None
        if checked_without_bytes and submission.artifact_id and result.outcome == "cannot_verify":
            raise BytesArrivedMeanwhile(submission_id)
        to = {
            VerificationOutcome.PASSED: S.VERIFIED,
            VerificationOutcome.FAILED: S.INVALID,
            VerificationOutcome.TIMED_OUT: S.INVALID,
        }.get(result.outcome, S.CANDIDATE)  # cannot verify → back
        try:
            return _move(
                submission,
                to,
                by=None,
                reason=result.detail,
                verification_outcome=result.outcome,
                verification_exit_code=result.exit_code,
                verification_output=result.output_tail,
                verified_at=timezone.now(),
            )
        except IllegalTransition:
            return None  # another delivery got there first


# --- review -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewOutcome:
    submission: Submission
    review: Review
    counted: bool  # False: an approval that does not count (the proposer's own, or a repeat)
    message: str


def approvals_needed(project) -> int:
    """How many distinct people must approve: two with the project's second-person rule, else one."""
    return 2 if project.require_second_reviewer else 1


@dataclass(frozen=True)
class Approvals:
    """The approvals of a verified submission that count towards `needed`, and who they are."""

    counted: int
    needed: int
    by: tuple[str, ...]  # the people whose approvals count, first first
    proposer: str = ""  # with the rule on, a person who proposed it (their approval never counts)

    @property
    def remaining(self) -> int:
        return max(self.needed - self.counted, 0)

    def still_needed(self) -> str:
        """Who may still approve, in words ("one more approval by someone other than alice")."""
        if not self.remaining:
            return ""
        others = " or ".join([*self.by, *([f"{self.proposer} (the proposer)"] if self.proposer else [])])
        if self.remaining == 1:
            head = "one more approval" if self.counted else "one approval"
            return f"{head} by someone other than {others}" if others else head
        head = f"{'two' if self.remaining == 2 else self.remaining} approvals by different people"
        return f"{head} other than {others}" if others else head

    def as_dict(self) -> dict:
        return {
            "counted": self.counted,
            "needed": self.needed,
            "by": list(self.by),
            "still_needed": self.still_needed(),
        }


def _approving_reviews(submission: Submission) -> list[Review]:
    """Its approvals, oldest first (from a prefetch of `reviews` with their reviewers when there is one)."""
    cache = getattr(submission, "_prefetched_objects_cache", {})
    rows = cache["reviews"] if "reviews" in cache else submission.reviews.select_related("reviewer")
    return sorted((r for r in rows if r.verdict == Verdict.APPROVE), key=lambda r: (r.created, r.pk))


def approval_log(submission: Submission) -> list[tuple[Review, str]]:
    """Each approval with what it was: "approval 1 of 2", or why it did not count."""
    needed, seen, log = approvals_needed(submission.project), set(), []
    for r in _approving_reviews(submission):
        if not r.counted:
            why = "the proposer's own" if r.reviewer_id == submission.proposed_by_id else "a repeat"
            log.append((r, f"not counted — {why}"))
        elif r.reviewer_id not in seen:
            seen.add(r.reviewer_id)
            log.append((r, f"approval {len(seen)} of {max(needed, len(seen))}"))
    return log


@dataclass(frozen=True)
class HistoryRow:
    created: Any
    from_status: str
    to_status: str
    by_label: str
    reason: str


def history(submission: Submission) -> list[HistoryRow]:
    """Every transition, and between them each approval that did not move the submission ("approval 1
    of 2 · alice"), in time order: the submission page's History."""
    rows = [
        HistoryRow(t.created, t.from_status, t.to_status, t.by_label, t.reason)
        for t in submission.transitions.all()
    ]
    needed = approvals_needed(submission.project)
    for r, label in approval_log(submission):
        if label == f"approval {needed} of {needed}":
            continue  # the approval that approved it: its transition says so
        reason = f"{label} · {r.reviewer.get_username()}" + (f": {r.comment}" if r.comment else "")
        rows.append(HistoryRow(r.created, S.VERIFIED, S.VERIFIED, r.reviewer.get_username(), reason))
    return sorted(rows, key=lambda row: row.created)


def approvals(submission: Submission) -> Approvals:
    """THE second-person rule, read: the distinct people whose approval counts (never the proposer's
    own where the rule holds), against how many the project needs."""
    by: list[str] = []
    seen: set[int] = set()
    for r in _approving_reviews(submission):
        if r.counted and r.reviewer_id not in seen:
            seen.add(r.reviewer_id)
            by.append(r.reviewer.get_username())
    proposer = ""
    if submission.project.require_second_reviewer and submission.proposed_by_id is not None:
        proposer = submission.proposed_by.get_username()
    return Approvals(len(by), approvals_needed(submission.project), tuple(by), proposer)


def is_own_approval(submission: Submission, user: Any) -> bool:
    """True when `user` proposed this submission and the project needs a second person to approve it."""
    return (
        submission.project.require_second_reviewer
        and submission.proposed_by_id is not None
        and submission.proposed_by_id == getattr(user, "pk", None)
    )


def approval_refusal(submission: Submission, user: Any) -> str:
    """Why an approval by `user` would not count ("" when it would): THE second-person rule, written.
    With the rule, a submission is approved by two distinct people, whoever (or whatever) verified it;
    the proposer's own approval never counts, and a person counts once."""
    if is_own_approval(submission, user):
        return (
            "You proposed this submission, and this project needs two other people to approve it: "
            "ask another reviewer. You can still reject it."
        )
    if submission.project.require_second_reviewer and any(
        r.counted and r.reviewer_id == getattr(user, "pk", None) for r in _approving_reviews(submission)
    ):
        left = approvals(submission)
        return (
            f"You approved it already ({left.counted} of {left.needed}): it needs "
            f"{left.still_needed() or 'nothing more'}."
        )
    return ""


def review(submission: Submission, *, by: Any, verdict: str, comment: str = "") -> ReviewOutcome:
    """Approve or reject a verified submission. It becomes approved once `approvals_needed` distinct
    people approved it (two with `require_second_reviewer`, whatever verified it); an approval that
    does not count (the proposer's own, a repeat) is recorded as such; a rejection by any reviewer counts."""
    _require(submission, by, Role.REVIEWER, "review a submission")
    if verdict not in Verdict.values:
        raise TrackingError(f"A review is {' or '.join(Verdict.values)}, not {verdict!r}.")
    comment = (comment or "").strip()
    with transaction.atomic():
        # Locked first: two people approving at once are counted one after the other.
        submission = (
            Submission.objects.select_for_update(of=("self",))
            .select_related("project__scenario", "run", "proposed_by")
            .get(pk=submission.pk)
        )
        if submission.status != S.VERIFIED:
            raise IllegalTransition(
                f"Only verified submissions are reviewed; this one is {submission.status} "
                f"(next: {NEXT_STEP[submission.status]})."
            )
        if verdict == Verdict.REJECT and not comment:
            raise InvalidInput(
                "comment",
                "Say why it is rejected: the reason is kept in its history and carried "
                "forward to the agents as project knowledge.",
            )
        refusal = approval_refusal(submission, by) if verdict == Verdict.APPROVE else ""
        made = Review.objects.create(
            submission=submission, reviewer=by, verdict=verdict, comment=comment[:5000], counted=not refusal
        )
        if verdict == Verdict.REJECT:
            submission = _move(submission, S.REJECTED, by=by, reason=comment)
            return ReviewOutcome(submission, made, True, "Submission rejected.")
        if refusal:
            record_audit(
                by,
                AuditVerb.SUBMISSION_REVIEW_NOT_COUNTED,
                submission,
                project=submission.project,
                why=refusal,
            )
            return ReviewOutcome(
                submission, made, False, "Your approval is recorded but does not count. " + refusal
            )
        now = approvals(submission)
        if now.remaining:
            # Not approved yet: the approval is recorded and audited; the submission waits for the next.
            record_audit(
                by,
                AuditVerb.REVIEW_APPROVAL_RECORDED,
                submission,
                project=submission.project,
                counted=now.counted,
                needed=now.needed,
                approvers=list(now.by),
                still_needed=now.still_needed(),
            )
            submission.save(update_fields=["updated"])  # a new version of its page and the queue
            return ReviewOutcome(
                submission,
                made,
                True,
                f"Approval {now.counted} of {now.needed} recorded: it needs {now.still_needed()}.",
            )
        reason = comment or "approved"
        if now.needed > 1:
            reason = f"approval {now.counted} of {now.needed} · {', '.join(now.by)}" + (
                f": {comment}" if comment else ""
            )
        submission = _move(submission, S.APPROVED, by=by, reason=reason, audit={"approvers": list(now.by)})
    return ReviewOutcome(submission, made, True, "Submission approved.")


APPROVED_OR_LATER = (S.APPROVED, S.UPLOADED, S.RANKED)


def approved_below_rule(project):
    """Submissions approved (or uploaded, ranked) with fewer distinct counted approvers than the
    project's rule now needs: approved by one person before the rule held (or before it covered
    auto-verified submissions). Listed for people to look at, never changed. `approvers` annotated."""
    needed = approvals_needed(project)
    if needed < 2:
        return Submission.objects.none()
    counted = (
        Review.objects.filter(submission=OuterRef("pk"), verdict=Verdict.APPROVE, counted=True)
        .order_by()
        .values("submission")
        .annotate(n=Count("reviewer", distinct=True))
        .values("n")
    )
    return (
        Submission.objects.filter(project=project, status__in=APPROVED_OR_LATER)
        .annotate(approvers=Coalesce(Subquery(counted), 0))
        .filter(approvers__lt=needed)
        .select_related("run", "proposed_by")
        .order_by("-updated", "-id")
    )


# --- bulk verify / approve (the review queue's selection, POST …/submissions/bulk) ----------------------

BULK_MAX = 200
BULK_ACTIONS = ("verify", "approve")


@dataclass(frozen=True)
class BulkOutcome:
    id: int
    outcome: str  # verifying | approved | approval_recorded | skipped
    detail: str
    why: str = ""  # for skipped ones: proposed | approved_already | status | missing | refused


# How a summary names each kind of skipped submission ("2 skipped: you proposed them").
_SKIPPED = {
    "proposed": ("you proposed it", "you proposed them"),
    "approved_already": ("you approved it already", "you approved them already"),
    "status": ("not in a status for this", "not in a status for this"),
    "missing": ("not in this project", "not in this project"),
    "refused": ("refused", "refused"),
}


def bulk_act(project, *, by: Any, action: str, ids: list[int], comment: str = "") -> list[BulkOutcome]:
    """Verify or approve many submissions: each one on its own, by the same rules (and audit) as one
    at a time; one that may not be moved is skipped and says why. The caller dispatches the
    verifications (outcome "verifying") on commit."""
    if action not in BULK_ACTIONS:
        raise InvalidInput("action", f"One of {', '.join(BULK_ACTIONS)}.")
    if not ids:
        raise InvalidInput("ids", "Name at least one submission.")
    if len(ids) > BULK_MAX:
        raise InvalidInput("ids", f"At most {BULK_MAX} submissions at a time (got {len(ids)}).")
    if not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"To {action} submissions you need the reviewer role in {project.slug}.")
    found = Submission.objects.filter(project=project, pk__in=ids).select_related(
        "project__scenario", "run", "proposed_by"
    )
    found = {sub.pk: sub for sub in found}
    results = []
    for pk in dict.fromkeys(ids):  # each once, in the order given
        sub = found.get(pk)
        if sub is None:
            results.append(BulkOutcome(pk, "skipped", f"No submission #{pk} in {project.slug}.", "missing"))
            continue
        try:
            results.append(_bulk_one(sub, by=by, action=action, comment=comment))
        except TrackingError as exc:
            results.append(BulkOutcome(pk, "skipped", exc.message, "refused"))
    return results


def _bulk_one(sub: Submission, *, by: Any, action: str, comment: str) -> BulkOutcome:
    if action == "verify":
        if S.VERIFYING not in TRANSITIONS[sub.status]:
            return BulkOutcome(
                sub.pk, "skipped", f"It is {sub.status}; next: {NEXT_STEP[sub.status]}.", "status"
            )
        request_verification(sub, by=by)
        return BulkOutcome(sub.pk, "verifying", "Verification requested.")
    if sub.status != S.VERIFIED:
        return BulkOutcome(sub.pk, "skipped", f"It is {sub.status}; next: {NEXT_STEP[sub.status]}.", "status")
    if refusal := approval_refusal(sub, by):
        # Skipped, not recorded: a bulk approval never adds an approval that does not count.
        why = "proposed" if is_own_approval(sub, by) else "approved_already"
        return BulkOutcome(sub.pk, "skipped", refusal, why)
    outcome = review(sub, by=by, verdict=Verdict.APPROVE, comment=comment)
    if outcome.submission.status == S.APPROVED:
        return BulkOutcome(sub.pk, "approved", outcome.message)
    return BulkOutcome(sub.pk, "approval_recorded", outcome.message)


def bulk_summary(action: str, results: list[BulkOutcome]) -> str:
    """One line for the person: "10 approved, 2 skipped: you proposed them"."""
    done = {
        k: sum(1 for r in results if r.outcome == k) for k in ("verifying", "approved", "approval_recorded")
    }
    parts = []
    if done["verifying"]:
        parts.append(f"{done['verifying']} put up for verification")
    if done["approved"]:
        parts.append(f"{done['approved']} approved")
    if done["approval_recorded"]:
        n = done["approval_recorded"]
        parts.append(f"{n} approval{'s' if n != 1 else ''} recorded (waiting for a second approver)")
    skipped = [r for r in results if r.outcome == "skipped"]
    if skipped:
        whys = {why: sum(1 for r in skipped if r.why == why) for why in dict.fromkeys(r.why for r in skipped)}
        if len(whys) == 1:
            [(why, n)] = whys.items()
            reasons = _SKIPPED[why][n != 1]
        else:
            reasons = ", ".join(f"{n} {_SKIPPED[why][n != 1]}" for why, n in whys.items())
        parts.append(f"{len(skipped)} skipped: {reasons}")
    return ", ".join(parts) or f"Nothing to {action}."


# --- auto-verify catching up on the candidates waiting when it was switched on ---------------------------

CATCH_UP_VERB = AuditVerb.PROJECT_VERIFICATION_CATCH_UP


def _never_verified(project):
    return Submission.objects.filter(
        project=project, status=S.CANDIDATE, verification_outcome="", excluded_at__isnull=True
    )


def start_catch_up(project, *, by: Any = None) -> int:
    """Auto-verify was switched on: record how many existing candidates wait (the progress's total);
    the caller queues `catch_up_verifications` in rate-limited chunks."""
    backlog = _never_verified(project).count()
    record_audit(by, CATCH_UP_VERB, project, project=project, backlog=backlog)
    return backlog


def catch_up_verifications(project_id: int, *, limit: int) -> tuple[list[Submission], int]:
    """Put up to `limit` of a project's never-verified candidates (oldest first) up for verification,
    as auto-verify would have; returns them and how many still wait. Nothing once auto-verify is off."""
    waiting = _never_verified(project_id).filter(project__auto_verify=True)
    started = []
    for sub in waiting.select_related("project__scenario", "run").order_by("id")[:limit]:
        try:
            started.append(request_verification(sub, by=None, automatic=True))
        except IllegalTransition:
            continue  # someone else moved it first
    return started, waiting.count()


@dataclass(frozen=True)
class CatchUp:
    done: int  # queued or finished
    total: int

    @property
    def remaining(self) -> int:
        return self.total - self.done


def catch_up_progress(project) -> CatchUp | None:
    """How far the last catch-up got: of the candidates waiting when auto-verify was switched on, how
    many have been put up for verification (or were verified another way); None when there is none
    under way."""
    if not project.auto_verify:
        return None
    started = (
        AuditEvent.objects.filter(project=project, verb=CATCH_UP_VERB).order_by("-created", "-id").first()
    )
    if started is None or not started.detail.get("backlog"):
        return None
    total = int(started.detail["backlog"])
    left = _never_verified(project).filter(created__lte=started.created).count()
    if not left:
        return None
    return CatchUp(max(total - left, 0), total)


QUEUE_STATUSES = (S.CANDIDATE, S.VERIFYING, S.VERIFIED)


def review_queue(project, *, statuses=QUEUE_STATUSES, per_run: bool = True):
    """Submissions waiting for someone (to verify, to finish verifying, to review), best first; by
    default the best per run only (a run's other waiting ones are counted beside it). Excluded
    submissions and runs are not waiting for anyone."""
    score = F("score").desc() if project.scenario.maximize else F("score").asc()
    waiting = Submission.objects.filter(
        project=project, status__in=statuses, excluded_at__isnull=True, run__excluded_at__isnull=True
    )
    rows = waiting
    if per_run:
        best = waiting.annotate(
            rn=Window(
                RowNumber(), partition_by=[F("run_id")], order_by=[score, F("ts").desc(), F("id").desc()]
            )
        ).filter(rn=1)
        others = (
            waiting.filter(run=OuterRef("run")).order_by().values("run").annotate(n=Count("id")).values("n")
        )
        rows = Submission.objects.filter(pk__in=best.values("pk")).annotate(
            run_waiting=Coalesce(Subquery(others), 0)
        )
    return rows.select_related("run__project", "artifact__blob", "proposed_by").order_by(
        score, F("ts").desc(), F("id").desc()
    )


def queue_counts(project) -> dict[str, int]:
    """How many submissions wait in each queue status (not excluded), in one query."""
    rows = (
        Submission.objects.filter(
            project=project,
            status__in=QUEUE_STATUSES,
            excluded_at__isnull=True,
            run__excluded_at__isnull=True,
        )
        .values("status")
        .annotate(n=Count("id"))
    )
    counts = {status: 0 for status in QUEUE_STATUSES}
    counts.update({row["status"]: row["n"] for row in rows})
    return counts


def next_in_queue(submission: Submission) -> Submission | None:
    """The best waiting submission of the project other than this one (the submission page's "next")."""
    return review_queue(submission.project, per_run=False).exclude(pk=submission.pk).first()


# --- exclusion from the project's numbers --------------------------------------------------------------


def exclude_submission(submission: Submission, *, by: Any, reason: str) -> Submission:
    """Take a score out of the project's numbers (best, leaderboard, best-so-far, regressions,
    carry-forward) — admins, with a reason; audited and reversible (`include_submission`)."""
    return _set_excluded(Submission, submission, by=by, reason=reason, exclude=True)


def include_submission(submission: Submission, *, by: Any) -> Submission:
    return _set_excluded(Submission, submission, by=by, reason="", exclude=False)


def exclude_run(run, *, by: Any, reason: str):
    """Take a whole run (every score of it) out of the project's numbers; audited, reversible."""
    return _set_excluded(type(run), run, by=by, reason=reason, exclude=True)


def include_run(run, *, by: Any):
    return _set_excluded(type(run), run, by=by, reason="", exclude=False)


def _set_excluded(model, obj, *, by: Any, reason: str, exclude: bool):
    project = obj.project
    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Excluding from the project's numbers needs the admin role in {project.slug}.")
    reason = (reason or "").strip()
    if exclude and not reason:
        raise InvalidInput(
            "reason", "Say why it is excluded (shown wherever it is listed, and in the audit log)."
        )
    what = "submission" if model is Submission else "run"
    with transaction.atomic():
        locked = (
            model.objects.select_for_update(of=("self",)).select_related("project__scenario").get(pk=obj.pk)
        )
        if exclude == (locked.excluded_at is not None):
            raise IllegalTransition(f"This {what} is {'already' if exclude else 'not'} excluded.")
        locked.excluded_at = timezone.now() if exclude else None
        locked.excluded_by = by if exclude and getattr(by, "is_authenticated", False) else None
        locked.excluded_reason = reason[:5000] if exclude else ""
        locked.save(update_fields=["excluded_at", "excluded_by", "excluded_reason", "updated"])
        record_audit(
            by,
            AuditVerb(f"{what}.{'excluded' if exclude else 'included'}"),
            locked,
            project=project,
            reason=reason[:500],
        )
        _touch_run(locked.run if model is Submission else locked, rescore=True)
    return locked
