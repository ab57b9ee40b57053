"""The Compare page's presentation: one colour per run, the figures, and the table's formatted deltas.
Style: `charts.style`; numbers: `core.numbers`."""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from html import escape
from typing import NamedTuple  # as Django's escape (& < > " '), without its lazy-string wrapper

from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from smrweb.core import cachekeys, softcache
from smrweb.core.numbers import MINUS, duration, plain_number, sign_of, tokens, usd_precise
from smrweb.dashboard.charts import style
from smrweb.dashboard.charts.style import (
    CHILD,
    DRIVER,
    TOKENS_IN,
    TOKENS_OUT,
    UNKNOWN,
    axis,
    base_layout,
    colour,
    plotly_text,
)
from smrweb.dashboard.clock import zone_label
from smrweb.dashboard.templatetags.smrweb import (
    FigureJSON,
    ago,
    figure_text,
    midtrunc,
    ms,
    score,
    state_badge,
    usd,
)
from smrweb.tracking.queries.compare import Comparison, RunSeries, keep_here
from smrweb.tracking.queries.compare_turns import add_turns

PARTS_CACHE_SECONDS = 3600
LEGEND_MAX = 10  # more runs than this: no legend (the table's swatches and the hover name them)


def signed_number(value: float, digits: int, *, percent: bool = False) -> str:
    """A rate (−0.25, 8,000) or, with `percent`, a change (+12%, −3%) in whole percent."""
    if percent:
        return f"{sign_of(round(value))}{abs(round(value))}%"
    return plain_number(value, digits).replace("-", MINUS)


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


def _x(seconds: float, unit: TimeUnit) -> float:
    return round(seconds / unit.seconds, 5)


def _end(s: RunSeries) -> float:
    """Where a run's lines stop: its end (finished, or last progress), never before its last point."""
    return max([s.duration.total_seconds(), *(x for x, _ in s.scores[-1:] + s.spend[-1:] + s.frontier[-1:])])


def _score_traces(s: RunSeries, col: str, unit: TimeUnit, metric: str) -> tuple[list[dict], dict | None]:
    """One run's traces of the score figure: its dots and its frontier (none without scores), and its
    scores that do not count as a trace of hollow dots (None when all count)."""
    if not s.scores:
        return [], None
    rid = plotly_text(s.run.external_id)
    why = s.score_standing or [""] * len(s.scores)
    counted = [p for p, w in zip(s.scores, why) if not w]
    void = [(p, w) for p, w in zip(s.scores, why) if w]
    frontier = s.frontier + [(_end(s), s.frontier[-1][1])] if s.frontier else []
    pair = [
        {
            "name": rid,
            "legendgroup": rid,
            "x": [_x(x, unit) for x, _ in counted],
            "y": [y for _, y in counted],
            "marker": {"color": col},
        },
        {
            "name": rid,
            "legendgroup": rid,
            "x": [_x(x, unit) for x, _ in frontier],
            "y": [y for _, y in frontier],
            "line": {"color": col, "shape": "hv"},
        },
    ]
    if not void:
        return pair, None
    # Scores that do not count (invalid, rejected, excluded): hollow, why on hover.
    hollow = {
        "type": "scatter",
        "mode": "markers",
        "name": rid,
        "legendgroup": rid,
        "showlegend": False,
        "x": [_x(x, unit) for (x, _), _ in void],
        "y": [y for (_, y), _ in void],
        "customdata": [w for _, w in void],
        "marker": {
            "symbol": "circle-open",
            "size": 7,
            "opacity": 1,
            "color": col,
            "line": {"width": 1.5},
        },
        "hovertemplate": f"<b>%{{fullData.name}}</b><br>{metric} %{{y:.6g}}<br>"
        f"<b>%{{customdata}}</b>: not counted<br>{_where(unit)}<extra></extra>",
    }
    return pair, hollow


def _where(unit: TimeUnit) -> str:
    return f"%{{x:.2f}} {unit.label} since start"


