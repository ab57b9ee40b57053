"""What an artifact looks like to a reviewer, rendered on the server from its bytes.

Artifacts are agent-supplied, so nothing here trusts them: text is split into lines, highlighted by
Pygments' lexers and escaped token by token (the only markup is our own `<span class>`); the uploaded
content type never decides how bytes are shown (an `text/html` artifact is shown as HTML *source*);
images are inline only when their magic bytes say PNG, JPEG, GIF or WebP (never SVG, which can carry
script); everything else is described — size, a type guessed from magic bytes, a hex dump of the head
— and never rendered. No code from an artifact runs, here or in the browser.

Highlighting is per line (a token that spans lines, such as a docstring, is cut at each newline into
spans of the same class), so the same lines serve the preview and both sides of a diff.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field

from django.utils.safestring import SafeString, mark_safe
from pygments.lexer import Lexer
from pygments.lexers import JsonLexer, TextLexer, get_lexer_for_filename, get_lexer_for_mimetype
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

PREVIEW_BYTES = 200_000  # what a preview shows first
FULL_BYTES = 2_000_000  # "show more" shows up to this much; past it, download the file
HIGHLIGHT_BYTES = 600_000  # larger text is shown escaped but not highlighted (lexing is ~1 s per MB)
MAX_LINE_CHARS = 1_000  # a minified line is cut, and says by how much
IMAGE_BYTES = 2_000_000  # larger images are described, not inlined
HEX_BYTES = 128

IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
BINARY_MAGIC = (
    (b"PK\x03\x04", "ZIP archive (also wheels, .pt checkpoints, .npz)"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"%PDF-", "PDF document"),
    (b"\x7fELF", "ELF executable or library"),
    (b"\x93NUMPY", "NumPy array (.npy)"),
    (b"\x89HDF\r\n\x1a\n", "HDF5 data"),
    (b"\x80\x02", "Python pickle (never loaded here: unpickling runs code)"),
    (b"\x80\x03", "Python pickle (never loaded here: unpickling runs code)"),
    (b"\x80\x04", "Python pickle (never loaded here: unpickling runs code)"),
    (b"\x80\x05", "Python pickle (never loaded here: unpickling runs code)"),
)


@dataclass
class Preview:
    kind: str  # "code" | "json" | "text" | "image" | "onnx" | "binary" | "empty"
    name: str
    size: int  # of the whole artifact
    shown: int = 0  # bytes of it on the page
    language: str = ""  # the lexer's name, e.g. "Python"
    lines: list[SafeString] = field(default_factory=list)
    truncated: bool = False  # more bytes than shown (a "show more" or a download away)
    can_show_more: bool = False  # the rest fits under FULL_BYTES
    image_uri: str = ""
    description: str = ""  # binary: what the magic bytes say
    hexdump: str = ""
    note: str = ""  # e.g. "not valid JSON: …", "not highlighted: larger than …"
    onnx: dict | None = None
    onnx_error: str = ""
    onnx_status: str = ""  # pending | done | unreadable | too_large (tracking.models.SummaryStatus)


def is_onnx(name: str, kind: str = "") -> bool:
    return kind == "onnx_model" or name.lower().endswith(".onnx")


def image_type(head: bytes) -> str:
    """The raster image type the bytes start with, or ""."""
    for magic, media in IMAGE_MAGIC:
        if head.startswith(magic):
            return media
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return ""


def describe_binary(head: bytes) -> str:
    for magic, what in BINARY_MAGIC:
        if head.startswith(magic):
            return what
    if image_type(head):
        return f"{image_type(head)} image"
    return "binary data of an unknown type"


def hexdump(data: bytes, width: int = 16) -> str:
    rows = []
    for offset in range(0, len(data), width):
        chunk = data[offset : offset + width]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        rows.append(f"{offset:08x}  {chunk.hex(' '):<{width * 3}} {text}")
    return "\n".join(rows)


def decode_text(data: bytes, *, truncated: bool) -> str | None:
    """UTF-8 text, or None for binary. A cut at the preview limit may split a character: up to three
    trailing bytes are dropped before deciding the bytes are not text."""
    if b"\x00" in data[:8192]:
        return None
    for cut in range(4 if truncated else 1):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def lexer_for(name: str, content_type: str = "") -> Lexer:
    """By file name, then by declared type, else plain text: never guessed from content (slow, and an
    artifact could steer it)."""
    options = {"stripnl": False, "ensurenl": False}
    try:
        return get_lexer_for_filename(name.rsplit("/", 1)[-1], **options)
    except ClassNotFound:
        pass
    media = content_type.split(";")[0].strip().lower()
    if media and media not in ("application/octet-stream", "text/plain"):
        try:
            return get_lexer_for_mimetype(media, **options)
        except ClassNotFound:
            pass
    return TextLexer(**options)


def _css_class(ttype) -> str:
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def _cut_long_lines(text: str) -> tuple[str, dict[int, int]]:
    """Lines cut to MAX_LINE_CHARS, and how many characters each cut line lost (by line index)."""
    lines = text.split("\n")
    cut = {}
    for i, line in enumerate(lines):
        if len(line) > MAX_LINE_CHARS:
            cut[i] = len(line) - MAX_LINE_CHARS
            lines[i] = line[:MAX_LINE_CHARS]
    return "\n".join(lines), cut


def highlight_lines(text: str, lexer: Lexer | None = None) -> list[SafeString]:
    """`text` as one HTML string per line: escaped, each token wrapped in Pygments' short CSS class."""
    text, cut = _cut_long_lines(text)
    if lexer is None or len(text) > HIGHLIGHT_BYTES:
        lexer = TextLexer(stripnl=False, ensurenl=False)
    lines: list[list[str]] = [[]]
    for ttype, value in lexer.get_tokens(text):
        css = _css_class(ttype)
        for i, part in enumerate(value.split("\n")):
            if i:
                lines.append([])
            if part:
                text_part = html.escape(part)  # the stdlib's: ~10x faster than Django's on many small tokens
                lines[-1].append(f'<span class="{css}">{text_part}</span>' if css else text_part)
    if text.endswith("\n"):
        lines.pop()  # the empty "line" after the final newline
    for index, lost in cut.items():
        if index < len(lines):
            lines[index].append(f'<span class="cut">… {lost:,} more characters</span>')
    return [mark_safe("".join(parts)) for parts in lines]  # noqa: S308 — built from escaped parts only


