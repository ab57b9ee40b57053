"""SMR run log archives (`GET /smr/projects/{pid}/runs/{rid}/logs/archives`): where an entry's lines are,
and what its bytes say, as lines for `services.logs` (docs/integrations.md, "Run logs").

The SDK ships the spec's shape (`SmrRunLogArchiveResponse`: `log_archive_id`, `artifact_id`, `s3_bucket`,
`s3_key`, `uri`, `metadata`, …) but returns raw dicts, and backends differ; so an entry is read from
whichever of these it has, in this order:
  1. lines inline: `lines` (strings or objects), or `content` / `text` (a string);
  2. an `artifact_id`: its bytes by the SDK's artifact content request, streamed and capped as artifacts are;
  3. a URL (`download_url`, `url`, `href`, `content_url`, or an http(s) or /path `uri`), read only when it
     is on the backend's own origin (below).
An entry with none of these (an S3 bucket and key only, say) or whose bytes cannot be read is
Unreadable: the poller records it with its reason, once, and counts it on the run.

Bytes may be gzip (by magic number) or plain; JSON lines (one object a line, VictoriaLogs' `_msg`,
`_time`, `_stream` included), a JSON array, or text. A text line's leading ISO time and level
("2026-12-02T10:00:00Z WARNING …", "[ERROR] …") are read when present; otherwise the time is left for the
write path (now) and the level is info."""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from django.conf import settings

from smrweb.sources.base import ServerError, SourceError, TimedOut, Unreachable

ARCHIVE_KEY_FIELDS = ("log_archive_id", "archive_id", "id", "key", "s3_key", "artifact_id")
URL_FIELDS = ("download_url", "url", "href", "content_url", "uri")
INLINE_FIELDS = ("content", "text")
TEXT_KEYS = ("message", "msg", "_msg", "text", "line", "log")
TIME_KEYS = ("ts", "timestamp", "time", "_time", "@timestamp", "created_at", "asctime")
LEVEL_KEYS = ("level", "levelname", "severity", "lvl", "loglevel")
STREAM_KEYS = ("source", "stream", "_stream", "logger", "name")
LEVELS = {
    "trace": 10, "debug": 10, "info": 20, "information": 20, "notice": 20, "warn": 30, "warning": 30,
    "error": 40, "err": 40, "critical": 50, "crit": 50, "fatal": 50, "alert": 50, "emergency": 50,
}  # fmt: skip
_LEADING = re.compile(
    r"^\s*\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?:\s*[|:-]?\s*\[?(?P<level>[A-Za-z]+)\]?(?=[\s:|\]-]))?\s*[|:-]?\s?"
)
# "[WARN] …" or "WARN: …" / "WARN - …" / "WARN | …" (a bare word needs its delimiter: "Errors are …" is text)
_LEADING_LEVEL = re.compile(
    r"^\s*(?:\[(?P<bracketed>[A-Za-z]+)\]\s*[:|-]?|(?P<level>[A-Za-z]+)(?:\s*:|\s+-|\s+\|))\s?"
)
_TS_MIN, _TS_MAX = datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC)


class Unreadable(Exception):
    """An archive smrweb cannot read, and that trying again will not change: recorded, not retried."""


def archive_key(entry: dict[str, Any]) -> str:
    """The entry's identity (its batch id is `smr:<key>`): its id, else a digest of the entry."""
    for name in ARCHIVE_KEY_FIELDS:
        value = entry.get(name)
        if isinstance(value, (str, int)) and str(value).strip():
            return str(value).strip()[:180]
    body = json.dumps(entry, sort_keys=True, default=str)
    return "h:" + hashlib.blake2b(body.encode(), digest_size=12).hexdigest()


def archive_name(entry: dict[str, Any]) -> str:
    """The stream its lines get when a line names none: the archive's id or name."""
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    for value in (entry.get("name"), metadata.get("name"), entry.get("log_archive_id"), archive_key(entry)):
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return ""


def same_origin(url: str, base: str) -> bool:
    a, b = urlsplit(url), urlsplit(base)
    default = {"http": 80, "https": 443}
    return a.scheme in ("http", "https") and (
        a.scheme,
        (a.hostname or "").lower(),
        a.port or default.get(a.scheme),
    ) == (b.scheme, (b.hostname or "").lower(), b.port or default.get(b.scheme))


def read_archive(
    entry: dict[str, Any], *, backend_base: str, http: httpx.Client, artifact_bytes
) -> list[dict]:
    """The archive's lines, as dicts `services.logs.append_lines` takes. Raises Unreadable (recorded,
    never retried) or SourceError (a transient fault: retried next cycle)."""
    if not isinstance(entry, dict):
        raise Unreadable(f"the entry is a {type(entry).__name__}, not an object")
    inline = entry.get("lines")
    if isinstance(inline, list):
        return [line for item in inline for line in _lines_of_item(item)]
    for name in INLINE_FIELDS:
        if isinstance(entry.get(name), str):
            return parse_bytes(entry[name].encode("utf-8"), hint=_hint(entry))
    cap = settings.SMRWEB_LOG_ARCHIVE_MAX_BYTES
    artifact_id = entry.get("artifact_id")
    if isinstance(artifact_id, str) and artifact_id.strip():
        data = artifact_bytes(artifact_id.strip(), cap)  # None: past the cap (not read further)
        if data is None:
            raise Unreadable(f"artifact {artifact_id}: over the {cap}-byte cap")
        return parse_bytes(data, hint=_hint(entry))
    url = _location(entry)
    if url is None:
        where = " ".join(str(entry.get(k)) for k in ("s3_bucket", "s3_key") if entry.get(k))
        raise Unreadable(
            f"no location smrweb can read (stored at {where})" if where else "no location and no content"
        )
    absolute = urljoin(backend_base.rstrip("/") + "/", url)
    # SSRF: a URL in a backend's answer is followed only to that backend's own origin (the address the
    # project was set up with, which the outbound guard vetted). Anywhere else, an internal address
    # or a metadata service say, it is not fetched, and the API key is never sent there.
    if not same_origin(absolute, backend_base):
        raise Unreadable(
            f"its URL is not on the SMR backend's origin ({urlsplit(absolute).netloc or url[:80]})"
        )
    return parse_bytes(_download(http, absolute, cap), hint=_hint(entry) or url)