def _score_layout(c: Comparison, unit: TimeUnit, metric: str, *, uirevision: str) -> dict:
    """What every trace shares (mode, hover text, line shape) is said once, in the layout's template:
    with 200 runs it was half the figure. Scatter traces take its styles in turn: each run's dots, then
    its frontier; the hollow dots, after every run's pair, are styled in full."""
    arrow = "↑" if c.maximize else "↓"
    dots = {
        "type": "scatter",
        "mode": "markers",
        "showlegend": False,
        "marker": {"size": 5, "opacity": 0.45},
        "hovertemplate": f"<b>%{{fullData.name}}</b><br>{metric} %{{y:.6g}}<br>{_where(unit)}<extra></extra>",
    }
    steps = {
        "type": "scatter",
        "mode": "lines",
        "line": {"width": 2, "shape": "hv"},
        "hovertemplate": (
            f"<b>%{{fullData.name}}</b><br>best so far %{{y:.6g}}<br>{_where(unit)}<extra></extra>"
        ),
    }
    return base_layout(
        380,
        uirevision=uirevision,
        hovermode="closest",
        showlegend=len(c.runs) <= LEGEND_MAX,
        template={"data": {"scatter": [dots, steps]}},
        xaxis=axis(f"{unit.label} since the run's start", rangemode="tozero"),
        yaxis=axis(f"{metric} {arrow} · line: best so far"),
    )


def score_figure(c: Comparison, colours: list[str], unit: TimeUnit, *, uirevision: str) -> dict | None:
    """Every score as a faint dot and the best-so-far frontier as a step line, per run, on time since
    each run's start. None when no run has a score."""
    metric = plotly_text(c.project.scenario.score_metric)
    data, hollow = [], []
    for s, col in zip(c.runs, colours):
        pair, void = _score_traces(s, col, unit, metric)
        data += pair
        if void:
            hollow.append(void)
    if not data:
        return None
    return {"data": data + hollow, "layout": _score_layout(c, unit, metric, uirevision=uirevision)}


def _spend_trace(s: RunSeries, col: str, unit: TimeUnit) -> dict | None:
    """One run's cumulative USD line (None without a turn)."""
    if not s.spend:
        return None
    rid = plotly_text(s.run.external_id)
    pts = [(0.0, 0.0), *s.spend, (_end(s), s.spend[-1][1])]
    # Every turn present: spend moves in steps. Downsampled: a straight line between the kept
    # turns is closer to the truth than a step drawn at each of them.
    every_turn = len(s.spend) >= s.run.turn_count
    return {
        "name": rid,
        "legendgroup": rid,
        "x": [_x(x, unit) for x, _ in pts],
        "y": [round(y, 6) for _, y in pts],
        "line": {"color": col, "shape": "hv" if every_turn else "linear"},
    }


def _spend_layout(c: Comparison, unit: TimeUnit, *, uirevision: str) -> dict:
    lines = {
        "type": "scatter",
        "mode": "lines",
        "line": {"width": 2, "shape": "linear"},
        "hovertemplate": "<b>%{fullData.name}</b><br>$%{y:,.4~f} spent<br>"
        f"%{{x:.2f}} {unit.label} since start<extra></extra>",
    }
    return base_layout(
        380,
        uirevision=uirevision,
        hovermode="closest",
        showlegend=len(c.runs) <= LEGEND_MAX,
        template={"data": {"scatter": [lines]}},
        xaxis=axis(f"{unit.label} since the run's start", rangemode="tozero"),
        yaxis=axis("USD spent (agent turns)", rangemode="tozero", tickprefix="$"),
    )


def spend_figure(c: Comparison, colours: list[str], unit: TimeUnit, *, uirevision: str) -> dict | None:
    """Cumulative USD of agent turns per run on time since its start. None when no run has a turn. The
    traces' shared style is in the layout's template."""
    data = [t for s, col in zip(c.runs, colours) if (t := _spend_trace(s, col, unit))]
    if not data:
        return None
    return {"data": data, "layout": _spend_layout(c, unit, uirevision=uirevision)}


TURN_COLUMNS = ("id", "tick", "driver", "child", "unknown", "tokens_in", "tokens_out")


def _turns_values(s: RunSeries, col: str) -> dict | None:
    """One run's values in the turn statistics figure, by `TURN_COLUMNS` (None without a turn)."""
    run = s.run
    if not run.turn_count:
        return None
    return {
        "id": run.external_id,
        "tick": f'<span style="color:{col}">■</span> {plotly_text(midtrunc(run.external_id, 24))}',
        "driver": round(float(run.driver_cost_usd), 6),
        "child": round(float(run.child_cost_usd), 6),
        "unknown": round(float(run.unknown_cost_usd), 6),
        "tokens_in": round(run.tokens_in / run.turn_count),
        "tokens_out": round(run.tokens_out / run.turn_count),
    }


