"""Cheap polling.

Whole fragments: a polled partial carries the version of what it shows; a poll that finds the same version
answers 204 and htmx leaves the page alone, so an idle page costs one small query per poll. Versions hold no
clock: relative times, durations and forecasts' "in 2h" are `<time>` elements the page script keeps current
(templatetags `ago`, `since`, `until`), so a quiet page stays 204. What reads a window up to a moment (the
burn rate) reads it up to the run's newest turn, not the server's now (queries.timeline.burn_forecast).

Cards (the run page): the live part of a page is a `Deck` of cards, each with a version computed from cheap
markers of what it shows (no rendering). The page's one poll sends every card's version (`X-Smrweb-Cards`,
built by static/js/smrweb.js from the `data-card`/`data-version` markers in the page); the answer is 204
when none changed, else only the changed cards as htmx out-of-band swaps, each with its new version.

Within a card, a change re-sends only what changed. A card's template marks its parts:

- `<!--p:ID-->…<!--/p-->` one element with id ID (a stat, a banner, a table row);
- `<!--rows:ID-->…<!--/rows-->` inside the element ID (a tbody, a list): rows that are parts; rows that
  arrived or moved are inserted after the row they now follow, rows that left deleted, changed rows replaced;
- `<!--f:ID-->…<!--/f-->` a chart's figure (`figure_json` script ID): re-sent as a patch of its traces (what
  was appended or replaced at their ends, and changed layout keys) when the figure kept its shape.

What the client shows of a card is known by its version: rendered cards are kept in the cache (compressed,
for `CARD_CACHE_SECONDS`) under their version, so the previous render is compared with the new one part by
part. Everything outside the marked parts must be the same for a part-wise answer; otherwise (or when the
previous render is no longer cached) the whole card goes. Cards are rendered with a placeholder for the CSRF
token, so one render serves every viewer with the same permissions, and the answer gets the viewer's token.
Clock texts (`<time data-ago|since|until>`) are kept current by the page script and are not compared.

Parts with versions of their own: a card whose changes are mostly a few of its parts (the run page's spend
and turn stats, its "no progress" numbers, one actor's row) says so with `Card.layout`: the version of what it
shows outside those parts (its skeleton) and each part's version and render (`Part`, a partial of its own).
These are read only when the card's version moved, and kept (under the card's version) with every render of
the card; a poll whose card changed but whose skeleton did not renders the parts whose versions moved, alone,
and sends them with the card's version marker, without rendering the card or comparing renders.

Many tabs on one live page poll the same versions: a card is rendered once per version (the first poll to
miss it renders, the others wait for it in the cache), each card's change from one version to another is
computed once, and a whole answer is cached under the changes it carries, so most polls cost the markers
query and a cache read. A cache that is down costs the part-wise answers (whole cards go), never an answer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

from django.http import HttpResponse
from django.middleware.csrf import get_token

from smrweb.core import cachekeys, localcache, softcache
from smrweb.dashboard.templatetags.smrweb import figure_script_attrs, script_safe

VERSION_HEADER = "X-Smrweb-Version"
CARDS_HEADER = "X-Smrweb-Cards"  # the versions of the cards a page shows: name=version&name=version…
ONLY_HEADER = "X-Smrweb-Only"  # a pager asks for its card only
# The shortest step of a live timeline's axis end (views.runs.horizon); bench/viewer.py reads the next line.
TICK_SECONDS = 30
CARD_CACHE_SECONDS = 180
LOCAL_ROWS = 200  # row renders a process keeps per page subject (`kept_rows`): a table's page and a log's
CSRF_PLACEHOLDER = "smrwebCsrfPlaceholder7f3a"  # in cached renders; each answer gets the viewer's token
PATCH_MAX_SHARE = 0.5  # a figure patch bigger than this share of the figure is sent as the figure
RENDER_WAIT_SECONDS = 5.0  # how long a poll waits for another's render of the same card before its own


def version(*parts: object) -> str:
    raw = "|".join(str(p) for p in parts)
    return hashlib.blake2s(raw.encode(), digest_size=8).hexdigest()


def unchanged(request, current: str) -> bool:
    """True for an htmx poll that already shows `current` (only polls send the header)."""
    return bool(request.htmx) and request.headers.get(VERSION_HEADER) == current


def no_change() -> HttpResponse:
    return HttpResponse(status=204)


# --- cards --------------------------------------------------------------------------------------------


def card_version(*parts: object) -> str:
    raw = "\x1f".join(repr(p) for p in parts)
    return hashlib.blake2s(raw.encode(), digest_size=8).hexdigest()


def wants_fresh(request) -> bool:
    """A hard reload (the browser sends Cache-Control: no-cache) renders every card again rather than
    trusting the renders kept under their versions: the way out should a version ever miss a change."""
    return "no-cache" in request.headers.get("Cache-Control", "")


def sent_cards(request) -> dict[str, str] | None:
    """The card versions a poll says its page shows, or None for a request that is not such a poll."""
    if not request.htmx:
        return None
    raw = request.headers.get(CARDS_HEADER)
    if raw is None:
        return None
    return dict(parse_qsl(raw, keep_blank_values=True)[:200])


def cards_header(versions: dict[str, str]) -> str:
    """What a page's poll sends for these versions (the page script builds the same from the page)."""
    return urlencode(versions)


