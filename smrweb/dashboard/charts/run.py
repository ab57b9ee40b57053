"""The run page's figures: the agent.turn timeline (score, tokens, USD per bar, cumulative USD against
the budget) and one chart per metric. Style: `charts.style`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from django.utils import timezone

from smrweb.core import localcache
from smrweb.dashboard.charts.style import (
    BEST,
    BUDGET,
    CHILD,
    DRIVER,
    EPOCH_MS_2001,
    GRID,
    INK,
    PALETTE,
    SCORE,
    UNKNOWN,
    VOID,
    axis,
    base_layout,
    plotly_text,
    time_axis,
    time_title,
)
from smrweb.dashboard.charts.style import x_time as _x_time
from smrweb.dashboard.charts.style import x_time_short as _x_time_short
from smrweb.dashboard.clock import zone_label
from smrweb.tracking.models import TurnKind
from smrweb.tracking.queries.timeline import Burn, Timeline


# A live run's timeline is built again for each new turn with the same bar edges and score times: their
# strings in the viewer's zone are kept (per zone) rather than converted anew each time.
@functools.lru_cache(maxsize=16384)
def _x_in(ts: datetime, zone: str, short: bool) -> str:
    return _x_time_short(ts) if short else _x_time(ts)


def x_time(ts: datetime) -> str:
    return _x_in(ts, timezone.get_current_timezone_name(), False)


def x_time_short(ts: datetime) -> str:
    return _x_in(ts, timezone.get_current_timezone_name(), True)


_INITIALS = {TurnKind.DRIVER_INFERENCE: "d", TurnKind.CHILD_WORK: "c", TurnKind.ROLE_UNKNOWN: "u"}


def _reusing(name: str, uirevision: str, context: tuple, items: list, draw: Callable) -> list:
    """`draw(item)` for each of `items`, kept in this process per figure (`uirevision`) and `context`: the
    items a live timeline reused from its last build (the same objects: `queries.timeline._binned`) are
    not drawn again (a poll after a turn draws the newest bar or two of ~500)."""
    key = ("timeline-drawn", name, uirevision)
    kept = localcache.get(key)
    same, drawn = 0, []
    if kept is not None and kept[0] == context:
        _, old_items, old_drawn = kept
        limit = min(len(items), len(old_items))
        while same < limit and items[same] is old_items[same]:
            same += 1
        drawn = old_drawn[:same]
    drawn += [draw(item) for item in items[same:]]
    localcache.put(key, (context, list(items), drawn))
    return drawn


def _kept_score_traces(tl: Timeline, metric: str, zone: str, uirevision: str, x_time: Callable) -> list:
    """The score traces (counted, and not counted), the same trace objects while the timeline's score lists
    are the same objects (`queries.timeline`: a poll after a turn, no new score): a live run's ~800 scores
    are not drawn again for each turn, and the figure's patch skips them (`live.figure_patch`)."""
    if not tl.scores:
        return []
    key = ("timeline-score-traces", uirevision)
    context = (zone, zone_label(), metric)
    kept = localcache.get(key)
    if kept is not None and kept[0] == context and kept[1] is tl.scores:
        if kept[2] is tl.score_turns and kept[3] is tl.score_standing:
            return kept[4]
    traces = _score_traces(tl, metric, x_time)
    localcache.put(key, (context, tl.scores, tl.score_turns, tl.score_standing, traces))
    return traces