def _turns_of(columns: dict, n: int, unknown: bool, *, uirevision: str) -> dict:
    """The turn statistics figure of `n` runs from its columns (`TURN_COLUMNS`: lists, or the placeholders
    that `build` puts the kept parts' texts in), with the role-unknown bars when `unknown`."""
    ids = columns["id"]
    ticks = {"tickmode": "array", "tickvals": ids, "ticktext": columns["tick"]}

    def bars(name, colour_, values, axis, fmt):
        return {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": ids,
            "x": values,
            "xaxis": f"x{axis}",
            "yaxis": f"y{axis}",
            "marker": {"color": colour_},
            "hovertemplate": f"<b>%{{y}}</b><br>{name} {fmt}<extra></extra>",
        }

    data = [
        bars("driver inference USD", DRIVER, columns["driver"], "", "$%{x:,.4~f}"),
        bars("child work USD", CHILD, columns["child"], "", "$%{x:,.4~f}"),
        # Turns of actors whose role no source states: their own bars, never folded into a side.
        *([bars("role unknown USD", UNKNOWN, columns["unknown"], "", "$%{x:,.4~f}")] if unknown else []),
        bars("tokens in / turn", TOKENS_IN, columns["tokens_in"], "2", "%{x:,.0f}"),
        bars("tokens out / turn", TOKENS_OUT, columns["tokens_out"], "2", "%{x:,.0f}"),
    ]
    height = 90 + 24 * max(n, 3)
    layout = base_layout(
        height,
        uirevision=uirevision,
        hovermode="closest",
        showlegend=True,
        barmode="stack",
        bargap=0.3,
        legend={
            "orientation": "h",
            "y": 1.0,
            "yanchor": "bottom",
            "x": 0,
            "traceorder": "normal",
            "font": {"size": 11},
        },
        xaxis=axis("USD spent, by kind", domain=[0, 0.47], tickprefix="$", rangemode="tozero"),
        xaxis2=axis("mean tokens per turn", domain=[0.53, 1], tickformat="~s", rangemode="tozero"),
        yaxis={**axis("", autorange="reversed", **ticks), "anchor": "x"},
        yaxis2={**axis("", autorange="reversed", matches="y", showticklabels=False), "anchor": "x2"},
    )
    return {"data": data, "layout": layout}


def turns_figure(c: Comparison, colours: list[str], *, uirevision: str) -> dict | None:
    """Per run, side by side: USD split into driver inference and child work, and mean tokens per
    turn split into in and out. Runs read top to bottom in the table's order, each label with its
    colour swatch. None when no run has a turn."""
    values = [v for s, col in zip(c.runs, colours) if (v := _turns_values(s, col))]
    if not values:
        return None
    columns = {name: [v[name] for v in values] for name in TURN_COLUMNS}
    return _turns_of(columns, len(values), any(columns["unknown"]), uirevision=uirevision)


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
    side_by_side_html: str = ""  # its rows in the two tables (`side_by_side_row`, `turns_row`), set by `rows`
    turns_html: str = ""


def rate(value: float | None) -> str:
    """Score gained per USD, to three significant digits."""
    if value is None:
        return "—"
    return signed_number(value, 3)


def _delta_text(key: str, d) -> str:
    if isinstance(d, timedelta):
        return sign_of(d.total_seconds()) + duration(abs(d))
    if key == "turns":
        return f"{sign_of(d)}{abs(d):,}"
    if key == "tokens":
        return sign_of(d) + tokens(abs(d))
    if key == "usd":
        return sign_of(d) + usd_precise(abs(d))
    return sign_of(d) + plain_number(abs(d))


def _tone(key: str, d, maximize: bool) -> str:
    if key in ("final", "best"):
        better = d > 0 if maximize else d < 0
    elif key == "gain_per_usd":
        better = d > 0
    else:
        return ""
    return "" if d == 0 else "good" if better else "bad"


