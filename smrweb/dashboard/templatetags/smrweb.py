"""Template helpers: server-rendered SVG sparklines, state badges, money and time formatting."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()


@register.simple_tag
def sparkline(values, *, width: int = 120, height: int = 28, maximize: bool = True):
    """An inline SVG polyline of `values` with the best point marked; a dash when there are none."""
    values = [float(v) for v in values or [] if v is not None]
    if not values:
        return format_html('<span class="spark-empty" title="no scores yet">—</span>')
    pad = 3
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    n = len(values)

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)
        y = height - pad - (height - 2 * pad) * ((v - lo) / span if hi != lo else 0.5)
        return round(x, 1), round(y, 1)

    points = " ".join(f"{x},{y}" for x, y in (xy(i, v) for i, v in enumerate(values)))
    best_i = max(range(n), key=lambda i: values[i]) if maximize else min(range(n), key=lambda i: values[i])
    bx, by = xy(best_i, values[best_i])
    lx, ly = xy(n - 1, values[-1])
    title = f"{n} scores · latest {values[-1]:.4g} · best {values[best_i]:.4g}"
    return format_html(
        '<svg class="spark" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        "<title>{}</title>"
        '<polyline points="{}" fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"/>'
        '<circle class="spark-best" cx="{}" cy="{}" r="2.5"/>'
        '<circle class="spark-last" cx="{}" cy="{}" r="2"/></svg>',
        width, height, width, height, title, title, points, bx, by, lx, ly,
    )


@register.simple_tag
def state_badge(run):
    """The run's state as a coloured badge; failure detail and stall evidence in the hover text."""
    if run.is_stalled:
        since = timezone.now() - run.last_progress_at
        return format_html(
            '<span class="badge badge-{}">{}</span> <span class="badge badge-stalled" '
            'title="No progress for {} (last activity {} UTC)">stalled</span>',
            run.state, run.state, duration(since), run.last_progress_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    if run.state == "failed":
        reason = " · ".join(x for x in (run.failure_family, run.failure_detail) if x) or "no reason given"
        return format_html('<span class="badge badge-failed" title="{}">failed</span>', reason)
    return format_html('<span class="badge badge-{}">{}</span>', run.state, run.state)


@register.filter
def usd(value) -> str:
    if value is None:
        return "—"
    value = Decimal(value)
    if value == 0:
        return "$0"
    if value < Decimal("0.01"):
        return f"${value:.4f}"
    return f"${value:,.2f}"


@register.filter
def score(value) -> str:
    return "—" if value is None else f"{value:.4g}"


@register.filter
def tokens(value) -> str:
    if value is None:
        return "—"
    value = int(value)
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


@register.filter
def duration(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


@register.filter
def ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    return duration(timezone.now() - value) + " ago"


@register.filter
def percent(value) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"
