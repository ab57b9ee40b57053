"""How numbers are written, in one place: on pages (template filters), in chart hovers and tables,
and in the plain text smrweb writes for people and agents (the carry-forward block, knowledge entries).

- Significant digits are written out, never an exponent people misread ("3.965e-05"), and never "-0".
- A difference carries its sign: "+" above zero, a minus below (U+2212 on pages, "-" in plain text that
  is pasted into kickoffs and terminals), and none at zero.
- Missing values are an em dash on pages and "n/a" in plain text.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal

MINUS = "−"  # U+2212: as wide as "+", so signed columns line up
MISSING = "—"


def plain_number(value: float, digits: int = 4) -> str:
    """`digits` significant digits written out (0.00003965, 3.142, 12,346), never "-0" or an exponent
    between 1e-9 and 1e15; beyond that range the exponent is kept."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    size = abs(value)
    if size < 1e-9 or size >= 1e15:
        return f"{value:.{digits}g}"
    if size >= 10**digits:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(size)))
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if float(text) == 0 else text


def sign_of(value: float | Decimal, *, minus: str = MINUS) -> str:
    """The sign a difference is written with: "+", `minus`, or nothing at zero."""
    return "+" if value > 0 else minus if value < 0 else ""


def signed(value: float | None, digits: int = 4, *, plain_text: bool = False) -> str:
    """A rate or delta with its sign: +0.0123, −4.5, 0 (plain text: -4.5, and "n/a" when missing)."""
    if value is None:
        return "n/a" if plain_text else MISSING
    text = plain_number(abs(float(value)), digits)
    return "0" if text == "0" else sign_of(float(value), minus="-" if plain_text else MINUS) + text


def signed_text(value: float | None) -> str:
    """A difference in plain text (kickoffs, knowledge entries): +0.0123, -4.5, 0, n/a."""
    return signed(value, 6, plain_text=True)


def rank_move(delta: int | None) -> str:
    """A move on a leaderboard in words: a rank that went from 12 to 9 (delta -3) is "3 places up"."""
    if delta is None:
        return MISSING
    if delta == 0:
        return "same place"
    places = f"{abs(delta)} place{'s' if abs(delta) != 1 else ''}"
    return f"{places} up" if delta < 0 else f"{places} down"


def number(value: float | None, digits: int = 6) -> str:
    """A score in plain text: six significant digits by default (scores often differ in the fifth)."""
    return MISSING if value is None else plain_number(value, digits)


def usd(value) -> str:
    """Money on pages: $0, $0.0042 under a cent, $1,234.50 above."""
    if value is None:
        return MISSING
    value = Decimal(value)
    if value == 0:
        return "$0"
    if value < Decimal("0.01"):
        return f"${value:.4f}"
    return f"${value:,.2f}"


def usd_precise(value) -> str:
    """Dollars with three significant digits below $1 ($0.0431), cents above ($12.35); for comparing runs
    whose spend differs in fractions of a cent."""
    if value is None:
        return MISSING
    value = float(value)
    if value == 0:
        return "$0"
    if abs(value) < 0.0001:
        return "<$0.0001"
    if abs(value) < 1:
        return f"${value:.3g}"
    return f"${value:,.2f}"


def tokens(value) -> str:
    """Token counts: 950, 12.3k, 4.1M."""
    if value is None:
        return MISSING
    value = int(value)
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def duration(value: timedelta | None) -> str:
    """Two units at most, dropping a zero second one: 45s, 3m 20s, 15m, 2h 5m, 5h, 3d 4h."""
    if value is None:
        return MISSING
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        big, small, units = seconds // 60, seconds % 60, ("m", "s")
    elif seconds < 86400:
        big, small, units = seconds // 3600, seconds % 3600 // 60, ("h", "m")
    else:
        big, small, units = seconds // 86400, seconds % 86400 // 3600, ("d", "h")
    return f"{big}{units[0]} {small}{units[1]}" if small else f"{big}{units[0]}"


def difference(value, fmt, convert=float) -> str:
    """A difference written by its size in `fmt` (usd, tokens, duration…) with its sign: +$1.20, −3.1k."""
    if value is None:
        return MISSING
    value = convert(value)
    size = abs(value)
    return sign_of(value.total_seconds() if isinstance(value, timedelta) else value) + fmt(size)
