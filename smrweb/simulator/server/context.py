"""A request as a handler sees it (`Ctx`: the world, path params, query, body, with FastAPI-like
query validation), what a handler answers (`Response`) or raises (`HttpError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from smrweb.simulator.world import World, parse_iso


class HttpError(Exception):
    def __init__(self, status: int, detail: Any):
        super().__init__(str(detail))
        self.status = status
        self.detail = detail


@dataclass
class Response:
    status: int = 200
    payload: Any = None
    raw: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Ctx:
    world: World
    method: str
    path: str
    params: dict[str, str]
    query: dict[str, list[str]]
    body: Any

    def q(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def q_int(self, name: str, default: int, lo: int, hi: int) -> int:
        raw = self.q(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise query_error(
                name,
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
                raw,
            ) from None
        if value < lo:
            raise query_error(
                name, "greater_than_equal", f"Input should be greater than or equal to {lo}", raw
            )
        if value > hi:
            raise query_error(name, "less_than_equal", f"Input should be less than or equal to {hi}", raw)
        return value

    def q_datetime(self, name: str) -> datetime | None:
        raw = self.q(name)
        if not raw:
            return None
        try:
            return parse_iso(raw)
        except ValueError:
            raise query_error(
                name, "datetime_from_date_parsing", "Input should be a valid datetime", raw
            ) from None


def query_error(name: str, type_: str, msg: str, value: Any) -> HttpError:
    """FastAPI's 422 shape (spec HTTPValidationError)."""
    return HttpError(422, [{"type": type_, "loc": ["query", name], "msg": msg, "input": value}])
