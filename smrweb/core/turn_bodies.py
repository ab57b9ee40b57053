"""A turn's prompt and response bodies as text: chat messages rendered, then capped in bytes.

One home for both rules, whatever the way in (REST, OTLP, JSONL): the contract hands over a string or a
list of {role, content, …} messages, and `services.ingest` stores what `body_text` and `cap` make of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

CUT_MARKER = "\n… [{cut:,} bytes cut]"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def content_text(content: Any) -> str:
    """A message's content as text: a string as is; a list of parts (OpenAI / Anthropic / GenAI semantic
    conventions) one per line, a text part by its text; anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        for key in ("text", "content"):
            if isinstance(content.get(key), str) and content.get("type") in (None, "text", "input_text"):
                return content[key]
        return _json(content)
    if isinstance(content, Sequence):
        return "\n".join(content_text(part) for part in content)
    return _json(content)


def messages_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """Chat messages as text: each under its role in brackets, other keys (tool calls, a name) as JSON
    lines after its content, a blank line between messages."""
    blocks = []
    for message in messages:
        lines = [f"[{message.get('role') or 'message'}]"]
        text = content_text(message.get("content"))
        if text:
            lines.append(text)
        lines += [
            f"{key}: {_json(value)}" for key, value in message.items() if key not in ("role", "content")
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def parsed(value: Any) -> Any:
    """A JSON string as what it holds (instrumentations serialise structured values); else unchanged."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def to_message(raw: Any, role: str, *, json_text: bool = True) -> dict[str, Any] | None:
    """One message of any of the shapes as a contract message ({role, content, …}), `role` when it names
    none; a string is read as JSON first when `json_text` (OTLP attributes carry serialised values)."""
    if json_text:
        raw = parsed(raw)
    inner = raw.get("message") if isinstance(raw, dict) else None
    inner = parsed(inner) if json_text else inner
    if isinstance(inner, dict):  # gen_ai.choice: {index, finish_reason, message}
        raw = {**{k: v for k, v in raw.items() if k not in ("message", "index")}, **inner}
    if not isinstance(raw, dict):
        return None if raw in (None, "", []) else {"role": role, "content": raw}
    message = {k: v for k, v in raw.items() if v is not None}
    if "parts" in message and "content" not in message:  # semantic conventions ≥ 1.37
        message["content"] = message.pop("parts")
    given = message.get("role")
    message["role"] = given[:200] if isinstance(given, str) and given else role
    return message


def to_messages(value: Any, role: str, *, json_text: bool = True) -> list[dict[str, Any]] | str | None:
    """A prompt or response as the contract takes it — text, or messages — from a message, a list of them
    or text (JSON text of them too when `json_text`); None when there is nothing. NUL characters (which
    the contract refuses and no database stores) become U+FFFD: a body is never why a turn is refused."""
    if json_text:
        value = parsed(value)
    if isinstance(value, str):
        return clean(value) or None
    items = value if isinstance(value, list) else [value]
    messages = [m for m in (to_message(item, role, json_text=json_text) for item in items) if m is not None]
    return clean(messages) or None


def clean(value: Any) -> Any:
    """`value` with NUL characters in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {clean(str(k)): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def cap(text: str, max_bytes: int) -> tuple[str, int, int]:
    """(the text to store, its size in UTF-8 bytes as sent, the bytes cut). A text over `max_bytes` is cut
    at a character boundary and ends in a marker saying how many bytes were cut; never refused. NUL
    (which PostgreSQL cannot store) and lone surrogates (not UTF-8) become U+FFFD first."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode(errors="replace")
        text = data.decode()
    size = len(data)
    if size <= max_bytes:
        return text, size, 0
    kept = data[: max(max_bytes, 0)].decode(errors="ignore")  # a character split by the cut is dropped
    cut = size - len(kept.encode())
    return kept + CUT_MARKER.format(cut=cut), size, cut
