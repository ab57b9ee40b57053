"""The API's JSON parser: DRF's, with a bound on nesting (finding N8).

Python's JSON decoder recurses once per level, so `[` × 50,000 raised RecursionError inside DRF's parser
and every JSON endpoint answered 500; a body just under the interpreter's limit parsed, and then any code
walking it recursively (serializers, `json.dumps` on save) could fail the same way. No request body of
this API nests deeper than a handful of levels, so anything past MAX_DEPTH is refused as a parse error
(400, `code: parse_error`) before a view sees it.
"""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_DEPTH = 32


def too_deep(value, limit: int = MAX_DEPTH) -> bool:
    """Whether a parsed JSON value nests lists and objects more than `limit` deep (iterative: a walk
    that recursed would fail on the very input it checks)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def nesting_error(limit: int = MAX_DEPTH) -> str:
    return f"JSON parse error - the body nests more than {limit} levels deep."


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(nesting_error()) from None
        if too_deep(data):
            raise ParseError(nesting_error())
        return data
