"""Template helpers: server-rendered SVG sparklines and score charts, state badges, the budget bar,
money, token, id and time formatting. Presentation only: no queries, no business rules."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from decimal import Decimal

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from smrweb.core import markdown, numbers
from smrweb.core.numbers import MISSING, plain_number
from smrweb.tracking.services import capabilities
from smrweb.tracking.services.capabilities import Action

register = template.Library()


def _best_index(values: list[float], maximize: bool) -> int:
    n = len(values)
    return max(range(n), key=lambda i: values[i]) if maximize else min(range(n), key=lambda i: values[i])


def _fmt(value: float) -> str:
    return plain_number(value)


def _points(values) -> list[tuple[float, str]]:
    """(score, why it does not count) from ScorePoints, or from bare numbers (which count)."""
    out = []
    for v in values or []:
        score, why = (v[0], v[1]) if isinstance(v, tuple) else (v, "")
        if score is not None:
            out.append((float(score), why))
    return out


@register.simple_tag
def card_version_marker(name: str, version: str) -> str:
    """A live card's version marker (the `data-card`/`data-version` the page script sends with its poll), a
    part of its own (`NAME--v`): written in each card's render and, alone, in a poll's answer for a card
    whose parts changed (no template render: a turn's answer carries six)."""
    return format_html(
        '<!--p:{0}--v--><i hidden id="{0}--v" data-card="{0}" data-version="{1}"></i><!--/p-->', name, version
    )


@register.simple_tag
def sparkline(values, *, width: int = 120, height: int = 28, maximize: bool = True, what: str = "scores"):
    """An inline SVG of `values` (ScorePoints, or numbers) with the best point marked; a dash when there
    are none. The line joins the scores that count; one that does not (its `why`) is a hollow dot off
    the line, and the best is the best of those that count. `what` names the window in the title ("the
    last 60 scores of every run"), which says that its best is the window's, not the headline's."""
    points = _points(values)
    if not points:
        return mark_safe('<span class="spark-empty" title="no scores yet">—</span>')
    pad = 3
    all_values = [v for v, _ in points]
    lo, hi = min(all_values), max(all_values)
    span = (hi - lo) or 1.0
    n = len(points)

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)
        y = height - pad - (height - 2 * pad) * ((v - lo) / span if hi != lo else 0.5)
        return round(x, 1), round(y, 1)

    coords = [xy(i, v) for i, (v, _) in enumerate(points)]
    counted = [i for i, (_, why) in enumerate(points) if not why]
    void = [i for i, (_, why) in enumerate(points) if why]
    title = f"{what}: {n}"
    parts = []
    if counted:
        line = " ".join(f"{coords[i][0]},{coords[i][1]}" for i in counted)
        # The area under the line, closed along the bottom edge: a faint fill that reads as a trend.
        first, last = coords[counted[0]], coords[counted[-1]]
        area = f"{first[0]},{height - pad} {line} {last[0]},{height - pad}"
        best_i = counted[_best_index([points[i][0] for i in counted], maximize)]
        title += f" · latest counted {_fmt(points[counted[-1]][0])} · best of these {_fmt(points[best_i][0])}"
        parts.append(
            format_html(
                '<polygon class="spark-area" points="{}"/>'
                '<polyline points="{}" fill="none" stroke="currentColor" stroke-width="1.5" '
                'stroke-linejoin="round" stroke-linecap="round"/>'
                '<circle class="spark-last" cx="{}" cy="{}" r="2"/>',
                area,
                line,
                *last,
            )
        )
    if void:
        reasons = sorted({points[i][1] for i in void})
        title += f" · {len(void)} not counted ({', '.join(reasons)})"
        parts += [
            format_html(
                '<circle class="spark-void" cx="{}" cy="{}" r="2.25" data-why="{}"/>',
                *coords[i],
                points[i][1],
            )
            for i in void
        ]
    if counted:
        parts.append(format_html('<circle class="spark-best" cx="{}" cy="{}" r="2.75"/>', *coords[best_i]))
    return format_html(
        '<svg class="spark" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        "<title>{}</title>{}</svg>",
        width,
        height,
        width,
        height,
        title,
        title,
        mark_safe("".join(parts)),  # noqa: S308 - each part built by format_html above
    )


