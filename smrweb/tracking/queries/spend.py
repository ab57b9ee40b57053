"""Spend by model and by day (issue 37 item 2), read from `RunModelSpend` (kept at ingest per run, model
and quarter hour), never from the turns: a run's breakdown is O(models × its active quarter hours), a
project's chart O(its runs' active quarter hours) whatever the number of turns."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db.models import Count, Sum

from smrweb.tracking.models import Project, Run, RunModelSpend

NO_MODEL = "(no model)"


@dataclass
class ModelSpend:
    model: str
    usd: Decimal = Decimal(0)
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    unpriced_turns: int = 0


def run_spend_by_model(run: Run) -> list[ModelSpend]:
    """The run's turns' cost, turns and tokens per model, most expensive first: sums to the run's turn
    columns (`Run.cost_usd`, `turn_count`, `tokens_in`, `tokens_out`). One query."""
    rows = (
        RunModelSpend.objects.filter(run=run)
        .values("model")
        .annotate(
            usd=Sum("cost_usd"),
            turns=Sum("turns"),
            tokens_in=Sum("tokens_in"),
            tokens_out=Sum("tokens_out"),
            unpriced=Sum("unpriced"),
        )
        .order_by()
    )
    out = [
        ModelSpend(
            r["model"] or NO_MODEL, r["usd"], r["turns"], r["tokens_in"], r["tokens_out"], r["unpriced"]
        )
        for r in rows
    ]
    return sorted(out, key=lambda m: (-m.usd, -m.turns, m.model))


@dataclass
class DaySpend:
    """A project's spend per day of one clock, per model (`models` in the order of `SpendByDay.models`)."""

    zone: str
    days: list[date] = field(default_factory=list)
    models: list[str] = field(default_factory=list)  # most expensive over the range first
    usd: dict[str, list[Decimal]] = field(default_factory=dict)  # model → per day
    turns: dict[str, list[int]] = field(default_factory=dict)
    unpriced: dict[str, list[int]] = field(default_factory=dict)

    @property
    def total_usd(self) -> Decimal:
        return sum((sum(v, Decimal(0)) for v in self.usd.values()), Decimal(0))


def project_spend_by_day(project: Project, zone: str, days: int, *, today: date | None = None) -> DaySpend:
    """The project's turns' cost per day in `zone` (the viewer's clock) over the last `days` days up to
    `today` (in that zone; default: now), per model. One query grouped by quarter hour and model; each
    quarter hour goes to the day of its start in `zone` (every zone's offset is a whole number of
    quarter hours)."""
    tz = ZoneInfo(zone)
    today = today or datetime.now(tz).date()
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tz).astimezone(UTC)
    end = datetime.combine(today + timedelta(days=1), datetime.min.time(), tz).astimezone(UTC)
    size = RunModelSpend.SLOT_SECONDS
    rows = (
        RunModelSpend.objects.filter(
            project=project, slot__gte=int(start.timestamp()) // size, slot__lt=int(end.timestamp()) // size
        )
        .values("slot", "model")
        .annotate(usd=Sum("cost_usd"), turns=Sum("turns"), unpriced=Sum("unpriced"), n=Count("id"))
        .order_by()
    )
    span = [first + timedelta(days=i) for i in range(days)]
    index = {d: i for i, d in enumerate(span)}
    usd: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * days)
    turns: dict[str, list[int]] = defaultdict(lambda: [0] * days)
    unpriced: dict[str, list[int]] = defaultdict(lambda: [0] * days)
    day_of: dict[int, int | None] = {}
    for r in rows:
        slot = r["slot"]
        if slot not in day_of:
            day_of[slot] = index.get(datetime.fromtimestamp(slot * size, tz).date())
        i = day_of[slot]
        if i is None:
            continue
        model = r["model"] or NO_MODEL
        usd[model][i] += r["usd"]
        turns[model][i] += r["turns"]
        unpriced[model][i] += r["unpriced"]
    models = sorted(usd, key=lambda m: (-sum(usd[m]), -sum(turns[m]), m))
    return DaySpend(zone, span, models, dict(usd), dict(turns), dict(unpriced))