@dataclass
class Part:
    """A marked part of a card (`<!--p:ID-->…<!--/p-->`) with its own version and render: its HTML between
    the markers, byte for byte what the card's render has there."""

    id: str
    version: str
    render: Callable[[], str]
    # A chart's figure part (`<!--f:ID-->`): its figure, so that a poll sends the figure's change as a
    # patch made from the figures themselves (kept in this process, `keep_figure`), not from their JSON.
    figure: Callable[[], dict] | None = None
    # A list's rows (`<!--rows:ID-->`, ID the list element's): its render is the rows, sent as the rows
    # that arrived, left or changed since the list the poll's page shows (kept under its version).
    rows: bool = False
    # The shared-cache entries its render reads (a list's rows, `rows_to_read`): read with the parts' own.
    reads: Callable[[], list[str]] | None = None


@dataclass
class Card:
    name: str  # the id of the card's outer element
    version: str
    render: Callable[[], str]  # the card's marked HTML (CSRF placeholder in its forms)
    # A card whose changes are mostly a few of its parts: `layout()` gives the version of all it shows
    # outside them (its skeleton) and those parts (each with its version and render), read only when the
    # card's version moved; `marker()` renders its version marker part (`<!--p:NAME--v-->`). See
    # `Deck.answer`.
    layout: Callable[[], tuple[str, tuple[Part, ...]]] | None = None
    marker: Callable[[], str] | None = None

    @functools.cached_property
    def laid_out(self) -> tuple[str, dict[str, Part]]:
        skeleton, parts = self.layout()
        return skeleton, {p.id: p for p in parts}


MARKERS = re.compile(r"<!--(?:[pf]:[\w.-]+|rows:[\w.-]+|card:[\w.-]+|/[pf]|/rows|/card)-->")
CARD_BLOCK = re.compile(r"<!--card:([\w.-]+)-->(.*?)<!--/card-->", re.S)  # a card rendered in its page
ROWS = re.compile(r"<!--rows:([\w.-]+)-->(.*?)<!--/rows-->", re.S)
PART = re.compile(r"<!--([pf]):([\w.-]+)-->(.*?)<!--/\1-->", re.S)
FIRST_TAG = re.compile(r"^(\s*<([a-zA-Z][\w-]*))")
TICKING = re.compile(r'(<time datetime="[^"]*" data-(?:ago|since|until)="\w+">)[^<]*(</time>)')
SCRIPT = re.compile(r"^\s*<script\b([^>]*)>(.*)</script>\s*$", re.S)
CONTAINER = {"tr": "tbody", "li": "ul", "option": "select"}


def _compressed(html: str) -> bytes:
    """How renders are kept in the cache (a poll's are compressed once its answer is sent: softcache)."""
    return zlib.compress(html.encode(), 1)


def strip(html: str) -> str:
    return MARKERS.sub("", html)


def _unwrap(html: str) -> str:
    """A card's render without the <!--card:--> block markers it may carry (when it is an inline partial)."""
    return CARD_BLOCK.sub(lambda m: m[2], html)


def _same(a: str, b: str) -> bool:
    return a == b or TICKING.sub(r"\1\2", a) == TICKING.sub(r"\1\2", b)


@dataclass
class _Rows:
    inner: str
    residue: str
    order: list[str] = field(default_factory=list)
    html: dict[str, str] = field(default_factory=dict)


@dataclass
class _Parsed:
    skeleton: str
    parts: dict[str, tuple[str, str]]
    rows: dict[str, _Rows]


def _rows_of(inner: str) -> _Rows:
    """A list's rows (each a marked part) in order, and what is between them."""
    block = _Rows(inner=inner, residue="")

    def take_row(r: re.Match) -> str:
        block.order.append(r[2])
        block.html[r[2]] = r[3]
        return ""

    block.residue = PART.sub(take_row, inner).strip()
    return block


def _parse(html: str) -> _Parsed:
    rows: dict[str, _Rows] = {}

    def take_rows(m: re.Match) -> str:
        rows[m[1]] = _rows_of(m[2])
        return f"<!--rows:{m[1]}-->"

    parts: dict[str, tuple[str, str]] = {}

    def take_part(m: re.Match) -> str:
        parts[m[2]] = (m[1], m[3])
        return f"<!--{m[1]}:{m[2]}-->"

    skeleton = PART.sub(take_part, ROWS.sub(take_rows, html))
    return _Parsed(TICKING.sub(r"\1\2", skeleton), parts, rows)


def _oob(html: str, how: str = "true") -> str:
    return FIRST_TAG.sub(lambda m: f'{m[1]} hx-swap-oob="{how}"', html, count=1)


def _tag(html: str) -> str:
    m = FIRST_TAG.match(html)
    return m[2].lower() if m else "div"


def _in_template(html: str) -> str:
    """Rows travel inside <template>: a <tr> outside a table is dropped by the parser, not in a template."""
    return f"<template>{html}</template>"


