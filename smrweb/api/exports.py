"""`?format=csv` and `?format=jsonl` on the API's lists: the same rows, filters and permissions as the JSON
answer, without pagination, streamed (core/exports.py), with the JSON field names as the header.

DRF reads `?format=` as a renderer choice (URL_FORMAT_OVERRIDE) and answers 404 for a format no renderer
has. Here the export formats are taken before that: the negotiation settles on JSON (so every error —
a filter's 400, a refusal's 403, an unknown project's 404 — stays JSON) and the view streams the file
itself; any other `?format=` than json, csv or jsonl is a 400 naming the field."""

from __future__ import annotations

from rest_framework.renderers import JSONRenderer

from smrweb.core import exports
from smrweb.tracking.errors import InvalidInput

FORMAT_PARAM = "format"
CHUNK_SIZE = 2000  # rows fetched per query round trip while streaming

EXPORT_DESCRIPTION = (
    "\n\n`?format=csv` or `?format=jsonl` answers every matching row (no pagination) as a streamed file — "
    "a header row of these JSON field names, nested values as JSON text — with the same filters and "
    "permissions; errors stay JSON."
)


def export_format(request) -> str | None:
    """csv or jsonl when the request asks for an export; None for JSON; a 400 for anything else."""
    value = request.query_params.get(FORMAT_PARAM)
    if value is None or value == "json":
        return None
    if value in exports.FORMATS:
        return value
    raise InvalidInput(FORMAT_PARAM, "One of json, csv or jsonl.")


class ExportNegotiation:
    """Mix into an APIView whose GET answers exports: content negotiation ignores `?format=`."""

    def perform_content_negotiation(self, request, force=False):
        if request.query_params.get(FORMAT_PARAM) is not None:
            renderer = JSONRenderer()
            return renderer, renderer.media_type
        return super().perform_content_negotiation(request, force=force)


class ExportableList(ExportNegotiation):
    """Mix into a ListAPIView: `?format=csv|jsonl` streams `filter_queryset(get_queryset())`, each row
    written by the list's own serializer (so its values are the JSON answer's)."""

    export_name = "rows"
    export_chunk_size = CHUNK_SIZE  # rows per query round trip; lists of large rows (bodies) take fewer

    def list(self, request, *args, **kwargs):
        fmt = export_format(request)
        if fmt is None:
            return super().list(request, *args, **kwargs)
        queryset = self.filter_queryset(self.get_queryset())
        header, rows = self.export_table(fmt, queryset, self.get_serializer())
        return exports.export_response(
            header, rows, fmt=fmt, filename=exports.export_filename(*self.export_parts(), fmt=fmt)
        )

    def export_table(self, fmt: str, queryset, serializer):
        """(header, rows): the JSON field names, and each row as the list's serializer writes it."""
        chunk = self.export_chunk_size
        rows = (serializer.to_representation(obj) for obj in queryset.iterator(chunk_size=chunk))
        return list(serializer.fields), rows

    def export_parts(self) -> tuple[str, ...]:
        return (self.kwargs.get("slug", ""), self.kwargs.get("run_id", ""), self.export_name)
