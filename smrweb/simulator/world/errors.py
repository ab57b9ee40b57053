"""What a client action or a lookup raises; the server turns them into 404 and 409 answers."""

from __future__ import annotations

from typing import Any


class NotFound(Exception):
    pass


class Conflict(Exception):
    def __init__(self, detail: dict[str, Any]):
        super().__init__(detail.get("message", "conflict"))
        self.detail = detail
