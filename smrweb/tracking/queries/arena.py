"""A project's arena history (issue 39, item 2): each recorded arena result in time order, with what the
project's turns had cost by the time it was recorded, for the chart of rank and arena score over time and
against spend.

The spend at a result is its whole UTC days before it from `RunDaySpend` (one grouped query) and the turns of
its own day up to it (one query per day that has results): never a sum over every turn per result."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime, time
from decimal import Decimal

from django.db.models import Sum

from smrweb.tracking.models import AgentTurn, ArenaResult, Project, RunDaySpend

MAX_POINTS = 500  # the newest results drawn; arenas cap uploads at a few a day


@dataclass
class ArenaPoint:
    result: ArenaResult  # with its submission and run
    spent_usd: Decimal  # what the project's turns had cost when it was recorded (turns stamped up to then)


def arena_history(project: Project) -> list[ArenaPoint]:
    newest = ArenaResult.objects.filter(submission__project=project).order_by("-created", "-id")[:MAX_POINTS]
    results = list(reversed(newest.select_related("submission__run")))
    if not results:
        return []
    by_day = dict(
        RunDaySpend.objects.filter(project=project)
        .values("day")
        .annotate(usd=Sum("cost_usd"))
        .values_list("day", "usd")
        .order_by()
    )
    days = sorted(by_day)
    before: list[Decimal] = []  # the spend of every day before days[i]
    total = Decimal(0)
    for day in days:
        before.append(total)
        total += by_day[day] or 0
    points = []
    for day in sorted({r.created.astimezone(UTC).date() for r in results}):
        todays = [r for r in results if r.created.astimezone(UTC).date() == day]
        start = datetime.combine(day, time.min, tzinfo=UTC)
        turns = list(
            AgentTurn.objects.filter(run__project=project, ts__gte=start, ts__lte=todays[-1].created)
            .order_by("ts")
            .values_list("ts", "cost_usd")
        )
        stamps = [ts for ts, _ in turns]
        running = [Decimal(0)]
        for _, cost in turns:
            running.append(running[-1] + (cost or 0))
        i = bisect.bisect_left(days, day)
        earlier = before[i] if i < len(days) else total
        for r in todays:
            points.append(ArenaPoint(r, earlier + running[bisect.bisect_right(stamps, r.created)]))
    points.sort(key=lambda p: (p.result.created, p.result.pk))
    return points