@register.simple_tag
def newer_not_counted(history):
    """Beside a Latest that reads the counted rule: the scores newer than it that do not count ("+1
    invalid"), the newest with its value and why in the title; nothing when the newest counts. Latest
    itself stays the latest that counts, so it never reads better than Best beside it."""
    points = _points(history)
    newer = []
    for score_value, why in reversed(points):
        if not why:
            break
        newer.append((score_value, why))
    if not newer:
        return ""
    reasons = sorted({why for _, why in newer})
    label = f"+{len(newer)} {reasons[0]}" if len(reasons) == 1 else f"+{len(newer)} not counted"
    listed = "; ".join(f"{_fmt(v)} {why}" for v, why in newer[:5]) + ("; …" if len(newer) > 5 else "")
    return format_html(
        '<span class="not-counted" data-newer-not-counted="{}" title="Newer, not counted: {}. Latest and '
        'best count only scores that are not invalid, rejected or excluded.">{}</span>',
        len(newer),
        listed,
        label,
    )


@register.inclusion_tag("dashboard/partials/card_head.html")
def card_head(title: str, note: str = ""):
    """A card's head: its title, and a muted note when there is one (the same markup on every card)."""
    return {"title": title, "note": note}


@register.simple_tag
def state_badge(run):
    """The run's state as a coloured badge; failure detail and stall evidence in the hover text."""
    if run.is_stalled:
        since = timezone.now() - run.last_progress_at
        # The hover's duration is kept current by the page script (data-since-title's {} filled in).
        return format_html(
            '<span class="badge badge-{}">{}</span> <span class="badge badge-stalled" '
            'title="No progress for {} (last activity {} UTC)" data-since-at="{}" '
            'data-since-title="No progress for {{}} (last activity {} UTC)">stalled</span>',
            run.state,
            run.state,
            duration(since),
            run.last_progress_at.strftime("%Y-%m-%d %H:%M:%S"),
            run.last_progress_at.isoformat(timespec="seconds"),
            run.last_progress_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    if run.state == "failed":
        reason = " · ".join(x for x in (run.failure_family, run.failure_detail) if x) or "no reason given"
        return format_html('<span class="badge badge-failed" title="{}">failed</span>', reason)
    if run.state == "abandoned":
        who = f"Closed by {run.failure_source}" if run.failure_source else "Abandoned"
        reason = f"{who}: {run.failure_detail}" if run.failure_detail else who
        return format_html('<span class="badge badge-abandoned" title="{}">abandoned</span>', reason)
    return format_html('<span class="badge badge-{}">{}</span>', run.state, run.state)


@register.simple_tag
def budget_meter(run):
    """A small inline meter of budget use for tables; a dash when the run has no budget."""
    fraction = run.budget_used_fraction
    if fraction is None:
        return mark_safe('<span class="muted" title="no budget set">—</span>')
    level = "over" if fraction >= 1 else "high" if fraction >= 0.8 else ""
    return format_html(
        '<span class="meter {}" title="{} of the budget used"><span style="width:{}%"></span></span>'
        '<span class="meter-pct">{}</span>',
        level,
        percent(fraction),
        round(min(fraction, 1) * 100, 1),
        percent(fraction),
    )


TURN_KIND_LABELS = {
    "driver_inference": ("driver inference", "driver"),
    "child_work": ("child work", "child"),
    "role_unknown": ("role unknown", "role unknown"),  # no source states the actor's role
}


@register.filter
def kind_label(kind: str, short: str = "") -> str:
    """A turn kind as pages name it ("driver inference"; `|kind_label:"short"`: "driver")."""
    long_name, short_name = TURN_KIND_LABELS.get(str(kind), (str(kind), str(kind)))
    return short_name if short else long_name


@register.simple_tag
def budget_bar(run, unit: str = "usd"):
    """Spend as a bar split into driver inference, child work and role unknown (turns of actors whose
    role no source states), against the budget when set: USD against `budget_usd`, or tokens (in + out)
    against `budget_tokens`. What the source reports beyond the turns (other meters, spend no turn
    accounts for) is a grey part: the bar is the whole."""
    if unit == "tokens":
        driver = Decimal(run.driver_tokens_in + run.driver_tokens_out)
        child = Decimal(run.child_tokens_in + run.child_tokens_out)
        unknown = Decimal(run.unknown_tokens_in + run.unknown_tokens_out)
        whole = Decimal(sum(run.reported_tokens))
        budget = Decimal(run.budget_tokens) if run.budget_tokens else None
        fmt = tokens
    else:
        driver, child = Decimal(run.driver_cost_usd), Decimal(run.child_cost_usd)
        unknown = Decimal(run.unknown_cost_usd)
        whole = Decimal(run.spend_usd)
        budget = Decimal(run.budget_usd) if run.budget_usd else None
        fmt = usd
    rest = max(Decimal(0), whole - driver - child - unknown)
    total = driver + child + unknown + rest
    scale = max(budget or Decimal(0), total) or Decimal(1)
    d_pct, c_pct, u_pct, r_pct = (float(x / scale * 100) for x in (driver, child, unknown, rest))
    over = budget is not None and total > budget
    return format_html(
        '<div class="budget{}" role="img" aria-label="{}: driver {} and child {}{}{}{}">'
        '<div class="budget-part driver" style="width:{}%"></div>'
        '<div class="budget-part child" style="width:{}%"></div>{}{}{}</div>',
        " over" if over else "",
        "tokens" if unit == "tokens" else "USD",
        fmt(driver),
        fmt(child),
        format_html(", {} of unknown role", fmt(unknown)) if unknown else "",
        format_html(", {} not in turns", fmt(rest)) if rest else "",
        format_html(" of {}", fmt(budget)) if budget else "",
        round(d_pct, 2),
        round(c_pct, 2),
        format_html(
            '<div class="budget-part unknown" style="width:{}%" title="{} in turns of actors whose role '
            'the source states nowhere (role unknown)"></div>',
            round(u_pct, 2),
            fmt(unknown),
        )
        if unknown
        else "",
        format_html(
            '<div class="budget-part rest" style="width:{}%" title="{} billed by the source beyond the '
            'turns (other meters, spend no turn accounts for)"></div>',
            round(r_pct, 2),
            fmt(rest),
        )
        if rest
        else "",
        format_html(
            '<div class="budget-limit" style="left:{}%" title="budget {}"></div>',
            round(float(budget / scale * 100), 2),
            fmt(budget),
        )
        if over
        else "",
    )


@register.filter
def usd(value) -> str:
    return numbers.usd(value)


@register.filter
def sub(value, other):
    """value − other, for amounts (Decimals stay exact)."""
    return Decimal(value) - Decimal(other)


@register.filter
def actor_name(actor: str, run) -> str:
    """An actor as people tell them apart: "worker 1a2b3c4d" for a source's bare id whose role is known,
    "role unknown 1a2b3c4d" for one the source bills but states no role of, else the id itself,
    shortened in the middle."""
    role = (getattr(run, "actor_roles", None) or {}).get(actor) if actor else None
    if role and role.lower() not in actor.lower():
        return f"{role} {actor[:8]}"
    if actor and actor in ((getattr(run, "source_spend", None) or {}).get("roles_unknown") or ()):
        return f"role unknown {actor[:8]}"
    return midtrunc(actor or "", 20)


@register.filter
def absval(value):
    """|x| of a number (rank moves: "▲ 2 places up"); None stays None."""
    return abs(value) if value is not None else None


@register.filter
def usd_abs(value) -> str:
    return MISSING if value is None else numbers.usd(abs(Decimal(value)))


@register.filter
def usd_signed(value) -> str:
    """+$1.20 / −$0.30: a difference, with its sign."""
    return numbers.difference(value, numbers.usd, Decimal)


@register.filter
def tokens_abs(value) -> str:
    return MISSING if value is None else numbers.tokens(abs(int(value)))


@register.filter
def tokens_signed(value) -> str:
    return numbers.difference(value, numbers.tokens, int)


@register.filter
def score(value) -> str:
    return "—" if value is None else _fmt(value)


@register.filter
def cell(value, column) -> str:
    """A chosen column's cell of the runs table, written as its column says (queries/views.Column.format)."""
    if value is None:
        return "—"
    kind = column.format
    if kind == "usd":
        return numbers.usd(value)
    if kind == "tokens":
        return numbers.tokens(value)
    if kind == "number":
        return _fmt(value)
    return str(value)


@register.filter
def change(value) -> str:
    """An absolute change of weights: three significant digits ("0.25", "0.000171", "1.2e-07")."""
    return "—" if value is None else f"{value:.3g}"


@register.filter
def tokens(value) -> str:
    return numbers.tokens(value)


@register.filter
def duration(value: timedelta | None) -> str:
    return numbers.duration(value)


@register.filter
def ms(value) -> str:
    """A duration in milliseconds: 850 ms, 12.3 s, 4m 10s."""
    if value is None:
        return "—"
    value = int(value)
    if value < 1000:
        return f"{value} ms"
    if value < 60_000:
        return f"{value / 1000:.1f} s"
    return duration(timedelta(milliseconds=value))


def _ticking(value: datetime, text: str, style: str, kind: str = "ago") -> str:
    """A clock text the page script keeps current (static/js/smrweb.js `tickTimes`), so no version of a
    card needs a clock: <time datetime=… data-ago|since|until=…>."""
    return format_html(
        '<time datetime="{}" data-{}="{}">{}</time>',
        value.astimezone(timezone.get_current_timezone()).isoformat(timespec="seconds"),
        kind,
        style,
        text,
    )


@register.filter
def ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    return _ticking(value, duration(timezone.now() - value) + " ago", "long")


@register.filter
def percent(value) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


@register.filter
def percent_small(value) -> str:
    """A share that may be small: "31%", "0.8%", "<0.1%"."""
    if value is None:
        return "—"
    if value >= 0.1:
        return f"{value * 100:.0f}%"
    return f"{value * 100:.1f}%" if value >= 0.001 else "<0.1%"


@register.filter
def midtrunc(value, length: int = 24) -> str:
    """Shorten a long id in the middle, keeping its head and its distinguishing tail: run-2026-…89ab."""
    value = str(value or "")
    length = int(length)
    if len(value) <= length:
        return value
    head = (length - 1) * 3 // 5
    tail = length - 1 - head
    return f"{value[:head]}…{value[-tail:]}"


@register.filter
def basename(value) -> str:
    return str(value or "").rstrip("/").rsplit("/", 1)[-1]


@register.filter
def tool_names(calls) -> str:
    """The names of a turn's tool calls (strings, or objects with a name), for hover text."""
    names = []
    for call in calls or []:
        if isinstance(call, dict):
            names.append(str(call.get("name") or call.get("tool") or call.get("type") or "call"))
        else:
            names.append(str(call))
    return ", ".join(names)


@register.filter
def until(value: datetime | None) -> str:
    """'in 8s' for a future time, 'now' for a past one."""
    if value is None:
        return "—"
    delta = value - timezone.now()
    return _ticking(value, "now" if delta.total_seconds() <= 0 else "in " + duration(delta), "long", "until")


@register.filter
def since(value: datetime | None) -> str:
    """How long it has been since `value`, without "ago" (stalled for 3h 5m), kept current by the page."""
    if value is None:
        return "—"
    return _ticking(value, duration(timezone.now() - value), "long", "since")


@register.filter
def ago_short(value: datetime | None) -> str:
    """The largest unit only, for tight spots: 40s ago, 12m ago, 3h ago, 2d ago."""
    if value is None:
        return "never"
    return _ticking(value, duration(timezone.now() - value).split(" ")[0] + " ago", "short")


@register.filter
def signed(value) -> str:
    """A rate or delta with its sign and four significant digits: +0.0123, −4.5, 0."""
    return numbers.signed(value)


@register.filter
def tool_calls_view(calls) -> list[dict]:
    """A turn's tool calls as (name, arguments as indented JSON) for the turn panel."""
    import json

    out = []
    for call in calls or []:
        if isinstance(call, dict):
            name = str(call.get("name") or call.get("tool") or call.get("type") or "call")
            rest = {k: v for k, v in call.items() if k not in ("name", "tool")}
            args = json.dumps(rest, indent=2, ensure_ascii=False, sort_keys=True) if rest else ""
        else:
            name, args = str(call), ""
        out.append({"name": name, "args": args[:4000] + ("\n…" if len(args) > 4000 else "")})
    return out


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.simple_tag
def source_dot(project):
    """A coloured dot for how polling a project's source goes (pushed projects have nothing to poll)."""
    health = getattr(project, "source_health", None)
    name = project.get_source_display()
    if project.source == "push":
        level, text = "push", "REST push: nothing to poll"
    elif health is None or (health.last_success_at is None and not health.consecutive_failures):
        level, text = "", f"{name}: not synced yet"
    elif health.consecutive_failures:
        level = "bad"
        text = (
            f"{name}: {health.consecutive_failures} failure(s) in a row — "
            f"{health.last_error_kind}: {health.last_error[:200]}"
        )
    else:
        level, text = "good", f"{name}: last sync {ago(health.last_success_at)}"
    return format_html(
        '<span class="source-dot {}" role="img" aria-label="{}" title="{}"></span>', level, text, text
    )


def script_safe(text: str) -> str:
    """JSON text made safe inside a <script> element (as `json_script` escapes it). str.replace, not
    str.translate: a 100 KB figure in 0.1 ms rather than 5."""
    return text.replace("<", "\\u003C").replace(">", "\\u003E").replace("&", "\\u0026")


class FigureJSON(str):
    """A figure already encoded as `figure_json` encodes one (`figure_text`), e.g. assembled from the kept
    texts of its parts: the filter writes it as it is."""


def figure_text(value) -> str:
    """A figure (or any part of one) as `figure_json` writes it. Encoding is compositional: the parts of a
    figure encoded apart and joined with the JSON around them are the figure encoded whole."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    try:  # most figures have nothing to make drawable: encoding them is the check (a cold page saved ~4 ms)
        data = json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"), allow_nan=False)
        if _BEYOND_LIMIT.search(data):
            raise ValueError("a magnitude beyond CHART_LIMIT")
    except ValueError:  # NaN or ±inf (refused by allow_nan=False), or a float too large to draw
        data = json.dumps(_drawable(value), cls=DjangoJSONEncoder, separators=(",", ":"), allow_nan=False)
    return script_safe(data)


@register.filter
def figure_json(value, element_id: str):
    """Like Django's `json_script`, without the spaces after separators: figures are mostly numbers,
    and the spaces were a sixth of their bytes."""
    data = value if isinstance(value, FigureJSON) else figure_text(value)
    return format_html("<script{}>{}</script>", figure_script_attrs(element_id), mark_safe(data))


def figure_script_attrs(element_id: str) -> str:
    """The attributes of a figure's script element (a live figure's patch goes in one like it)."""
    return format_html(' id="{}" type="application/json"', element_id)


CHART_LIMIT = 1e300  # plotly's axis arithmetic (max - min) overflows near the float limit and draws nothing
_BEYOND_LIMIT = re.compile(r"e\+30\d")  # how json writes a float of magnitude 1e300 or more


def _drawable(value):
    """The figure with every float a browser can parse and plot: NaN and ±inf become null (JSON has no
    such numbers, and one made JSON.parse fail for the whole page: red-team finding 7), and magnitudes
    beyond CHART_LIMIT are drawn at the limit."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return value if -CHART_LIMIT <= value <= CHART_LIMIT else math.copysign(CHART_LIMIT, value)
    if isinstance(value, dict):
        return {key: _drawable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_drawable(item) for item in value]
    return value


