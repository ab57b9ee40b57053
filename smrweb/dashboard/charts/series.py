"""Compare's "any metric against any axis" figure (tracking/queries/series.py reads it): per run, the metric
as dots and lines (a score: its dots and its best so far as a step line), on spend, time, the clock or
the step. On a spend axis each trace runs on, dotted, to what its run has spent since its last point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from smrweb.core import numbers
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


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def arms_figure(found: Series, arm_list: list, metric_label: str, *, uirevision: str) -> dict | None:
    """One line per arm (the median of its runs at equal x) over its band (inter-quartile from four runs,
    else the range). None when no arm has a value anywhere."""
    data = []
    label = plotly_text(metric_label)
    for i, arm in enumerate(arm_list):
        if not arm.line:
            continue
        col, name = colour(i), plotly_text(f"{arm.label} (n={arm.n})")
        xs = [_x(found, x) for x, *_ in arm.line]
        band = "IQR" if arm.band == "iqr" else "min–max"
        data += [
            {
                "name": name,
                "legendgroup": name,
                "showlegend": False,
                "hoverinfo": "skip",
                "x": xs,
                "y": [hi for _, _, _, hi, _ in arm.line],
                "mode": "lines",
                "line": {"width": 0, "color": col, "shape": "hv"},
            },
            {
                "name": name,
                "legendgroup": name,
                "showlegend": False,
                "hoverinfo": "skip",
                "x": xs,
                "y": [lo for _, _, lo, _, _ in arm.line],
                "mode": "lines",
                "fill": "tonexty",
                "fillcolor": _rgba(col, 0.15),
                "line": {"width": 0, "color": col, "shape": "hv"},
            },
            {
                "name": name,
                "legendgroup": name,
                "x": xs,
                "y": [m for _, m, _, _, _ in arm.line],
                "customdata": [[lo, hi, n] for _, _, lo, hi, n in arm.line],
                "mode": "lines",
                "line": {"color": col, "width": 2.5, "shape": "hv"},
                "hovertemplate": f"<b>%{{fullData.name}}</b><br>median {label} %{{y:.6g}}<br>"
                f"{band} %{{customdata[0]:.6g}} – %{{customdata[1]:.6g}} of %{{customdata[2]}} runs<br>"
                f"{X_HOVER[found.x]}<extra></extra>",
            },
        ]
    if not data:
        return None
    x_axis = (
        {**time_axis(), "title": {"text": time_title(), "font": {"size": 11}}}
        if found.x == "wall"
        else axis(X_TITLES[found.x], rangemode="tozero")
    )
    best = " (best so far)" if found.metric == SCORE else ""
    return {
        "data": data,
        "layout": base_layout(
            400,
            uirevision=uirevision,
            hovermode="closest",
            showlegend=True,
            xaxis=x_axis,
            yaxis=axis(f"median {label}{best} · band: IQR (4+ runs) or range"),
        ),
    }


def at_x(x: str, value: float) -> str:
    """A point on axis `x` as a sentence says it: "$0.20 spent", "1,200 tokens", "turn 40"…"""
    if x == "usd":
        return f"{numbers.usd(value)} spent"
    if x == "tokens":
        return f"{numbers.tokens(int(value))} tokens"
    if x == "turns":
        return f"{value:,.0f} turns"
    if x == "time":
        return f"{numbers.duration(timedelta(seconds=value))} after the start"
    if x == "wall":
        return timezone.localtime(datetime.fromtimestamp(value, UTC)).strftime("%Y-%m-%d %H:%M")
    return f"step {value:,.0f}"


def _number(value: float | None) -> str:
    return numbers.MISSING if value is None else numbers.plain_number(value)


def arm_rows(arm_list: list) -> list[dict]:
    """The arm table's cells, formatted."""

    def spread(s, fmt) -> tuple[str, str]:
        if s.median is None:
            return numbers.MISSING, ""
        return fmt(s.median), f"{fmt(s.low)} – {fmt(s.high)}" if s.low != s.high else ""

    rows = []
    for i, arm in enumerate(arm_list):
        rows.append(
            {
                "arm": arm,
                "colour": colour(i),
                "best": spread(arm.best, numbers.plain_number),
                "final": spread(arm.final, numbers.plain_number),
                "usd": spread(arm.usd, numbers.usd),
                "tokens": spread(arm.tokens, lambda v: numbers.tokens(int(v))),
                "per_usd": _number(arm.gain_per_usd),
                "per_mtok": _number(arm.gain_per_mtok),
                "failed": f"{arm.failed_share * 100:.0f}%",
            }
        )
    return rows
