"""Errors in MLflow's shape, `{"error_code": …, "message": …}` with its HTTP status, so the MLflow client
raises its usual `MlflowException` (`RestException`) with the code: not the API's JSON errors."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions

from smrweb.api.errors import BUSY_MESSAGE, is_busy
from smrweb.sources.mlflow.wire import MlflowError, from_tracking_error
from smrweb.tracking.errors import TrackingError


def mlflow_error(status: int, error_code: str, message: str) -> JsonResponse:
    response = JsonResponse({"error_code": error_code, "message": message}, status=status)
    if status == 503:
        response["Retry-After"] = "2"
    return response


def as_mlflow_error(exc: BaseException) -> JsonResponse | None:
    """The answer to an exception raised in an MLflow view; None for a bug (the 500 handler answers)."""
    if isinstance(exc, MlflowError):
        return mlflow_error(exc.status, exc.error_code, exc.message)
    if isinstance(exc, TrackingError):
        return as_mlflow_error(from_tracking_error(exc))
    if is_busy(exc):
        return mlflow_error(503, "TEMPORARILY_UNAVAILABLE", BUSY_MESSAGE)
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        return mlflow_error(401, "UNAUTHENTICATED", str(exc.detail))
    if isinstance(exc, (exceptions.PermissionDenied, DjangoPermissionDenied)):
        return mlflow_error(403, "PERMISSION_DENIED", str(getattr(exc, "detail", "")) or "Not allowed.")
    if isinstance(exc, (exceptions.NotFound, Http404)):
        return mlflow_error(404, "RESOURCE_DOES_NOT_EXIST", str(getattr(exc, "detail", "")) or "Not found.")
    if isinstance(exc, exceptions.MethodNotAllowed):
        return mlflow_error(405, "ENDPOINT_NOT_FOUND", str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        return mlflow_error(429, "REQUEST_LIMIT_EXCEEDED", str(exc.detail))
    if isinstance(exc, exceptions.APIException):
        return mlflow_error(exc.status_code, "BAD_REQUEST", str(exc.detail))
    return None
