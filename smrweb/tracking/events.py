"""The ingest contract's event shapes, validated in one pass by pydantic-core straight from JSON bytes.

Every source (REST push, the SMR poller, importers) turns what it receives into these events and
hands them to `services.ingest_events`, so the contract is enforced in exactly one place.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from smrweb.core import turn_bodies
from smrweb.tracking import pricing
from smrweb.tracking.errors import EventError, InvalidEvents
from smrweb.tracking.models import RunState, TurnKind

MAX_EVENTS = 5000
ERROR_MESSAGE_MAX = 2000  # a failed call's message is kept to this many characters
# How MLflow (sources/mlflow/) fills a score event: its id starts with this prefix, and its `artifact` is
# the run's tag of this name, else the scenario's artifact path (docs/integrations.md, "MLflow client").
MLFLOW_SCORE_ID_PREFIX = "mlflow-score:"
MLFLOW_ARTIFACT_TAG = "smrweb.artifact"

TS_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TS_MAX = datetime(9999, 1, 1, tzinfo=UTC)
Finite = Annotated[float, Field(allow_inf_nan=False)]
# Upper bounds keep every value, and every per-run sum of them, inside its database column.
NonNegative = Annotated[int, Field(ge=0, le=2**62)]
Int32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
TokenCount = Annotated[int, Field(ge=0, le=10**12)]
Text = Annotated[str, Field(max_length=200)]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="Client idempotency key, unique per run: a replay is a no-op."
    )
    ts: datetime | None = Field(default=None, description="ISO 8601; default: when the server receives it.")

    @field_validator("ts")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        # A timestamp without a zone is taken as UTC rather than the server's local time.
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        # Years 1971-9997 are inside the bounds whatever the offset (under a day): skip the two
        # aware comparisons, which cost more than the rest of this validator, on the common case.
        if not 1971 <= value.year <= 9997 and not TS_MIN <= value <= TS_MAX:
            # Checked before converting: also keeps the UTC conversion inside datetime's range.
            raise ValueError("Timestamp must be between 1970-01-01 and 9999-01-01 (UTC).")
        return value.astimezone(UTC)

    def idempotency_key(self) -> str:
        """The client's id, or a digest of the event's content when it sent none."""
        if self.id is not None:
            return self.id
        body = json.dumps(self.model_dump(mode="json", exclude_unset=True), sort_keys=True, default=str)
        return "h:" + hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


class MetricEvent(_Event):
    type: Literal["metric"]
    key: Annotated[str, Field(min_length=1, max_length=200)]
    value: Finite
    step: NonNegative = 0


class ScoreEvent(_Event):
    type: Literal["score"]
    score: Finite
    harness_id: Text = ""
    artifact: Annotated[str, Field(max_length=500)] | None = Field(
        default=None, description="The artifact's sha256, or its path in the run (latest version)."
    )
    experiment: Text | None = Field(
        default=None, description="External id of the experiment that produced it."
    )
    commit: Annotated[str, Field(max_length=64)] = ""
    details: dict[str, Any] = Field(default_factory=dict)


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    family: Annotated[str, Field(max_length=100)] = ""
    detail: Annotated[str, Field(max_length=20000)] = ""
    source: Text = ""


class ChatMessage(BaseModel):
    """One message of a chat prompt or response. Other keys (name, tool_calls, tool_call_id, …) are
    allowed, so messages pasted from a provider's API fit, and are kept in the text."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    role: Annotated[str, Field(min_length=1, max_length=200)]
    content: Any = Field(
        default=None,
        description="Text, or a list of parts (a text part by its `text`); other values as JSON.",
    )


MAX_BODY_MESSAGES = 10_000
# Never refused for length: stored cut to SMRWEB_TURN_BODY_MAX_BYTES (the request's size bounds it).
Body = str | Annotated[list[ChatMessage], Field(max_length=MAX_BODY_MESSAGES)]


def _body_text(body: Body | None) -> str:
    if body is None or isinstance(body, str):
        return body or ""
    return turn_bodies.messages_text([m.model_dump() for m in body])