def _score_traces(tl: Timeline, metric: str, x_time: Callable) -> list:
    """The timeline's scores: counted ones as markers, the others hollow with why they do not count."""
    data: list[dict] = []
    # customdata: the turn the score came after ("turn #12 · driver"), or "" when no turn preceded it.
    turns = [
        f"<br>after turn #{n} · {plotly_text(actor)}" if n is not None else ""
        for n, actor in (
            tl.score_turns[i] if i < len(tl.score_turns) else (None, "") for i in range(len(tl.scores))
        )
    ]
    why = tl.score_standing or [""] * len(tl.scores)
    counted = [i for i in range(len(tl.scores)) if not why[i]]
    void = [i for i in range(len(tl.scores)) if why[i]]
    hover = f"{metric} %{{y:.6g}}<br>%{{x|%b %d, %H:%M:%S}} {zone_label()}%{{customdata}}<extra></extra>"
    if counted:
        data.append(
            {
                "type": "scatter",  # not scattergl: the basic bundle has none (scores are capped)
                "mode": "markers",
                "name": metric,
                "x": [x_time(tl.scores[i][0]) for i in counted],
                "y": [tl.scores[i][1] for i in counted],
                "customdata": [turns[i] for i in counted],
                "marker": {"color": SCORE, "size": 6, "line": {"color": "#2563eb", "width": 1}},
                "hovertemplate": hover,
                "yaxis": "y",
                "legendgroup": "score",
            }
        )
    if void:
        # Scores that do not count (invalid, rejected, excluded) stay on the chart, hollow, with why.
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "not counted",
                "x": [x_time(tl.scores[i][0]) for i in void],
                "y": [tl.scores[i][1] for i in void],
                "customdata": [f"<br><b>{why[i]}</b>: not counted{turns[i]}" for i in void],
                "marker": {
                    "symbol": "circle-open",
                    "color": VOID,
                    "size": 8,
                    "line": {"color": VOID, "width": 1.5},
                },
                "hovertemplate": hover,
                "yaxis": "y",
                "legendgroup": "void",
            }
        )
    return data


