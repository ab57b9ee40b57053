"""Templates stay readable and in their places: no line over 160 characters (one tag or block tag per line,
nested content indented), reused includes live in templates/<app>/partials/ (no "_name.html" elsewhere), and
every template parses."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.template.loader import get_template

TEMPLATES = Path(settings.BASE_DIR) / "templates"
MAX_LINE = 160


def _templates() -> list[Path]:
    return sorted(p for p in TEMPLATES.rglob("*.html") if p.is_file())


def test_there_are_templates():
    assert len(_templates()) > 10


def test_no_template_line_is_over_160_characters():
    long_lines = [
        f"{path.relative_to(TEMPLATES)}:{number}: {len(line)} characters"
        for path in _templates()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if len(line) > MAX_LINE
    ]
    assert not long_lines, f"template lines over {MAX_LINE} characters:\n" + "\n".join(long_lines)


def test_no_comment_spans_lines():
    """Django's {# #} comment is one line: one spread over two is shown on the page as text."""
    spread = [
        f"{path.relative_to(TEMPLATES)}:{number}"
        for path in _templates()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "{#" in line and "#}" not in line.split("{#", 1)[1]
    ]
    assert not spread, "{# comments over several lines (use {% comment %}):\n" + "\n".join(spread)


def test_underscore_names_only_for_partials():
    misplaced = [
        str(path.relative_to(TEMPLATES))
        for path in _templates()
        if path.name.startswith("_") and path.parent.name != "partials"
    ]
    assert not misplaced, f"reused includes belong in templates/<app>/partials/: {misplaced}"


@pytest.mark.parametrize("name", [str(p.relative_to(TEMPLATES)) for p in _templates()])
def test_every_template_parses(name):
    get_template(name)