def deltas(
    s: RunSeries, base: RunSeries, maximize: bool, base_values: dict | None = None
) -> dict[str, Delta]:
    out = {}
    base_values = base_values or base.values()  # the same for every row: `rows` reads it once
    for key, d in s.deltas.items():
        if d is None:
            out[key] = Delta("—", "", "no value to compare")
            continue
        b = base_values[key]
        b_num = b.total_seconds() if isinstance(b, timedelta) else b
        d_num = d.total_seconds() if isinstance(d, timedelta) else d
        pct = f" ({signed_number(d_num / abs(b_num) * 100, 2, percent=True)})" if b_num else ""
        text = _delta_text(key, d)
        out[key] = Delta(text, _tone(key, d_num, maximize), f"{text}{pct} against {base.run.external_id}")
    return out


def rows(
    c: Comparison, colours: list[str], start: int = 0, stop: int | None = None, *, slots: bool = False
) -> list[Row]:
    """The table rows of the runs `start` to `stop` (all by default), with their deltas and HTML; with
    `slots`, the side-by-side HTML has a slot where each delta goes (`_slot`, filled by `_filled`) rather
    than the delta: what is kept of a row does not depend on the baseline's figures."""
    out = []
    base_values = c.runs[0].values() if c.runs else {}
    tz = zone_label()
    for i, (s, col) in enumerate(zip(c.runs[start:stop], colours[start:stop]), start):
        out.append(
            Row(
                s=s,
                colour=col,
                deltas=deltas(s, c.runs[0], c.maximize, base_values) if i else {},
                gain_per_usd=rate(s.gain_per_usd),
                usd_per_turn=usd_precise(s.usd_per_turn),
            )
        )
        out[-1].side_by_side_html = side_by_side_row(
            out[-1], first=i == 0, slug=c.project.slug, tz=tz, delta=_slot if slots else None
        )
        out[-1].turns_html = turns_row(out[-1])
    return out


def _slot(key: str) -> str:
    """Where a row's delta `key` goes in its kept HTML (no text of a row has NULs: ingest refuses them)."""
    return f"\x00{key}\x00"


def _filled(text: str, row_deltas: dict[str, Delta]) -> SafeString:
    """A kept row's HTML with each delta in its slot (none in the baseline's row)."""
    parts = text.split("\x00")
    for i in range(1, len(parts), 2):
        parts[i] = _delta(row_deltas.get(parts[i]))
    return mark_safe("".join(parts))  # noqa: S308 - both the text and the deltas are escaped HTML


class RowText(NamedTuple):
    """A run's rows of the two tables as written (`rows`), kept per run and version (`kept_rows`)."""

    side_by_side_html: SafeString
    turns_html: SafeString


def _row_keys(
    project, markers: list, colours: list[str], start: int = 0, stop: int | None = None
) -> list[str]:
    """The keys of the runs' kept rows (`kept_rows`), from their markers (`RunMarker`s or runs: pk,
    `updated`, the parent's `updated`): each under its change marker and what else its rows show: its
    colour, whether it is the baseline, its parent's marker, the project's slug and the viewer's clock."""
    common = (
        project.slug,
        zone_label(),
        timezone.get_current_timezone_name(),
        project.scenario.maximize,
        _code(),
    )
    keys = []
    for i, (m, col) in list(enumerate(zip(markers, colours)))[start:stop]:
        parent = m.parent_updated.timestamp() if m.parent_updated else None
        version = hashlib.blake2s(repr((col, i == 0, parent, *common)).encode(), digest_size=8).hexdigest()
        keys.append(cachekeys.compare_row(m.pk, m.updated.timestamp(), version))
    return keys


class _Marked(NamedTuple):
    """A compared run's markers as `_row_keys` reads them, from its row."""

    pk: int
    updated: object
    parent_updated: object


