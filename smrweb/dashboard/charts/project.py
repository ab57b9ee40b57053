"""The project page's score-over-time figure: every run's scores and the project's best so far.
Style: `charts.style`."""

from __future__ import annotations

from datetime import datetime

from smrweb.dashboard.charts.style import BEST, GRID, base_layout, colour, plotly_text, time_axis, x_time
from smrweb.dashboard.clock import zone_label


def project_scores_figure(
    series: list[tuple[str, str, list[tuple[datetime, float]], list[tuple[datetime, float, str]]]],
    frontier: list[tuple[datetime, float]],
    *,
    maximize: bool,
    metric: str,
    start: datetime,
    end: datetime,
    uirevision: str,
    frontier_label: str = "project best so far",
) -> dict:
    """Every run's scores over time, overlaid, and the project's best-so-far as a step line.

    `series` is (run name, run URL, points that count, points that do not with why); a click on a point
    opens its run (trace `meta.url`). A run's line joins its scores that count; the others are hollow
    dots of its colour beside it, with why on hover (`void` traces, in the run's legend group).
    """
    metric = plotly_text(metric)
    data = []
    many = len(series) > 12
    for i, (run_name, url, points, void) in enumerate(series):
        # Only what differs per run; the shared style and hover text come from layout.template. The name
        # is a display name (people's text) or a run id.
        short = run_name if len(run_name) <= 28 else f"{run_name[:12]}…{run_name[-12:]}"
        meta = {"url": url, "run": plotly_text(run_name)}
        if points:
            data.append(
                {
                    "name": plotly_text(short),
                    "legendgroup": f"run-{i}",
                    "x": [x_time(t) for t, _ in points],
                    "y": [v for _, v in points],
                    "meta": meta,
                    "line": {"color": colour(i)},
                }
            )
        if void:
            data.append(
                {
                    "name": plotly_text(short),
                    "legendgroup": f"run-{i}",
                    # The run's legend entry when none of its scores counts (plotly lists no empty trace).
                    "showlegend": not points and not many,
                    "mode": "markers",
                    "x": [x_time(t) for t, _, _ in void],
                    "y": [v for _, v, _ in void],
                    "customdata": [f"<br><b>{why}</b>: not counted" for _, _, why in void],
                    "meta": meta,
                    "marker": {
                        "symbol": "circle-open",
                        "size": 7,
                        "color": colour(i),
                        "line": {"width": 1.5},
                    },
                    "hovertemplate": f"%{{meta.run}}<br>{metric} %{{y:.6g}}%{{customdata}}<br>"
                    f"%{{x|%b %d, %H:%M:%S}} {zone_label()}<extra></extra>",
                }
            )
    if frontier:
        points = frontier + [(end, frontier[-1][1])]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": frontier_label,
                "showlegend": True,
                "opacity": 1,
                "x": [x_time(t) for t, _ in points],
                "y": [v for _, v in points],
                "line": {"color": BEST, "width": 3, "shape": "hv"},
                "hovertemplate": "best %{y:.6g}<extra></extra>",
            }
        )
    run_style = {
        "type": "scatter",
        "mode": "lines+markers",
        "showlegend": not many,
        "opacity": 0.55 if many else 0.85,
        "line": {"width": 1},
        "marker": {"size": 4},
        "hovertemplate": f"%{{meta.run}}<br>{metric} %{{y:.6g}}<br>%{{x|%b %d, %H:%M:%S}} {zone_label()}"
        "<extra></extra>",
    }
    layout = base_layout(
        320,
        uirevision=uirevision,
        hovermode="closest",
        showlegend=True,
        template={"data": {"scatter": [run_style]}},
        xaxis=time_axis(),
        yaxis={
            "title": {"text": f"{metric} {'↑' if maximize else '↓'}"},
            "gridcolor": GRID,
            "automargin": True,
            "zeroline": False,
        },
    )
    return {"data": data, "layout": layout}
