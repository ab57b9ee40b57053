"""Over budget, as SQL: a run whose spend exceeds its USD budget, or whose tokens (in + out) exceed its
token budget. The same rule as `Run.budget_overruns` in Python (a test holds the two together), so the
runs filter and the overview counts are one query whatever the number of runs.

Spend is what the source bills in all when it states a total (`source_total_usd`), else the turns' cost
plus other meters; tokens are the source's own totals (`source_spend.tokens_in/out`) when it states
them, else the turns'. A budget of 0 or none is no budget (as `budget_used_fraction` has it)."""

from __future__ import annotations

from django.db.models import BigIntegerField, ExpressionWrapper, F, Q, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, NullIf
from django.db.models.lookups import GreaterThan

USD = "usd"
TOKENS = "tokens"
KINDS = (USD, TOKENS)


def spend_usd(prefix: str = ""):
    """`Run.spend_usd` as an expression (`prefix`: "runs__" from a project, "" from a run)."""
    return Coalesce(F(f"{prefix}source_total_usd"), F(f"{prefix}cost_usd") + F(f"{prefix}other_meters_usd"))


def spend_tokens(prefix: str = ""):
    """`sum(Run.reported_tokens)` as an expression."""

    def one(direction: str):
        # SQLite reads a JSON null as the text 'null' here (PostgreSQL as NULL): both mean "not stated".
        stated = NullIf(KeyTextTransform(f"tokens_{direction}", f"{prefix}source_spend"), Value("null"))
        return Coalesce(
            Cast(stated, BigIntegerField()), F(f"{prefix}tokens_{direction}"), output_field=BigIntegerField()
        )

    return ExpressionWrapper(one("in") + one("out"), output_field=BigIntegerField())


def over_usd(prefix: str = "") -> Q:
    return Q(**{f"{prefix}budget_usd__gt": 0}) & Q(GreaterThan(spend_usd(prefix), F(f"{prefix}budget_usd")))


def over_tokens(prefix: str = "") -> Q:
    return Q(**{f"{prefix}budget_tokens__gt": 0}) & Q(
        GreaterThan(spend_tokens(prefix), F(f"{prefix}budget_tokens"))
    )


def over_budget(prefix: str = "", on: str | None = None) -> Q:
    """Runs over their USD budget, their token budget (`on`), or either (no `on`)."""
    if on == USD:
        return over_usd(prefix)
    if on == TOKENS:
        return over_tokens(prefix)
    return over_usd(prefix) | over_tokens(prefix)
