"""Submissions (scored artifacts) and their lifecycle records: transitions, reviews, arena results."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from smrweb.tracking.models.artifact import Artifact
from smrweb.tracking.models.common import finite
from smrweb.tracking.models.project import Project
from smrweb.tracking.models.run import Experiment, Run


class SubmissionStatus(models.TextChoices):
    CANDIDATE = "candidate"
    VERIFYING = "verifying"
    VERIFIED = "verified"
    INVALID = "invalid"
    APPROVED = "approved"
    REJECTED = "rejected"
    UPLOADED = "uploaded"
    RANKED = "ranked"
    REFUSED = "refused"  # uploaded, and the arena turned the file down


# What a project's numbers (best, leaderboard, best-so-far, regressions, carry-forward) are made of:
# never a submission the validator or a reviewer turned down, never an excluded one, and — unless the
# person looking asks for them — only submissions that passed verification.
# A file the arena refused is not a result anyone can stand on: it leaves the numbers and is carried
# forward as a failed approach, as an invalid or rejected one is.
NEVER_COUNTED = (SubmissionStatus.INVALID, SubmissionStatus.REJECTED, SubmissionStatus.REFUSED)


VERIFIED_STATUSES = (
    SubmissionStatus.VERIFIED,
    SubmissionStatus.APPROVED,
    SubmissionStatus.UPLOADED,
    SubmissionStatus.RANKED,
)


UNVERIFIED_STATUSES = (SubmissionStatus.CANDIDATE, SubmissionStatus.VERIFYING)


# The one rule, in two forms that say the same (tests/tracking/test_counted_rule.py checks they agree):
# `counted_q` for SQL (filters, and `Case(When(...))` inside the running-best windows of the charts)
# and `standing` for rows already read (a chart's hollow points, a table's "not counted" marker).
#
# Two scopes read it. A run's own figures (its best and latest, its page's best-so-far line and
# efficiency, the runs table, Compare) count unverified scores too (`unverified=True`) and ignore the
# run's own exclusion (an excluded run still shows its own history). The project's figures (the
# overview, the leaderboard, the project chart) leave excluded runs out and count verified submissions
# unless the person asks for unverified ones.


def counted_q(*, unverified: bool = False, of_run: bool = False, prefix: str = "") -> Q:
    """The submissions that count, as a filter (`prefix`: the path to the submission, "" for its own
    rows). `of_run`: a run's own figures (the run's exclusion does not apply)."""
    q = Q(**{f"{prefix}excluded_at__isnull": True})
    if not of_run:
        q &= Q(**{f"{prefix}run__excluded_at__isnull": True})
    if unverified:
        return q & ~Q(**{f"{prefix}status__in": NEVER_COUNTED})
    return q & Q(**{f"{prefix}status__in": VERIFIED_STATUSES})


def standing(
    status: str,
    excluded: bool,
    *,
    run_excluded: bool = False,
    unverified: bool = False,
    of_run: bool = False,
) -> str:
    """Why a submission does not count ("invalid", "rejected", "excluded", "run excluded", "candidate",
    "verifying"), or "" when it counts: `counted_q` for one row."""
    if status in NEVER_COUNTED:
        return str(status)
    if excluded:
        return "excluded"
    if run_excluded and not of_run:
        return "run excluded"
    if not unverified and status not in VERIFIED_STATUSES:
        return str(status)
    return ""


# What a run's own figures count: unverified scores too, whatever the run's own exclusion.
RUN_RULE = {"unverified": True, "of_run": True}


class SubmissionQuerySet(models.QuerySet):
    def counted(self, *, unverified: bool = False, of_run: bool = False) -> SubmissionQuerySet:
        """Submissions that count in the project's numbers (see NEVER_COUNTED and `counted_q`);
        `of_run`: in a run's own figures."""
        return self.filter(counted_q(unverified=unverified, of_run=of_run))


class VerificationOutcome(models.TextChoices):
    PASSED = "passed"
    FAILED = "failed"  # the validator ran and said no (non-zero exit)
    TIMED_OUT = "timed_out"
    CANNOT_VERIFY = "cannot_verify"  # no validator, missing toolchain or no artifact bytes


