"""A run with 100,000 log lines: the run page and every view of its Logs card make as many queries as with
1,000 (one bounded page of lines, the totals from the run's counters), and an unchanged poll still answers
204 without reading a line. Counts, not times (bench numbers are in the report of issue 37 part 5)."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.core import localcache
from smrweb.dashboard import live
from tests.dashboard.test_logs_card import ONLY, add_lines, seqs, url
from tests.dashboard.test_logs_card import card as logs_card
from tests.dashboard.test_logs_card import frozen as frozen  # noqa: F401 (fixtures)
from tests.dashboard.test_logs_card import run as run  # noqa: F401

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


def needle(seq: int) -> str:
    """Every 97th line says something a search looks for; the rest are noise."""
    return f"checkpoint {seq} FAILED: RuntimeError" if seq % 97 == 0 else f"tick {seq} ok"


def views(n: int) -> dict[str, tuple[str, dict]]:
    """What is measured at each size: the query, the headers. Cursors sit in the middle of the log."""
    return {
        "run page, the tail": ("", {}),
        "run page, an older page": (f"logs_before={n // 2}", {}),
        "card, older page": (f"logs_before={n // 2}", ONLY),
        "card, newer page": (f"logs_after={n // 2}", ONLY),
        "card, warnings and worse": ("logs_level=warning", ONLY),
        "card, errors and worse, older": (f"logs_level=error&logs_before={n // 2}", ONLY),
        "card, search": ("logs_q=failed", ONLY),
        "card, search with level, older": (
            f"logs_q=runtimeerror&logs_level=error&logs_before={n // 2}",
            ONLY,
        ),
        "card, search that finds nothing": ("logs_q=no+such+words", ONLY),
    }


def measure(client, project, n: int) -> dict[str, int]:
    out = {}
    for name, (query, headers) in views(n).items():
        cache.clear()  # cold: no card render kept from an earlier request, here or in the process
        localcache.clear()
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url(project, query), headers=headers)
        assert response.status_code == 200, name
        assert 0 < len(seqs(logs_card(response.content.decode()))) <= 200 or "nothing" in name, name
        out[name] = len(queries.captured_queries)
        # One page of lines (the tail: one query; from a cursor also whether lines lie beyond it), no count.
        lines = [q["sql"] for q in queries.captured_queries if "runlogline" in q["sql"].lower()]
        assert len(lines) <= (1 if "tail" in name else 2) and not any("COUNT(" in q for q in lines), name
    return out


def poll(client, project) -> tuple[int, int]:
    """(status, queries) of the page's poll when nothing changed."""
    page = client.get(url(project)).content.decode()
    cards = dict(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', page))
    headers = {**HX, live.CARDS_HEADER: live.cards_header(cards)}
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url(project), headers=headers)
    return response.status_code, len(queries.captured_queries)


def test_a_hundred_thousand_lines_cost_as_many_queries_as_a_thousand(client_alice, project, run):  # noqa: F811
    add_lines(run, 1_000, text=needle)
    small, small_poll = measure(client_alice, project, 1_000), poll(client_alice, project)
    add_lines(run, 99_000, text=needle)
    assert run.log_lines == 100_000
    large, large_poll = measure(client_alice, project, 100_000), poll(client_alice, project)
    assert large == small, {k: (small[k], large[k]) for k in small if small[k] != large[k]}
    assert small_poll == large_poll and large_poll[0] == 204 and large_poll[1] <= 7
    # The card alone: the session, the person, the run and role, the markers, its lines, and the two other
    # paged cards whose links carry its query (turns, artifacts).
    assert max(v for k, v in large.items() if k.startswith("card")) <= 11, large
    # What the views show at 100,000 lines: the tail, and the search's finds (the newest 200 of 1,030).
    tail = logs_card(client_alice.get(url(project)).content.decode())
    assert seqs(tail) == list(range(99_801, 100_001)) and "100,000\n          lines" in tail
    found = seqs(client_alice.get(url(project, "logs_q=FAILED"), headers=ONLY).content.decode())
    assert found == list(range(97, 100_001, 97))[-200:]