def _kept_in_place(old: list[str], new: list[str]) -> set[str]:
    """The rows that keep their place: a longest common subsequence of the two orders (lists are short).
    When the rows in both keep their order (a live list's usual change: rows arrived on top, the oldest
    left at the bottom), that is all of them, found without comparing every pair."""
    common = set(old) & set(new)
    if [x for x in old if x in common] == [x for x in new if x in common]:
        return common
    return _longest_common(old, new)


def _longest_common(old: list[str], new: list[str]) -> set[str]:
    """The rows of a longest common subsequence of two orders (rows unique in each)."""
    lengths = [[0] * (len(new) + 1) for _ in range(len(old) + 1)]
    for i in range(len(old) - 1, -1, -1):
        for j in range(len(new) - 1, -1, -1):
            lengths[i][j] = (
                lengths[i + 1][j + 1] + 1 if old[i] == new[j] else max(lengths[i + 1][j], lengths[i][j + 1])
            )
    kept, i, j = set(), 0, 0
    while i < len(old) and j < len(new):
        if old[i] == new[j]:
            kept.add(old[i])
            i, j = i + 1, j + 1
        elif lengths[i + 1][j] >= lengths[i][j + 1]:
            i += 1
        else:
            j += 1
    return kept


def _whole_rows(rid: str, rows: _Rows, tag: str | None = None) -> list[str]:
    """The list `rid` sent whole (its inner HTML replaced)."""
    container = CONTAINER.get(tag or _tag(next(iter(rows.html.values()), "")), "div")
    return [_in_template(f'<{container} hx-swap-oob="innerHTML:#{rid}">{rows.inner}</{container}>')]


def _row_fragments(rid: str, old: _Rows, new: _Rows) -> list[str]:
    """Rows that left (or moved) deleted, rows that arrived (or moved) inserted after the row they follow now,
    rows that stayed replaced when they changed; the whole list when that is not smaller."""
    tag = _tag(next(iter(new.html.values()), "") or next(iter(old.html.values()), ""))
    container = CONTAINER.get(tag, "div")
    whole = _whole_rows(rid, new, tag)
    if old.residue != new.residue:
        return whole
    kept = _kept_in_place(old.order, new.order)
    out = [_in_template(f'<{tag} id="{x}" hx-swap-oob="delete"></{tag}>') for x in old.order if x not in kept]
    out += [
        _in_template(_oob(new.html[x]))
        for x in new.order
        if x in kept and not _same(old.html[x], new.html[x])
    ]
    order, i = new.order, 0
    while i < len(order):
        if order[i] in kept:
            i += 1
            continue
        start = i
        while i < len(order) and order[i] not in kept:
            i += 1
        rows = "".join(new.html[x] for x in order[start:i])
        where = f"afterend:#{order[start - 1]}" if start else f"afterbegin:#{rid}"
        out.append(_in_template(f'<{container} hx-swap-oob="{where}">{rows}</{container}>'))
    return whole if sum(map(len, out)) >= len(whole[0]) else out


ARRAY_KEYS = ("x", "y", "customdata", "text", "hovertext", "base", "width")


def figure_patch(old: dict, new: dict) -> dict | None:
    """How to turn figure `old` into `new` by cutting each trace's arrays and appending to them, and by
    replacing changed top-level layout keys; None when the figures differ in shape (a trace added or
    removed, a trace's style or type changed): then the new figure is sent whole.

    {"base": [points of each old trace], "traces": [[trace, key, keep, [values…]], …], "layout": {key: value}}
    """
    old_data, new_data = old.get("data") or [], new.get("data") or []
    if len(old_data) != len(new_data):
        return None
    traces = []
    for i, (o, n) in enumerate(zip(old_data, new_data, strict=True)):
        arrays = {k for k in (*o, *n) if isinstance(o.get(k), list) or isinstance(n.get(k), list)}
        if not arrays <= set(ARRAY_KEYS):
            return None
        if {k: v for k, v in o.items() if k not in arrays} != {k: v for k, v in n.items() if k not in arrays}:
            return None
        if o is n:  # a trace the figure reused whole (charts.run: the score traces between scores)
            continue
        for key in sorted(arrays):
            a, b = o.get(key), n.get(key)
            if not isinstance(a, list) or not isinstance(b, list):
                return None
            keep = _common_prefix(a, b)
            if keep == len(a) == len(b):
                continue
            traces.append([i, key, keep, b[keep:]])
    old_layout, new_layout = old.get("layout") or {}, new.get("layout") or {}
    layout = {
        k: new_layout.get(k) for k in {*old_layout, *new_layout} if old_layout.get(k) != new_layout.get(k)
    }
    base = [len(t.get("x") if isinstance(t.get("x"), list) else t.get("y") or []) for t in old_data]
    return {"base": base, "traces": traces, "layout": layout}


def _common_prefix(a: list, b: list) -> int:
    """How many leading items `a` and `b` share. A live figure's arrays change at their end: the whole
    prefix is compared first, then halves (each comparison a slice compared in C, not a Python loop over
    a long run's ~2,000 points)."""
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    lo, hi = 0, limit - 1  # a[:lo] == b[:lo]; they differ within a[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _points(figure: dict) -> int:
    return sum(len(v) for t in figure.get("data") or [] for v in t.values() if isinstance(v, list))


