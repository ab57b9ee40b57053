"""A run's log, read side: one page of lines by `seq`, shared by the API (`GET …/runs/{run}/logs`) and
the run page's Logs card. Whatever the length of the log: one query for the page (one line more than
asked, to know whether more lie beyond it) and, per cursor given, one to know whether any matching line
lies on the other side of it (so the tail is one query, paging two, a window between two cursors three)."""

from __future__ import annotations

from dataclasses import dataclass

from smrweb.tracking.models import LogLevel, Run, RunLogLine

LOG_PAGE_DEFAULT = 200
LOG_PAGE_MAX = 1000
LOG_SEARCH_MAX = 200  # characters of a `q` search


@dataclass(frozen=True)
class LogPage:
    """Lines oldest first. Without a cursor it is the tail (the newest `limit` lines that match);
    `has_older`/`has_newer` say whether matching lines lie before the first / after the last of them."""

    lines: list[RunLogLine]
    has_older: bool
    has_newer: bool
    limit: int
    min_level: int | None = None
    search: str = ""

    @property
    def first_seq(self) -> int | None:
        """The cursor for the page before this one (`before=`)."""
        return self.lines[0].seq if self.lines else None

    @property
    def last_seq(self) -> int | None:
        """The cursor for the page after this one (`after=`); also what a live tail polls from."""
        return self.lines[-1].seq if self.lines else None


def log_page(
    run: Run,
    *,
    after: int | None = None,
    before: int | None = None,
    min_level: int | None = None,
    search: str | None = None,
    limit: int = LOG_PAGE_DEFAULT,
) -> LogPage:
    """One page of the run's lines that are `min_level` or worse and contain `search` (any case).

    `after=N`: the first `limit` lines with seq > N (reading forward, a live tail polls this way).
    `before=N`: the last `limit` lines with seq < N (scrolling back).
    Both: the lines strictly between them, from `after` on. Neither: the newest `limit` lines.
    `limit` is clamped to 1..LOG_PAGE_MAX; the caller validates `min_level` (`LogLevel.parse`)."""
    limit = max(1, min(int(limit), LOG_PAGE_MAX))
    search = (search or "").strip()[:LOG_SEARCH_MAX]
    matching = RunLogLine.objects.filter(run=run)
    if min_level is not None and min_level > LogLevel.DEBUG:
        matching = matching.filter(level__gte=min_level)
    if search:
        matching = matching.filter(text__icontains=search)
    window = matching
    if after is not None:
        window = window.filter(seq__gt=after)
    if before is not None:
        window = window.filter(seq__lt=before)

    if after is not None:  # forward from the cursor
        rows = list(window.order_by("seq")[: limit + 1])
        more_beyond = len(rows) > limit
        lines = rows[:limit]
        has_newer = more_beyond or (before is not None and matching.filter(seq__gte=before).exists())
        has_older = matching.filter(seq__lte=after).exists()
    else:  # backward from `before`, or from the end (the tail)
        rows = list(window.order_by("-seq")[: limit + 1])
        has_older = len(rows) > limit
        lines = rows[:limit][::-1]
        has_newer = before is not None and matching.filter(seq__gte=before).exists()
    return LogPage(
        lines=lines,
        has_older=has_older,
        has_newer=has_newer,
        limit=limit,
        min_level=min_level,
        search=search,
    )
