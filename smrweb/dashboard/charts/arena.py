"""A project's arena history (issue 39, item 2): the rank (the axis reversed: first place on top) and the
arena score of each recorded result, over time or against what the project had spent by then."""

from __future__ import annotations

from smrweb.dashboard.charts.style import axis, base_layout, colour, plotly_text, time_axis, x_time
from smrweb.tracking.queries.arena import ArenaPoint

AGAINST = ("time", "spend")


def arena_figure(points: list[ArenaPoint], *, against: str = "time") -> dict:
    xs = [float(p.spent_usd) if against == "spend" else x_time(p.result.created) for p in points]
    custom = [
        [
            p.result.submission_id,
            plotly_text(p.result.arena),
            p.result.submission.score,
            float(p.spent_usd),
            plotly_text(p.result.submission.run.external_id),
        ]
        for p in points
    ]
    hover = (
        "%{customdata[1]} · submission #%{customdata[0]} (run %{customdata[4]}, score %{customdata[2]:.4g})"
        "<br>spent by then $%{customdata[3]:,.2f}"
    )
    ranked = [(x, p.result.rank, c) for x, p, c in zip(xs, points, custom, strict=True) if p.result.rank]
    scored = [
        (x, p.result.arena_score, c)
        for x, p, c in zip(xs, points, custom, strict=True)
        if p.result.arena_score is not None
    ]
    data = []
    if ranked:
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "rank",
                "x": [x for x, _, _ in ranked],
                "y": [y for _, y, _ in ranked],
                "customdata": [c for _, _, c in ranked],
                "line": {"color": colour(0), "shape": "hv"},
                "hovertemplate": f"rank %{{y}}<br>{hover}<extra></extra>",
            }
        )
    if scored:
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "arena score",
                "yaxis": "y2",
                "x": [x for x, _, _ in scored],
                "y": [y for _, y, _ in scored],
                "customdata": [c for _, _, c in scored],
                "line": {"color": colour(1), "dash": "dot"},
                "hovertemplate": f"arena score %{{y:.4g}}<br>{hover}<extra></extra>",
            }
        )
    xaxis = axis("USD spent by the project's turns", tickprefix="$", rangemode="tozero")
    return {
        "data": data,
        "layout": base_layout(
            260,  # the .plot box's height
            uirevision=f"arena-{against}",
            showlegend=True,
            xaxis=xaxis if against == "spend" else time_axis(),
            # First place on top: a rank axis reversed, whole numbers only.
            yaxis=axis("rank", autorange="reversed", tickformat="d"),
            yaxis2=axis("arena score", overlaying="y", side="right", showgrid=False),
        ),
    }