def _patch_script(attrs: str, old: dict, new: dict) -> str | None:
    """The script that patches figure `old` into `new` on the page (`attrs`: the figure script's), or None
    when only the new figure will do (another shape, or a patch more than `PATCH_MAX_SHARE` of it)."""
    try:
        patch = figure_patch(old, new)
    except (AttributeError, TypeError):  # not figures (a kept text that did not parse as one)
        return None
    if patch is None or sum(len(t[3]) for t in patch["traces"]) > PATCH_MAX_SHARE * max(_points(new), 1):
        return None
    text = script_safe(json.dumps(patch, separators=(",", ":"), allow_nan=False))
    return f'<script{attrs} data-figure-patch hx-swap-oob="true">{text}</script>'


def _figure_fragment(old_script: str, new_script: str) -> str:
    """The figure's changes as a patch (a script the page applies to the chart it has), or the figure."""
    old_m, new_m = SCRIPT.match(old_script), SCRIPT.match(new_script)
    if not old_m or not new_m or old_m[1] != new_m[1]:
        return _oob(new_script)
    try:
        old, new = json.loads(old_m[2]), json.loads(new_m[2])
    except ValueError:
        return _oob(new_script)
    return _patch_script(new_m[1], old, new) or _oob(new_script)


def _figure_of(html: str, pid: str) -> dict | None:
    """The figure of part `pid` in a kept render (a card's, or the part's own), parsed; None if not there."""
    start = html.find(f"<!--f:{pid}-->")
    if start >= 0:
        end = html.find("<!--/f-->", start)
        html = html[start + len(f"<!--f:{pid}-->") : end] if end > 0 else ""
    m = SCRIPT.match(html)
    try:
        return json.loads(m[2]) if m else None
    except ValueError:
        return None


def keep_figure(scope: str, name: str, part: str, version: str, figure: dict) -> None:
    """Keep a figure part's figure in this process (the two newest versions per part: pollers of one page are
    at most a turn apart), for the next poll's patch."""
    key = ("live-figure", scope, name, part)
    kept = localcache.get(key) or ()
    localcache.put(key, ((version, figure), *(kv for kv in kept[:1] if kv[0] != version)))


def kept_figure(scope: str, name: str, part: str, version: str) -> dict | None:
    kept = localcache.get(("live-figure", scope, name, part)) or ()
    return next((figure for v, figure in kept if v == version), None)


def card_changes(old: str, new: str) -> list[str] | None:
    """Out-of-band fragments that turn the render `old` of a card into `new`, or None when only the whole
    card will do (its markup outside the marked parts changed)."""
    o, n = _parse(old), _parse(new)
    if o.skeleton != n.skeleton:
        return None
    out: list[str] = []
    for pid, (kind, html) in n.parts.items():
        if _same(o.parts[pid][1], html):
            continue
        out.append(_figure_fragment(o.parts[pid][1], html) if kind == "f" else _oob(html))
    for rid, rows in n.rows.items():
        out += _row_fragments(rid, o.rows[rid], rows)
    return out


