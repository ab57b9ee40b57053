"""Issue 36, item 5: a poll after one new turn renders only the parts of the run page's cards that changed
(the "no progress" numbers, the spend and turn stats, the actor's row), not the cards; what the page shows
after applying each poll's fragments is what a fresh page shows."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.core import localcache
from smrweb.dashboard import live
from smrweb.dashboard.views import runs
from smrweb.tracking.models import Run
from tests.factories import push

NOW = datetime(2026, 11, 23, 9, 30, 7, tzinfo=UTC)
START = NOW - timedelta(hours=2)
ACTORS = ("driver", "worker-1", "worker-2")


def turn(n: int, ts: datetime, actor: str = "driver") -> dict:
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        **({"parent_actor": "driver"} if actor != "driver" else {}),
        "tokens_in": 1000 + n % 97,
        "tokens_out": 100,
        "cost_usd": 0.001 * (1 + n % 5),
        "ts": ts.isoformat(),
    }


def seed(project, run_id: str, turns: int) -> str:
    """A live run with a score early and `turns` turns of three actors after it (so "no progress" shows)."""
    with time_machine.travel(START, tick=False):
        push(project, run_id, {"type": "state", "state": "running"}, {"type": "score", "score": 0.5})
    step = (NOW - START - timedelta(minutes=5)) / turns
    events = [turn(i, START + step * (i + 1), ACTORS[i % 3]) for i in range(turns)]
    with time_machine.travel(NOW - timedelta(minutes=1), tick=False):
        for start in range(0, len(events), 5000):
            push(project, run_id, *events[start : start + 5000])
    return f"/projects/hill/runs/{run_id}/"


@pytest.fixture
def now():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def poll(client, url: str, shown: dict):
    return client.get(url, headers={"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)})


def cards_of(html: str, into: dict | None = None) -> dict:
    into = {} if into is None else into
    into.update(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    return into


# --- what htmx and the page script do with an answer, done here -------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Extents(HTMLParser):
    """Where each element with an id starts and ends (offsets of its outer and inner HTML)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=False)
        self.lines = [0]
        for line in html.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.open: list[tuple[str, str | None, int, int]] = []
        self.found: dict[str, tuple[int, int, int, int]] = {}
        self.feed(html)

    def _at(self) -> int:
        line, col = self.getpos()
        return self.lines[line - 1] + col

    def handle_starttag(self, tag, attrs):
        start = self._at()
        end = start + len(self.get_starttag_text())
        ident = dict(attrs).get("id")
        if tag in VOID:
            if ident:
                self.found.setdefault(ident, (start, end, end, end))
            return
        self.open.append((tag, ident, start, end))

    def handle_startendtag(self, tag, attrs):
        start = self._at()
        end = start + len(self.get_starttag_text())
        if ident := dict(attrs).get("id"):
            self.found.setdefault(ident, (start, end, end, end))

    def handle_endtag(self, tag):
        at = self._at()
        while self.open:
            name, ident, start, inner = self.open.pop()
            if ident:
                self.found.setdefault(ident, (start, inner, at, at + len(f"</{tag}>")))
            if name == tag:
                return


def _element(html: str, ident: str) -> tuple[int, int, int, int]:
    return _Extents(html).found[ident]


OOB = re.compile(r'\s*hx-swap-oob="([^"]*)"')
FIGURE = re.compile(r'(<script id="([\w-]+)" type="application/json">)(.*?)(</script>)', re.S)


def _top_elements(html: str) -> list[str]:
    """The top-level elements of a fragment, each with its markup."""
    parser = _Extents(f"<x-root>{html}</x-root>")
    out, depth_end = [], 0
    spans = sorted((s, e) for s, _, _, e in parser.found.values())
    for start, end in spans:
        if start >= depth_end:
            out.append(f"<x-root>{html}</x-root>"[start:end])
            depth_end = end
    return out


