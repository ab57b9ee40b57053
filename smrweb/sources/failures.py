"""A failed model call, read from a free-form record: a per-call log line (seed 001's `error`,
`fix_hint`, `http_status`) or an SMR usage entry, whose spec leaves the shape open. One home for the
keys and words both adapters accept; the OTLP adapter reads span status instead (`otlp._failure`).
Returns the contract's failure fields (`status`, `error`, `http_status`, `error_message`), or {}."""

from __future__ import annotations

from typing import Any

FAILED_WORDS = frozenset(
    {"error", "errored", "failed", "failure", "fail", "timeout", "timed_out", "rate_limited"}
)
STATUS_KEYS = ("status", "outcome", "result", "call_status")
ERROR_KEYS = ("error", "error_type", "error_class", "error_code", "exception", "exception_type")
MESSAGE_KEYS = (
    "fix_hint",
    "fixHint",
    "error_message",
    "errorMessage",
    "error_detail",
    "failure_reason",
    "message",
)
HTTP_KEYS = ("http_status", "httpStatus", "status_code", "statusCode", "http_status_code")
NESTED_NAME_KEYS = ("type", "class", "code", "name", "kind")
NESTED_MESSAGE_KEYS = ("message", "detail", "fix_hint", "reason")
NESTED_HTTP_KEYS = ("http_status", "status", "status_code")


def _first(record: dict, keys: tuple[str, ...]) -> Any:
    return next((record[k] for k in keys if record.get(k) not in (None, "")), None)


def _http(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599 else None


def failure_of(record: dict) -> dict[str, Any]:
    """A record failed when its `error` (or `error_type`, …) is given, as text or as an object
    (`{"type", "message", "status"}`), or its status says so (error, failed, timeout, …), or its HTTP
    status is 400 or more; the message is its `fix_hint` (seed 001), else `error_message`, `message`…"""
    error = _first(record, ERROR_KEYS)
    nested = error if isinstance(error, dict) else {}
    status = _first(record, STATUS_KEYS)
    http = _http(_first(record, HTTP_KEYS))
    if http is None and nested:
        http = _http(_first(nested, NESTED_HTTP_KEYS))
    if http is None and isinstance(status, (int, float)):
        http = _http(status)  # `"status": 429` is an HTTP status
    said_failed = isinstance(status, str) and status.strip().lower() in FAILED_WORDS
    if not (error not in (None, False) or said_failed or (http or 0) >= 400):
        return {}
    name = _first(nested, NESTED_NAME_KEYS) if nested else error
    if name is None or isinstance(name, (dict, list, bool)):
        name = status if said_failed else (str(http) if http else "error")
    message = _first(nested, NESTED_MESSAGE_KEYS) if nested else None
    if message is None:
        message = _first(record, MESSAGE_KEYS)
    out: dict[str, Any] = {"status": "error", "error": str(name)[:200]}
    if isinstance(message, str) and message:
        out["error_message"] = message
    if http is not None:
        out["http_status"] = http
    return out