class Deck:
    """The live cards of one page (`scope` names the page's subject in cache keys, e.g. "run-12")."""

    def __init__(self, scope: str, cards: Iterable[Card]):
        self.scope = scope
        self.cards = {c.name: c for c in cards}
        # Entries read ahead by an earlier `_recall` (`also`), found or not: an answer reads what its later
        # steps need with its first reads (one cache round trip, not one per step).
        self._ahead: dict[str, str | None] = {}

    def _key(self, name: str, version: str) -> str:
        return cachekeys.live_card(self.scope, name, version)

    def _recall(self, keys: list[str], also: Iterable[str] = (), then: list[str] = ()) -> dict[str, str]:
        """The kept renders of `keys`; the entries `also` are read in the same call, for a later one, and
        so are `then` (other entries, held by softcache's block for their reader)."""
        asked = [k for k in keys if k not in self._ahead]
        ahead = [k for k in dict.fromkeys(also) if k not in self._ahead and k not in keys]
        # A cache that is down costs the diff, never the answer.
        found = softcache.get_many([*asked, *ahead], also=then)
        found = {k: zlib.decompress(v).decode() for k, v in found.items() if isinstance(v, bytes)}
        self._ahead.update({k: found.get(k) for k in ahead})
        return {k: v for k in keys if (v := found.get(k) if k in found else self._ahead.get(k)) is not None}

    def _remember(self, renders: dict[str, str]) -> None:
        self._ahead.update({k: v for k, v in renders.items() if k in self._ahead})
        softcache.set_many(renders, CARD_CACHE_SECONDS, encode=_compressed)

    def _claim(self, keys: list[str]) -> list[str]:
        """The keys whose render is this request's to make: those no other request is making now (a
        cache that is down: all of them)."""
        claims = {cachekeys.live_claim(key): key for key in keys}
        return [claims[c] for c in softcache.add_many(list(claims), 1, RENDER_WAIT_SECONDS * 2, down=True)]

    def _release(self, keys: list[str]) -> None:
        softcache.delete_many([cachekeys.live_claim(key) for key in keys])

    def _await(self, key: str) -> str | None:
        """Another request's render of `key`, once it is in the cache; None if it is not within the wait."""
        softcache.flush()  # what this request rendered first: the other may be waiting for it
        deadline = time.monotonic() + RENDER_WAIT_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.02)
            self._ahead.pop(key, None)  # read again: another request writes it
            if (found := self._recall([key]).get(key)) is not None:
                return found
        return None

    def render(
        self, names: Iterable[str] | None = None, *, fresh: bool = False, wait: bool = True
    ) -> dict[str, str]:
        """The marked HTML of the named cards (all by default): from the cache unless `fresh`, rendered
        (and cached) otherwise. A card's render is made once for everyone asking for the same version (a
        new turn brings all the page's pollers to the same few cards within a second): the first request
        to miss it renders it while the others wait for it in the cache — or, when not `wait`, go without
        it (left out): a poll then answers with what is ready and gets the rest at its next poll, instead
        of holding a server thread. The renders a request makes are written, and their claims released,
        in one cache call each (a cold page makes ~20: not three per card)."""
        chosen = [self.cards[n] for n in (self.cards if names is None else names)]
        keys = {card.name: self._key(card.name, card.version) for card in chosen}
        if fresh:
            out = {card.name: _unwrap(card.render()) for card in chosen}
            self._remember({keys[name]: html for name, html in out.items()} | self._parted(out))
            return out
        found = self._recall(list(keys.values()))
        missing = [card for card in chosen if keys[card.name] not in found]
        claimed = self._claim([keys[card.name] for card in missing])
        try:
            made = {keys[card.name]: _unwrap(card.render()) for card in missing if keys[card.name] in claimed}
            ours = {c.name: made[keys[c.name]] for c in missing if keys[c.name] in made}
            self._remember(made | self._parted(ours))
        finally:
            self._release(claimed)
        found.update(made)
        for card in missing:
            key = keys[card.name]
            if key not in found and wait:
                html = self._await(key)
                if html is None:  # the other request failed or is slow: render it here
                    html = _unwrap(card.render())
                    self._remember({key: html} | self._parted({card.name: html}))
                found[key] = html
        return {card.name: found[keys[card.name]] for card in chosen if keys[card.name] in found}

    def page(self, names: Iterable[str] | None = None, *, fresh: bool = False) -> dict[str, str]:
        """Every card (or the named ones) for a page load, without markers: the renders of these versions
        the polls share (a card's version says all it shows), or rendered now when `fresh` (a hard reload,
        see `wants_fresh`); kept for the next poll's comparison either way."""
        return {name: strip(html) for name, html in self.render(names, fresh=fresh).items()}

    def keep(self, page: str) -> str:
        """Remember the cards a page rendered in place (marked <!--card:NAME-->…<!--/card-->) for the next
        poll's comparison; the page without markers."""
        rendered = {m[1]: m[2] for m in CARD_BLOCK.finditer(page) if m[1] in self.cards}
        self._remember(
            {self._key(name, self.cards[name].version): html for name, html in rendered.items()}
            | self._parted(rendered)
        )
        return strip(page)

    def only(self, name: str, *also: str) -> str:
        """One card (what a pager asks for), with the cards `also` out of band (the poll, to follow)."""
        rendered = self.render([name, *also])
        return strip("\n".join([rendered[name], *(_oob(rendered[n]) for n in also)]))

    def _part_key(self, name: str, part: str, version: str) -> str:
        return self._key(f"{name}:{part}", version)

    def _manifest(self, card: Card) -> dict[str, str]:
        """The versions of a card's skeleton and parts, kept under the card's version."""
        skeleton, parts = card.laid_out
        versions = {p.id: p.version for p in parts.values()}
        return {self._key(f"{card.name}~parts", card.version): json.dumps([skeleton, versions])}

    def _parted(self, renders: dict[str, str]) -> dict[str, str]:
        """For the cards with parts among `renders` (name: marked HTML): what a later part-wise answer reads,
        kept with the render: the versions of its skeleton and parts, under the card's version."""
        out: dict[str, str] = {}
        for name in renders:
            card = self.cards.get(name)
            if card is not None and card.layout is not None:
                out.update(self._manifest(card))
                for p in card.laid_out[1].values():
                    if p.figure is not None:  # what the next poll's patch starts from
                        keep_figure(self.scope, name, p.id, p.version, p.figure())
        return out

    def _part_steps(self, names: list[str], sent: dict[str, str], also: Iterable[str] = ()) -> dict[str, str]:
        """The changes of the cards `names` whose skeleton is the same as at the version `sent`: only the
        parts whose versions moved, rendered on their own (each kept under its version), and the card's
        version marker; the card itself is not rendered. Cards this cannot answer (no parts, the skeleton
        moved, what the sent version was no longer kept) are left out for the whole-card comparison."""
        cards = [self.cards[n] for n in names if self.cards[n].layout is not None and sent.get(n)]
        kept = self._recall([self._key(f"{c.name}~parts", sent[c.name]) for c in cards])
        plans: dict[str, list[Part]] = {}
        was: dict[str, dict[str, str]] = {}
        for card in cards:
            raw = kept.get(self._key(f"{card.name}~parts", sent[card.name]))
            if raw is None or card.marker is None:
                continue
            was_skeleton, versions = json.loads(raw)
            skeleton, parts = card.laid_out
            if was_skeleton != skeleton or versions.keys() != parts.keys():
                continue
            plans[card.name] = [p for p in parts.values() if versions[p.id] != p.version]
            was[card.name] = versions
        if not plans:
            return {}
        # A part's render is kept under its version: polls a turn or two behind need the same new parts. A
        # rows part's lists are read with them.
        rows = [
            key
            for n, parts in plans.items()
            for p in parts
            if p.rows
            for key in self._rows_to_read(n, p, was[n][p.id], sent[n])
        ]
        plain = [
            self._part_key(n, p.id, p.version) for n, parts in plans.items() for p in parts if not p.rows
        ]
        # What a rows part's render reads, unless its new list is the one this process parsed last.
        reads = [
            key
            for n, parts in plans.items()
            for p in parts
            if p.reads and self._kept_parse(p.id, self._part_key(n, p.id, p.version)) is None
            for key in p.reads()
        ]
        kept = self._recall(plain, also=[*rows, *also], then=reads)
        made: dict[str, str] = {}
        out: dict[str, str] = {}
        for name, changed in plans.items():
            fragments = []
            for p in changed:
                if p.figure is not None:
                    fragments.append(self._figure_step(name, p, was[name][p.id], sent[name]))
                    continue
                if p.rows:
                    fragments += self._rows_step(name, p, was[name][p.id], sent[name])
                    continue
                key = self._part_key(name, p.id, p.version)
                if (html := kept.get(key) or made.get(key)) is None:
                    html = made[key] = p.render()
                fragments.append(_oob(html))
            marker = self.cards[name].marker()
            marker = m[3] if (m := PART.search(marker)) else marker  # the marker part's element
            out[name] = "\n".join([*fragments, _oob(marker)])
        for name in out:
            made.update(self._manifest(self.cards[name]))
        self._remember(made)
        return out

    def _figure_step(self, name: str, part: Part, old_version: str, old_card_version: str) -> str:
        """A figure part's change: a patch from the figure the poll's page has (kept in this process, else
        read from that version's kept card render) to the new one; the new figure whole when there is no
        patch to make."""
        figure = part.figure()
        keep_figure(self.scope, name, part.id, part.version, figure)
        old = kept_figure(self.scope, name, part.id, old_version)
        if old is None:  # another process made the page's render: its card render is in the shared cache
            key = self._key(name, old_card_version)
            old = _figure_of(html, part.id) if (html := self._recall([key]).get(key)) else None
        patch = _patch_script(figure_script_attrs(part.id), old, figure) if old is not None else None
        return patch or _oob(part.render())

    def _rows_keys(
        self, name: str, part: Part, old_version: str, old_card_version: str
    ) -> tuple[str, str, str]:
        """Where a rows part's list is kept now and at the poll's version, and the poll's card render."""
        new_key, old_key = (self._part_key(name, part.id, v) for v in (part.version, old_version))
        return new_key, old_key, self._key(name, old_card_version)

    def _rows_to_read(self, name: str, part: Part, old_version: str, old_card_version: str) -> list[str]:
        """Where a rows part's lists are kept (now, at the poll's version, in the poll's card render), but
        for the one this process parsed last: after a turn, the list the previous poll made (the page's)."""
        new_key, old_key, card_key = self._rows_keys(name, part, old_version, old_card_version)
        if self._kept_parse(part.id, old_key) is not None:
            return [new_key]
        if self._kept_parse(part.id, new_key) is not None:
            return [old_key, card_key]
        return [new_key, old_key, card_key]

    def _rows_step(self, name: str, part: Part, old_version: str, old_card_version: str) -> list[str]:
        """A rows part's change: its rows that arrived, left or changed since the list of the poll's page
        (kept under its version, else read from that version's kept card render); the list whole when
        that is not kept."""
        new_key, old_key, card_key = self._rows_keys(name, part, old_version, old_card_version)
        old = self._parsed_rows(part.id, old_key)
        if old is None and (card := self._recall([card_key]).get(card_key)) is not None:
            old = next((_rows_of(m[2]) for m in ROWS.finditer(card) if m[1] == part.id), None)
        if (new := self._parsed_rows(part.id, new_key)) is None:
            html = part.render()
            self._remember({new_key: html})
            new = self._parsed_rows(part.id, new_key, html)
        if old is None:
            return _whole_rows(part.id, new)
        return _row_fragments(part.id, old, new)

    def _parsed_rows(self, part_id: str, key: str, html: str | None = None) -> _Rows | None:
        """The list kept at `key` (or `html`, its render), parsed; this process's last parse of the list
        reused: the list one poll makes is the one the next poll's page shows."""
        if (kept := self._kept_parse(part_id, key)) is not None:
            return kept
        if html is None and (html := self._recall([key]).get(key)) is None:
            return None
        rows = _rows_of(html)
        localcache.put(("rows-parsed", self.scope, part_id), (key, rows))  # never changed once parsed
        return rows

    def _kept_parse(self, part_id: str, key: str) -> _Rows | None:
        kept = localcache.get(("rows-parsed", self.scope, part_id))
        return kept[1] if kept is not None and kept[0] == key else None

    def answer(self, sent: dict[str, str]) -> str | None:
        """The poll's answer: out-of-band swaps of what changed since the versions `sent`, or None.

        What one card's change from one version to another looks like is the same for every poll, and so is
        the whole answer for polls that sent the same versions (the pollers of one page mostly do): both are
        cached, so most polls cost the markers query and one cache read."""
        changed = [n for n in self.cards if sent.get(n) != self.cards[n].version]
        if not changed:
            return None
        steps = {n: f"{sent.get(n, '')}>{self.cards[n].version}" for n in changed}
        whole_key = self._key("answer", card_version(*sorted(steps.items())))
        step_keys = {n: self._key(n, step) for n, step in steps.items()}
        laid_out = [n for n in changed if self.cards[n].layout is not None and sent.get(n)]
        manifests = [self._key(f"{n}~parts", sent[n]) for n in laid_out]
        found = self._recall([whole_key, *step_keys.values()], also=manifests)
        if whole_key in found:
            return found[whole_key]
        missing = [n for n in changed if step_keys[n] not in found]
        # The cards rendered whole: their renders now and at the poll's versions, read with the parts'.
        whole = [n for n in missing if n not in laid_out]
        renders = [self._key(n, v) for n in whole for v in (self.cards[n].version, sent.get(n)) if v]
        if missing and (parted := self._part_steps(missing, sent, also=renders)):
            made = {step_keys[n]: text for n, text in parted.items()}
            found.update(made)
            self._remember(made)
            missing = [n for n in missing if n not in parted]
        if missing:
            new = self.render(missing, wait=False)
            old = self._recall([self._key(n, sent[n]) for n in new if sent.get(n)])
            made = {}
            for name in new:
                previous = old.get(self._key(name, sent.get(name, "")))
                fragments = card_changes(previous, new[name]) if previous is not None else None
                whole = _oob(new[name])
                made[step_keys[name]] = (
                    whole
                    if fragments is None or sum(map(len, fragments)) >= len(whole)
                    else "\n".join(fragments)
                )
            found.update(made)
            self._remember(made)
        ready = [n for n in changed if step_keys[n] in found]
        if not ready:
            return None  # what changed is being rendered for another poll: this one gets it next time
        text = strip("\n".join(found[step_keys[n]] for n in ready))
        if len(ready) == len(changed):
            self._remember({whole_key: text})
        return text

    def answer_parts(
        self, name: str, old_version: str, parts: dict[str, str], *, found: dict | None = None, also=None
    ) -> str | None:
        """The poll's answer when the caller knows, from cheap markers, that of card `name` only the marked
        parts `parts` changed since `old_version` (id -> the part's new HTML with its markers: rows of a list,
        a stat): the kept render of `old_version` with those parts put in is the current version's render
        (kept for the next poll, as a render would be), and the answer is what `answer` sends for it, made
        without rendering the card or comparing it whole. None when the old render is not kept (or lacks
        a part): the caller answers as usual. `found`: what the caller read from the cache with the old
        render (one read); `also`: entries the caller keeps with the new render (one write)."""
        old_key, new_key = self._key(name, old_version), self._key(name, self.cards[name].version)
        kept = found.get(old_key) if found is not None else softcache.get(old_key)
        old = zlib.decompress(kept).decode() if isinstance(kept, bytes) else None
        new = None if old is None else replace_parts(old, parts)
        if new is None:
            return None
        fragments = _part_changes(old, new, parts)
        whole = _oob(new)
        with softcache.batched():  # one write, made (and the render compressed) after the answer is sent
            softcache.set_many({new_key: new}, CARD_CACHE_SECONDS, encode=_compressed)
            softcache.set_many(also or {}, CARD_CACHE_SECONDS)
        if sum(map(len, fragments)) >= len(whole):
            return strip(whole)
        return strip("\n".join(fragments))