class TurnEvent(_Event):
    type: Literal["agent.turn"]
    turn: Int32
    actor: Annotated[str, Field(min_length=1, max_length=200)] = "driver"
    parent_actor: Text | None = None
    kind: TurnKind | None = Field(
        default=None,
        description="Default: driver_inference for a root actor (no parent_actor), child_work otherwise.",
    )
    model: Text = ""
    tokens_in: TokenCount = Field(default=0, description="Every input token, cached ones included.")
    tokens_out: TokenCount = Field(default=0, description="Every output token, reasoning included.")
    tokens_cached_in: TokenCount = Field(
        default=0, description="Of tokens_in, those read from the provider's prompt cache."
    )
    tokens_cache_write: TokenCount = Field(
        default=0, description="Of tokens_in, those written to the provider's prompt cache."
    )
    tokens_reasoning: TokenCount = Field(default=0, description="Of tokens_out, the reasoning tokens.")
    cost_usd: Annotated[float, Field(ge=0, le=10_000, allow_inf_nan=False)] | None = Field(
        default=None,
        description="What the call cost as the source states it. Absent: priced from the model's price at "
        "the turn's time (the price table), or counted as unpriced when the table has none.",
    )
    tool_calls: list[str | dict[str, Any]] = Field(default_factory=list, max_length=1000)
    duration_ms: Int32 | None = None
    status: Literal["ok", "error"] | None = Field(
        default=None,
        description="Whether the call failed. Default: error when `error`, `error_message` or an "
        "`http_status` of 400 or more is given, else ok.",
    )
    error: Text = Field(default="", description="The failure's class or code, e.g. RateLimitError, 429.")
    http_status: Annotated[int, Field(ge=100, le=599)] | None = None
    error_message: str = Field(
        default="",
        description=f"What went wrong; stored cut to {ERROR_MESSAGE_MAX} characters, never refused.",
    )
    prompt: Body | None = Field(
        default=None,
        description="What the model was sent: text, or chat messages ({role, content}). Stored only when "
        "the project captures bodies; cut to SMRWEB_TURN_BODY_MAX_BYTES (64 KiB) with a marker, never "
        "refused.",
    )
    response: Body | None = Field(
        default=None, description="What the model answered: text, or chat messages; as `prompt`."
    )

    @field_validator("tokens_cached_in", "tokens_cache_write", "tokens_reasoning")
    @classmethod
    def _parts_within_totals(cls, value: int, info: ValidationInfo) -> int:
        problem = pricing.part_over_total(info.field_name, {**info.data, info.field_name: value})
        if problem:
            raise ValueError(problem)
        return value

    @property
    def failed(self) -> bool:
        if self.status is not None:
            return self.status == "error"
        return bool(self.error or self.error_message or (self.http_status or 0) >= 400)

    @property
    def has_body(self) -> bool:
        return bool(self.prompt) or bool(self.response)

    @property
    def usage(self) -> pricing.Usage:
        return pricing.Usage(
            self.tokens_in,
            self.tokens_out,
            self.tokens_cached_in,
            self.tokens_cache_write,
            self.tokens_reasoning,
        )

    @property
    def prompt_text(self) -> str:
        return _body_text(self.prompt)

    @property
    def response_text(self) -> str:
        return _body_text(self.response)

    @property
    def resolved_kind(self) -> TurnKind:
        if self.kind is not None:
            return TurnKind(self.kind)
        return TurnKind.DRIVER_INFERENCE if not self.parent_actor else TurnKind.CHILD_WORK

    @property
    def cost_decimal(self) -> Decimal | None:
        """The stated cost (None: none stated), through str() so 0.1 stays 0.1, to the column's 6 places."""
        if self.cost_usd is None:
            return None
        return Decimal(str(self.cost_usd)).quantize(Decimal("0.000001"))


class StateEvent(_Event):
    type: Literal["state"]
    state: RunState
    failure: Failure | None = None


class MessageEvent(_Event):
    type: Literal["message"]
    body: Annotated[str, Field(min_length=1, max_length=100_000)]
    topic: Text = ""
    target: Text = ""
    mode: Annotated[str, Field(max_length=50)] = ""


class CheckpointEvent(_Event):
    type: Literal["checkpoint"]
    label: Annotated[str, Field(max_length=500)] = ""
    commit: Annotated[str, Field(max_length=64)] = ""
    restorable: bool = True
    failure_reason: Annotated[str, Field(max_length=20000)] = ""
    parent: Annotated[
        str,
        Field(
            max_length=200,
            description="The checkpoint this one continues (the run's previous one, or a checkpoint of "
            "another run of the project when this run was branched from it).",
        ),
    ] = ""


Event = Annotated[
    MetricEvent | ScoreEvent | TurnEvent | StateEvent | MessageEvent | CheckpointEvent,
    Field(discriminator="type"),
]
EVENT_TYPES = {
    "metric": MetricEvent,
    "score": ScoreEvent,
    "agent.turn": TurnEvent,
    "state": StateEvent,
    "message": MessageEvent,
    "checkpoint": CheckpointEvent,
}
# The fields that can hold free-form JSON (a dict or a list), per event type.
_CONTAINER_FIELDS = {
    cls: tuple(
        name
        for name, f in cls.model_fields.items()
        if "dict" in str(f.annotation) or "list" in str(f.annotation)
    )
    for cls in EVENT_TYPES.values()
}
_batch = TypeAdapter(Annotated[list[Event], Field(max_length=MAX_EVENTS)])


