"""Domain errors raised by tracking services and reads, all of them here (one module, not one per noun); the
API turns them into JSON with field detail, each with its HTTP `status` and `code`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


class TrackingError(Exception):
    """Base class: a request the domain refuses. Carries a message fit to show a user."""

    status = 400
    code = "invalid"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class EventError:
    index: int | None  # position of the offending event in the batch, None for the batch itself
    field: str
    message: str


class InvalidEvents(TrackingError):
    """A batch with at least one invalid event; nothing of it was written."""

    code = "invalid_events"

    def __init__(self, errors: list[EventError]):
        super().__init__(f"{len(errors)} problem(s) in the batch; nothing was written.")
        self.errors = errors

    def as_dict(self) -> dict:
        return {**super().as_dict(), "errors": [asdict(e) for e in self.errors]}


class InvalidLogLines(InvalidEvents):
    """A batch of log lines with at least one problem (`lines[3].level`); nothing of it was written."""

    code = "invalid_log_lines"


class BatchTooLarge(TrackingError):
    status = 413
    code = "batch_too_large"


class DigestMismatch(TrackingError):
    code = "digest_mismatch"


class ArtifactTooLarge(TrackingError):
    status = 413
    code = "artifact_too_large"


class ArtifactBytesMissing(TrackingError):
    """An artifact row whose bytes are not in artifact storage (a file or S3 object removed by hand, a
    bucket restored without them): a clear refusal, never a 500."""

    status = 404
    code = "artifact_bytes_missing"


class StorageQuotaExceeded(TrackingError):
    status = 413
    code = "storage_quota_exceeded"


class InvalidInput(TrackingError):
    """A single field of a non-event request is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    def as_dict(self) -> dict:
        return {
            **super().as_dict(),
            "errors": [{"index": None, "field": self.field, "message": self.message}],
        }


class OverUploadLimit(InvalidInput):
    """The arena's uploads for today are used up: the upload is recorded only when confirmed
    (`confirm_over_limit`), since only the person at the arena knows whether it took the file."""

    status = 409
    code = "arena_daily_limit_reached"

    def __init__(self, message: str):
        super().__init__("confirm_over_limit", message)


class NotAllowed(TrackingError):
    """The actor lacks the project role an action needs (API tokens have no role)."""

    status = 403
    code = "not_allowed"


class InvitationUnusable(TrackingError):
    """An invitation link that cannot be used: altered or replaced, expired, used, revoked, or opened by
    someone signed in with another address. `reason` says which (the page words it)."""

    status = 410
    code = "invitation_unusable"

    def __init__(self, reason: str, message: str, *, status: int = 410):
        super().__init__(message)
        self.reason = reason
        self.status = status


class Archived(TrackingError):
    """The run or project is archived: read-only until it is restored (nothing is written)."""

    status = 409
    code = "archived"


class DeletionRefused(TrackingError):
    """A deletion that cannot go ahead (a wrong confirmation, a row another run still needs)."""

    status = 409
    code = "deletion_refused"


class ArchiveRefused(TrackingError):
    """Archiving or restoring that makes no sense now (already archived, a live run)."""

    status = 409
    code = "archive_refused"


# --- refusals of the services that write runs, submissions and what is sent to a source ----------------


class CloseRefused(TrackingError):
    """A run that cannot be closed as abandoned now (see services.capabilities: Action.CLOSE)."""

    status = 409
    code = "close_refused"


class StopRefused(TrackingError):
    """A stop the run's source cannot take (see services.capabilities: Action.STOP)."""

    status = 409
    code = "stop_refused"


class IllegalTransition(TrackingError):
    """A submission move its lifecycle does not allow from where it is (services.submissions.TRANSITIONS)."""

    status = 409
    code = "illegal_transition"


class RollbackRefused(TrackingError):
    """A rollback the project's source cannot make, or its target cannot be restored."""

    status = 409
    code = "rollback_refused"


class ControlRefused(TrackingError):
    """Steering the run's source cannot take, or a message that cannot be sent."""

    status = 409
    code = "control_refused"


class LaunchRefused(TrackingError):
    """Starting the next run is refused (the project's source cannot, the person may not, a bad field)."""

    status = 409
    code = "launch_refused"


class KeyReused(TrackingError):
    """The idempotency key names an earlier request that asked for something else."""

    status = 409
    code = "idempotency_key_reused"


# --- alerts --------------------------------------------------------------------------------------------


class DuplicateRule(InvalidInput):
    """The rule asked for exists already: two would notify the same destination twice for each event."""

    code = "duplicate_rule"

    def __init__(self, existing: Any):  # the AlertRule (errors sit below the models: no import)
        when = f"{existing.created:%Y-%m-%d}"
        by = f" by {existing.created_by.get_username()}" if existing.created_by_id else ""
        super().__init__(
            "non_field_errors",
            f"This rule exists already: rule #{existing.pk}, {existing.trigger} → {existing.destination} "
            f"(added{by} on {when}{', muted' if existing.muted else ''}). Change that one, or give this one "
            "another trigger, option or destination.",
        )
        self.existing = existing  # the API's answer keeps its one error shape: the message names it


# --- reads that can refuse: the review workbench's comparisons and summaries ------------------------------


class NoComparison(TrackingError):
    """There is nothing to compare with (no approved submission yet, an unknown id)."""

    status = 404
    code = "no_comparison"


class NotComparable(TrackingError):
    """A side has no stored bytes (an artifact reference that was never uploaded), or is too large."""

    status = 409
    code = "not_comparable"


class TooLargeToCompare(NotComparable):
    """A side is too large to summarise, or the summaries too large to diff."""

    code = "too_large"


class SummaryPending(TrackingError):
    """A model's summary is being computed on a worker: ask again shortly (the API answers 202)."""

    status = 202
    code = "pending"


# --- reproducibility bundles ----------------------------------------------------------------------------


class NoBundle(TrackingError):
    """A submission without stored artifact bytes has nothing to re-score: no bundle is made for it."""

    status = 409
    code = "no_artifact"


# --- read-only share links ------------------------------------------------------------------------------


class ShareLinkUnknown(TrackingError):
    """No share link has this token, or it was revoked, or what it shows is no longer its creator's to
    show: one answer for all (nobody learns which tokens were ever issued)."""

    status = 404
    code = "share_link_unknown"


class ShareLinkExpired(TrackingError):
    """A genuine share link whose time is up (its creator may share the page again)."""

    status = 410
    code = "share_link_expired"
