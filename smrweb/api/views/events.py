"""The push ingest contract over the API: a run's events, posted as one JSON batch."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import project_for
from smrweb.api.schema import ERROR, ERRORS
from smrweb.api.serializers.events import IngestResultSerializer
from smrweb.sources.apply import count_events
from smrweb.tracking import services
from smrweb.tracking.errors import BatchTooLarge, InvalidEvents
from smrweb.tracking.events import batch_json_schema, parse_events
from smrweb.tracking.models import Role


class UnparsedJSON(BaseParser):
    """Accepts application/json and parses nothing: the view reads `request.body` itself."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


class RunEvents(APIView):
    """The push ingest contract: a JSON list of at most 5,000 events, applied all-or-nothing."""

    # The body is validated straight from bytes (msgspec / pydantic-core) in the view; this parser only
    # lets a session's CSRF check look at request.POST without DRF refusing the media type (415).
    parser_classes = [UnparsedJSON]

    @extend_schema(
        request={"application/json": batch_json_schema()},
        examples=[examples.EVENTS],
        responses={200: IngestResultSerializer, 413: OpenApiResponse(ERROR), **ERRORS},
    )
    def post(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.ADMIN)
        try:
            body = request.body
        except RequestDataTooBig:
            raise BatchTooLarge("The request body is over 10 MB; send smaller batches.") from None
        try:
            events = parse_events(body)
        except InvalidEvents as exc:  # (as many refused events as the errors name)
            count_events("api", accepted=0, duplicates=0, refused=len({e.index for e in exc.errors}) or 1)
            raise
        try:
            result = services.ingest_events(project, run_id, events)
        except InvalidEvents:  # refused whole: every event of the batch
            count_events("api", accepted=0, duplicates=0, refused=len(events))
            raise
        count_events("api", accepted=result.accepted, duplicates=result.duplicates, refused=0)
        answer = {"run": run_id, "accepted": result.accepted, "duplicates": result.duplicates}
        if result.bodies_dropped:  # said, so a client sending bodies is never silently ignored
            answer["bodies_dropped"] = result.bodies_dropped
        return Response(answer)