def run_timeline_figure(
    tl: Timeline,
    *,
    maximize: bool,
    metric: str,
    budget_usd: Decimal | None,
    burn: Burn | None,
    uirevision: str,
    failed: Sequence[tuple] = (),
) -> dict:
    """Scores, per-bin tokens, per-bin cost and cumulative USD against the budget, on one time axis;
    `failed` calls ((ts, error, http status, actor, turn), newest first) marked on the tokens' panel.

    Bars carry `[bin index, kind initial, turns, tokens in, tokens out]` as customdata: the page turns
    a click into the turns of that bin, and the hover reads its figures from it.
    """
    metric = plotly_text(metric)
    zone = timezone.get_current_timezone_name()  # once: a long run's figure converts ~700 times

    def x_time(ts: datetime) -> str:
        return _x_in(ts, zone, False)

    def x_time_short(ts: datetime) -> str:
        return _x_in(ts, zone, True)

    data: list[dict] = [*_kept_score_traces(tl, metric, zone, uirevision, x_time)]
    if tl.frontier:
        frontier = tl.frontier + [(tl.end, tl.frontier[-1][1])]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "best so far",
                "line": {"shape": "hv", "color": BEST, "width": 2},
                "x": [x_time(t) for t, _ in frontier],
                "y": [v for _, v in frontier],
                "hovertemplate": "best %{y:.6g}<extra></extra>",
                "yaxis": "y",
            }
        )
    width_ms = tl.bin_width.total_seconds() * 1000
    # Per bar: [x, tokens, customdata, USD, the USD bar's customdata]; the click asks for the bar's turns,
    # the hover reads the rest.
    drawn = _reusing(
        "bars",
        uirevision,
        (zone, tl.start, tl.bin_width),
        tl.bins,
        lambda b: (
            x_time_short(b.start + tl.bin_width / 2),
            b.tokens_in + b.tokens_out,
            [(b.start - tl.start) // tl.bin_width, _INITIALS[b.kind], b.count, b.tokens_in, b.tokens_out],
            round(float(b.cost_usd), 5),
            [(b.start - tl.start) // tl.bin_width, _INITIALS[b.kind], b.count],  # the USD bar's (kept too)
        ),
    )
    by_kind: dict[str, list] = {}
    for b, d in zip(tl.bins, drawn, strict=True):
        by_kind.setdefault(b.kind, []).append(d)
    for kind, colour, label in (
        (TurnKind.DRIVER_INFERENCE, DRIVER, "driver inference"),
        (TurnKind.CHILD_WORK, CHILD, "child work"),
        (TurnKind.ROLE_UNKNOWN, UNKNOWN, "role unknown"),
    ):
        if not (bars := by_kind.get(kind)):
            continue
        x = [d[0] for d in bars]
        # Per-turn detail (actor, model, tools) is one click away instead of in every bar.
        data.append(
            {
                "type": "bar",
                "name": label,
                "legendgroup": kind,
                "x": x,
                "y": [d[1] for d in bars],
                "width": width_ms * 0.9,
                "customdata": [d[2] for d in bars],
                "marker": {"color": colour},
                "yaxis": "y2",
                "hovertemplate": "%{customdata[2]} turn(s)<br>%{customdata[3]:,} in · %{customdata[4]:,} "
                "out tokens"
                f"<extra>{label}</extra>",
            }
        )
        data.append(
            {
                "type": "bar",
                "name": label,
                "legendgroup": kind,
                "showlegend": False,
                "x": x,
                "y": [d[3] for d in bars],
                "width": width_ms * 0.9,
                "customdata": [d[4] for d in bars],
                "marker": {"color": colour},
                "yaxis": "y3",
                "hovertemplate": f"$%{{y:.4f}} in %{{customdata[2]}} turn(s)<extra>{label}</extra>",
            }
        )
    if failed:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "failed calls",
                "x": [x_time(ts) for ts, *_ in failed],
                "y": [0] * len(failed),
                "customdata": [
                    f"{plotly_text(actor)} #{turn}: {plotly_text(error or 'error')}"
                    + (f" (HTTP {status})" if status else "")
                    for _, error, status, actor, turn in failed
                ],
                "marker": {"symbol": "x", "color": BUDGET, "size": 8, "line": {"color": BUDGET, "width": 1}},
                "yaxis": "y2",
                "hovertemplate": "%{customdata}<br>%{x|%b %d, %H:%M:%S}<extra>failed call</extra>",
            }
        )
    if tl.cumulative:
        points = _reusing(
            "spend",
            uirevision,
            (zone, tl.start, tl.bin_width),
            tl.cumulative,
            lambda p: (x_time_short(p[0]), round(float(p[1]), 5), round(float(p[2]), 5)),
        )
        xs = [x_time_short(tl.start)] + [x for x, _, _ in points]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "total USD",
                "x": xs,
                "yaxis": "y4",
                "y": [0.0] + [total for _, total, _ in points],
                "line": {"color": INK, "width": 2, "shape": "hv"},
                "hovertemplate": "total $%{y:.4f}<extra></extra>",
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "driver USD",
                "x": xs,
                "yaxis": "y4",
                "y": [0.0] + [driver for _, _, driver in points],
                "line": {"color": DRIVER, "width": 1.5, "shape": "hv", "dash": "dot"},
                "hovertemplate": "driver $%{y:.4f}<extra></extra>",
            }
        )
    if budget_usd:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"budget ${budget_usd:,.2f}",
                "yaxis": "y4",
                "x": [x_time(tl.start), x_time(tl.end)],
                "y": [float(budget_usd)] * 2,
                "line": {"color": BUDGET, "width": 1.5, "dash": "dash"},
                "hovertemplate": "budget $%{y:.2f}<extra></extra>",
            }
        )
        spent = float(tl.cumulative[-1][1]) if tl.cumulative else 0.0
        if (
            burn
            and burn.runs_out_at
            and burn.runs_out_on == "USD"
            and burn.runs_out_at - burn.as_of <= tl.end - tl.start
        ):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "forecast",
                    "yaxis": "y4",
                    "x": [x_time(burn.as_of), x_time(burn.runs_out_at)],
                    "y": [spent, float(budget_usd)],
                    "line": {"color": BUDGET, "width": 1, "dash": "dot"},
                    "hovertemplate": f"budget runs out ~%{{x|%H:%M}} {zone_label()}<extra>forecast</extra>",
                }
            )
    layout = base_layout(
        560,
        uirevision=uirevision,
        # Room for the axes' labels and the legend up front: automargin then has nothing to push and plotly
        # draws the figure once instead of twice (a third of its drawing time: issue 21, bench/browser.py).
        margin={"l": 60, "r": 12, "t": 52, "b": 56},
        barmode="stack",
        bargap=0,
        hovermode="closest",
        showlegend=True,
        xaxis={**time_axis(), "anchor": "y4", "fixedrange": False},
        yaxis=axis(f"{metric} {'↑' if maximize else '↓'}", domain=[0.74, 1.0], fixedrange=True),
        yaxis2=axis("tokens", domain=[0.50, 0.70], fixedrange=True, rangemode="tozero", tickformat="~s"),
        yaxis3=axis("USD / bar", domain=[0.27, 0.46], fixedrange=True, rangemode="tozero", tickprefix="$"),
        yaxis4=axis("USD total", domain=[0.0, 0.23], fixedrange=True, rangemode="tozero", tickprefix="$"),
    )
    if budget_usd:
        # Headroom above the budget line and a label on it: at the panel's very top edge it looked like it
        # floated between two panels (walkthrough P3).
        spent = float(tl.cumulative[-1][1]) if tl.cumulative else 0.0
        layout["yaxis4"]["range"] = [0, max(spent, float(budget_usd)) * 1.18]
        layout["annotations"] = [
            *layout.get("annotations", []),
            {
                "text": f"budget ${budget_usd:,.2f}",
                "xref": "paper",
                "x": 1,
                "xanchor": "right",
                "yref": "y4",
                "y": float(budget_usd),
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 10, "color": BUDGET},
            },
        ]
    return {"data": data, "layout": layout}


