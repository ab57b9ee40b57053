"""The price table: what a model call costs when its source says only how many tokens it used.

One home for every way in (REST, JSONL import, OTLP, MLflow, SMR usage entries): the write path
(`services.ingest`) prices each agent turn that has tokens and no stated cost, by the price valid at the
turn's time, and records where its cost came from (`AgentTurn.cost_origin`): `reported` (the source
stated it), `computed` (from this table) or `unpriced` (no price for its model at its time: counted and
named on the run, never a silent $0).

Prices are USD per 1M tokens, per usage type. Token counts follow OpenAI's and OpenTelemetry GenAI's
convention: `tokens_in` is every input token, of which `tokens_cached_in` were read from the provider's
cache and `tokens_cache_write` written to it; `tokens_out` every output token, of which `tokens_reasoning`
were reasoning. So a turn costs

    (in − cached − cache write) × input + cached × cached_input + cache write × cache_write
    + (out − reasoning) × output + reasoning × reasoning

with cached_input and cache_write at the input price and reasoning at the output price where the table
has no price of their own (providers bill reasoning as output).

Where a table comes from, later over earlier, per (model, effective date): the defaults below (list
prices when written: check them against your contract), `SMRWEB_MODEL_PRICES` (settings), then the
`ModelPrice` rows of the admin page (`services.current_prices`). A model name is looked up as sent,
then without its provider prefix (`openai/…`, `anthropic/…`, `models/…`, Bedrock's `anthropic.…-v1:0`,
Vertex's `…@20240620`), then without a dated snapshot suffix (`-2024-08-06`, `-20250514`) or `-latest`,
each time also through the aliases. Nothing else: a model the table does not name is unpriced, not
priced like one it resembles (`o3-pro` is not `o3`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

USAGE_TYPES = ("input", "output", "cached_input", "cache_write", "reasoning")
OPTIONAL_TYPES = ("cached_input", "cache_write", "reasoning")
MAX_PRICE = Decimal(1_000_000)  # USD per 1M tokens: far above any model's, below the column's range
_MICRO = Decimal("0.000001")
_MILLION = Decimal(1_000_000)


class Origin:
    """Where a turn's cost came from (`AgentTurn.cost_origin`)."""

    REPORTED = "reported"
    COMPUTED = "computed"
    UNPRICED = "unpriced"
    CHOICES = [
        (REPORTED, "reported by the source"),
        (COMPUTED, "computed from the price table"),
        (UNPRICED, "no price for its model"),
    ]


