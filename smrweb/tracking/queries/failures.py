"""A run's failed calls (issue 37 item 3): turns whose call failed, read through the partial index of
failed turns (`turn_run_failed_idx`), never the run's other turns."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Max

from smrweb.tracking.models import AgentTurn, Run

RECENT = 20  # the newest failed calls a page lists with their messages


@dataclass
class FailedCalls:
    count: int
    rate: float | None  # of the run's turns; None without turns
    by_model: list[dict] = field(default_factory=list)  # {model, n, last}
    by_error: list[dict] = field(default_factory=list)  # {error, http_status, n, last}
    recent: list[AgentTurn] = field(default_factory=list)


def failed_calls(run: Run, recent: int = RECENT) -> FailedCalls:
    """The run's failed calls: how many (its `failed_turns` column), the share of its turns, by model and
    by error (class or code and HTTP status), and the newest `recent` with their messages. Three queries
    when there are any, none otherwise."""
    count = run.failed_turns
    rate = count / run.turn_count if run.turn_count else None
    if not count:
        return FailedCalls(0, rate)
    failed = AgentTurn.objects.filter(run=run, failed=True)
    by_model = list(
        failed.values("model").annotate(n=Count("id"), last=Max("ts")).order_by("-n", "model")[:50]
    )
    by_error = list(
        failed.values("error", "http_status")
        .annotate(n=Count("id"), last=Max("ts"))
        .order_by("-n", "error")[:50]
    )
    newest = list(
        failed.order_by("-id").only(
            "pk", "turn", "actor", "model", "ts", "error", "http_status", "error_message", "duration_ms"
        )[:recent]
    )
    return FailedCalls(count, rate, by_model, by_error, newest)