def _span(html: str, pid: str) -> tuple[int, int] | None:
    """Where the marked part `pid` is in a render (found, not parsed: a render is ~100 KB)."""
    start = html.find(f"<!--p:{pid}-->")
    end = -1 if start < 0 else html.find("<!--/p-->", start)
    return None if end < 0 else (start, end + len("<!--/p-->"))


def replace_parts(html: str, parts: dict[str, str]) -> str | None:
    """The marked render `html` with the parts named in `parts` (id -> new HTML, markers included) in place
    of its own; None when one of them is not in it."""
    spans = {pid: _span(html, pid) for pid in parts}
    if None in spans.values():
        return None
    out, at = [], 0
    for pid, (start, end) in sorted(spans.items(), key=lambda kv: kv[1]):
        out += [html[at:start], parts[pid]]
        at = end
    return "".join([*out, html[at:]])


def _part_changes(old: str, new: str, ids: Iterable[str]) -> list[str]:
    """What `card_changes(old, new)` sends when the renders differ in the parts `ids` alone and rows kept
    their places: the changed parts, then per list its changed rows (or the list whole when that is not
    larger), found by position instead of parsing both renders."""
    plain, lists = [], {}
    for pid in ids:
        (o_start, o_end), (n_start, n_end) = _span(old, pid), _span(new, pid)
        head, tail = len(f"<!--p:{pid}-->"), len("<!--/p-->")
        change = (n_start, old[o_start + head : o_end - tail], new[n_start + head : n_end - tail])
        opened = new.rfind("<!--rows:", 0, n_start)
        if opened >= 0 and new.rfind("<!--/rows-->", 0, n_start) < opened:
            lists.setdefault(opened, []).append(change)
        else:
            plain.append(change)
    out = [_oob(after) for _, before, after in sorted(plain) if not _same(before, after)]
    for opened, changes in sorted(lists.items()):
        name_end = new.index("-->", opened)
        rid, inner = (
            new[opened + len("<!--rows:") : name_end],
            new[name_end + 3 : new.index("<!--/rows-->", opened)],
        )
        first = inner.find("-->", inner.find("<!--p:")) + 3
        container = CONTAINER.get(_tag(inner[first : first + 200]), "div")
        whole = _in_template(f'<{container} hx-swap-oob="innerHTML:#{rid}">{inner}</{container}>')
        rows = [_in_template(_oob(after)) for _, before, after in sorted(changes) if not _same(before, after)]
        out += [whole] if sum(map(len, rows)) >= len(whole) else rows
    return out


