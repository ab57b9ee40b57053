"""Domain errors raised by tracking services; the API turns them into JSON with field detail."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