class Submission(models.Model):
    """A scored artifact: `{harness_id, score, artifact, timestamp}` — the point of a run."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="submissions")
    run = models.ForeignKey(Run, models.CASCADE, related_name="submissions")
    event_id = models.CharField(max_length=200)
    experiment = models.ForeignKey(
        Experiment, models.SET_NULL, null=True, blank=True, related_name="submissions"
    )
    artifact = models.ForeignKey(Artifact, models.SET_NULL, null=True, blank=True, related_name="submissions")
    # What the score event named (a sha256 or a path); linked to `artifact` once that is uploaded.
    artifact_ref = models.CharField(max_length=500, blank=True)
    harness_id = models.CharField(max_length=200, blank=True)
    score = models.FloatField()
    details = models.JSONField(default=dict, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=20, choices=SubmissionStatus, default=SubmissionStatus.CANDIDATE)
    # Who put it up for review (asked for verification): with `require_second_reviewer`, their own
    # approval does not count.
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    verification_outcome = models.CharField(max_length=20, choices=VerificationOutcome, blank=True)
    verification_output = models.TextField(blank=True)  # the tail, size-capped
    verification_exit_code = models.IntegerField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    uploaded_at = models.DateTimeField(null=True, blank=True)
    # The arena's own id or URL for the upload (Mark uploaded), so a result can be traced back.
    arena_ref = models.CharField(max_length=500, blank=True)
    # An admin took it out of the project's numbers (junk, a test, a misconfigured harness); reversible.
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    excluded_reason = models.TextField(blank=True)
    ts = models.DateTimeField()
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-ts", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "event_id"], name="submission_run_event_uniq"),
            models.CheckConstraint(condition=finite("score"), name="submission_score_finite"),
        ]
        indexes = [
            # The leaderboard: a project's submissions by score.
            models.Index(fields=["project", "score"], name="submission_project_score_idx"),
            # Sparklines and the score-over-time charts: a run's scores in time order, from the index alone.
            models.Index(fields=["run", "ts", "score"], name="submission_run_ts_idx"),
            # The review queue: a project's submissions waiting in one status; in score order with the
            # exclusion and the run, the best waiting to be verified (the top of a range) and each run's
            # best verified score, from the index alone.
            models.Index(
                fields=["project", "status", "score", "excluded_at", "run"],
                name="submission_project_status_idx",
            ),
        ]

    objects = SubmissionQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.score:g} ({self.run.external_id})"

    @property
    def is_verified(self) -> bool:
        return self.status in VERIFIED_STATUSES

    @property
    def counts(self) -> bool:
        """In its run's figures (the run page's view: unverified ones included)."""
        return not standing(self.status, self.excluded_at is not None, **RUN_RULE)


class SubmissionTransition(models.Model):
    """One step of a submission's lifecycle: who moved it from what to what, when and why."""

    submission = models.ForeignKey(Submission, models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=20, choices=SubmissionStatus)
    to_status = models.CharField(max_length=20, choices=SubmissionStatus)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    by_label = models.CharField(max_length=200)  # kept when the user is deleted; "system" for tasks
    reason = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created", "id"]


class Verdict(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"


class Review(models.Model):
    submission = models.ForeignKey(Submission, models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, models.PROTECT, related_name="reviews")
    verdict = models.CharField(max_length=10, choices=Verdict)
    comment = models.TextField(blank=True)
    # False: an approval that does not count where two people must approve: the proposer's own, or a
    # second one by the same person (recorded, not counted).
    counted = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)


class ArenaResult(models.Model):
    submission = models.ForeignKey(Submission, models.CASCADE, related_name="arena_results")
    arena = models.CharField(max_length=200)
    rank = models.PositiveIntegerField(null=True, blank=True)
    arena_score = models.FloatField(null=True, blank=True)
    delta = models.FloatField(null=True, blank=True)  # against the previous recorded result
    delta_best = models.FloatField(null=True, blank=True)  # against the best recorded result before it
    rank_delta = models.IntegerField(
        null=True, blank=True
    )  # rank minus the previous rank (negative: moved up)
    note = models.TextField(blank=True)
    recorded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.PROTECT, related_name="arena_results")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(arena_score__isnull=True) | finite("arena_score"), name="arena_score_finite"
            )
        ]
