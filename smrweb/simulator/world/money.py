"""Money: amounts are integer pico-USD (1 USD = 10**12 pico-USD, 1 cent = 10**10).

Cents are derived with `pico_to_cents` (round half up) wherever the wire wants cents; sums are always
taken in pico, so a total never drifts from the sum of its parts.
"""

from __future__ import annotations

PICO_PER_USD = 10**12
PICO_PER_CENT = 10**10


def pico_to_cents(pico: int) -> int:
    """Cents the way the simulator reports them: round half up (pico amounts are never negative)."""
    return (pico + PICO_PER_CENT // 2) // PICO_PER_CENT


def pico_to_usd(pico: int) -> float:
    return pico / PICO_PER_USD


def pico_to_usd_text(pico: int) -> str:
    """Exact USD as a decimal string with 12 places: 1234567 pico -> "0.000001234567"."""
    return f"{pico // PICO_PER_USD}.{pico % PICO_PER_USD:012d}"