def kept_rows(
    scope: str, rows: list[tuple[str, object]], render: Callable[[list], str], also: list[str] = ()
) -> list[str]:
    """The rows of a long list (a card's table), each rendered once per its own version and kept in the cache:
    `rows` are (version, item) in order, `render(items)` renders the rows of the items given, in order, each
    one marked part (`<!--p:ID-->…<!--/p-->`). One cache read for them all (with the entries `also` that
    `render` reads); a new turn renders its one row, not the table. A cache that is down renders them all."""
    keys = [_row_key(scope, version) for version, _ in rows]
    # This process's copies first (a row's render never changes under its version): a poll after a turn
    # reads the new row from the shared cache (another process may have rendered it), not the 24 others.
    found = localcache.near(("kept-rows", scope), keys)
    if unknown := [key for key in keys if key not in found]:
        found.update(softcache.get_many(unknown, also=also))
    missing = [i for i, key in enumerate(keys) if not isinstance(found.get(key), str)]
    if missing:
        made = [m[0] for m in PART.finditer(render([rows[i][1] for i in missing]))]
        if len(made) != len(missing):
            raise ValueError(f"{scope}: {len(missing)} rows asked for, {len(made)} rendered")
        fresh = {keys[i]: html for i, html in zip(missing, made, strict=True)}
        softcache.set_many(fresh, CARD_CACHE_SECONDS)
        found.update(fresh)
    # With the other lists of the page (its log lines), newest kept.
    localcache.keep_near(("kept-rows", scope), {key: found[key] for key in keys}, LOCAL_ROWS)
    return [found[key] for key in keys]


