"""The Compare page's presentation: one colour per run, plotly figures as plain dicts (graph_objects
validates every attribute and costs more than the queries), and the table's formatted deltas.

Figures are emitted with `json_script` and drawn by static/js/smrweb.js with Plotly.react.
"""

from __future__ import annotations

import colorsys
import hashlib
import html
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from smrweb.dashboard.templatetags.smrweb import duration, midtrunc, plain_number, tokens
from smrweb.tracking.queries.compare import Comparison, RunSeries

# Distinct and at least 3:1 against white; kept clear of the driver violet and child cyan used for
# spend kinds. Runs past the palette get hues spread by the golden angle (see `colour`).
PALETTE = ["#2563eb", "#d97706", "#059669", "#db2777", "#dc2626", "#4f46e5", "#65a30d", "#0f766e",
           "#a16207", "#9333ea"]
DRIVER, CHILD, TOKENS_IN, TOKENS_OUT = "#7c3aed", "#0891b2", "#475569", "#94a3b8"
INK, GRID = "#3b4656", "#eef1f4"
FONT = {"family": 'ui-sans-serif, system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif',
        "size": 11, "color": INK}
LEGEND_MAX = 10  # more runs than this: no legend (the table's swatches and the hover name them)
MINUS = "−"


def contrast_on_white(hex_colour: str) -> float:
    """WCAG contrast ratio of a colour against white."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(hex_colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


def colour(i: int) -> str:
    """The i-th run's colour: the palette, then golden-angle hues darkened until they read on white."""
    if i < len(PALETTE):
        return PALETTE[i]
    hue, lightness = (i * 0.381966) % 1.0, 0.42
    while True:
        r, g, b = colorsys.hls_to_rgb(hue, lightness, 0.70)
        hex_colour = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
        if contrast_on_white(hex_colour) >= 3 or lightness < 0.2:
            return hex_colour
        lightness -= 0.02


@dataclass(frozen=True)
class TimeUnit:
    seconds: float
    label: str  # "minutes", "hours", "days"


def time_unit(c: Comparison) -> TimeUnit:
    """The x unit that suits the longest run: minutes under 2 h, hours under 3 days, else days."""
    longest = max((_end(s) for s in c.runs), default=0)
    if longest < 2 * 3600:
        return TimeUnit(60, "minutes")
    if longest < 72 * 3600:
        return TimeUnit(3600, "hours")
    return TimeUnit(86400, "days")


def _text(value: str) -> str:
    """Plotly draws names and titles as pseudo-HTML: escape what it would interpret."""
    return html.escape(value, quote=False)


def _layout(height: int, *, uirevision: str, show_legend: bool, **extra) -> dict:
    return {
        "height": height, "margin": {"l": 8, "r": 12, "t": 8, "b": 8}, "font": FONT,
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "#fff", "uirevision": uirevision,
        "hovermode": "closest", "hoverlabel": {"font": {"size": 11}}, "showlegend": show_legend,
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "font": {"size": 11}},
        **extra,
    }


def _axis(title: str, **extra) -> dict:
    return {"title": {"text": title, "font": {"size": 11}}, "gridcolor": GRID, "zeroline": False,
            "automargin": True, **extra}


def _x(seconds: float, unit: TimeUnit) -> float:
    return round(seconds / unit.seconds, 5)


def _end(s: RunSeries) -> float:
    """Where a run's lines stop: its end (finished, or last progress), never before its last point."""
    return max([s.duration.total_seconds(), *(x for x, _ in s.scores[-1:] + s.spend[-1:] + s.frontier[-1:])])


def score_figure(c: Comparison, colours: list[str], unit: TimeUnit, *, uirevision: str) -> dict | None:
    """Every score as a faint dot and the best-so-far frontier as a step line, per run, on time since
    each run's start. None when no run has a score."""
    metric = _text(c.project.scenario.score_metric)
    legend = len(c.runs) <= LEGEND_MAX
    data = []
    for s, col in zip(c.runs, colours):
        if not s.scores:
            continue
        rid = _text(s.run.external_id)
        where = f"%{{x:.2f}} {unit.label} since start"
        data.append({"type": "scatter", "mode": "markers", "name": rid, "legendgroup": rid, "showlegend": False,
                     "x": [_x(x, unit) for x, _ in s.scores], "y": [y for _, y in s.scores],
                     "marker": {"color": col, "size": 5, "opacity": 0.45},
                     "hovertemplate": f"<b>{rid}</b><br>{metric} %{{y:.6g}}<br>{where}<extra></extra>"})
        frontier = s.frontier + [(_end(s), s.frontier[-1][1])]
        data.append({"type": "scatter", "mode": "lines", "name": rid, "legendgroup": rid,
                     "x": [_x(x, unit) for x, _ in frontier], "y": [y for _, y in frontier],
                     "line": {"color": col, "width": 2, "shape": "hv"},
                     "hovertemplate": f"<b>{rid}</b><br>best so far %{{y:.6g}}<br>{where}<extra></extra>"})
    if not data:
        return None
    arrow = "↑" if c.maximize else "↓"
    layout = _layout(380, uirevision=uirevision, show_legend=legend,
                     xaxis=_axis(f"{unit.label} since the run's start", rangemode="tozero"),
                     yaxis=_axis(f"{metric} {arrow} · line: best so far"))
    return {"data": data, "layout": layout}