def kept_rows(c: Comparison, colours: list[str], start: int = 0, stop: int | None = None) -> list[RowText]:
    """`rows`' HTML, each run's kept (`_row_keys`) with slots for its deltas, which are filled for the
    baseline of the moment; written for the runs whose rows are not kept, which are then kept. One change
    to a run, the baseline too, writes that run's rows alone."""
    if not c.runs:
        return []
    marked = [
        _Marked(s.run.pk, s.run.updated, s.run.parent.updated if s.run.parent_id and s.run.parent else None)
        for s in c.runs
    ]
    keys = _row_keys(c.project, marked, colours, start, stop)
    kept = _kept(c, keys)
    out, made = [], {}
    base_values = c.runs[0].values()
    for (i, s), key in zip(list(enumerate(c.runs))[start:stop], keys):
        if not isinstance(text := kept.get(key), RowText):
            row = rows(c, colours, i, i + 1, slots=True)[0]
            made[key] = text = RowText(row.side_by_side_html, row.turns_html)
        row_deltas = deltas(s, c.runs[0], c.maximize, base_values) if i else {}
        out.append(RowText(_filled(text.side_by_side_html, row_deltas), text.turns_html))
    softcache.set_many(made, PARTS_CACHE_SECONDS)
    keep_here(c.project, made)
    return out


def _kept(c: Comparison, keys: list[str]) -> dict:
    """What the cache keeps of `keys`: fetched with the compared runs (`Comparison.kept`, in one round
    trip: `kept_keys`) where they were asked for then, the others now."""
    out = {k: c.kept[k] for k in keys if k in c.kept}
    out.update(softcache.get_many([k for k in keys if k not in c.asked]))
    return out


# --- the tables' rows, written here rather than in the template: 200 runs × two tables cost the template
# engine ~0.4 s; the same markup from format_html costs a tenth of that.

SWATCH = (
    '<svg class="swatch" width="10" height="10" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" '
    'height="10" rx="2.5" fill="{}"/></svg>'
)


def _when(value) -> str:
    """A time in the viewer's clock, as the template's date:'Y-m-d H:i:s'."""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


def _delta(d: Delta | None) -> str:
    if not d:
        return ""
    return f'<span class="delta {d.tone}" title="{escape(d.title)}">{escape(d.text)}</span>'


def _downgraded_badge(run) -> str:
    """The project table's "downgraded" badge, what was asked and what ran in its hover."""
    if not run.is_downgraded:
        return ""
    moves = [f"requested {run.requested_profile}, got {run.actual_profile}"] if _profile_changed(run) else []
    for a in run.downgraded_actors:
        who = " ".join(x for x in (a.get("role") or "actor", a.get("actor") or "") if x)
        moves.append(f"{who}: requested {a['requested']}, got {a['actual']}")
    title = escape("; ".join(moves))
    return f' <span class="badge badge-warn" data-downgraded title="{title}">downgraded</span>'


def _profile_changed(run) -> bool:
    return bool(run.requested_profile and run.actual_profile and run.requested_profile != run.actual_profile)


def _name(profile: str) -> str:
    """A profile name, escaped, that may wrap after its underscores (codex_gpt_5_4_mini_medium)."""
    return str(escape(profile)).replace("_", "_<wbr>")


def _model_cell(run) -> str:
    """The model profile the run ran on (requested → actual when it got another), then each downgraded
    role or actor, grouped: "2 × worker: A → B"."""
    if _profile_changed(run):
        head = (
            f'<span class="muted" title="requested">{_name(run.requested_profile)}</span> → '
            f'<b class="warn-text" title="what it ran on">{_name(run.actual_profile)}</b>'
        )
    elif run.actual_profile or run.requested_profile:
        head = f"<b>{_name(run.actual_profile or run.requested_profile)}</b>"
    else:
        head = '<span class="muted" title="the source names no model profile">—</span>'
    groups: dict[tuple[str, str, str], int] = {}
    for a in run.downgraded_actors:
        key = (a.get("role") or "actor", a["requested"], a["actual"])
        groups[key] = groups.get(key, 0) + 1
    lines = "".join(
        f'<span class="model-move" data-downgraded-actor>{f"{n} × " if n > 1 else ""}{escape(role)}: '
        f"{_name(requested)} → <b>{_name(actual)}</b></span>"
        for (role, requested, actual), n in groups.items()
    )
    return f'<span class="model-cell">{head}{lines}</span>'


