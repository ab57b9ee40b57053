"""What both halves of the MLflow face share: MLflow's error shape and codes, the request fields,
timestamps in milliseconds, status names, and artifact locations."""

from __future__ import annotations

import posixpath
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

from smrweb.sources.apply import describe
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidEvents, TrackingError
from smrweb.tracking.events import MLFLOW_ARTIFACT_TAG
from smrweb.tracking.models import RunState

VIA = "mlflow"
DEFAULT_EXPERIMENT_ID = "0"
RUN_NAME_TAG = "mlflow.runName"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
USER_TAG = "mlflow.user"
ARTIFACT_TAG = MLFLOW_ARTIFACT_TAG  # the artifact a run's scores name (its path in the run, or a sha256)


STATUS_TO_STATE = {
    "RUNNING": RunState.RUNNING,
    "SCHEDULED": RunState.QUEUED,
    "FINISHED": RunState.DONE,
    "FAILED": RunState.FAILED,
    "KILLED": RunState.STOPPED,
}
STATE_TO_STATUS = {
    RunState.QUEUED: "SCHEDULED",
    RunState.DONE: "FINISHED",
    RunState.FAILED: "FAILED",
    RunState.ABANDONED: "FAILED",
    RunState.STOPPED: "KILLED",
    RunState.CANCELED: "KILLED",
}


class MlflowError(Exception):
    """A request refused in MLflow's terms: `error_code` (databricks.proto's ErrorCode) and a message."""

    STATUS = {
        "INVALID_PARAMETER_VALUE": 400,
        "BAD_REQUEST": 400,
        "RESOURCE_ALREADY_EXISTS": 400,
        "UNAUTHENTICATED": 401,
        "PERMISSION_DENIED": 403,
        "RESOURCE_DOES_NOT_EXIST": 404,
        "ENDPOINT_NOT_FOUND": 404,
        "REQUEST_LIMIT_EXCEEDED": 429,
        "INTERNAL_ERROR": 500,
        "TEMPORARILY_UNAVAILABLE": 503,
    }

    def __init__(self, error_code: str, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.STATUS.get(self.error_code, 400)


def invalid(message: str) -> MlflowError:
    return MlflowError("INVALID_PARAMETER_VALUE", message)


def from_tracking_error(exc: TrackingError) -> MlflowError:
    """A domain refusal in MLflow's terms (the message names the field)."""
    if isinstance(exc, InvalidEvents):
        return invalid("; ".join(describe([e]) for e in exc.errors) or exc.message)
    if exc.status == 403:
        return MlflowError("PERMISSION_DENIED", exc.message)
    if exc.status == 413:
        return MlflowError("INVALID_PARAMETER_VALUE", exc.message)
    field = getattr(exc, "field", "")
    return invalid(f"{field}: {exc.message}" if field else exc.message)


# --- reading request fields ------------------------------------------------------------------------------


def text_field(body: dict, name: str, *, required: bool = True, default: str = "") -> str:
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise invalid(f"Missing value for required parameter '{name}'.")
        return default
    if not isinstance(value, str):
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a string.")
    return value


def int_field(body: dict, name: str, *, required: bool = False, default: int | None = None) -> int | None:
    """An int64 field: protobuf's JSON sends them as numbers or as decimal strings."""
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise invalid(f"Missing value for required parameter '{name}'.")
        return default
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a 64-bit integer.")
    return value


def run_id_of(body: dict) -> str:
    """The run named by `run_id` (or the older `run_uuid`)."""
    return text_field(body, "run_id", required=False) or text_field(body, "run_uuid")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def ms_of(dt: datetime | None) -> int | None:
    """Milliseconds since 1970, in integers (a float round trip can lose the last millisecond)."""
    return None if dt is None else (dt - _EPOCH) // _MS


def iso_of(ms: int) -> str:
    if not 0 <= ms <= 253_370_764_800_000:  # 1970 … 9999
        raise invalid(f"Invalid timestamp {ms}: expected milliseconds since 1970 before the year 9999.")
    return (_EPOCH + ms * _MS).isoformat().replace("+00:00", "Z")


def split_artifact_path(path: str) -> tuple[str, str, str]:
    """`<experiment id>/<run id>/artifacts[/<path>]` → (experiment id, run id, path in the run)."""
    parts = path.strip("/").split("/", 3)
    if len(parts) < 3 or parts[2] != "artifacts":
        raise MlflowError(
            "RESOURCE_DOES_NOT_EXIST",
            f"No artifact location {path[:200]!r}: expected <experiment>/<run>/artifacts/…",
        )
    inner = parts[3] if len(parts) == 4 else ""
    if inner:
        try:
            services.check_artifact_path(inner)
        except TrackingError as exc:
            raise invalid(f"Invalid artifact path {inner[:200]!r}: {exc.message}") from None
    normal = posixpath.normpath(inner) if inner else ""
    if normal in (".",):
        normal = ""
    if normal.startswith("/"):
        raise invalid(f"Invalid artifact path {inner[:200]!r}: it is absolute.")
    if any(_decoded(part) in (".", "..") for part in normal.split("/")):
        # `..` left after normalizing, or `%2e%2e` (sent as `%252e%252e`), which was kept as a directory:
        # a client that decodes it once more would walk up (review N10)
        raise invalid(
            f"Invalid artifact path {inner[:200]!r}: a part is, or percent-decodes to, '.' or '..'."
        )
    return parts[0], parts[1], normal


def _decoded(part: str) -> str:
    """`part` percent-decoded until nothing changes (each round shortens it, so this ends)."""
    while "%" in part and (decoded := unquote(part)) != part:
        part = decoded
    return part