def spend_figure(c: Comparison, colours: list[str], unit: TimeUnit, *, uirevision: str) -> dict | None:
    """Cumulative USD of agent turns per run on time since its start. None when no run has a turn."""
    data = []
    for s, col in zip(c.runs, colours):
        if not s.spend:
            continue
        rid = _text(s.run.external_id)
        pts = [(0.0, 0.0), *s.spend, (_end(s), s.spend[-1][1])]
        # Every turn present: spend moves in steps. Downsampled: a straight line between the kept
        # turns is closer to the truth than a step drawn at each of them.
        shape = "hv" if len(s.spend) >= s.run.turn_count else "linear"
        data.append({"type": "scatter", "mode": "lines", "name": rid, "legendgroup": rid,
                     "x": [_x(x, unit) for x, _ in pts], "y": [round(y, 6) for _, y in pts],
                     "line": {"color": col, "width": 2, "shape": shape},
                     "hovertemplate": f"<b>{rid}</b><br>$%{{y:,.4~f}} spent<br>%{{x:.2f}} {unit.label} since start"
                                      "<extra></extra>"})
    if not data:
        return None
    layout = _layout(380, uirevision=uirevision, show_legend=len(c.runs) <= LEGEND_MAX,
                     xaxis=_axis(f"{unit.label} since the run's start", rangemode="tozero"),
                     yaxis=_axis("USD spent (agent turns)", rangemode="tozero", tickprefix="$"))
    return {"data": data, "layout": layout}


def turns_figure(c: Comparison, colours: list[str], *, uirevision: str) -> dict | None:
    """Per run, side by side: USD split into driver inference and child work, and mean tokens per
    turn split into in and out. Runs read top to bottom in the table's order, each label with its
    colour swatch. None when no run has a turn."""
    runs = [(s, col) for s, col in zip(c.runs, colours) if s.run.turn_count]
    if not runs:
        return None
    ids = [s.run.external_id for s, _ in runs]
    ticks = {"tickmode": "array", "tickvals": ids,
             "ticktext": [f'<span style="color:{col}">■</span> {_text(midtrunc(rid, 24))}' for rid, (_, col)
                          in zip(ids, runs)]}

    def bars(name, colour_, values, axis, fmt):
        return {"type": "bar", "orientation": "h", "name": name, "y": ids, "x": values, "xaxis": f"x{axis}",
                "yaxis": f"y{axis}", "marker": {"color": colour_},
                "hovertemplate": f"<b>%{{y}}</b><br>{name} {fmt}<extra></extra>"}

    data = [
        bars("driver inference USD", DRIVER, [round(float(s.run.driver_cost_usd), 6) for s, _ in runs], "",
             "$%{x:,.4~f}"),
        bars("child work USD", CHILD, [round(float(s.run.child_cost_usd), 6) for s, _ in runs], "", "$%{x:,.4~f}"),
        bars("tokens in / turn", TOKENS_IN, [round(s.run.tokens_in / s.run.turn_count) for s, _ in runs], "2",
             "%{x:,.0f}"),
        bars("tokens out / turn", TOKENS_OUT, [round(s.run.tokens_out / s.run.turn_count) for s, _ in runs], "2",
             "%{x:,.0f}"),
    ]
    height = 90 + 24 * max(len(runs), 3)
    layout = _layout(
        height, uirevision=uirevision, show_legend=True, barmode="stack", bargap=0.3,
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "traceorder": "normal"},
        xaxis=_axis("USD spent, by kind", domain=[0, 0.47], tickprefix="$", rangemode="tozero"),
        xaxis2=_axis("mean tokens per turn", domain=[0.53, 1], tickformat="~s", rangemode="tozero"),
        yaxis={**_axis("", autorange="reversed", **ticks), "anchor": "x"},
        yaxis2={**_axis("", autorange="reversed", matches="y", showticklabels=False), "anchor": "x2"},
    )
    return {"data": data, "layout": layout}


