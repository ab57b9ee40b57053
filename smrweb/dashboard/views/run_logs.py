"""The run page's Logs card: one page of the run's log lines (`queries.logs.log_page`), chosen by the page's
query (`logs_level`, `logs_q`, `logs_before`, `logs_after`) so a link shows the same view. A render reads
that one bounded page and nothing else: the totals it shows are the run's counters, kept by the write path,
never a COUNT over the lines. Without a cursor it shows the tail, which follows a live run on the page's
poll (the card's version moves with `Run.log_lines`)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.http import QueryDict
from django.utils import timezone

from smrweb.tracking.models import LogLevel, Run, RunLogLine
from smrweb.tracking.queries.logs import LOG_SEARCH_MAX, LogPage, log_page

CARD = "run-logs"
PARAMS = ("logs_level", "logs_q", "logs_before", "logs_after")
LINES_PER_PAGE = 200
# The level filter's choices: the value in the query, what the menu says, the lowest level shown.
LEVELS = (
    ("", "all levels", None),
    ("info", "info and worse", LogLevel.INFO),
    ("warning", "warnings and worse", LogLevel.WARNING),
    ("error", "errors and worse", LogLevel.ERROR),
)
MIN_LEVEL = {value: level for value, _, level in LEVELS}
STANDARD_LEVELS = sorted(((int(value), label) for value, label in LogLevel.choices), reverse=True)
SEQ_MAX = 2**63 - 1  # seq is a PositiveBigIntegerField: a cursor beyond it names no line


def level_name(levelno: int) -> str:
    """A line's level as its badge says it: the standard level at or below it (a custom levelno 25 is
    "info"; anything under debug is "debug")."""
    return next((label for value, label in STANDARD_LEVELS if levelno >= value), "debug")


def prepare(lines: list[RunLogLine]) -> list[RunLogLine]:
    """What a line's row shows, worked out once here rather than by template filters (a cold page of 200
    rows spent most of its time in four date formats and a number format per row): the time in the
    viewer's clock (the zone the request activated), the full stamp, the level's name."""
    for line in lines:
        local = timezone.localtime(line.ts)
        line.level_name = level_name(line.level)
        line.clock = local.strftime("%H:%M:%S")
        line.stamp = local.strftime("%Y-%m-%d %H:%M:%S.") + f"{local.microsecond // 1000:03d}"
        line.iso = local.isoformat()
        line.n = str(line.seq)
    return lines


def _cursor(raw: str | None) -> int | None:
    """A seq cursor from the query; anything that is not one (it is user input) means none."""
    if not raw or not raw.isdigit() or len(raw) > 19:
        return None
    value = int(raw)
    return value if value <= SEQ_MAX else None


@dataclass(frozen=True)
class LogView:
    """What the viewer asked to see: a level filter, a search, and a cursor (none: the tail)."""

    level: str = ""
    search: str = ""
    before: int | None = None
    after: int | None = None

    @classmethod
    def from_query(cls, query: QueryDict) -> LogView:
        level = query.get("logs_level", "")
        after = _cursor(query.get("logs_after"))
        return cls(
            level=level if level in MIN_LEVEL else "",
            search=query.get("logs_q", "").strip()[:LOG_SEARCH_MAX],
            # Both cursors at once are not something the card links to: the newer page wins.
            before=None if after is not None else _cursor(query.get("logs_before")),
            after=after,
        )

    @property
    def at_tail(self) -> bool:
        return self.before is None and self.after is None

    @property
    def filtered(self) -> bool:
        return bool(self.level or self.search)

    def params(self, **cursor: int) -> dict[str, str]:
        """This view's filter with a cursor of `cursor` (none: the tail), as query parameters."""
        out = {"logs_level": self.level, "logs_q": self.search}
        out.update({f"logs_{k}": str(v) for k, v in cursor.items()})
        return {k: v for k, v in out.items() if v}


def page_of(run: Run, view: LogView) -> LogPage | None:
    """The lines the card shows; None for a run that has kept no lines (no query at all)."""
    if not run.log_lines:
        return None
    return log_page(
        run,
        after=view.after,
        before=view.before,
        min_level=MIN_LEVEL[view.level],
        search=view.search,
        limit=LINES_PER_PAGE,
    )


def context(run: Run, view: LogView, other_query: QueryDict) -> dict:
    """The card's context. `other_query`: the page's query without the card's own parameters (the other
    lists' pages), which the card's links and form carry along."""
    page = page_of(run, view)
    base = other_query.urlencode()

    def link(view: LogView = view, **cursor: int) -> str:
        query = "&".join(q for q in (base, urlencode(view.params(**cursor))) if q)
        return f"?{query}" if query else "?"

    links = {"clear": link(LogView())}
    if page is not None and page.lines:
        if page.has_older:
            links["older"] = link(before=page.first_seq)
        if page.has_newer:
            links["newer"] = link(after=page.last_seq)
    if not view.at_tail:
        links["newest"] = link()
    return {
        "logs": page,
        "logs_view": view,
        "logs_levels": LEVELS[1:],
        "logs_links": links,
        "logs_streams": page is not None and any(line.stream for line in page.lines),  # a column for them
        "logs_keep": [(k, v) for k, values in other_query.lists() for v in values],
    }


def version_parts(run: Run, view: LogView) -> tuple:
    """What the card shows, as the inputs of its version: the run's counters (a new line moves them, so
    the tail follows it; a page further back shows the same lines, and its counts and links move) and the
    view. Lines are never edited once kept, so their seq range is all a page's rows depend on."""
    return (run.log_lines, run.log_warnings, run.log_lines_dropped, run.is_terminal, view)  # "following"
