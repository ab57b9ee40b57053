"""One chart style for every page: colours, the run palette, fonts, layout and axes, the time axis in
the viewer's clock, and the escaping of supplied text. Figures are plain dicts (plotly.graph_objects
validates every attribute and costs more than the queries), emitted with `json_script` and drawn by
static/js/smrweb.js with Plotly.react.

Times are zone-less strings already in the viewer's clock (the zone the clock middleware activated: UTC
or the browser's), because plotly draws epoch numbers in the browser's own zone whatever the label says;
axis titles and hovers name that zone."""

from __future__ import annotations

import colorsys
import functools
import html
from datetime import datetime

from django.utils import timezone

from smrweb.dashboard.clock import zone_label

# Spend kinds, scores and budget; runs take PALETTE colours, kept clear of the two spend kinds.
DRIVER, CHILD, TOKENS_IN, TOKENS_OUT = "#7c3aed", "#0891b2", "#475569", "#94a3b8"
SCORE, BEST, BUDGET, INK, GRID = "#93b4f5", "#15803d", "#b91c1c", "#3b4656", "#eef1f4"
# A score that does not count (invalid, rejected, excluded, or unverified where only verified ones
# count): drawn hollow in this colour on every chart, its reason in the hover.
VOID = "#c2410c"
# Turns of actors whose role no source states: neutral, neither the driver's nor the child's colour.
UNKNOWN = "#78716c"
# Distinct and at least 3:1 against white; runs past the palette get hues spread by the golden angle
# (see `colour`), and their hover names tell them apart.
PALETTE = [
    "#2563eb",
    "#d97706",
    "#059669",
    "#db2777",
    "#dc2626",
    "#4f46e5",
    "#65a30d",
    "#0f766e",
    "#a16207",
    "#9333ea",
]
FONT = {
    "family": 'ui-sans-serif, system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif',
    "size": 11,
    "color": INK,
}
EPOCH_MS_2001 = 978_307_200_000


def contrast_on_white(hex_colour: str) -> float:
    """WCAG contrast ratio of a colour against white."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(hex_colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


@functools.cache  # pure, and asked for every compared run of every view (i < compare.MAX_RUNS)
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


def plotly_text(value: str) -> str:
    """Plotly draws names, titles and hover templates as pseudo-HTML (<a href>, <b>, …): escape what it
    would interpret in supplied text (metric keys and run ids come from agents)."""
    return html.escape(value, quote=False)


def base_layout(height: int, *, uirevision: str, **extra) -> dict:
    return {
        "height": height,
        "margin": {"l": 8, "r": 12, "t": 8, "b": 8},
        "font": FONT,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#fff",
        "uirevision": uirevision,
        "hoverlabel": {"font": {"size": 11}},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "font": {"size": 11}},
        **extra,
    }


def axis(title: str, **extra) -> dict:
    return {
        "title": {"text": title, "font": {"size": 11}},
        "gridcolor": GRID,
        "zeroline": False,
        "automargin": True,
        **extra,
    }


def x_time(ts: datetime) -> str:
    """`ts` in the active clock as a zone-less date string, which plotly draws as it is."""
    return timezone.localtime(ts).replace(tzinfo=None).isoformat(" ", "milliseconds")  # (strftime: 3x slower)


def x_time_short(ts: datetime) -> str:
    """`x_time`, without the milliseconds when they are zero (bar edges and centres on whole seconds):
    a run timeline sends a thousand of them."""
    text = x_time(ts)
    return text[:-4] if text.endswith(".000") else text


def time_title() -> str:
    return f"time ({zone_label()})"


def time_axis() -> dict:
    """A date axis in the active clock. No fixed range: the traces span the run (or project) from start
    to now, and a range that moved with every poll would undo the viewer's zoom (plotly keeps ui
    state under `uirevision` only for attributes whose given value did not change)."""
    return {
        "type": "date",
        "gridcolor": GRID,
        "automargin": True,
        "showspikes": True,
        "spikemode": "across",
        "spikesnap": "cursor",
        "spikethickness": 1,
        "spikecolor": "#98a2b0",
        "hoverformat": f"%b %d, %H:%M:%S {zone_label()}",
        "title": {"text": time_title()},
    }
