"""OTLP/HTTP trace ingestion at `/v1/traces` (the path OTLP exporters append to their endpoint).

The view authenticates the project token, undoes the transport (Content-Type, Content-Encoding, size)
and answers per the OTLP/HTTP spec; `api.otlp_wire` decodes and encodes, `sources.otlp` maps spans to agent
turns and writes them
through `services.ingest_events`. Answers: 200 with an ExportTraceServiceResponse in the request's
encoding (partial_success when spans were refused or a model had no price), 400/401/413/415 with a
google.rpc.Status, 503 + Retry-After when SQLite is busy. See docs/integrations.md.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import HttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from smrweb.api import errors, otlp_wire
from smrweb.api.auth import ApiTokenAuthentication
from smrweb.sources import otlp

log = logging.getLogger(__name__)

CONTENT_TYPES = {"protobuf": "application/x-protobuf", "json": "application/json"}
# google.rpc.Code values for the Status body
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, UNAUTHENTICATED = 3, 8, 14, 16


def _answer(status: int, body: bytes, encoding: str) -> HttpResponse:
    return HttpResponse(body, status=status, content_type=CONTENT_TYPES[encoding])


def _status(status: int, code: int, message: str, encoding: str) -> HttpResponse:
    return _answer(status, otlp_wire.encode_status(code, message, encoding), encoding)


@method_decorator(csrf_exempt, name="dispatch")
class Traces(View):
    http_method_names = ("post", "options")

    def post(self, request):
        try:
            encoding = otlp_wire.media_type(request.content_type or "")
        except otlp_wire.UnsupportedMediaType as exc:
            encoding, unsupported = "json", exc
        else:
            unsupported = None
        # The token first: an unauthenticated client learns nothing and costs no decompression.
        try:
            authenticated = ApiTokenAuthentication().authenticate(request)
        except AuthenticationFailed as exc:
            authenticated, why = None, str(exc.detail)
        else:
            why = "Send Authorization: Bearer <project token>."
        if authenticated is None:
            response = _status(401, UNAUTHENTICATED, why, encoding)
            response["WWW-Authenticate"] = 'Bearer realm="smrweb"'
            return response
        token = authenticated[1]
        if unsupported is not None:
            return _status(415, INVALID_ARGUMENT, unsupported.message, encoding)

        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        too_large = f"The request body is over {limit} bytes; export smaller batches."
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
            return _status(413, RESOURCE_EXHAUSTED, too_large, encoding)
        try:
            body = request.body
        except RequestDataTooBig:
            return _status(413, RESOURCE_EXHAUSTED, too_large, encoding)
        try:
            data = otlp_wire.decompress(body, request.headers.get("Content-Encoding", ""), limit)
            export = otlp_wire.decode_request(data, encoding)
        except otlp_wire.OtlpError as exc:
            code = RESOURCE_EXHAUSTED if exc.status == 413 else INVALID_ARGUMENT
            return _status(exc.status, code, exc.message, encoding)

        try:
            outcome = otlp.ingest_request(token.project, export)
        except OperationalError as exc:
            if not errors.is_busy(exc):
                raise
            # OTLP exporters retry a 503; the body is a google.rpc.Status in the request's encoding.
            return errors.busy_response(
                lambda status, message: _status(status, UNAVAILABLE, message, encoding)
            )
        log.info(
            "otlp export for %s: runs %s, %d accepted, %d duplicates, %d refused, %d spans ignored",
            token.project.slug,
            outcome.runs,
            outcome.accepted,
            outcome.duplicates,
            len(outcome.rejected),
            outcome.ignored,
        )
        return _answer(
            200, otlp_wire.encode_response(len(outcome.rejected), outcome.message, encoding), encoding
        )
