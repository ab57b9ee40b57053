"""A project's spend per day of the viewer's clock, stacked by model (issue 37 item 2)."""

from __future__ import annotations

from smrweb.dashboard.charts.style import UNKNOWN, axis, base_layout, colour, plotly_text
from smrweb.dashboard.clock import zone_label
from smrweb.tracking.queries.spend import NO_MODEL, DaySpend

MAX_MODELS = 8  # the most expensive models get a bar each; the rest are summed as "other models"
OTHER = "other models"


def spend_by_day_figure(spend: DaySpend) -> dict:
    days = [d.isoformat() for d in spend.days]
    shown, rest = spend.models[:MAX_MODELS], spend.models[MAX_MODELS:]
    series = [(m, spend.usd[m], spend.turns[m], spend.unpriced[m]) for m in shown]
    if rest:
        width = len(days)
        series.append(
            (
                OTHER,
                [sum(spend.usd[m][i] for m in rest) for i in range(width)],
                [sum(spend.turns[m][i] for m in rest) for i in range(width)],
                [sum(spend.unpriced[m][i] for m in rest) for i in range(width)],
            )
        )
    traces = []
    for i, (model, usd, turns, unpriced) in enumerate(series):
        # A model whose turns are all unpriced draws no bar: its legend entry says why.
        name = plotly_text(model) + (" (unpriced)" if not any(usd) and any(unpriced) else "")
        traces.append(
            {
                "type": "bar",
                "name": name,
                "x": days,
                "y": [round(float(v), 6) for v in usd],
                "customdata": [[t, u] for t, u in zip(turns, unpriced, strict=True)],
                "marker": {"color": UNKNOWN if model in (NO_MODEL, OTHER) else colour(i)},
                "hovertemplate": f"{name}<br>%{{x|%a %Y-%m-%d}}: $%{{y:,.4f}}"
                "<br>%{customdata[0]:,} turns, %{customdata[1]:,} unpriced<extra></extra>",
            }
        )
    return {
        "data": traces,
        "layout": base_layout(
            260,  # the .plot box's height
            uirevision="project-spend",
            barmode="stack",
            showlegend=True,
            xaxis=axis(f"day ({zone_label()})", type="date", tickformat="%b %d"),
            yaxis=axis("USD", rangemode="tozero", tickprefix="$"),
        ),
    }