def side_by_side_row(
    row: Row, *, first: bool, slug: str, tz: str, delta: Callable[[str], str] | None = None
) -> SafeString:
    """One run's row of the side-by-side table (its deltas to the baseline under each value, or what
    `delta` writes for each). Every text is escaped here (ids and names are the agents'; the zone label
    comes from a cookie)."""
    s, run = row.s, row.s.run
    d = row.deltas
    delta = delta or (lambda key: _delta(d.get(key)))
    rid, tz = escape(run.external_id), escape(tz)
    parent = ""
    if run.parent_id and run.parent:
        url = reverse("dashboard:run-detail", args=[slug, run.parent.external_id])
        parent = (
            f'\n<span class="muted small lineage" data-parent="{escape(run.parent.external_id)}">from '
            f'<a href="{escape(url)}">{escape(midtrunc(run.parent.name, 20))}</a></span>'
        )
    best_title = (
        f' title="reached {escape(duration(s.best_after))} after the start"'
        if s.best_after is not None
        else ""
    )
    gain_title = (
        f"{score(s.gain)} gained from the first score that counts {score(s.first_score)} to the best"
        if s.gain is not None
        else "no scores"
    )
    end = (
        f"finished {_when(run.finished_at)}"
        if run.finished_at
        else f"last progress {_when(run.last_progress_at)}"
    )
    actions = (
        f'<button class="btn small" form="compare-rows" name="drop" value="{rid}" '
        f'aria-label="Remove {rid} from the comparison" title="remove from the comparison">✕</button>'
    )
    if not first:
        actions = (
            f'<button class="btn small" form="compare-rows" name="baseline" value="{rid}" '
            f'aria-label="Make {rid} the baseline">Make baseline</button>\n{actions}'
        )
    start = _when(s.start)
    unknown = f", role unknown {escape(usd(run.unknown_cost_usd))}" if run.unknown_cost_usd else ""
    baseline_class = ' class="baseline"' if first else ""
    badge = '<span class="badge badge-base">baseline</span>' if first else ""
    return mark_safe(
        f'<tr data-run="{rid}"{baseline_class}>\n'
        f'<th scope="row"><span class="rid-cell">{SWATCH.format(escape(row.colour))}<a class="rid" '
        f'href="{escape(run.get_absolute_url())}" title="{rid}">{escape(midtrunc(run.external_id, 24))}</a>'
        f"{badge}</span>{parent}</th>\n"
        f'<td><span class="states">{state_badge(run)}{_downgraded_badge(run)}</span></td>\n'
        f"<td>{_model_cell(run)}</td>\n"
        f'<td class="num" data-final>{escape(score(run.latest_score))}{delta("final")}</td>\n'
        f'<td class="num" data-best><b{best_title}>{escape(score(run.best_score))}</b>'
        f"{delta('best')}</td>\n"
        f'<td class="num">{run.turn_count}{delta("turns")}</td>\n'
        f'<td class="num"><span title="{s.tokens} tokens: {run.tokens_in} in, {run.tokens_out} out">'
        f"{escape(tokens(s.tokens))}</span>{delta('tokens')}</td>\n"
        f'<td class="num"><span title="${run.cost_usd} — driver {escape(usd(run.driver_cost_usd))}, child '
        f'{escape(usd(run.child_cost_usd))}{unknown}">{escape(usd(run.cost_usd))}</span>{delta("usd")}</td>\n'
        f'<td class="num"><span title="{escape(gain_title)}">{escape(row.gain_per_usd)}</span>'
        f"{delta('gain_per_usd')}</td>\n"
        f'<td class="num"><span title="from {start} {tz} to {end} {tz}">{escape(duration(s.duration))}</span>'
        f"{delta('duration')}</td>\n"
        f'<td class="when" title="{start} {tz}">{ago(s.start)}</td>\n'
        f'<td class="row-actions">{actions}</td>\n</tr>'
    )


