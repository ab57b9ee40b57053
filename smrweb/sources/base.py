"""What a source can do for smrweb, independent of any one backend.

A connector answers in plain data (`RunSnapshot`, `ArtifactRef`, ingest-contract event dicts);
`sources.sync` hands them to the tracking services, so a connector never writes to the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol


class SourceError(Exception):
    """A failed call to a source. `kind` names the fault for source health; `retry_after` is the
    backend's own hint in seconds, when it gave one; `status` the HTTP status that carried it, if any."""

    kind = "error"

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class RateLimited(SourceError):
    kind = "rate_limited"


class Denied(SourceError):
    """A structured denial (e.g. smr_limit_exceeded), whatever HTTP status carried it."""

    kind = "denied"


class TimedOut(SourceError):
    kind = "timeout"


class Unreachable(SourceError):
    kind = "unreachable"


class ServerError(SourceError):
    kind = "server_error"


class QuotaExceeded(SourceError):
    """Storing what the source has would pass the project's storage quota (recorded, visible on health)."""

    kind = "quota"


class Blocked(SourceError):
    """The project's own backend address is one smrweb does not send to (core/outbound.py)."""

    kind = "blocked"


class Malformed(SourceError):
    """The answer was not of the expected shape (the SDK's parsers raise ValueError)."""

    kind = "malformed"


class AuthFailed(SourceError):
    kind = "auth"


class RunGone(SourceError):
    kind = "not_found"


class NotPossible(SourceError):
    """The backend refused an action for a reason retrying will not change (e.g. the run is terminal)."""

    kind = "refused"


@dataclass(frozen=True)
class Failure:
    family: str = ""
    detail: str = ""
    source: str = ""


@dataclass(frozen=True)
class RunSnapshot:
    """One run as the backend's run list describes it."""

    external_id: str
    state: str
    updated_at: datetime | None
    live_phase: str = ""
    terminal_outcome: str = ""
    failure: Failure | None = None
    started_at: datetime | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    requested_profile: str = ""
    actual_profile: str = ""
    budget_usd: Decimal | None = None
    # Requested vs resolved profile per role (and per actor where the source lists them).
    actor_profiles: tuple[dict[str, str], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_terminal(self) -> bool:
        return self.state in {"done", "failed", "stopped", "canceled"}


@dataclass
class SpendReading:
    """One cycle's look at a run's spend: the source's own totals (`spend`, a smr_usage.SourceSpend),
    the new turns read from its usage entries, and how those entries read (None: not re-read this cycle,
    the timeline is as of `timeline_as_of`)."""

    turns: list[dict]
    spend: Any
    entries: Any
    timeline_as_of: datetime | None
    timeline_current: bool
    cursor: dict[str, Any]


@dataclass(frozen=True)
class ArtifactRef:
    artifact_id: str
    path: str
    sha256: str
    size: int | None
    content_type: str
    kind: str
    created_at: datetime | None
    experiment_id: str = ""


class Connector(Protocol):
    """Reads come one kind of data per call, each returning ingest-contract events and the cursor
    values to save once they are applied."""

    def list_runs(self, *, known: set[str], live: set[str], full: bool) -> list[RunSnapshot]: ...

    def fetch_spend(
        self, external_id: str, cursor: dict[str, Any], *, final: bool = False
    ) -> SpendReading: ...

    def declared_metrics(self) -> dict[str, str]: ...

    def fetch_artifacts(self, external_id: str) -> list[ArtifactRef]: ...

    def fetch_results(
        self,
        external_id: str,
        artifacts: list[ArtifactRef],
        cursor: dict[str, Any],
        *,
        created_at: datetime | None = None,
    ) -> tuple[list[dict], dict[str, Any]]: ...

    def fetch_checkpoints(
        self, external_id: str, cursor: dict[str, Any]
    ) -> tuple[list[dict], dict[str, Any]]: ...

    def experiment_names(self, external_id: str) -> dict[str, dict[str, str]]: ...

    def fetch_messages(
        self, external_id: str, cursor: dict[str, Any]
    ) -> tuple[list[dict], dict[str, Any]]: ...

    def pull_artifact(self, artifact: ArtifactRef) -> bytes: ...

    def stop_run(self, external_id: str) -> None: ...

    def roll_back(self, external_id: str, *, checkpoint_id: str, reason: str) -> dict[str, Any]: ...
