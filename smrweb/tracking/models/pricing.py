"""Prices an admin adds or overrides (the admin page), over the built-in table and SMRWEB_MODEL_PRICES
(`smrweb.tracking.pricing`)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from smrweb.tracking import pricing


def _usd_per_million(**kwargs) -> models.DecimalField:
    return models.DecimalField(max_digits=13, decimal_places=6, help_text="USD per 1M tokens", **kwargs)


class ModelPrice(models.Model):
    """One model's price per usage type from a day on (no day: since always). A turn with tokens and no
    stated cost is priced by the price of its model valid at its time; a row here replaces the built-in
    or configured price of the same model and day, and adds to the others."""

    model = models.CharField(max_length=200, help_text="As providers name it, e.g. gpt-4o (lower case)")
    since = models.DateField(null=True, blank=True, help_text="Valid from this day (UTC); empty: always")
    input = _usd_per_million()
    output = _usd_per_million()
    cached_input = _usd_per_million(null=True, blank=True)
    cache_write = _usd_per_million(null=True, blank=True)
    reasoning = _usd_per_million(null=True, blank=True)
    aliases = models.CharField(
        max_length=1000, blank=True, help_text="Other names of this model, comma-separated"
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model", "since"]
        constraints = [
            models.UniqueConstraint(fields=["model", "since"], name="modelprice_model_since_uniq"),
            models.UniqueConstraint(
                fields=["model"], condition=Q(since__isnull=True), name="modelprice_model_always_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} from {self.since}" if self.since else self.model

    def clean(self) -> None:
        self.model = (self.model or "").strip().lower()
        for name in pricing.USAGE_TYPES:
            value = getattr(self, name)
            if value is not None and not 0 <= value < pricing.MAX_PRICE:
                raise ValidationError({name: f"Must be at least 0 and below {pricing.MAX_PRICE}."})

    def alias_list(self) -> list[str]:
        return [a.strip().lower() for a in self.aliases.split(",") if a.strip()]

    def as_price(self) -> pricing.Price:
        return pricing.Price(
            self.input, self.output, self.cached_input, self.cache_write, self.reasoning, since=self.since
        )
