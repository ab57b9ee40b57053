"""Artifact downloads, shared by the API and the dashboard.

Artifacts are agent-supplied bytes with an agent-supplied name and content type, served from the
dashboard's own origin, so a download must never be something the browser renders or runs there:

* the type is the uploaded one only when it is on a short safelist of inert types (plain text, Python
  source, JSON, CSV, archives, raster images); anything else — text/html, SVG, JavaScript, PDF, unknown — is
  `application/octet-stream`;
* `Content-Disposition: attachment`, with a filename cut down to the path's last segment and stripped
  of control and bidirectional-override characters, sent as an ASCII `filename` plus an RFC 5987
  `filename*` when the name is not ASCII;
* `X-Content-Type-Options: nosniff` and a CSP of its own (`default-src 'none'; sandbox`) in case a
  browser shows it anyway.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from typing import IO
from urllib.parse import quote

from django.http import FileResponse

FALLBACK_TYPE = "application/octet-stream"
SAFE_TYPES = frozenset(
    {
        "application/octet-stream",
        "text/plain",
        "text/csv",
        "text/tab-separated-values",
        "text/markdown",
        "text/x-python",
        "application/json",
        "application/x-ndjson",
        "application/zip",
        "application/gzip",
        "application/x-gzip",
        "application/x-tar",
        "application/x-bzip2",
        "application/x-xz",
        "application/zstd",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    }
)
TEXT_TYPES = frozenset(t for t in SAFE_TYPES if t.startswith("text/")) | {
    "application/json",
    "application/x-ndjson",
}
CHARSET_RE = re.compile(r"[A-Za-z0-9._-]{1,40}")
DOWNLOAD_CSP = "default-src 'none'; sandbox"
MAX_FILENAME = 150


def safe_content_type(declared: str) -> str:
    """`declared` when its media type is safelisted (keeping only a well-formed charset), else
    octet-stream."""
    media, _, params = (declared or "").partition(";")
    media = media.strip().lower()
    if media not in SAFE_TYPES:
        return FALLBACK_TYPE
    if media in TEXT_TYPES:
        for param in params.split(";"):
            name, _, value = param.partition("=")
            value = value.strip().strip('"')
            if name.strip().lower() == "charset" and CHARSET_RE.fullmatch(value):
                return f"{media}; charset={value}"
    return media


def safe_filename(path: str) -> str:
    """The last segment of an artifact path (either slash), without control, format (bidi overrides,
    zero-width) or separator characters, at most MAX_FILENAME characters; "artifact" when nothing is left."""
    name = re.split(r"[/\\]", path or "")[-1]
    name = "".join(
        " " if unicodedata.category(ch) in ("Zs", "Zl", "Zp") else ch
        for ch in name
        if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )
    name = name.strip().strip(".")  # no "..", no hidden-file or trailing-dot names
    if len(name) > MAX_FILENAME:
        _, dot, ext = name.rpartition(".")
        ext = ext if dot and 0 < len(ext) <= 16 else ""
        name = name[: MAX_FILENAME - len(ext) - 1].rstrip() + ("." + ext if ext else "")
    return name or "artifact"


def content_disposition(filename: str) -> str:
    """`attachment; filename="…"` (ASCII, quoted), plus `filename*=UTF-8''…` (RFC 5987) when needed."""
    ascii_name = "".join(ch if 32 <= ord(ch) < 127 else "_" for ch in filename)
    ascii_name = ascii_name.replace("\\", "_").replace('"', "'")
    header = f'attachment; filename="{ascii_name}"'
    if ascii_name != filename:
        header += f"; filename*=UTF-8''{quote(filename, safe='')}"
    return header


def attachment_response(
    content: IO[bytes], *, path: str, content_type: str, sha256: str, size: int
) -> FileResponse:
    """Stored bytes (an open file the response closes) as an attachment, with the digest in the headers."""
    response = FileResponse(content, content_type=safe_content_type(content_type))
    response["Content-Disposition"] = content_disposition(safe_filename(path))
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = DOWNLOAD_CSP  # the CSP middleware leaves a set header alone
    response["X-Content-SHA256"] = sha256
    response["Repr-Digest"] = f"sha-256=:{base64.b64encode(bytes.fromhex(sha256)).decode()}:"  # RFC 9530
    response["Content-Length"] = str(size)
    return response