def rows_to_read(scope: str, versions: list[str]) -> list[str]:
    """The shared-cache entries `kept_rows` reads for rows of these versions: those this process did not
    keep (a step that renders the rows reads them ahead with its own reads, `Part.reads`)."""
    keys = [_row_key(scope, version) for version in versions]
    kept = localcache.near(("kept-rows", scope), keys)
    return [key for key in keys if key not in kept]


def _row_key(scope: str, version: str) -> str:
    return cachekeys.live_card(scope, "row", version)


@functools.cache
def template_digest(name: str, *modules) -> str:
    """A template's digest (with the source of `modules`, code that writes what it shows), for the versions
    of renders kept in the cache: a changed template or module (a deploy) makes them other versions."""
    import inspect

    from django.template.loader import get_template

    source = get_template(name).template.source + "".join(inspect.getsource(m) for m in modules)
    return hashlib.blake2s(source.encode(), digest_size=6).hexdigest()


def remembered(
    scope: str, name: str, version: str, compute: Callable[[], object], also: list[str] = ()
) -> object:
    """`compute()` once per `version` of what it reads, kept in the cache: a card's version that depends on
    a reading costing queries (the run's "no progress" reading) pays them when its inputs move, not every
    poll. This process's copy first (core.localcache: no cache round trip), then the shared cache's, read
    with the entries `also` that `compute` reads first (one round trip)."""
    key = cachekeys.live_card(scope, name, version)
    kept = localcache.get(("remembered", key)) or softcache.get_many([key], also=also).get(key)
    if isinstance(kept, tuple) and len(kept) == 1:
        localcache.put(("remembered", key), kept)
        return kept[0]
    value = compute()
    softcache.set(key, (value,), CARD_CACHE_SECONDS)
    localcache.put(("remembered", key), (value,))
    return value


def with_token(request, html: str) -> str:
    """A rendered answer with the viewer's CSRF token in place of the cards' placeholder."""
    return html.replace(CSRF_PLACEHOLDER, get_token(request)) if CSRF_PLACEHOLDER in html else html
