"""Every API error is JSON: `{"code", "message", "errors": [{"index", "field", "message"}]}`."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import OperationalError
from django.http import Http404, HttpResponse, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from smrweb.tracking.errors import TrackingError

BUSY_MESSAGE = "The database is busy; retry shortly."


def is_busy(exc: BaseException) -> bool:
    """SQLite's busy timeout ran out under write load: a retryable condition, not a server bug."""
    return isinstance(exc, OperationalError) and "locked" in str(exc)


def busy_response(render: Callable[[int, str], HttpResponse] | None = None) -> HttpResponse:
    """The answer while SQLite is busy: 503 with Retry-After, for the JSON API and for OTLP alike.
    `render(status, message)` builds the body in another wire format (OTLP's google.rpc.Status);
    without it, the API's JSON error with code "busy"."""
    if render is None:
        response = Response({"code": "busy", "message": BUSY_MESSAGE, "errors": []}, status=503)
    else:
        response = render(503, BUSY_MESSAGE)
    response["Retry-After"] = "2"
    return response


def rate_limited(limited) -> Response:
    """429 with Retry-After: a caller over one of smrweb's rate limits (`core.ratelimits.Limited`)."""
    return Response(
        {"code": "rate_limited", "message": limited.message, "errors": []},
        status=429,
        headers={"Retry-After": str(limited.retry_after)},
    )


def _flatten(detail, prefix: str = "") -> list[dict]:
    """DRF's nested error detail as a flat list of {index, field, message}."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else (f"{prefix}.{key}" if prefix else str(key))
            out += _flatten(value, name)
        return out
    if isinstance(detail, list):
        if all(not isinstance(d, (dict, list)) for d in detail):
            return [{"index": None, "field": prefix, "message": str(d)} for d in detail]
        out = []
        for i, value in enumerate(detail):
            out += _flatten(value, f"{prefix}.{i}" if prefix else str(i))
        return out
    return [{"index": None, "field": prefix, "message": str(detail)}]


def exception_handler(exc, context):
    if isinstance(exc, TrackingError):
        body = exc.as_dict()
        body.setdefault("errors", [])  # errors without field detail (too large, digest mismatch) too
        return Response(body, status=exc.status)
    if is_busy(exc):
        return busy_response()
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        body = {
            "code": "invalid",
            "message": "The request has invalid fields.",
            "errors": _flatten(exc.detail),
        }
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
        body = {"code": code, "message": str(detail), "errors": []}
    response.data = body
    return response


def json_error(status: int, code: str, message: str) -> JsonResponse:
    """For failures outside DRF views (the 400/403/404/500 handlers under /api/)."""
    return JsonResponse({"code": code, "message": message, "errors": []}, status=status)
