"""Error pages: JSON under /api/ (clients parse it), HTML elsewhere."""

from django.shortcuts import render

from smrweb.api.errors import json_error


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error(404, "not_found", "No such resource.")
    return render(request, "404.html", status=404)


def server_error(request):
    if request.path.startswith("/api/"):
        return json_error(500, "server_error", "The server failed; the error was logged.")
    return render(request, "500.html", status=500)