def points(figure: dict | None) -> int:
    """How many points a figure ships (what downsampling bounds)."""
    return sum(len(trace.get("x", ())) for trace in (figure or {}).get("data", ()))


# --- the table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    text: str
    tone: str  # "good", "bad" or "" (neither: more spend is not worse in itself)
    title: str


@dataclass
class Row:
    s: RunSeries
    colour: str
    deltas: dict[str, Delta]
    gain_per_usd: str
    usd_per_turn: str
    baseline_query: str  # this run first
    without_query: str  # this run removed


def _sign(value: float) -> str:
    return "+" if value > 0 else MINUS if value < 0 else "±"


def usd_precise(value) -> str:
    """Dollars with three significant digits below $1 ($0.0431), cents above ($12.35)."""
    if value is None:
        return "—"
    value = float(value)
    if value == 0:
        return "$0"
    if abs(value) < 0.0001:
        return "<$0.0001"
    if abs(value) < 1:
        return f"${value:.3g}"
    return f"${value:,.2f}"


def _num(value: float, digits: int = 4) -> str:
    """Significant digits written out: 0.0412, 3.142, 12,346 (never "-0" or an exponent)."""
    return plain_number(value, digits)


def rate(value: float | None) -> str:
    """Score gained per USD, to three significant digits."""
    if value is None:
        return "—"
    return _num(value, 3).replace("-", MINUS)


def _delta_text(key: str, d) -> str:
    if isinstance(d, timedelta):
        return _sign(d.total_seconds()) + duration(abs(d))
    if key == "turns":
        return f"{_sign(d)}{abs(d):,}"
    if key == "tokens":
        return _sign(d) + tokens(abs(d))
    if key == "usd":
        return _sign(d) + usd_precise(abs(d))
    return _sign(d) + _num(abs(d))


def _tone(key: str, d, maximize: bool) -> str:
    if key in ("final", "best"):
        better = d > 0 if maximize else d < 0
    elif key == "gain_per_usd":
        better = d > 0
    else:
        return ""
    return "" if d == 0 else "good" if better else "bad"


def deltas(s: RunSeries, base: RunSeries, maximize: bool) -> dict[str, Delta]:
    out = {}
    base_values = base.values()
    for key, d in s.deltas.items():
        if d is None:
            out[key] = Delta("—", "", "no value to compare")
            continue
        b = base_values[key]
        b_num = b.total_seconds() if isinstance(b, timedelta) else b
        d_num = d.total_seconds() if isinstance(d, timedelta) else d
        pct = f" ({d_num / abs(b_num) * 100:+.0f}%)".replace("-", MINUS) if b_num else ""
        out[key] = Delta(_delta_text(key, d), _tone(key, d_num, maximize),
                         f"{_delta_text(key, d)}{pct} against {base.run.external_id}")
    return out


def rows(c: Comparison, colours: list[str]) -> list[Row]:
    params = [urlencode({"runs": s.run.external_id}) for s in c.runs]  # quoted once, not once per link
    out = []
    for i, (s, col) in enumerate(zip(c.runs, colours)):
        others = params[:i] + params[i + 1:]
        out.append(Row(
            s=s, colour=col, deltas=deltas(s, c.runs[0], c.maximize) if i else {},
            gain_per_usd=rate(s.gain_per_usd), usd_per_turn=usd_precise(s.usd_per_turn),
            baseline_query="&".join([params[i], *others]), without_query="&".join(others),
        ))
    return out


def build(c: Comparison) -> dict:
    """Everything the template needs about a comparison of two or more runs."""
    colours = [colour(i) for i in range(len(c.runs))]
    unit = time_unit(c)
    # Zoom survives re-renders of the same selection (a reload, a later poll), not a new one.
    key = "compare:" + hashlib.blake2b("\n".join(s.run.external_id for s in c.runs).encode(), digest_size=8).hexdigest()
    figures = {
        "score_figure": score_figure(c, colours, unit, uirevision=key),
        "spend_figure": spend_figure(c, colours, unit, uirevision=key),
        "turns_figure": turns_figure(c, colours, uirevision=key),
    }
    return {**figures, "rows": rows(c, colours), "unit": unit,
            "points": {name: points(fig) for name, fig in figures.items()}}