def apply(page: str, answer: str) -> str:
    """The page after htmx's out-of-band swaps (and the page script's figure patches) of one poll's answer."""
    for template in re.findall(r"<template>(.*?)</template>", answer, re.S):
        page = _swap(page, template)
    for fragment in _top_elements(re.sub(r"<template>.*?</template>", "", answer, flags=re.S)):
        page = _swap(page, fragment)
    return page


def _swap(page: str, fragment: str) -> str:
    how = OOB.search(fragment)[1]
    element = OOB.sub("", fragment, count=1)
    if "data-figure-patch" in fragment:
        ident = re.search(r'id="([\w-]+)"', fragment)[1]
        patch = json.loads(re.search(r">(.*)</script>", fragment, re.S)[1])
        match = next(m for m in FIGURE.finditer(page) if m[2] == ident)
        figure = json.loads(match[3])
        for trace, key, keep, values in patch["traces"]:
            figure["data"][trace][key] = figure["data"][trace][key][:keep] + values
        figure["layout"].update(patch["layout"])
        text = json.dumps(figure)
        return page[: match.start(3)] + text + page[match.end(3) :]
    if how == "true":
        ident = re.search(r'id="([\w-]+)"', element)[1]
        start, _, _, end = _element(page, ident)
        return page[:start] + element + page[end:]
    if how == "delete":
        start, _, _, end = _element(page, re.search(r'id="([\w-]+)"', element)[1])
        return page[:start] + page[end:]
    where, target = how.split(":#")
    inner = re.match(r"\s*<(\w+)[^>]*>(.*)</\1>\s*$", element, re.S)[2]
    start, inner_start, inner_end, end = _element(page, target)
    if where == "innerHTML":
        return page[:inner_start] + inner + page[inner_end:]
    if where == "afterbegin":
        return page[:inner_start] + inner + page[inner_start:]
    if where == "afterend":
        return page[:end] + inner + page[end:]
    raise AssertionError(how)


def shown_part(page: str) -> str:
    """The live part of a page as compared: figures as data; clock texts, CSRF tokens and the white space
    between elements (rows inserted out of band come without the template's indentation) aside."""
    live_part = page[page.index('<div id="run-live"') : page.index('id="run-poll"')]
    live_part = FIGURE.sub(lambda m: m[1] + json.dumps(json.loads(m[3]), sort_keys=True) + m[4], live_part)
    live_part = re.sub(r'(name="csrfmiddlewaretoken" value=")[^"]*', r"\1", live_part)
    return re.sub(r">\s+<", "><", re.sub(r"\s+", " ", live.TICKING.sub(r"\1\2", live_part)))


# --- the tests ---------------------------------------------------------------------------------------------


def test_polls_after_random_turns_scores_and_states_show_what_a_fresh_page_shows(client_alice, project, now):
    """After each of a random sequence of turns (of three actors), scores and state changes, the page with
    the poll's fragments applied equals a fresh render of the page (one rendered anew: a hard reload)."""
    url = seed(project, "prop", 60)
    rng = random.Random(36)
    page = client_alice.get(url).content.decode()
    shown = cards_of(page)
    n, parted = 60, 0
    for step in range(24):
        now.shift(timedelta(seconds=1))
        what = rng.choice(["turn", "turn", "turn", "turns", "score", "state"])
        at = (NOW + timedelta(seconds=step)).isoformat()
        if what == "turn":
            push(project, "prop", {**turn(n, NOW, rng.choice(ACTORS)), "ts": at})
            n += 1
        elif what == "turns":
            push(project, "prop", *({**turn(n + k, NOW, ACTORS[k % 3]), "ts": at} for k in range(3)))
            n += 3
        elif what == "score":
            push(project, "prop", {"type": "score", "score": rng.random(), "ts": at})
        else:
            push(project, "prop", {"type": "state", "state": rng.choice(["running", "paused"]), "ts": at})
        answer = poll(client_alice, url, shown)
        if answer.status_code == 200:
            body = answer.content.decode()
            parted += 'id="stat-turns"' in body and 'id="run-stats"' not in body
            page = apply(page, body)
            cards_of(body, shown)
        # A fresh page from a process that kept nothing (the poll's process goes on from what it kept).
        kept = dict(localcache._KEPT)
        localcache.clear()
        try:
            fresh = client_alice.get(url, headers={"Cache-Control": "no-cache"}).content.decode()
        finally:
            localcache.clear()
            localcache._KEPT.update(kept)
        assert shown == cards_of(fresh), step
        a, b = shown_part(page), shown_part(fresh)
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert a == b, (step, what, a[at - 300 : at + 300], b[at - 300 : at + 300])
    assert parted >= 5  # the part-wise answers were exercised