def metric_figure(key: str, points: list, *, total: int, uirevision: str) -> dict:
    """One metric by step: the bucket mean as a line, with a min–max band when downsampled."""
    key = plotly_text(key)
    xs = [p.step for p in points]
    data = []
    if total > len(points):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": xs,
                "y": [p.max for p in points],
                "line": {"width": 0},
                "hoverinfo": "skip",
                "showlegend": False,
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": xs,
                "y": [p.min for p in points],
                "line": {"width": 0},
                "fill": "tonexty",
                "fillcolor": "rgba(37,99,235,.15)",
                "name": "min–max per bucket",
                "hoverinfo": "skip",
            }
        )
    data.append(
        {
            "type": "scatter",  # never scattergl: not in the basic bundle; series are downsampled to 1,000
            "mode": "lines",
            "name": key,
            "x": xs,
            "y": [p.value for p in points],
            "line": {"color": PALETTE[0], "width": 1.5},
            "hovertemplate": "step %{x:,}<br>" + key + " %{y:.6g}<extra></extra>",
        }
    )
    # Polled sources (SMR) number a result's steps by its time in epoch milliseconds: show those as dates.
    as_time = bool(xs) and xs[0] >= EPOCH_MS_2001
    xaxis = (
        {"type": "date", "title": {"text": time_title()}, "hoverformat": f"%b %d, %H:%M:%S {zone_label()}"}
        if as_time
        else {"title": {"text": "step"}}
    )
    if as_time:
        # Epoch milliseconds, drawn by plotly in the browser's zone: send them in the viewer's clock.
        times = [x_time(datetime.fromtimestamp(x / 1000, tz=UTC)) for x in xs]
        for trace in data:
            trace["x"] = times
            trace["hovertemplate"] = trace.get("hovertemplate", "").replace(
                "step %{x:,}", "%{x|%b %d, %H:%M:%S} " + zone_label()
            )
    layout = base_layout(
        260,
        uirevision=uirevision,
        showlegend=total > len(points),
        hovermode="closest",
        xaxis={**xaxis, "gridcolor": GRID, "automargin": True},
        yaxis={"title": {"text": key}, "gridcolor": GRID, "automargin": True},
    )
    return {"data": data, "layout": layout}