def render(
    data: bytes,
    *,
    name: str,
    size: int,
    content_type: str = "",
    kind: str = "",
    limit: int = PREVIEW_BYTES,
    onnx_summary: dict | None = None,
    onnx_error: str = "",
    onnx_status: str = "",
) -> Preview:
    """The preview of an artifact whose first bytes are `data` (at most `limit` of them are shown; pass
    one more byte than `limit` or the whole file). `size` is the artifact's full size. ONNX models come
    with their summary and its status (read by the caller on a worker: never parsed here)."""
    truncated = size > limit or len(data) > limit
    data = data[:limit]
    base = {"name": name, "size": size, "shown": len(data), "truncated": truncated}
    base["can_show_more"] = truncated and limit < FULL_BYTES
    if size == 0:
        return Preview(kind="empty", **base)
    if is_onnx(name, kind):
        return Preview(
            kind="onnx",
            onnx=onnx_summary,
            onnx_error=onnx_error,
            onnx_status=onnx_status,
            hexdump=hexdump(data[:HEX_BYTES]),
            description="ONNX model",
            **{**base, "shown": 0, "truncated": False, "can_show_more": False},
        )
    media = image_type(data[:16])
    if media:
        if size <= IMAGE_BYTES and not truncated:
            uri = f"data:{media};base64,{base64.b64encode(data).decode()}"
            return Preview(kind="image", image_uri=uri, description=media, **base)
        return Preview(
            kind="binary",
            description=f"{media} image, {size:,} bytes: too large to show inline",
            hexdump=hexdump(data[:HEX_BYTES]),
            **{**base, "can_show_more": False},
        )
    text = decode_text(data, truncated=truncated)
    if text is None:
        return Preview(
            kind="binary",
            description=describe_binary(data[:16]),
            hexdump=hexdump(data[:HEX_BYTES]),
            **{**base, "can_show_more": False},
        )
    note = ""
    media_type = content_type.split(";")[0].strip().lower()
    if name.lower().endswith(".json") or media_type == "application/json":
        if truncated:
            note = "Shown as stored (not pretty-printed): the file is larger than the preview."
        else:
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError as exc:
                note = f"Not valid JSON ({exc}); shown as stored."
            else:
                lines = highlight_lines(text, JsonLexer(stripnl=False, ensurenl=False))
                return Preview(kind="json", language="JSON", lines=lines, **base)
    lexer = lexer_for(name, content_type)
    if len(text) > HIGHLIGHT_BYTES:
        note = note or f"Not highlighted: over {HIGHLIGHT_BYTES:,} characters."
    lines = highlight_lines(text, lexer)
    kind_name = "text" if isinstance(lexer, TextLexer) else "code"
    return Preview(kind=kind_name, language=lexer.name, lines=lines, note=note, **base)