def test_a_poll_after_one_turn_renders_parts_not_the_cards_that_have_them(
    client_alice, project, now, monkeypatch
):
    """The title, the alerts, the stats and the actors change in their "no progress" numbers, spend, turn
    count and one actor's row: those parts are rendered on their own; those cards are not rendered."""
    url = seed(project, "parts", 60)
    shown = cards_of(client_alice.get(url).content.decode())
    rendered: list[str] = []
    card = runs.RunPage.render_card
    monkeypatch.setattr(runs.RunPage, "render_card", lambda page, *a: rendered.append(a[0]) or card(page, *a))
    now.shift(timedelta(seconds=1))
    push(project, "parts", turn(60, NOW, "worker-1"))
    body = poll(client_alice, url, shown).content.decode()
    assert not {"run-head", "run-alerts", "run-stats", "run-actors"} & set(rendered), rendered
    sent = set(re.findall(r'<\w+ hx-swap-oob="true"[^>]*? id="([\w-]+)"', body))
    assert {"alert-no-progress", "stat-turns", "stat-spend", "stat-child", "actor-row-1"} <= sent, sent
    assert "61 turns" in body and 'data-card="run-actors"' in body  # the numbers; the card's new version
    assert not {"actor-row-0", "actor-row-2", "stat-driver", "run-stats", "run-actors", "run-alerts"} & sent


def test_a_poll_after_one_turn_costs_the_same_queries_on_a_long_and_a_short_run(client_alice, project, now):
    """Reading what changed after one turn does not grow with the run: the same queries on 60 and 1,200
    turns; and none of them reads what only the skeletons of the title and the alerts show (tags, snooze,
    loops, rollbacks): their "no progress" numbers are rendered alone."""
    counts, tables = [], set()
    for run_id, turns in (("short", 60), ("long", 1200)):
        url = seed(project, run_id, turns)
        shown = cards_of(client_alice.get(url).content.decode())
        poll(client_alice, url, shown)
        now.shift(timedelta(seconds=1))
        push(project, run_id, turn(turns, NOW + timedelta(seconds=len(counts)), "worker-1"))
        with CaptureQueriesContext(connection) as queries:
            assert poll(client_alice, url, shown).status_code == 200
        counts.append(len(queries))
        tables |= {m[1] for q in queries.captured_queries if (m := re.match(r'SELECT "(\w+)"\.', q["sql"]))}
    assert Run.objects.get(external_id="long").turn_count == 1201
    assert counts[0] == counts[1], counts
    skeleton_only = {"tracking_runtag", "tracking_runsnooze", "tracking_loopfinding", "tracking_rollback"}
    assert not tables & skeleton_only, tables & skeleton_only


def test_the_timeline_horizon_is_computed_from_the_run_it_is_given():
    """It was memoized per (run, now) for the process: a Run hashes by its id, so another run with the same
    id (ids repeat across tests; a start corrected by a sync) got the first one's horizon, and every poll's
    distinct `now` added an entry that was never freed."""
    first = Run(pk=10**9, started_at=START)
    again = Run(pk=10**9, started_at=START - timedelta(days=30))
    assert runs.horizon(first, NOW) != runs.horizon(again, NOW)
    assert runs.horizon(again, NOW) >= NOW > again.started_at
