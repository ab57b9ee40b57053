"""Compare's "any metric against any axis" figure (tracking/queries/series.py reads it): per run, the metric
as dots and lines (a score: its dots and its best so far as a step line), on spend, time, the clock or
the step. On a spend axis each trace runs on, dotted, to what its run has spent since its last point."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone

from smrweb.dashboard.charts.style import axis, base_layout, colour, plotly_text, time_axis, time_title
from smrweb.tracking.queries.series import AXIS_LABELS, SCORE, Series

LEGEND_MAX = 10
X_TITLES = {
    "usd": "USD spent (agent turns, driver + child)",
    "tokens": "tokens spent (in + out, driver + child)",
    "turns": "turns (driver + child)",
    "time": "seconds since the run's start",
    "step": "step (a score: its ordinal)",
}
X_HOVER = {
    "usd": "$%{x:,.4~f} spent",
    "tokens": "%{x:,.0f} tokens",
    "turns": "turn %{x:,.0f}",
    "time": "%{x:,.0f} s since start",
    "wall": "%{x}",
    "step": "step %{x:,.0f}",
}


def _x(found: Series, value: float):
    if found.x == "wall":
        return timezone.localtime(datetime.fromtimestamp(value, UTC)).replace(tzinfo=None).isoformat(" ")
    return round(value, 6)


def series_figure(found: Series, metric_label: str, *, uirevision: str) -> dict | None:
    """The figure, or None when no run has a point of the metric."""
    data, tails = [], []
    score = found.metric == SCORE
    for i, trace in enumerate(found.traces):
        if not trace.points:
            continue
        col, name = colour(i), plotly_text(trace.name)
        points = trace.points
        drawn = points[:-1] if trace.carried else points
        carried = trace.carried and not score and drawn  # a score's best so far is carried instead
        data.append(
            {
                "name": name,
                "legendgroup": name,
                "x": [_x(found, x) for x, _ in drawn],
                "y": [y for _, y in drawn],
                "marker": {"color": col},
                "line": {"color": col},
                "mode": "markers" if score else "lines+markers" if len(drawn) <= 60 else "lines",
            }
        )
        if score and trace.best:
            data.append(
                {
                    "name": name,
                    "legendgroup": name,
                    "showlegend": False,
                    "x": [_x(found, x) for x, _ in trace.best],
                    "y": [y for _, y in trace.best],
                    "mode": "lines",
                    "line": {"color": col, "shape": "hv", "width": 2},
                    "hovertemplate": f"<b>%{{fullData.name}}</b><br>best so far %{{y:.6g}}<br>"
                    f"{X_HOVER[found.x]}<extra></extra>",
                }
            )
        if carried:  # the last value, carried to what the run has spent since
            tails.append(
                {
                    "name": name,
                    "legendgroup": name,
                    "showlegend": False,
                    "hoverinfo": "skip",
                    "x": [_x(found, x) for x, _ in points[-2:]],
                    "y": [y for _, y in points[-2:]],
                    "mode": "lines",
                    "line": {"color": col, "dash": "dot", "width": 1},
                }
            )
    if not data:
        return None
    label = plotly_text(metric_label)
    x_axis = (
        {**time_axis(), "title": {"text": time_title(), "font": {"size": 11}}}
        if found.x == "wall"
        else axis(X_TITLES[found.x], rangemode="tozero")
    )
    layout = base_layout(
        400,
        uirevision=uirevision,
        hovermode="closest",
        showlegend=len(found.traces) <= LEGEND_MAX,
        template={
            "data": {
                "scatter": [
                    {
                        "type": "scatter",
                        "marker": {"size": 5, "opacity": 0.6 if score else 0.9},
                        "line": {"width": 1.5},
                        "hovertemplate": f"<b>%{{fullData.name}}</b><br>{label} %{{y:.6g}}<br>"
                        f"{X_HOVER[found.x]}<extra></extra>",
                    }
                ]
            }
        },
        xaxis=x_axis,
        yaxis=axis(f"{label}{' · line: best so far' if score else ''}"),
    )
    return {"data": data + tails, "layout": layout}


def axis_label(x: str) -> str:
    return AXIS_LABELS[x]
