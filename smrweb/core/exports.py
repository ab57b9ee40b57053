"""Exports as CSV or JSON Lines, streamed: rows in, byte chunks out, so an export of any size is written
while it is read and never held whole in memory.

Both formats carry the same columns, named like the API's JSON fields (`header`). A CSV cell is the
JSON value written as text: null is empty, true/false stay words, numbers as they are, lists and objects
as JSON. A text cell that a spreadsheet would run as a formula (it starts with = + - @, a tab or a
carriage return) gets a leading apostrophe — numbers (also numbers sent as text, like "-0.5") are left
alone, so a negative value stays a number.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import StreamingHttpResponse
from django.utils import timezone

from smrweb.core.downloads import content_disposition, safe_filename

CSV = "csv"
JSONL = "jsonl"
FORMATS = (CSV, JSONL)
MEDIA_TYPES = {CSV: "text/csv; charset=utf-8", JSONL: "application/x-ndjson; charset=utf-8"}
_ENCODER = DjangoJSONEncoder()
ROWS_PER_CHUNK = 500  # rows written per chunk sent: big enough for few writes, small enough to stay flat

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def guard_text(text: str) -> str:
    """`text`, with an apostrophe first when a spreadsheet would read it as a formula."""
    if text.startswith(FORMULA_START) and not NUMBER_RE.fullmatch(text):
        return "'" + text
    return text


def csv_cell(value: Any) -> Any:
    """One JSON value as a CSV cell (see the module's docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return _ENCODER.default(value)  # as the JSON Lines write it: ISO 8601, "Z" for UTC
    if isinstance(value, Mapping | list | tuple):
        return guard_text(json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, separators=(",", ":")))
    return guard_text(str(value))


def _values(row: Sequence[Any] | Mapping[str, Any], header: Sequence[str]) -> Sequence[Any]:
    return [row.get(name) for name in header] if isinstance(row, Mapping) else row


def csv_chunks(header: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> Iterator[bytes]:
    """The header line, then the rows, as UTF-8 CSV chunks of ROWS_PER_CHUNK rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(header)
    pending = 0
    for row in rows:
        writer.writerow([csv_cell(v) for v in _values(row, header)])
        pending += 1
        if pending >= ROWS_PER_CHUNK:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
            pending = 0
    yield buffer.getvalue().encode()


def jsonl_chunks(header: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> Iterator[bytes]:
    """One JSON object per line (keys: `header`), in chunks of ROWS_PER_CHUNK lines."""
    lines: list[str] = []
    encoder = DjangoJSONEncoder(ensure_ascii=False, separators=(",", ":"))
    for row in rows:
        lines.append(encoder.encode(dict(zip(header, _values(row, header), strict=True))))
        if len(lines) >= ROWS_PER_CHUNK:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()


def export_filename(*parts: str, fmt: str) -> str:
    """`hill-runs-20261126.csv`: the parts, today's date, the format; safe as a download name."""
    stem = "-".join(p for p in parts if p) + "-" + timezone.now().strftime("%Y%m%d")
    return safe_filename(f"{stem}.{fmt}")


def export_response(
    header: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]], *, fmt: str, filename: str
) -> StreamingHttpResponse:
    """A streamed attachment of `rows` in `fmt` (csv or jsonl); nothing is read before the first chunk
    is asked for."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}")
    chunks = csv_chunks(header, rows) if fmt == CSV else jsonl_chunks(header, rows)
    response = StreamingHttpResponse(chunks, content_type=MEDIA_TYPES[fmt])
    response["Content-Disposition"] = content_disposition(safe_filename(filename))
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-store"
    return response
