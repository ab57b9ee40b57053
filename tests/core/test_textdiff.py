"""The line diff behind the diff API and the diff pages: counts, unified text and rows agree."""

from __future__ import annotations

import difflib

import pytest

from smrweb.core import textdiff

OLD = "".join(f"line {i}\n" for i in range(1, 41))
NEW = (
    OLD.replace("line 5\n", "line five\n")
    .replace("line 12\n", "")
    .replace("line 30\n", "line 30\nline 30b\n")
)


def test_counts_and_unified_text_match_difflib():
    d = textdiff.diff(OLD, NEW, old_name="a/opt.py", new_name="b/opt.py")
    assert (d.added, d.removed) == (2, 2)
    expected = "\n".join(
        difflib.unified_diff(OLD.splitlines(), NEW.splitlines(), "a/opt.py", "b/opt.py", lineterm="")
    )
    assert d.unified == expected + "\n"
    assert (
        d.unified.count("\n@@ ") == 2
    )  # 5 and 12 share a hunk (3 lines of context each way); 30 has its own


def test_side_by_side_pairs_a_changed_line_and_gaps_count_hidden_lines():
    d = textdiff.diff(OLD, NEW)
    changed = [r for r in d.split if r.kind == "change"]
    assert [(r.old_no, r.old, r.new_no, r.new) for r in changed] == [(5, "line 5", 5, "line five")]
    assert [(r.old_no, r.old) for r in d.split if r.kind == "del"] == [(12, "line 12")]
    assert [(r.new_no, r.new) for r in d.split if r.kind == "add"] == [(30, "line 30b")]
    gaps = [r.hidden for r in d.split if r.kind == "gap"]
    shown_old = {r.old_no for r in d.split if r.old_no}
    assert sum(gaps) + len(shown_old) == 40  # every old line is either shown or counted in a gap
    assert gaps == [1, 12, 7]  # line 1; 16–27 between the hunks; 34–40 after the last


def test_unified_rows_put_removals_before_additions():
    d = textdiff.diff("a\nb\nc\n", "a\nB\nc\n")
    assert [(r.kind, r.old_no, r.new_no) for r in d.rows] == [
        ("same", 1, 1),
        ("del", 2, None),
        ("add", None, 2),
        ("same", 3, 3),
    ]


def test_identical_texts_have_no_diff():
    d = textdiff.diff(OLD, OLD)
    assert d.identical and d.unified == "" and d.split == [] and d.rows == []


def test_lines_are_escaped_unless_highlighted_html_is_given():
    d = textdiff.diff("x = '<b>'\n", "x = '<i>'\n")
    assert d.split[0].old == "x = &#x27;&lt;b&gt;&#x27;"
    d = textdiff.diff(
        "a\n", "b\n", old_html=['<span class="n">a</span>'], new_html=['<span class="n">b</span>']
    )
    assert d.split[0].new == '<span class="n">b</span>'
    # Highlighted lines that do not line up with the text are not trusted: plain escaping instead.
    d = textdiff.diff("a\nb\n", "c\n", old_html=["<x>"])
    assert d.split[0].old == "a"


def test_added_and_removed_files():
    d = textdiff.diff("", "one\ntwo\n")
    assert (d.added, d.removed) == (2, 0) and "@@ -0,0 +1,2 @@" in d.unified
    d = textdiff.diff("one\n", "")
    assert (d.added, d.removed) == (0, 1) and "@@ -1 +0,0 @@" in d.unified


def test_too_many_lines_are_refused():
    with pytest.raises(textdiff.TooLarge):
        textdiff.diff("x\n" * (textdiff.MAX_LINES + 1), "y\n")


def test_files_of_many_repeated_lines_are_refused_before_the_quadratic_matcher_runs():
    # Red-team N2 follow-up (textdiff in the request): 250 lines repeated ~120 times, shuffled: 112 s.
    import time

    a = "\n".join(f"l{i % 250}" for i in range(29_999))
    b = "\n".join(f"l{(i * 7) % 250}" for i in range(29_999))
    started = time.monotonic()
    with pytest.raises(textdiff.TooLarge, match="pairs of repeated lines"):
        textdiff.diff(a, b)
    assert time.monotonic() - started < 3
    ordinary = "\n".join(f"line {i}" for i in range(29_000))  # unique lines: as before
    assert textdiff.diff(ordinary, ordinary.replace("line 7", "line seven")).added == 1111
