"""Field helpers shared by the models: money columns and the finite-number check constraints."""

from __future__ import annotations

import sys

from django.db.models import Q

FLOAT_MAX = sys.float_info.max


USD = {"max_digits": 18, "decimal_places": 6}


def finite(field: str) -> Q:
    """A CHECK that a float column holds a finite number (PostgreSQL sorts NaN above +inf)."""
    return Q(**{f"{field}__gte": -FLOAT_MAX, f"{field}__lte": FLOAT_MAX})