@register.filter
def clean_html(value) -> str:
    """HTML rendered from what people wrote (`core.markdown.render`: notes, comments), sanitized once more
    and marked safe: the one way a template shows HTML that people wrote."""
    return mark_safe(markdown.clean(str(value or "")))


@register.filter
def http_url(value) -> str:
    """`value` when it is an absolute http(s) URL, else "": for every supplied URL that becomes an href
    (a `javascript:` or `data:` link would run or render in the dashboard's origin when clicked)."""
    from urllib.parse import urlsplit

    text = str(value or "").strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or any(ord(ch) < 32 for ch in text):
        return ""
    return text


def overrun_text(overrun: dict) -> str:
    """One exceeded budget in words: "131 % of the $5.00 budget ($6.55)", "1.6M / 1.5M tokens (105 %)"."""
    pct = f"{overrun['fraction'] * 100:.0f} %"
    if overrun["budget"] == "usd":
        return f"{pct} of the {usd(overrun['limit'])} budget ({usd(overrun['spent'])} spent)"
    return f"{tokens(overrun['spent'])} / {tokens(overrun['limit'])} tokens ({pct})"


@register.filter
def overrun(value: dict) -> str:
    return overrun_text(value)


@register.simple_tag
def over_budget_badge(run):
    """An `over budget` badge naming which budget and by how much; nothing when the run is within budget."""
    overruns = run.budget_overruns
    if not overruns:
        return ""
    return format_html(
        '<span class="badge badge-over-budget" data-badge="over-budget" data-over="{}" title="Over budget: '
        '{}">'
        "over budget</span>",
        " ".join(o["budget"] for o in overruns),
        "; ".join(overrun_text(o) for o in overruns),
    )


