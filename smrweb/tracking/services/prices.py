"""The price table the write path prices with (smrweb.tracking.pricing): the configured one with the admin's
`ModelPrice` rows over it."""

from __future__ import annotations

from smrweb.tracking import pricing
from smrweb.tracking.models import ModelPrice


def current_prices() -> pricing.PriceTable:
    """The built-in table with SMRWEB_MODEL_PRICES, then the admin's rows, over it (one small query)."""
    rows = list(ModelPrice.objects.all())
    if not rows:
        return pricing.configured_table()
    prices: dict[str, list[pricing.Price]] = {}
    aliases: dict[str, str] = {}
    for row in rows:
        prices.setdefault(row.model.strip().lower(), []).append(row.as_price())
        aliases.update({a: row.model.strip().lower() for a in row.alias_list()})
    return pricing.configured_table().merged(prices, aliases)