@dataclass(frozen=True)
class Price:
    """USD per 1M tokens of each usage type, valid from `since` (a UTC day; None: since always)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    reasoning: Decimal | None = None
    since: date | None = None

    def cost(self, usage: Usage) -> Decimal:
        plain_in = usage.tokens_in - usage.cached_in - usage.cache_write
        plain_out = usage.tokens_out - usage.reasoning
        total = (
            plain_in * self.input
            + usage.cached_in * _or(self.cached_input, self.input)
            + usage.cache_write * _or(self.cache_write, self.input)
            + plain_out * self.output
            + usage.reasoning * _or(self.reasoning, self.output)
        )
        return (total / _MILLION).quantize(_MICRO, rounding=ROUND_HALF_EVEN)


def _or(value: Decimal | None, default: Decimal) -> Decimal:
    return default if value is None else value


@dataclass(frozen=True)
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    cached_in: int = 0
    cache_write: int = 0
    reasoning: int = 0

    @property
    def any(self) -> bool:
        return bool(self.tokens_in or self.tokens_out)


# The parts of the token totals billed at other prices, as harnesses, provider APIs and usage logs name
# them (flat, or in OpenAI's prompt_tokens_details / completion_tokens_details and the Responses API's
# input_tokens_details / output_tokens_details): read by the JSONL and SMR usage adapters.
PART_KEYS = {
    "tokens_cached_in": (
        *("tokens_cached_in", "cached_tokens", "cache_read_input_tokens", "cache_read_tokens"),
        *("cachedTokens", "cacheReadInputTokens", "cacheReadTokens", "cached_input_tokens"),
    ),
    "tokens_cache_write": (
        *("tokens_cache_write", "cache_creation_input_tokens", "cache_write_tokens"),
        *("cacheCreationInputTokens", "cacheWriteTokens", "cache_write_input_tokens"),
    ),
    "tokens_reasoning": (
        *("tokens_reasoning", "reasoning_tokens", "thoughts_token_count", "reasoningTokens"),
        *("thoughtsTokenCount", "thinking_tokens"),
    ),
}
_DETAILS = (
    "prompt_tokens_details",
    "input_tokens_details",
    "completion_tokens_details",
    "output_tokens_details",
)


def token_counts(found: Mapping[str, Any], *sources: Any) -> dict[str, Any]:
    """The totals in `found` (tokens_in / tokens_out) with the parts the `sources` (dicts) carry under
    `PART_KEYS`, folded (`fold_parts`); missing ones left out. Whole floats become ints; other values are
    passed on for the contract to refuse with its own message."""
    places = [s for s in sources if isinstance(s, dict)]
    places += [s[d] for s in list(places) for d in _DETAILS if isinstance(s.get(d), dict)]
    counts = {k: found.get(k) for k in ("tokens_in", "tokens_out")}
    for name, keys in PART_KEYS.items():
        value = next((p[k] for p in places for k in keys if p.get(k) is not None), None)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is not None:
            counts[name] = value
    return {k: v for k, v in fold_parts(counts).items() if v is not None}


# Which counts are parts of which total: the cached and cache-write tokens of the input, the reasoning
# tokens of the output. One home for the rule, read by the contract's check and by `fold_parts`.
PARTS_OF_TOTAL = {
    "tokens_in": ("tokens_cached_in", "tokens_cache_write"),
    "tokens_out": ("tokens_reasoning",),
}


def part_over_total(name: str, counts: Mapping[str, Any]) -> str:
    """Why the part `name` cannot stand with the parts before it in `counts` (the contract checks them in
    order): together they are more than their total; "" when they fit or the total is unknown."""
    total_name, parts = next((t, p) for t, p in PARTS_OF_TOTAL.items() if name in p)
    total = counts.get(total_name)
    named = [p for p in parts[: parts.index(name) + 1] if isinstance(counts.get(p), int)]
    together = sum(counts[p] for p in named)
    if not isinstance(total, int) or together <= total:
        return ""
    what = "it is a part" if len(named) == 1 else "they are parts"
    return f"{' + '.join(named)} ({together}) is more than {total_name} ({total}): {what} of it."


def fold_parts(counts: dict[str, Any]) -> dict[str, Any]:
    """Token counts as an adapter read them (OTLP attributes, JSONL lines, MLflow) brought to the contract's
    convention, where the cached, cache-write and reasoning counts are parts of the input and output
    totals: a source whose parts exceed its total counted them apart (Anthropic's input_tokens leave the
    cache out; Gemini's candidates leave the thoughts out), so they are added to it. Other values are left
    for the contract to word its error."""
    out = dict(counts)
    numbers = {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}
    for total, parts in PARTS_OF_TOTAL.items():
        together = sum(numbers.get(part, 0) for part in parts)
        if total in numbers and together > numbers[total]:
            out[total] = numbers[total] + together
    return out


def _p(
    input: str, output: str, cached: str | None = None, write: str | None = None, since: str | None = None
):
    return Price(
        Decimal(input),
        Decimal(output),
        Decimal(cached) if cached else None,
        Decimal(write) if write else None,
        since=date.fromisoformat(since) if since else None,
    )


# List prices (USD per 1M tokens: input, output, cached input read, cache write) when written. Claude's
# cache write is the 5-minute one (1.25 × input); OpenAI and Gemini bill no cache write. Gemini 2.5 Pro's
# price above 200k tokens of prompt is not modelled (the lower tier is used).
DEFAULT_PRICES: dict[str, list[Price]] = {
    "gpt-5": [_p("1.25", "10.00", "0.125")],
    "gpt-5-mini": [_p("0.25", "2.00", "0.025")],
    "gpt-5-nano": [_p("0.05", "0.40", "0.005")],
    "gpt-4o": [_p("2.50", "10.00", "1.25")],
    "gpt-4o-mini": [_p("0.15", "0.60", "0.075")],
    "gpt-4.1": [_p("2.00", "8.00", "0.50")],
    "gpt-4.1-mini": [_p("0.40", "1.60", "0.10")],
    "gpt-4.1-nano": [_p("0.10", "0.40", "0.025")],
    # o3's price was cut by 80 % on 2025-06-10: a turn is priced by the price of its day.
    "o3": [_p("10.00", "40.00", "2.50"), _p("2.00", "8.00", "0.50", since="2025-06-10")],
    "o4-mini": [_p("1.10", "4.40", "0.275")],
    "claude-opus-4": [_p("15.00", "75.00", "1.50", "18.75")],
    "claude-opus-4-1": [_p("15.00", "75.00", "1.50", "18.75")],
    "claude-sonnet-4": [_p("3.00", "15.00", "0.30", "3.75")],
    "claude-sonnet-4-5": [_p("3.00", "15.00", "0.30", "3.75")],
    "claude-haiku-4-5": [_p("1.00", "5.00", "0.10", "1.25")],
    "claude-3-5-haiku": [_p("0.80", "4.00", "0.08", "1.00")],
    "gemini-2.5-pro": [_p("1.25", "10.00", "0.31")],
    "gemini-2.5-flash": [_p("0.30", "2.50", "0.075")],
}
DEFAULT_ALIASES: dict[str, str] = {
    "claude-opus-4-0": "claude-opus-4",
    "claude-sonnet-4-0": "claude-sonnet-4",
    "claude-3-5-haiku-latest": "claude-3-5-haiku",
    "chatgpt-4o-latest": "gpt-4o",
}

_BEDROCK = re.compile(
    r"^(?:[a-z]{2}\.)?(?:anthropic|meta|amazon|cohere|mistral|ai21|openai)\.(.+?)(?:-v\d+(?::\d+)?)?$"
)
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


@dataclass
class PriceTable:
    prices: dict[str, list[Price]] = field(default_factory=dict)  # model → its prices, by `since`
    aliases: dict[str, str] = field(default_factory=dict)  # name → model

    def merged(self, prices: Mapping[str, Iterable[Price]], aliases: Mapping[str, str]) -> PriceTable:
        """This table with `prices` over it: a price replaces the one of its model and day, others add."""
        out = {model: {p.since: p for p in entries} for model, entries in self.prices.items()}
        for model, entries in prices.items():
            for p in entries:
                out.setdefault(model.lower(), {})[p.since] = p
        return PriceTable(
            {m: sorted(by_day.values(), key=_since_key) for m, by_day in out.items()},
            {**self.aliases, **{a.lower(): m.lower() for a, m in aliases.items()}},
        )

    def model_for(self, name: str) -> str | None:
        """The table's model for a name as a source sent it (see the module's docstring), or None."""
        name = (name or "").strip().lower()
        if not name:
            return None
        for candidate in _spellings(name):
            if candidate in self.prices:
                return candidate
            if (target := self.aliases.get(candidate)) in self.prices:
                return target
        return None

    def price(self, name: str, at: datetime | date) -> Price | None:
        """The price of the model `name` valid at `at` (the latest whose day has begun), or None."""
        model = self.model_for(name)
        if model is None:
            return None
        day = at.date() if isinstance(at, datetime) else at
        valid = [p for p in self.prices[model] if p.since is None or p.since <= day]
        return valid[-1] if valid else None

    def cost(self, name: str, usage: Usage, at: datetime) -> Decimal | None:
        price = self.price(name, at)
        return None if price is None else price.cost(usage)


def _since_key(price: Price) -> date:
    return price.since or date.min


def _spellings(name: str) -> list[str]:
    """The name, then without its provider prefix, then each without a dated snapshot suffix."""
    out = [name]
    bare = name.rsplit("/", 1)[-1]
    if (m := _BEDROCK.match(bare)) is not None:
        bare = m[1]
    bare = bare.replace("@", "-")  # Vertex: claude-3-5-sonnet@20240620
    out.append(bare)
    out += [_SNAPSHOT.sub("", s) for s in list(out)]
    return list(dict.fromkeys(out))


# --- where tables come from ------------------------------------------------------------------------


def _decimal(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ValueError(f"{where}: expected a number of USD per 1M tokens")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"{where}: expected a number of USD per 1M tokens") from None
    if not number.is_finite() or not 0 <= number < MAX_PRICE:
        raise ValueError(f"{where}: must be at least 0 and below {MAX_PRICE}")
    return number


def parse_prices(obj: Any) -> tuple[dict[str, list[Price]], dict[str, str]]:
    """`SMRWEB_MODEL_PRICES` as a table's prices and aliases, or ValueError saying what is wrong:
    {"model": {"input": 2.5, "output": 10, "cached_input": 1.25, "cache_write": 3.75, "reasoning": 10,
    "since": "2025-06-10", "aliases": ["my-name"]}, …}; a model may have a list of such (one per day its
    price changed); input and output are required, the rest optional."""
    if not isinstance(obj, dict):
        raise ValueError('expected a JSON object {"model": {"input": USD per 1M, "output": USD per 1M}}')
    prices: dict[str, list[Price]] = {}
    aliases: dict[str, str] = {}
    for model, spec in obj.items():
        if not isinstance(model, str) or not 1 <= len(model.strip()) <= 200:
            raise ValueError(f"{model!r}: a model name is 1 to 200 characters")
        specs = spec if isinstance(spec, list) else [spec]
        if not specs:
            raise ValueError(f"{model}: no price")
        for i, one in enumerate(specs):
            where = f"{model}[{i}]" if isinstance(spec, list) else model
            if not isinstance(one, dict):
                raise ValueError(f"{where}: expected an object with input and output prices")
            unknown = set(one) - {*USAGE_TYPES, "since", "aliases"}
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
            missing = {"input", "output"} - set(one)
            if missing:
                raise ValueError(f"{where}: missing {', '.join(sorted(missing))}")
            since = one.get("since")
            try:
                day = date.fromisoformat(since) if since is not None else None
            except (TypeError, ValueError):
                raise ValueError(f"{where}.since: expected a date YYYY-MM-DD") from None
            values = {k: _decimal(one[k], f"{where}.{k}") for k in USAGE_TYPES if one.get(k) is not None}
            prices.setdefault(model.strip().lower(), []).append(
                Price(**{k: values.get(k) for k in USAGE_TYPES}, since=day)
            )
            names = one.get("aliases", [])
            if not isinstance(names, list) or not all(isinstance(a, str) and a.strip() for a in names):
                raise ValueError(f"{where}.aliases: expected a list of model names")
            aliases.update({a.strip().lower(): model.strip().lower() for a in names})
        days = [p.since for p in prices[model.strip().lower()]]
        if len(days) != len(set(days)):
            raise ValueError(f"{model}: two prices from the same day")
    return prices, aliases


@functools.cache
def _configured(setting: str) -> PriceTable:
    """The defaults with the setting over them (the setting's JSON text is the cache key)."""
    import json

    prices, aliases = parse_prices(json.loads(setting))
    return PriceTable().merged(DEFAULT_PRICES, DEFAULT_ALIASES).merged(prices, aliases)


def configured_table() -> PriceTable:
    """The defaults with `SMRWEB_MODEL_PRICES` over them (`services.current_prices` adds the admin's rows)."""
    import json

    from django.conf import settings

    return _configured(json.dumps(getattr(settings, "SMRWEB_MODEL_PRICES", {}) or {}, sort_keys=True))


@dataclass
class Priced:
    cost: Decimal
    origin: str


def price_turn(table: PriceTable, model: str, usage: Usage, stated: Decimal | None, at: datetime) -> Priced:
    """A turn's cost and its origin: as stated, else from the table, else zero and `unpriced` (a turn
    with no tokens and no stated cost costs nothing, as reported)."""
    if stated is not None:
        return Priced(stated, Origin.REPORTED)
    if not usage.any:
        return Priced(Decimal(0), Origin.REPORTED)
    cost = table.cost(model, usage, at)
    if cost is None:
        return Priced(Decimal(0), Origin.UNPRICED)
    return Priced(cost, Origin.COMPUTED)
