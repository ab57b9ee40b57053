"""A line diff of two texts, as the unified text the API returns and as rows a page lays out side by
side or unified. One `SequenceMatcher` pass feeds both, so the counts, the text and the rows agree.

Rows carry each side's line as HTML: the caller passes lines it highlighted (`core.preview`), or the
plain lines are escaped here.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

CONTEXT = 3
MAX_LINES = 30_000  # per side: past it a diff is refused as too large (the matcher is quadratic at worst)
# The matcher's work is about the pairs of equal lines it may align; lines it treats as junk (autojunk:
# more than 1% of a long side) do not count. Two 30,000-line files of 250 lines each repeated ~120 times
# held a request for 112 s; ordinary files pair each line with a few others.
MAX_PAIRS = 1_000_000


@dataclass
class Row:
    kind: str  # "same" | "del" | "add" | "change" (side by side: a removed line beside an added one) | "gap"
    old_no: int | None = None
    old: SafeString | str = ""
    new_no: int | None = None
    new: SafeString | str = ""
    hidden: int = 0  # for a gap: unchanged lines not shown


@dataclass
class TextDiff:
    unified: str
    added: int
    removed: int
    split: list[Row] = field(default_factory=list)  # side by side
    rows: list[Row] = field(default_factory=list)  # unified: "same", "del", "add" and "gap" only

    @property
    def identical(self) -> bool:
        return not self.added and not self.removed


class TooLarge(ValueError):
    pass


def _html(lines: list[str] | None, plain: list[str]) -> list[SafeString]:
    if lines is not None and len(lines) == len(plain):
        return [mark_safe(line) for line in lines]  # noqa: S308 — highlighted (escaped) by the caller
    return [escape(line) for line in plain]


def diff(
    old: str,
    new: str,
    *,
    old_name: str = "old",
    new_name: str = "new",
    old_html: list[str] | None = None,
    new_html: list[str] | None = None,
    context: int = CONTEXT,
) -> TextDiff:
    a, b = old.splitlines(), new.splitlines()
    if len(a) > MAX_LINES or len(b) > MAX_LINES:
        raise TooLarge(f"over {MAX_LINES:,} lines on a side")
    if _pairs(a, b) > MAX_PAIRS:
        raise TooLarge(f"over {MAX_PAIRS:,} pairs of repeated lines to align")
    ha, hb = _html(old_html, a), _html(new_html, b)
    matcher = difflib.SequenceMatcher(None, a, b)
    added = removed = 0
    unified = [f"--- {old_name}", f"+++ {new_name}"] if a != b else []
    split: list[Row] = []
    rows: list[Row] = []
    shown_to = 0  # old-side line index up to which rows were emitted (for gap sizes)
    for group in matcher.get_grouped_opcodes(context):
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        if i1 > shown_to:
            gap = Row("gap", hidden=i1 - shown_to)
            split.append(gap)
            rows.append(gap)
        shown_to = i2
        unified.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                for i, j in zip(range(x1, x2), range(y1, y2)):
                    unified.append(" " + a[i])
                    same = Row("same", i + 1, ha[i], j + 1, hb[j])
                    split.append(same)
                    rows.append(same)
                continue
            removed += x2 - x1
            added += y2 - y1
            unified += ["-" + a[i] for i in range(x1, x2)] + ["+" + b[j] for j in range(y1, y2)]
            rows += [Row("del", old_no=i + 1, old=ha[i]) for i in range(x1, x2)]
            rows += [Row("add", new_no=j + 1, new=hb[j]) for j in range(y1, y2)]
            for k in range(max(x2 - x1, y2 - y1)):
                i, j = x1 + k, y1 + k
                has_old, has_new = i < x2, j < y2
                split.append(
                    Row(
                        "change" if has_old and has_new else ("del" if has_old else "add"),
                        i + 1 if has_old else None,
                        ha[i] if has_old else "",
                        j + 1 if has_new else None,
                        hb[j] if has_new else "",
                    )
                )
    if split and shown_to < len(a):
        gap = Row("gap", hidden=len(a) - shown_to)
        split.append(gap)
        rows.append(gap)
    return TextDiff("\n".join(unified) + ("\n" if unified else ""), added, removed, split, rows)


def _pairs(a: list[str], b: list[str]) -> int:
    """How many (line of a, equal line of b) pairs SequenceMatcher would look at, junk left out as it
    leaves it out (difflib's autojunk: b's lines that make up more than 1% of a side of 200 lines or more)."""
    counts = Counter(b)
    if len(b) >= 200:
        popular = len(b) // 100 + 1
        counts = Counter({line: n for line, n in counts.items() if n <= popular})
    return sum(counts[line] for line in a)


def _range(start: int, stop: int) -> str:
    """The `start,length` of a unified hunk header (1-based; an empty range names the line before)."""
    length = stop - start
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"