_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class PlainMetric(msgspec.Struct, forbid_unknown_fields=True, rename={"ts_text": "ts"}, gc=False):
    """A metric event of the common shape (client id, finite value, RFC 3339 or no timestamp), decoded
    and bounds-checked by msgspec in one pass: several times cheaper than the pydantic union, which
    still defines the contract. Duck-types `MetricEvent` for `services.ingest_events`.

    Once the batch is parsed, `ts_text` (the JSON "ts") is None or the instant in UTC in one of the
    canonical forms `YYYY-MM-DDTHH:MM:SS[.ffffff](Z|+00:00)` (six fraction digits, never all zero): what
    the database adapters turn into their storage form without parsing it again. `ts` is the same
    instant as an aware datetime, made when asked for. (Untracked by the garbage collector: it holds
    only strings and numbers, and a batch makes 5,000 of them.)"""

    type: Literal["metric"]
    id: _Text
    key: _Text
    value: float
    step: Annotated[int, msgspec.Meta(ge=0, le=2**62)] = 0
    ts_text: str | None = None

    @property
    def ts(self) -> datetime | None:
        return None if self.ts_text is None else datetime.fromisoformat(self.ts_text)

    @property
    def naive_utc(self) -> str | None:
        """The instant in Django's SQLite storage form: "YYYY-MM-DD HH:MM:SS[.ffffff]" (UTC)."""
        return None if self.ts_text is None else _naive_utc_texts([self.ts_text])[0]

    def idempotency_key(self) -> str:
        return self.id


_plain_metrics = msgspec.json.Decoder(list[PlainMetric])
# The timestamp forms pydantic reads to exactly the value `datetime.fromisoformat` gives; others
# (week dates, basic format, over 6 fraction digits, …) take the pydantic path.
_PLAIN_TS = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})?", re.ASCII
)
# The canonical forms, as their digits-to-0 templates: what a client writing `datetime.isoformat()`
# (UTC) or msgspec / JavaScript-style "Z" with microseconds sends, and what ingest stores unparsed.
_DIGITS_TO_0 = str.maketrans("123456789", "000000000")
_CANONICAL_TS = frozenset(
    f"0000-00-00T00:00:00{fraction}{zone}" for fraction in ("", ".000000") for zone in ("Z", "+00:00")
)


class PlainMetrics(list):
    """A batch of PlainMetrics only (canonical UTC `ts_text`), with its earliest instant: ingest needs
    neither to sort the batch by type nor to look for that instant again."""

    earliest: datetime | None = None


def _naive_utc_texts(texts: list[str]) -> list[str]:
    """Canonical UTC texts (see PlainMetric) as Django stores datetimes in SQLite, "YYYY-MM-DD
    HH:MM:SS[.ffffff]": in a canonical text "T" is only the separator, "Z" and "+00:00" only the zone,
    so three replacements over the whole batch at once do it."""
    return "\n".join(texts).replace("T", " ").replace("Z", "").replace("+00:00", "").split("\n")


def _canonical_ts(text: str) -> str | None:
    """One timestamp in a canonical form (see PlainMetric), or None when the fast path must decline it
    (a form whose reading could differ from pydantic's, an impossible date, outside the contract's
    years): pydantic then accepts it or words the error."""
    if (
        text.translate(_DIGITS_TO_0) in _CANONICAL_TS
        and text.endswith(("Z", "+00:00"))
        and not text.endswith((".000000Z", ".000000+00:00"))
    ):
        return text
    if _PLAIN_TS.fullmatch(text) is None:
        return None
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:  # 2026-02-30 and the like: pydantic words the error
        return None
    if not 1971 <= ts.year <= 9997:  # near the contract's bounds: pydantic decides
        return None
    # Naive is taken as UTC; isoformat() of a UTC instant writes "+00:00" and six fraction digits or none.
    return (ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)).isoformat()


def _parse_plain_metrics(body: bytes | str) -> PlainMetrics | None:
    """The batch as PlainMetrics when every event is a plain metric that the contract accepts; None
    when anything is off (the pydantic path then accepts it or reports every error). It must never
    accept what pydantic refuses or read a value differently: tests/tracking/test_plain_metrics.py
    checks both against generated batches.

    Per event, only C runs in the common case (msgspec decoding and bounds, then whole-batch checks:
    one template test of every timestamp at once, `fromisoformat` mapped over them, min and max);
    timestamps in other forms are brought to the canonical one event by event."""
    if b"\\u0000" in (body if isinstance(body, bytes) else body.encode()):
        return None
    try:
        events = _plain_metrics.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if len(events) > MAX_EVENTS or not all(map(math.isfinite, [e.value for e in events])):
        return None
    batch = PlainMetrics(events)
    texts = [e.ts_text for e in events]
    if None in texts:
        texts = [t for t in texts if t is not None]
    if not texts:
        return batch
    joined = "\n".join(texts)
    if (
        ".000000" in joined
        # Every text one of the templates (so one zone each, where "Z" and "+" can only be), each zone UTC.
        or not set(joined.translate(_DIGITS_TO_0).split("\n")) <= _CANONICAL_TS
        or joined.count("Z") + joined.count("+00:00") != len(texts)
    ):
        for event in events:  # some other form: bring each to the canonical one, or decline
            if event.ts_text is not None:
                event.ts_text = _canonical_ts(event.ts_text)
                if event.ts_text is None:
                    return None
        texts = [e.ts_text for e in events if e.ts_text is not None]
    try:
        instants = list(map(datetime.fromisoformat, texts))
    except ValueError:  # 2026-02-30 and the like: pydantic words the error
        return None
    earliest = min(instants)
    if earliest < TS_MIN or max(instants) > TS_MAX:  # the contract's bounds, as _Event._aware checks them
        return None
    batch.earliest = earliest
    return batch


