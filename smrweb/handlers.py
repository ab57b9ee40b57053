"""The project's error handlers (urls.handler400…500): JSON under /api/ (clients parse it), HTML
elsewhere. At project level, so neither face imports the other."""

from django.shortcuts import render
from django.views.defaults import bad_request as html_bad_request
from django.views.defaults import permission_denied as html_permission_denied

from smrweb.api.errors import json_error
from smrweb.api.mlflow.errors import mlflow_error


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error(404, "not_found", "No such resource.")
    return render(request, "404.html", status=404)


def server_error(request):
    if request.path.startswith("/mlflow/"):  # the MLflow client reads its own error shape
        return mlflow_error(500, "INTERNAL_ERROR", "The server failed; the error was logged.")
    if request.path.startswith("/api/"):
        return json_error(500, "server_error", "The server failed; the error was logged.")
    return render(request, "500.html", status=500)


def bad_request(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error(400, "bad_request", str(exception) or "The request could not be read.")
    return html_bad_request(request, exception)


def permission_denied(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error(403, "permission_denied", str(exception) or "Not allowed.")
    return html_permission_denied(request, exception)