def turns_row(row: Row) -> SafeString:
    """One run's row of the turn statistics table."""
    s, run = row.s, row.s.run
    usd_title = f"${s.usd_per_turn:.6f}" if s.usd_per_turn is not None else ""
    unknown = (  # turns no source gave a side: counted apart, never folded into driver or child
        ' · <span class="kind role_unknown" title="turns whose role no source states">'
        f"{s.role_unknown_turns} role unknown</span>"
        if s.role_unknown_turns
        else ""
    )
    return mark_safe(
        f'<tr>\n<th scope="row"><span class="rid-cell">{SWATCH.format(escape(row.colour))}<span class="rid" '
        f'title="{escape(run.external_id)}">{escape(midtrunc(run.external_id, 24))}</span></span></th>\n'
        f'<td class="num">{run.turn_count}</td>\n'
        f'<td class="num">{s.driver_turns} · {s.child_turns}{unknown}</td>\n'
        f'<td class="num" title="{run.tokens_in}">{escape(tokens(run.tokens_in))}</td>\n'
        f'<td class="num" title="{run.tokens_out}">{escape(tokens(run.tokens_out))}</td>\n'
        f'<td class="num">{escape(tokens(s.tokens_per_turn))}</td>\n'
        f'<td class="num" title="{usd_title}">{escape(row.usd_per_turn)}</td>\n'
        f'<td class="num">{escape(usd(run.driver_cost_usd))}</td>\n'
        f'<td class="num">{escape(usd(run.child_cost_usd))}</td>\n'
        f'<td class="num">{s.tool_calls}</td>\n<td class="num">{escape(ms(s.mean_turn_ms))}</td>\n</tr>'
    )


class RunParts(NamedTuple):
    """One run's parts of the figures, encoded as the page writes them (`figure_text`), kept per run and
    version (`_parts`): a page after one run changed encodes that run's parts alone and joins the rest."""

    score: str  # its dots and its frontier, comma-joined; "" without a score
    hollow: str  # its scores that do not count; "" when all count
    score_points: int
    spend: str  # "" without a turn
    spend_points: int
    turns: tuple[str, ...]  # its `TURN_COLUMNS` values; () without a turn
    unknown: bool  # it has role-unknown USD to draw
    unit: tuple[float, str]  # the time unit its x values are in (not in its key: `_part_keys`)


def run_parts(s: RunSeries, col: str, unit: TimeUnit, metric: str) -> RunParts:
    pair, void = _score_traces(s, col, unit, metric)
    spend = _spend_trace(s, col, unit)
    values = _turns_values(s, col)
    return RunParts(
        figure_text(pair)[1:-1] if pair else "",
        figure_text(void) if void else "",
        sum(len(t["x"]) for t in [*pair, *([void] if void else [])]),
        figure_text(spend) if spend else "",
        len(spend["x"]) if spend else 0,
        tuple(figure_text(values[name]) for name in TURN_COLUMNS) if values else (),
        bool(values and values["unknown"]),
        (unit.seconds, unit.label),
    )


@functools.cache
def _code() -> str:
    """What the parts are written by, and what reads the series they show: kept parts of other code are
    other versions."""
    modules = [
        sys.modules[__name__],
        style,
        sys.modules[Comparison.__module__],
        sys.modules[add_turns.__module__],
    ]
    source = "".join(inspect.getsource(m) for m in modules) + inspect.getsource(figure_text)
    return hashlib.blake2s(source.encode(), digest_size=6).hexdigest()


def _part_keys(project, markers: list, colours: list[str], per_run: int) -> list[str]:
    """The keys of the runs' kept parts (`_parts`), from their markers (pk, `updated`): each under the
    run's change marker (`Run.updated`, which its series are kept under too) and what else they show (its
    colour, the metric, the direction, the resolution, the code). The time unit is kept in the parts (it
    depends on every run's end, which the page knows only once it has the runs)."""
    scenario = project.scenario
    common = (plotly_text(scenario.score_metric), scenario.maximize, per_run, _code())
    return [
        cachekeys.compare_parts(
            m.pk,
            m.updated.timestamp(),
            hashlib.blake2s(repr((col, *common)).encode(), digest_size=8).hexdigest(),
        )
        for m, col in zip(markers, colours)
    ]


def _parts(c: Comparison, colours: list[str], unit: TimeUnit, metric: str) -> list[RunParts]:
    """Each run's parts: kept (`_part_keys`) in the time unit of the moment, written for the runs whose
    parts are not kept so, which are then kept."""
    keys = _part_keys(c.project, [s.run for s in c.runs], colours, c.per_run)
    kept = _kept(c, keys)
    parts, made = [], {}
    for s, col, key in zip(c.runs, colours, keys):
        part = kept.get(key)
        if not isinstance(part, RunParts) or part.unit != (unit.seconds, unit.label):
            made[key] = part = run_parts(s, col, unit, metric)
        parts.append(part)
    softcache.set_many(made, PARTS_CACHE_SECONDS)
    keep_here(c.project, made)
    return parts