def results_incomplete_text(missing: int | None, at_least: int | None = None) -> str:
    """What a best read from only part of its results says (one wording for run, project, leaderboard)."""
    if at_least:
        return f"incomplete: at least {at_least:,} results not readable from the source"
    if missing is None:
        return "incomplete: results not readable from the source (it does not say how many)"
    return f"incomplete: {missing:,} result{'' if missing == 1 else 's'} not readable from the source"


@register.simple_tag
def results_incomplete(run_or_gap, compact: bool = False):
    """The "incomplete" mark beside a best that was read from only part of the results the source holds
    (a Run, or a project's `ResultsGap`); nothing when every result was read. `compact` (a table cell):
    "incomplete" and the count, the whole sentence on hover."""
    if getattr(run_or_gap, "results_complete", True):
        return ""
    missing = run_or_gap.results_missing
    text = results_incomplete_text(missing, getattr(run_or_gap, "at_least", None))
    return format_html(
        '<span class="results-incomplete{}" data-results-incomplete="{}" title="{}: the source holds results '
        'that could not be read, so the best shown is the best of those read">{}</span>',
        " compact" if compact else "",
        "" if missing is None else missing,
        text[:1].upper() + text[1:],
        (f"incomplete ({missing:,})" if missing is not None else "incomplete") if compact else text,
    )


