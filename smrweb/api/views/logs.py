"""A run's log: `POST` a batch of lines (the harness, `smrweb log`, the logging handler) and `GET` a page
of them by seq (docs/api.md, "Run logs"). The write is `services.logs`, the read `queries.logs`."""

from __future__ import annotations

import json

from django.core.exceptions import RequestDataTooBig
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import project_for, run_for
from smrweb.api.parsers import nesting_error, too_deep
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.logs import LogBatchIn, LogBatchResultSerializer, LogPageSerializer
from smrweb.api.views.events import UnparsedJSON
from smrweb.tracking.errors import BatchTooLarge, InvalidInput
from smrweb.tracking.models import LogLevel, Role
from smrweb.tracking.queries.logs import LOG_PAGE_DEFAULT, LOG_PAGE_MAX, log_page
from smrweb.tracking.services import logs as log_service

BATCH_FIELDS = {"batch_id", "lines", "stream"}


def _seq_param(request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    if not value.isdigit() or len(value) > 18:
        raise InvalidInput(name, f"`{name}` is a line's seq: a whole number ≥ 0.")
    return int(value)


def _page_params(request) -> dict:
    limit = request.query_params.get("limit") or str(LOG_PAGE_DEFAULT)
    if not limit.isdigit() or not 1 <= int(limit) <= LOG_PAGE_MAX:
        raise InvalidInput("limit", f"`limit` is 1 to {LOG_PAGE_MAX}.")
    level = request.query_params.get("level") or None
    try:
        min_level = LogLevel.parse(level) if level is not None else None
    except ValueError as exc:
        raise InvalidInput("level", str(exc)) from None
    order = request.query_params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise InvalidInput("order", "`order` is asc (oldest first, the default) or desc (newest first).")
    return {
        "after": _seq_param(request, "after"),
        "before": _seq_param(request, "before"),
        "min_level": min_level,
        "search": request.query_params.get("q", ""),
        "limit": int(limit),
        "newest_first": order == "desc",
    }


class RunLogs(APIView):
    # Read from the bytes (as the events endpoint does), so Django's 10 MB body cap holds: DRF's own JSON
    # parser streams the body past it.
    parser_classes = [UnparsedJSON]

    @extend_schema(
        operation_id="run_log_list",
        summary="A page of a run's log",
        description="Lines by seq, oldest first. Without `after`/`before`: the newest `limit` lines (the "
        "tail). `after=N`: the lines after seq N (a live tail polls with the last seq it has); "
        "`before=N`: the lines before seq N (scrolling back). `order=desc` lists the page newest first.",
        parameters=[
            OpenApiParameter("after", OpenApiTypes.INT, description="Lines with a seq above this."),
            OpenApiParameter("before", OpenApiTypes.INT, description="Lines with a seq below this."),
            OpenApiParameter(
                "level", OpenApiTypes.STR, description="This level and worse (warning: warnings, errors, …)."
            ),
            OpenApiParameter("q", OpenApiTypes.STR, description="Lines containing this text (any case)."),
            OpenApiParameter(
                "limit",
                OpenApiTypes.INT,
                description=f"At most this many lines (default 200, max {LOG_PAGE_MAX}).",
            ),
            OpenApiParameter(
                "order", OpenApiTypes.STR, enum=["asc", "desc"], description="The page's order."
            ),
        ],
        responses={200: LogPageSerializer, **ERRORS},
    )
    def get(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug), run_id)
        params = _page_params(request)
        newest_first = params.pop("newest_first")
        page = log_page(run, **params)
        lines = page.lines[::-1] if newest_first else page.lines
        return Response(
            LogPageSerializer(
                {
                    "lines": lines,
                    "has_older": page.has_older,
                    "has_newer": page.has_newer,
                    "first_seq": page.first_seq,
                    "last_seq": page.last_seq,
                    "counts": {
                        "kept": run.log_lines,
                        "dropped": run.log_lines_dropped,
                        "warnings": run.log_warnings,
                    },
                }
            ).data
        )

    @extend_schema(
        operation_id="run_log_push",
        summary="Push a batch of log lines",
        description="All or nothing: a bad line refuses the batch, naming it (`lines[3].level`). The run is "
        "created if the project has not heard of it. 201 with what was kept; 200 with the first answer "
        "when the run already has this `batch_id`. Lines past the run's cap are counted as dropped.",
        request=LogBatchIn,
        examples=[examples.LOG_LINES],
        responses={
            201: LogBatchResultSerializer,
            200: LogBatchResultSerializer,
            413: OpenApiResponse(ERROR),
            **ERRORS,
            **UNSUPPORTED_MEDIA_TYPE,
        },
    )
    def post(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.ADMIN)  # who may push events may push logs
        request.data  # noqa: B018 -- the media type: 415 unless JSON (UnparsedJSON reads no byte)
        try:
            body = json.loads(request.body)
        except RequestDataTooBig:
            raise BatchTooLarge("The request body is over 10 MB; send smaller batches.") from None
        except RecursionError:  # the decoder recurses per level: `[` × 50,000 (api/parsers.py)
            raise ParseError(nesting_error()) from None
        except (ValueError, UnicodeDecodeError):
            raise InvalidInput("body", "The body is not JSON.") from None
        if too_deep(body):
            raise ParseError(nesting_error())
        if not isinstance(body, dict):
            raise InvalidInput("body", 'Send an object: {"batch_id": …, "lines": [...]}.')
        if unknown := sorted(set(body) - BATCH_FIELDS):
            raise InvalidInput(unknown[0], "Unknown field; a batch has batch_id, lines and stream.")
        stream = body.get("stream") or ""
        if not isinstance(stream, str) or len(stream) > log_service.STREAM_MAX:
            raise InvalidInput("stream", "A stream is a string of at most 200 characters.")
        result = log_service.push_lines(
            project, run_id, body.get("batch_id"), body.get("lines"), stream=stream
        )
        return Response(
            result.as_dict(), status=status.HTTP_200_OK if result.repeat else status.HTTP_201_CREATED
        )