def kept_keys(project, markers: list, *, per_run: int, shown: int | None) -> list[str]:
    """What the page keeps per compared run (`RunMarker`s: its figure parts and its first `shown` rows),
    for the comparison to fetch with the runs in one round trip (`queries.compare.compare(also=…)`)."""
    colours = [colour(i) for i in range(len(markers))]
    return _part_keys(project, markers, colours, per_run) + _row_keys(project, markers, colours, 0, shown)


def _placeholder(name: str) -> str:
    """Where a column of the turn statistics goes in its encoded figure (no text of the figure has NULs)."""
    return f"\x00{name}\x00"


def _joined(items: list[str], layout: dict) -> FigureJSON:
    """A figure from its traces' texts (in order) and its layout, as `figure_text` encodes it whole."""
    return FigureJSON('{"data":[' + ",".join(items) + '],"layout":' + figure_text(layout) + "}")


def figures(c: Comparison, colours: list[str], unit: TimeUnit, *, uirevision: str) -> tuple[dict, dict]:
    """The three figures, encoded, assembled from the runs' kept parts (`_parts`); and the points each
    ships. What depends on every run is not in the parts: the unit (from each run's end), the colours (by
    position: in the version of a run's parts), the legend (by the number of runs), the role-unknown bars
    (shown when any run has some) and the turn figure's height."""
    metric = plotly_text(c.project.scenario.score_metric)
    parts = _parts(c, colours, unit, metric)
    out: dict[str, FigureJSON | None] = {"score_figure": None, "spend_figure": None, "turns_figure": None}
    points_ = dict.fromkeys(out, 0)
    if scored := [p for p in parts if p.score]:
        layout = _score_layout(c, unit, metric, uirevision=uirevision)
        out["score_figure"] = _joined(
            [p.score for p in scored] + [p.hollow for p in parts if p.hollow], layout
        )
        points_["score_figure"] = sum(p.score_points for p in parts)
    if spent := [p for p in parts if p.spend]:
        out["spend_figure"] = _joined([p.spend for p in spent], _spend_layout(c, unit, uirevision=uirevision))
        points_["spend_figure"] = sum(p.spend_points for p in spent)
    if turned := [p for p in parts if p.turns]:
        unknown = any(p.unknown for p in turned)
        columns = {name: _placeholder(name) for name in TURN_COLUMNS}
        text = figure_text(_turns_of(columns, len(turned), unknown, uirevision=uirevision))
        for i, name in enumerate(TURN_COLUMNS):
            text = text.replace(figure_text(columns[name]), "[" + ",".join(p.turns[i] for p in turned) + "]")
        out["turns_figure"] = FigureJSON(text)
        points_["turns_figure"] = len(turned) * (5 if unknown else 4)
    return out, points_


def uirevision(c: Comparison) -> str:
    """Zoom survives re-renders of the same selection (a reload, a later poll), not a new one."""
    ids = "\n".join(s.run.external_id for s in c.runs)
    return "compare:" + hashlib.blake2b(ids.encode(), digest_size=8).hexdigest()


def build(c: Comparison, *, shown: int | None = None) -> dict:
    """Everything the template needs about a comparison of two or more runs: the figures, encoded, and
    the tables' first `shown` rows (all by default; `later_rows` writes the others when they are asked
    for)."""
    colours = [colour(i) for i in range(len(c.runs))]
    unit = time_unit(c)
    encoded, points_ = figures(c, colours, unit, uirevision=uirevision(c))
    return {
        **encoded,
        "rows_shown": kept_rows(c, colours, 0, shown),
        "rows_later": max(len(c.runs) - shown, 0) if shown is not None else 0,
        "unit": unit,
        "points": points_,
    }


def later_rows(c: Comparison, after: int) -> tuple[str, str]:
    """The two tables' rows after the first `after` (side by side, turn statistics), as HTML: what a
    page that shows the first rows loads once its table is scrolled to."""
    later = kept_rows(c, [colour(i) for i in range(len(c.runs))], after)
    return "\n".join(r.side_by_side_html for r in later), "\n".join(r.turns_html for r in later)
