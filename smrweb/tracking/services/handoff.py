"""The manual arena handoff — part of the one write path (with `services.submissions`, whose moves it
makes): an approved submission marked uploaded by hand (against the arena's daily limit, counted in its own
zone), what the arena answered (a rank and score, with deltas and a knowledge entry) or that it refused the
file (the submission leaves the numbers and is carried forward as a failed approach)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from smrweb.core import numbers
from smrweb.tracking.errors import InvalidInput, OverUploadLimit
from smrweb.tracking.models import (
    ArenaResult,
    AuditVerb,
    KnowledgeEntry,
    KnowledgeKind,
    Role,
    Submission,
    SubmissionTransition,
)
from smrweb.tracking.models.scenario import arena_zone
from smrweb.tracking.services import record_audit
from smrweb.tracking.services.submissions import S, _move, _require

ARENA_REF_MAX = Submission._meta.get_field("arena_ref").max_length


@dataclass(frozen=True)
class UploadAllowance:
    """The arena's uploads today for one project: its daily limit (None: none known), how many this
    project has marked uploaded since the arena's day began, and when the next day begins."""

    limit: int | None
    used: int
    day_start: datetime  # aware, in the arena's zone
    resets: datetime  # aware, in the arena's zone
    zone: str

    @property
    def left(self) -> int | None:
        return None if self.limit is None else max(self.limit - self.used, 0)

    @property
    def used_up(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    @property
    def reset_clock(self) -> str:
        """When the arena's next day starts, on its own clock: "00:00"."""
        return f"{self.resets:%H:%M}"

    def reset_text(self, now: datetime | None = None) -> str:
        """ "resets 00:00 Europe/Paris, in 3h 12m"."""
        wait = numbers.duration(self.resets - (now or timezone.now()))
        return f"resets {self.reset_clock} {self.zone}, in {wait}"

    def text(self, now: datetime | None = None) -> str:
        """ "2 uploads left today (resets 00:00 UTC, in 5h)"; "" without a known limit."""
        if self.limit is None:
            return ""
        left = self.left
        head = f"{left} upload{'' if left == 1 else 's'} left today" if left else "No uploads left today"
        return f"{head} ({self.reset_text(now)}); {self.used} of {self.limit} used"

    def as_dict(self) -> dict:
        return {
            "limit": self.limit,
            "used": self.used,
            "left": self.left,
            "day_start": self.day_start.isoformat(),
            "resets_at": self.resets.isoformat(),
            "timezone": self.zone,
        }


def arena_day(scenario, now: datetime | None = None) -> tuple[datetime, datetime]:
    """The arena's current day, [start, next start), as aware times in its zone: it starts at
    `arena_resets_at` wall-clock time (a day across a DST change is 23 or 25 hours long)."""
    zone = arena_zone(scenario.arena_timezone)
    local = (now or timezone.now()).astimezone(zone)
    start = datetime.combine(local.date(), scenario.arena_resets_at, tzinfo=zone)
    if start > local:
        start = datetime.combine(local.date() - timedelta(days=1), scenario.arena_resets_at, tzinfo=zone)
    return start, datetime.combine(start.date() + timedelta(days=1), scenario.arena_resets_at, tzinfo=zone)


def upload_allowance(project, now: datetime | None = None) -> UploadAllowance:
    """How many of the arena's uploads this project has left today. Every "marked uploaded" counts,
    an upload the arena then refused too: the arena counted it."""
    scenario = project.scenario
    start, resets = arena_day(scenario, now)
    used = SubmissionTransition.objects.filter(
        submission__project=project, to_status=S.UPLOADED, created__gte=start
    ).count()
    return UploadAllowance(scenario.arena_daily_limit, used, start, resets, scenario.arena_timezone)


def mark_uploaded(
    submission: Submission,
    *,
    by: Any,
    note: str = "",
    arena_ref: str = "",
    confirm_over_limit: bool = False,
) -> Submission:
    """Record the manual upload; `arena_ref` is the arena's own submission id or URL for it. When the
    arena's uploads for today are used up it is refused (OverUploadLimit) unless `confirm_over_limit`;
    the audit row says how many were used and whether it went over."""
    _require(submission, by, Role.REVIEWER, "mark a submission uploaded")
    arena_ref = (arena_ref or "").strip()
    if len(arena_ref) > ARENA_REF_MAX or "\x00" in arena_ref:
        raise InvalidInput(
            "arena_ref", f"The arena's submission id or URL, at most {ARENA_REF_MAX} characters."
        )
    if "://" in arena_ref and not arena_ref.lower().startswith(("https://", "http://")):
        raise InvalidInput("arena_ref", "A link to the arena must start with https:// or http://.")
    allowance = upload_allowance(submission.project)
    if allowance.used_up and not confirm_over_limit:
        raise OverUploadLimit(
            f"The arena takes {allowance.limit} upload{'' if allowance.limit == 1 else 's'} a day and this "
            f"project has marked {allowance.used} today ({allowance.reset_text()}). If the arena took "
            "the file anyway, confirm to record it."
        )
    reason = note or ("uploaded to the arena by hand" + (f" as {arena_ref}" if arena_ref else ""))
    if allowance.used_up:
        reason += f" (over the arena's daily limit of {allowance.limit}, confirmed)"
    return _move(
        submission,
        S.UPLOADED,
        by=by,
        reason=reason,
        audit={
            "arena_ref": arena_ref,
            "uploads_today": allowance.used + 1,
            "daily_limit": allowance.limit,
            "over_limit": allowance.used_up,
        },
        uploaded_by=by,
        uploaded_at=timezone.now(),
        arena_ref=arena_ref,
    )


REFUSAL_MAX = 5000


def record_refusal(submission: Submission, *, by: Any, reason: str) -> Submission:
    """The arena turned an uploaded file down: the submission leaves the project's numbers and is
    carried forward as a failed approach with `reason` (required: what the arena said)."""
    _require(submission, by, Role.REVIEWER, "record that the arena refused a submission")
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(
            "reason",
            "Say what the arena said: the reason is kept in the history and carried forward to the "
            "agents as a failed approach.",
        )
    if len(reason) > REFUSAL_MAX or "\x00" in reason:
        raise InvalidInput("reason", f"At most {REFUSAL_MAX} characters of text.")
    return _move(submission, S.REFUSED, by=by, reason=reason, audit={"arena_ref": submission.arena_ref})


def arena_better(delta: float | None, *, maximize: bool) -> bool | None:
    """Whether an arena-score change is an improvement in the arena's own direction (None: no change
    known)."""
    if delta is None or delta == 0:
        return None
    return delta > 0 if maximize else delta < 0


ARENA_SCORE_LIMIT = 1e300


def record_arena_result(
    submission: Submission, *, by: Any, rank: int | None, arena_score: float | None, note: str = ""
) -> ArenaResult:
    """Record what the arena said about an uploaded submission: deltas against the project's previous
    recorded result and its best so far (in the scenario's direction), and a knowledge entry."""
    _require(submission, by, Role.REVIEWER, "record an arena result")
    if rank is None and arena_score is None:
        raise InvalidInput("rank", "Give the arena's rank, its score, or both.")
    if arena_score is not None and not (-ARENA_SCORE_LIMIT <= arena_score <= ARENA_SCORE_LIMIT):
        # Deltas of two scores near the float limit overflow (red-team finding 7): no arena scores that big.
        raise InvalidInput(
            "arena_score", f"A finite number between -{ARENA_SCORE_LIMIT:g} and {ARENA_SCORE_LIMIT:g}."
        )
    scenario = submission.project.scenario
    with transaction.atomic():
        submission = _move(submission, S.RANKED, by=by, reason=note or "arena result recorded")
        earlier = ArenaResult.objects.select_for_update(of=("self",)).filter(
            submission__project=submission.project
        )
        previous = earlier.exclude(arena_score__isnull=True).order_by("-created", "-id").first()
        previous_rank = earlier.exclude(rank__isnull=True).order_by("-created", "-id").first()
        scores = list(earlier.exclude(arena_score__isnull=True).values_list("arena_score", flat=True))
        best = (max(scores) if scenario.arena_maximize else min(scores)) if scores else None
        delta = arena_score - previous.arena_score if arena_score is not None and previous else None
        delta_best = arena_score - best if arena_score is not None and best is not None else None
        rank_delta = rank - previous_rank.rank if rank is not None and previous_rank else None
        result = ArenaResult.objects.create(
            submission=submission,
            arena=scenario.arena_name or scenario.key,
            rank=rank,
            arena_score=arena_score,
            delta=delta,
            delta_best=delta_best,
            rank_delta=rank_delta,
            note=note[:5000],
            recorded_by=by,
        )
        better = arena_better(delta, maximize=scenario.arena_maximize)
        verdict = "" if better is None else (", better" if better else ", worse")
        moved = "" if rank_delta is None else f", {numbers.rank_move(rank_delta)}"
        title = (
            f"Arena: rank {rank if rank is not None else '—'}, score "
            f"{'—' if arena_score is None else f'{arena_score:g}'} "
            f"({numbers.signed_text(delta)} vs previous{verdict}, {numbers.signed_text(delta_best)} vs "
            f"best{moved})"
        )
        body = "\n".join(
            filter(
                None,
                [
                    f"Submission {submission.score:g} from run {submission.run.external_id}"
                    + (f" ({submission.artifact_ref or ''})" if submission.artifact_ref else ""),
                    note,
                ],
            )
        )
        KnowledgeEntry.objects.create(
            project=submission.project,
            kind=KnowledgeKind.ARENA_DELTA,
            title=title[:300],
            body=body,
            submission=submission,
            created_by=by,
        )
        record_audit(
            by,
            AuditVerb.ARENA_RESULT_RECORDED,
            result,
            project=submission.project,
            rank=rank,
            arena_score=arena_score,
            delta=delta,
            delta_best=delta_best,
            rank_delta=rank_delta,
        )
    return result