def _download(http: httpx.Client, url: str, cap: int) -> bytes:
    try:
        with http.stream("GET", url, follow_redirects=False) as response:
            status = response.status_code
            if status == 429 or status >= 500:
                raise ServerError(f"log archive {url}: HTTP {status}", status=status)
            if status != 200:
                raise Unreadable(f"HTTP {status} from {urlsplit(url).path}")
            declared = response.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > cap:
                raise Unreadable(f"{declared} bytes, over the {cap}-byte cap")
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > cap:
                    raise Unreadable(f"over the {cap}-byte cap")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.TimeoutException as exc:
        raise TimedOut(f"log archive {url}: timed out") from exc
    except httpx.HTTPError as exc:
        raise Unreachable(f"log archive {url}: {exc!r}") from exc
    except SourceError:
        raise


def _location(entry: dict[str, Any]) -> str | None:
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    for source in (entry, metadata):
        for name in URL_FIELDS:
            value = source.get(name)
            if isinstance(value, str) and (
                value.startswith(("http://", "https://")) or value.startswith("/")
            ):
                return value
    return None


def _hint(entry: dict[str, Any]) -> str:
    """What the entry says of its format (content type, format, file name), lower-cased."""
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    parts = [entry.get(k) or metadata.get(k) for k in ("content_type", "format", "name", "s3_key", "key")]
    return " ".join(str(p) for p in parts if p).lower()


def parse_bytes(data: bytes, *, hint: str = "") -> list[dict]:
    """gzip or plain; JSON lines, a JSON array or text; as lines."""
    cap = settings.SMRWEB_LOG_ARCHIVE_MAX_BYTES
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, cap)
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except ValueError:
            items = None
        if isinstance(items, list):
            return [line for item in items for line in _lines_of_item(item)]
    jsonl = "json" in hint or stripped.startswith("{")
    out: list[dict] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if jsonl and raw.lstrip().startswith("{"):
            try:
                item = json.loads(raw)
            except ValueError:
                item = None
            if isinstance(item, dict):
                out.extend(_lines_of_item(item))
                continue
        out.append(parse_text_line(raw))
    return out


def _gunzip(data: bytes, cap: int) -> bytes:
    """Decompressed up to the cap: a small gzip that inflates past it (a bomb) is refused, not read."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, cap + 1)
    except zlib.error as exc:
        raise Unreadable(f"not a readable gzip file ({exc})") from exc
    if len(out) > cap or inflate.unconsumed_tail:
        raise Unreadable(f"over the {cap}-byte cap once decompressed")
    return out


def parse_text_line(raw: str) -> dict:
    """A text line; its leading ISO time and level, when it starts with them, taken out of the text."""
    line: dict[str, Any] = {"text": raw}
    match = _LEADING.match(raw)
    if match and (ts := _time(match.group("ts"))):
        line["ts"] = ts
        level = (match.group("level") or "").lower()
        if level in LEVELS:
            line["level"] = LEVELS[level]
            line["text"] = raw[match.end() :]
        else:
            line["text"] = (
                raw[match.end("ts") :].lstrip(" ]|:-") if match.group("level") else raw[match.end() :]
            )
        return line
    match = _LEADING_LEVEL.match(raw)
    word = match and (match.group("bracketed") or match.group("level")).lower()
    if word in LEVELS:
        line["level"] = LEVELS[word]
        line["text"] = raw[match.end() :]
    return line


def _lines_of_item(item: Any) -> list[dict]:
    if isinstance(item, str):
        return [parse_text_line(item)]
    if not isinstance(item, dict):
        return [{"text": json.dumps(item, default=str)}]
    text = next((item[k] for k in TEXT_KEYS if isinstance(item.get(k), str)), None)
    if text is None:  # an object without a message: the object itself is the line
        text = json.dumps(item, sort_keys=True, default=str)
    line: dict[str, Any] = {"text": text}
    for key in TIME_KEYS:
        if (ts := _time(item.get(key))) is not None:
            line["ts"] = ts
            break
    for key in LEVEL_KEYS:
        value = item.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 50:
            line["level"] = value
            break
        if isinstance(value, str) and value.strip().lower() in LEVELS:
            line["level"] = LEVELS[value.strip().lower()]
            break
    for key in STREAM_KEYS:
        if isinstance(item.get(key), str) and item[key].strip():
            line["stream"] = item[key].strip()[:200]
            break
    return [line]


def _time(value: Any) -> str | None:
    """An ISO 8601 time within the write path's bounds, from text or POSIX seconds (or milliseconds)."""
    when = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value
        try:
            when = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str) and value.strip():
        try:
            when = datetime.fromisoformat(value.strip().replace(",", ".").replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
    if when is None or not _TS_MIN <= when <= _TS_MAX:
        return None
    return when.astimezone(UTC).isoformat()
