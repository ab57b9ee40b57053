"""core/patterns.py: LIKE/ILIKE as MLflow means them, matched without backtracking, and the limits every
user-supplied pattern and search shares (review 2026-11-28, N1)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlflow.utils.search_utils import _ilike, _like

from smrweb.core.patterns import (
    MAX_PATTERN_CHARS,
    MAX_SEARCH_CHARS,
    MAX_WILDCARDS,
    Like,
    PatternRefused,
    check_search,
)


def like(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    return Like(pattern, ignore_case=ignore_case).matches(text)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("abc", "abc", True),
        ("abc", "abcd", False),  # anchored at both ends
        ("abc", "xabc", False),
        ("ab%", "abcd", True),
        ("%cd", "abcd", True),
        ("%bc%", "abcd", True),
        ("%", "", True),
        ("", "", True),
        ("", "a", False),
        ("a_c", "abc", True),
        ("a_c", "ac", False),  # `_` is exactly one character
        ("a__", "abc", True),
        ("___", "ab", False),
        ("%_%", "", False),
        ("a%b%c", "aXbYc", True),
        ("a%b%c", "acb", False),  # segments in order
        ("%aa%aa", "aaa", False),  # segments do not overlap
        ("%aa%aa", "aaaa", True),
        ("a.c", "abc", False),  # regex metacharacters are themselves
        ("a.c", "a.c", True),
        (".*", "anything", False),
        (".*", ".*", True),
        ("x+?[]()", "x+?[]()", True),
        ("[ab]", "a", False),
        ("(a|b)", "(a|b)", True),
        ("a\\%", "a\\bc", True),  # no escape character: a backslash is a character, `%` a wildcard
        ("a\\_", "a\\x", True),
        ("a%c", "a\nb\nc", True),  # wildcards match newlines, as SQL's LIKE does
        ("a_c", "a\nc", True),
        ("%$", "a$", True),
        ("^a", "a", False),
    ],
)
def test_like_means_what_mlflow_means(pattern, text, expected):
    assert like(pattern, text) is expected
    if "\n" not in text:  # MLflow's regex (`.` without DOTALL) differs only there
        assert _like(text, pattern) is expected


def test_ilike_ignores_case_and_like_does_not():
    assert like("%RUN_%", "my-run-1", ignore_case=True)
    assert not like("%RUN_%", "my-run-1")
    assert like("Größe%", "GRÖSSE", ignore_case=False) is False
    assert like("ÄB_", "äbc", ignore_case=True)


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.text(alphabet="ab%_.*", max_size=9),
    text=st.text(alphabet="abAB.*", max_size=12),
    ignore_case=st.booleans(),
)
def test_like_agrees_with_mlflow_on_any_small_pattern(pattern, text, ignore_case):
    expected = (_ilike if ignore_case else _like)(text, pattern)
    assert like(pattern, text, ignore_case=ignore_case) is expected


def test_the_reviews_patterns_stay_fast_on_long_texts():
    """Five and more `%a` on a 200-character name took over 60 s in the old regex; 6,000-character params
    and `_`-heavy patterns are the worst the API stores. A generous ceiling, not a benchmark."""
    import time

    cases = [
        ("%a%a%a%a%a%b", "a" * 200, False),
        ("%a%a%a%a%a%a%a%a%a%a%b", "a" * 200, False),
        ("%a%a%a%b", "a" * 6000, False),
        ("%" + "a_" * 9 + "b%", "a" * 6000, False),
        ("%_" + "a" * 480 + "b%", "a" * 6000, False),
        ("%" + "_a" * 9 + "%b", ("a" * 14 + "b") * 400, True),
        ("%" + "_a" * 9 + "%c", ("a" * 14 + "b") * 400, False),
        ("%" + "a%" * 19, "ab" * 3000, True),
    ]
    start = time.monotonic()
    for pattern, text, expected in cases:
        assert like(pattern, text) is like(pattern, text, ignore_case=True) is expected
    assert time.monotonic() - start < 2


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("a" * (MAX_PATTERN_CHARS + 1), f"at most {MAX_PATTERN_CHARS} characters"),
        ("%a" * (MAX_WILDCARDS + 1), f"at most {MAX_WILDCARDS} wildcards"),
        ("_" * (MAX_WILDCARDS + 1), f"at most {MAX_WILDCARDS} wildcards"),
        ("a\x00", "NUL"),
    ],
)
def test_patterns_over_the_limits_are_refused_naming_the_filter(pattern, needle):
    with pytest.raises(PatternRefused) as refused:
        Like(pattern, field="params.x")
    assert refused.value.field == "params.x" and needle in refused.value.message


def test_a_pattern_at_the_limits_is_accepted():
    assert Like("%a" * (MAX_WILDCARDS // 2), field="x").matches("a" * MAX_WILDCARDS)
    assert Like("a" * MAX_PATTERN_CHARS, field="x").matches("a" * MAX_PATTERN_CHARS)


def test_searches_are_bounded():
    assert check_search("x" * MAX_SEARCH_CHARS, field="q")
    with pytest.raises(PatternRefused, match=re.escape(f"at most {MAX_SEARCH_CHARS} characters")):
        check_search("x" * (MAX_SEARCH_CHARS + 1), field="q")