SORT_ARROWS = {"asc": "▲", "desc": "▼"}


@register.simple_tag
def column_header(sorts: dict, column):
    """A chosen column's header (queries/views.Column): sorts like the others, its source in the title."""
    css = "col-chosen" if column.format == "text" else "num col-chosen"
    return sort_header(sorts, f"col:{column.spec}", column.label, css)


@register.simple_tag
def sort_header(sorts: dict, key: str, label: str, css: str = ""):
    """A runs-table header that sorts by its column on the server: a link (htmx swaps the table, the URL
    keeps the sort), an arrow on the sorted column for its direction, and aria-sort for screen readers.
    The other sortable headers are dotted-underlined links (no arrow: seven arrows widen the table)."""
    link = sorts[key]
    direction = link["direction"]
    aria = {"asc": "ascending", "desc": "descending"}.get(direction, "none")
    return format_html(
        '<th class="{} sortable{}" aria-sort="{}" data-sort-key="{}"><a href="{}" hx-get="{}" '
        'hx-target="#project-live" '
        'hx-swap="outerHTML" hx-push-url="true" hx-sync="#runs-filter:replace" title="Sort by {}, '
        '{}">{}{}</a></th>',
        css,
        " sorted" if direction else "",
        aria,
        key,
        link["url"],
        link["url"],
        label.lower(),
        link["next"],
        label,
        format_html('<span class="sort-arrow" aria-hidden="true">{}</span>', SORT_ARROWS[direction])
        if direction
        else "",
    )


@register.filter
def rollback_effect(project) -> str:
    """What a rollback does in this project (the confirmation names it): one text per source."""
    return capabilities.effect(project.source, Action.ROLL_BACK)
