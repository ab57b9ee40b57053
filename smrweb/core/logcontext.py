"""What every log line says about where it came from: the request (or Celery task) id, the project and
the run. Set per request by `RequestContextMiddleware`, per task by the Celery signals in
`smrweb/celery.py`, and narrowed by code that knows more (`bind(project=…)`); read by `ContextFilter`, which
both log formats use (`SMRWEB_LOG_FORMAT=json` writes them as fields, the console leaves them out).
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from contextvars import ContextVar

FIELDS = ("request_id", "project", "run")
# The one JSON line format (dictConfig), for Django's LOGGING and gunicorn's own loggers alike.
JSON_FORMATTER = {
    "()": "pythonjsonlogger.json.JsonFormatter",
    "fmt": "%(levelname)s %(name)s %(message)s %(request_id)s %(project)s %(run)s",
    "rename_fields": {"levelname": "level", "name": "logger"},
    "timestamp": "time",
}
CONTEXT_FILTER = {"()": "smrweb.core.logcontext.ContextFilter"}
_EMPTY: dict[str, str] = {}  # (never mutated: every change sets a new dict)
_context: ContextVar[dict[str, str]] = ContextVar("smrweb_log_context", default=_EMPTY)  # noqa: B039
# A caller's own request id is kept when it is a plain token (a proxy's X-Request-ID); anything else is
# replaced, so a header cannot inject text into the logs.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def current() -> dict[str, str]:
    return _context.get()


def start(request_id: str | None = None, **fields: str) -> object:
    """Begin a fresh context (a request or a task); returns the token `end` needs."""
    if not request_id or not _REQUEST_ID.fullmatch(request_id):
        request_id = uuid.uuid4().hex
    return _context.set({"request_id": request_id, **{k: str(v) for k, v in fields.items() if v}})


def end(token) -> None:
    _context.reset(token)


def clear(**kwargs) -> None:
    _context.set({})


def bind(**fields) -> None:
    """Add what the running code knows (the project being synced, the run being written)."""
    _context.set({**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}})


@contextlib.contextmanager
def scope(request_id: str | None = None, **fields):
    token = start(request_id, **fields)
    try:
        yield current()
    finally:
        end(token)


class ContextFilter(logging.Filter):
    """Puts the context's fields on every record (empty strings when there is none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get()
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, context.get(name, ""))
        return True


class RequestContextMiddleware:
    """One request id per request (the caller's X-Request-ID when it is a plain token), echoed in the
    response; the project and run come from the URL once it is resolved. The context outlives this
    middleware on purpose: Django logs a 4xx or 5xx after the middleware chain returns, so the context is
    cleared when the request finishes (`request_finished`), not here."""

    def __init__(self, get_response):
        from django.core.signals import request_finished

        self.get_response = get_response
        request_finished.connect(clear, dispatch_uid="smrweb-log-context")

    def __call__(self, request):
        start(request.headers.get("X-Request-ID"))
        request.request_id = current()["request_id"]
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        bind(project=view_kwargs.get("slug"), run=view_kwargs.get("run_id"))
        return None
