"""Numbers are written by one module (`core.numbers`): the pages' filters, the Compare table and the plain
text of knowledge entries and the carry-forward block follow the same rules. These tests fail when a
second way of writing a signed number appears (the drift the structure review found in four places)."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from smrweb.core import numbers
from smrweb.dashboard.charts import compare as compare_charts
from smrweb.dashboard.templatetags import smrweb as filters

SMRWEB = Path(__file__).resolve().parents[2] / "smrweb"


@pytest.mark.parametrize(
    ("value", "page", "text"),
    [
        (0.0123, "+0.0123", "+0.0123"),
        (-4.5, "−4.5", "-4.5"),
        (0, "0", "0"),
        (-0.0, "0", "0"),
        (1234567.0, "+1,234,567", "+1,234,567"),
        (0.123456789, "+0.1235", "+0.123457"),
        (None, "—", "n/a"),
    ],
)
def test_a_difference_is_written_with_one_sign_rule_on_pages_and_in_text(value, page, text):
    assert filters.signed(value) == numbers.signed(value) == page
    assert numbers.signed_text(value) == text


def test_differences_of_amounts_carry_no_sign_at_zero_and_a_true_minus_below():
    assert filters.usd_signed(Decimal("1.2")) == "+$1.20"
    assert filters.usd_signed(Decimal("-0.3")) == "−$0.30"
    assert filters.usd_signed(0) == "$0"
    assert filters.tokens_signed(-3100) == "−3.1k"
    assert filters.tokens_signed(0) == "0"
    assert numbers.difference(timedelta(minutes=-3), numbers.duration, lambda v: v) == "−3m"


def test_the_compare_table_writes_deltas_by_the_same_rule():
    assert compare_charts.signed_number(-0.25, 3) == "−0.25"
    assert compare_charts.signed_number(12.4, 2, percent=True) == "+12%"
    assert compare_charts.signed_number(-3.2, 2, percent=True) == "−3%"
    assert compare_charts.signed_number(0.2, 2, percent=True) == "0%"


def _hand_made_signs(source: str) -> list[int]:
    """Lines that write a sign themselves: a `+` format spec in an f-string or format(), or a U+2212."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = "".join(v.value for v in node.format_spec.values if isinstance(v, ast.Constant))
            if spec.startswith("+") or re.match(r"^.?[<>^=]?\+", spec):
                found.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "−" in node.value:
            if not isinstance(getattr(node, "parent", None), ast.Expr):
                found.append(node.lineno)
    return found


def test_no_module_but_core_numbers_writes_a_sign_by_hand():
    offenders = []
    for path in sorted(SMRWEB.rglob("*.py")):
        if path.name == "numbers.py" and path.parent.name == "core" or "simulator" in path.parts:
            continue  # the simulator stands in for an outside service and writes its own text
        source = path.read_text()
        docstrings = {
            n.value.lineno
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        }
        offenders += [
            f"{path.relative_to(SMRWEB)}:{line}"
            for line in _hand_made_signs(source)
            if line not in docstrings
        ]
    assert not offenders, f"write signed numbers with smrweb.core.numbers: {offenders}"


def test_the_hand_made_sign_check_can_fail():
    assert _hand_made_signs('x = f"{delta:+g}"\n') == [1]
    assert _hand_made_signs('x = f"{delta:+.6g} vs"\n') == [1]
    assert _hand_made_signs('x = "−" + str(v)\n') == [1]
    assert _hand_made_signs('x = f"{delta:.6g}"\n') == []


@pytest.mark.parametrize(
    ("delta", "words"),
    [
        (-3, "3 places up"),
        (-1, "1 place up"),
        (0, "same place"),
        (2, "2 places down"),
        (None, numbers.MISSING),
    ],
)
def test_a_rank_move_is_said_in_words_not_as_a_signed_number(delta, words):
    """Walkthrough P3: a knowledge entry said "rank -3" beside the card's "▲ 3 places up"."""
    assert numbers.rank_move(delta) == words
