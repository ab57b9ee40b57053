"""User-supplied patterns and search text, bounded (docs/security.md, N1). Every search box, `?q=` and MLflow
`LIKE` filter is checked here, so the work one request asks for grows with its text, never exponentially.

`LIKE` is matched without regex or backtracking: the pattern is split on `%` into segments of fixed length
(a character is itself, `_` is any one character); the first segment must start the text, the last must end
it, and the ones between are found left to right, each at its leftmost place after the previous one. The
leftmost place is always the best (a later start leaves less room for the rest), so no choice is revisited,
and a segment is found with str.find on its literal pieces: the work is about (text length × pieces), and
the limits below keep the pieces few. There is no escape character (MLflow's own
matcher, `mlflow.utils.search_utils._like`, has none), so `%` and `_` are always wildcards and every other
character, regex metacharacters and backslashes included, is itself; `%` and `_` match newlines too, as
SQL's `LIKE` does. `ILIKE` compares the lower-cased text with the lower-cased pattern."""

from __future__ import annotations

import re

MAX_PATTERN_CHARS = 500  # a LIKE pattern (MLflow keys are at most 250 characters, values are compared whole)
MAX_WILDCARDS = 20  # `%` and `_` together in one pattern
MAX_SEARCH_CHARS = 200  # a search box: a substring, matched by the database (`icontains`)


class PatternRefused(ValueError):
    """A pattern or search text over the limits; `field` names the filter, `message` says what to change."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_search(text: str, *, field: str) -> str:
    """A substring search (`?q=`, the runs search box): at most MAX_SEARCH_CHARS characters, no NUL."""
    if len(text) > MAX_SEARCH_CHARS:
        raise PatternRefused(field, f"A search is at most {MAX_SEARCH_CHARS} characters ({len(text)} given).")
    if "\x00" in text:
        raise PatternRefused(field, "A search cannot contain NUL.")
    return text


def check_pattern(pattern: str, *, field: str) -> str:
    """A LIKE pattern: at most MAX_PATTERN_CHARS characters and MAX_WILDCARDS wildcards, no NUL."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRefused(
            field, f"A LIKE pattern is at most {MAX_PATTERN_CHARS} characters ({len(pattern)} given)."
        )
    wildcards = pattern.count("%") + pattern.count("_")
    if wildcards > MAX_WILDCARDS:
        raise PatternRefused(
            field, f"A LIKE pattern holds at most {MAX_WILDCARDS} wildcards (% and _; {wildcards} given)."
        )
    if "\x00" in pattern:
        raise PatternRefused(field, "A LIKE pattern cannot contain NUL.")
    return pattern


class Like:
    """A checked LIKE (or, `ignore_case`, ILIKE) pattern; `matches(text)` is True when the whole text
    matches it."""

    def __init__(self, pattern: str, *, ignore_case: bool = False, field: str = "pattern"):
        check_pattern(pattern, field=field)
        self._fold = str.lower if ignore_case else None
        if ignore_case:
            pattern = pattern.lower()
        # Each segment: its length, and its literal pieces (between `_`s) with their offsets in it.
        self._segments = [
            (len(part), [(m.start(), m.group()) for m in re.finditer(r"[^_]+", part)])
            for part in pattern.split("%")
        ]

    def matches(self, text: str) -> bool:
        if self._fold is not None:
            text = self._fold(text)
        (first_len, first), *rest = self._segments
        if not rest:  # no `%`: the pattern is the whole text
            return len(text) == first_len and _at(text, first, 0)
        *middle, (last_len, last) = rest
        end = len(text) - last_len  # where the last segment starts
        if end < first_len or not _at(text, first, 0) or not _at(text, last, end):
            return False
        pos = first_len
        for length, pieces in middle:
            found = _leftmost(text, pieces, length, pos, end)
            if found < 0:
                return False
            pos = found + length
        return True


def _at(text: str, pieces: list[tuple[int, str]], start: int) -> bool:
    return all(text.startswith(piece, start + offset) for offset, piece in pieces)


def _leftmost(text: str, pieces: list[tuple[int, str]], length: int, start: int, end: int) -> int:
    """The leftmost place in text[start:end] where a segment fits (-1: none). When a piece is not where
    the candidate needs it, the candidate jumps to the piece's next occurrence: the places skipped cannot
    hold it, so each piece's text is scanned forward only (str.find, linear)."""
    place = start
    while place + length <= end:
        for offset, piece in pieces:
            found = text.find(piece, place + offset, end - length + offset + len(piece))
            if found < 0:
                return -1
            if found != place + offset:
                place = found - offset
                break
        else:
            return place
    return -1
