"""How times and ids are spelled: ISO timestamps, and ids derived from a digest of their parts.

Ids are never drawn from an RNG: an id is a hash of what it names (the seed, the run, an index), so it
is the same whatever else the world did before.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime


def iso(ts: datetime) -> str:
    """UTC, microseconds always present, `Z` suffix: string order equals time order."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime:
    text = text.strip()
    if len(text) > 6 and text[-6] == " " and text[-3] == ":":  # "+00:00" whose "+" a query string ate
        text = text[:-6] + "+" + text[-5:]
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def hex_digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def stable_uuid(*parts: object) -> str:
    return str(uuid.UUID(bytes=bytes.fromhex(hex_digest(*parts)[:32]), version=4))