def parse_events(body: bytes | str) -> list[_Event]:
    """Validate a JSON batch; raise InvalidEvents listing every offending event index and field."""
    plain = _parse_plain_metrics(body)
    if plain is not None:
        return plain  # type: ignore[return-value]  # duck-typed MetricEvents
    return _parse_contract(body)


def _parse_contract(body: bytes | str) -> list[_Event]:
    """The contract itself: every event type, every error with its index and field."""
    try:
        events = _batch.validate_json(body)
    except ValidationError as exc:
        raise InvalidEvents([_event_error(err) for err in exc.errors(include_url=False)]) from None
    if b"\\u0000" in (body if isinstance(body, bytes) else body.encode()):
        _refuse_nul_characters(events)
    _refuse_non_finite_json(events)
    return events


def _refuse_non_finite_json(events: list[_Event]) -> None:
    """Free-form JSON (details, tool_calls) may not hold NaN or Infinity either: no database stores them."""

    def non_finite(value: Any) -> bool:
        if isinstance(value, float):
            return not math.isfinite(value)
        if isinstance(value, dict):
            return any(non_finite(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(non_finite(v) for v in value)
        return False

    errors = [
        EventError(index, name, "Numbers must be finite (no NaN or Infinity).")
        for index, event in enumerate(events)
        for name in _CONTAINER_FIELDS[type(event)]  # none for metrics: nothing to look at
        if isinstance(getattr(event, name), (dict, list)) and non_finite(getattr(event, name))
    ]
    if errors:
        raise InvalidEvents(errors)


def _refuse_nul_characters(events: list[_Event]) -> None:
    """PostgreSQL cannot store U+0000 in text or jsonb; refuse it with its place instead of failing later."""

    def has_nul(value: Any) -> bool:
        if isinstance(value, str):
            return "\x00" in value
        if isinstance(value, dict):
            return any(has_nul(k) or has_nul(v) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return any(has_nul(v) for v in value)
        if isinstance(value, BaseModel):
            return any(has_nul(getattr(value, name)) for name in type(value).model_fields)
        return False

    errors = [
        EventError(index, name, "Text must not contain the NUL character (\\u0000).")
        for index, event in enumerate(events)
        for name in type(event).model_fields
        if has_nul(getattr(event, name))
    ]
    if errors:
        raise InvalidEvents(errors)


_UNION_MEMBERS = {"str", "list[ChatMessage]"}  # the members pydantic names in a body's error location


def _event_error(err: dict[str, Any]) -> EventError:
    loc = list(err["loc"])
    if err["type"] == "json_invalid":
        return EventError(None, "", f"Malformed JSON: {err['ctx'].get('error', err['msg'])}")
    if not loc:
        if err["type"] in ("too_long", "list_type"):
            msg = f"A batch holds at most {MAX_EVENTS} events." if err["type"] == "too_long" else err["msg"]
            return EventError(None, "", msg.rstrip(".") + ". Send a JSON list of event objects.")
        return EventError(None, "", err["msg"])
    index = loc.pop(0)
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        expected = ", ".join(EVENT_TYPES)
        got = err.get("input", {}).get("type") if isinstance(err.get("input"), dict) else None
        what = f"Unknown event type {got!r}" if got is not None else "Missing event type"
        return EventError(index, "type", f"{what}; expected one of: {expected}.")
    if loc and loc[0] in EVENT_TYPES:
        loc.pop(0)  # the discriminator tag pydantic puts in front of the field
    loc = [part for part in loc if part not in _UNION_MEMBERS]  # "prompt.str" → "prompt"
    field = ".".join(str(part) for part in loc)
    return EventError(index, field, err["msg"])


def batch_json_schema() -> dict[str, Any]:
    """The request schema of the events endpoint, for the OpenAPI document."""
    return _batch.json_schema(ref_template="#/components/schemas/{model}")
