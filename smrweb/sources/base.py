"""What a source can do for smrweb, independent of any one backend.

A connector answers in plain data (`RunSnapshot`, `RunData`); `sources.sync` turns that into events
and hands them to the tracking services, so a connector never writes to the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol


class SourceError(Exception):
    """A failed call to a source. `kind` names the fault for source health; `retry_after` is the
    backend's own hint in seconds, when it gave one."""

    kind = "error"

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


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
    finished_at: datetime | None = None
    requested_profile: str = ""
    actual_profile: str = ""
    budget_usd: Decimal | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_terminal(self) -> bool:
        return self.state in {"done", "failed", "stopped", "canceled"}


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


@dataclass
class RunData:
    """Everything a sync brings in for one run, already converted to ingest events where it can be."""

    snapshot: RunSnapshot
    events: list[dict[str, Any]]  # ingest-contract events (agent.turn, metric, score, checkpoint, message)
    artifacts: list[ArtifactRef]
    other_meters_usd: Decimal
    total_usd: Decimal | None  # what the backend bills for the run, all meters included
    cursor: dict[str, Any]


class Connector(Protocol):
    def list_runs(self) -> list[RunSnapshot]: ...

    def fetch_run(self, snapshot: RunSnapshot, cursor: dict[str, Any]) -> RunData: ...

    def pull_artifact(self, artifact: ArtifactRef) -> bytes: ...

    def stop_run(self, external_id: str) -> None: ...

    def roll_back(self, external_id: str, *, checkpoint_id: str, reason: str) -> dict[str, Any]: ...
