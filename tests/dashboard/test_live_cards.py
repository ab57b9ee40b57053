"""The run page's live cards (dashboard/live.py): one poll sends the versions the page shows and gets 204, or
only the cards that changed; within a card only the parts, rows and chart points that changed. Sizes and
contents are asserted, never times."""

from __future__ import annotations

import json
import random
import re
import threading
import zlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.core import cachekeys, localcache, softcache
from smrweb.dashboard import live
from smrweb.dashboard.views import runs
from smrweb.dashboard.views.runs import horizon
from smrweb.tracking import services
from smrweb.tracking.models import Run
from tests.factories import push

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC)
START = NOW - timedelta(hours=10)
URL = "/projects/hill/runs/long/"
MANY = 1200  # more turns than the timeline has bars (300 per kind), so a turn lands in an existing or new bar
TARGET_BYTES = 20_000  # issue 21: one new turn on a 100,000-turn run sends at most this


def turn(n: int, ts: datetime, actor: str = "driver", **extra) -> dict:
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "tokens_in": 1000 + n % 97,
        "tokens_out": 100,
        "cost_usd": 0.001 * (1 + n % 5),
        "ts": ts.isoformat(),
        "tool_calls": [{"name": "bash", "arguments": {"cmd": f"make {n}"}}],
        **extra,
    }


def cards_of(html: str, into: dict | None = None) -> dict:
    """The card versions shown: what the page script sends with its poll (and updates from each answer)."""
    into = {} if into is None else into
    into.update(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    return into


def poll(client, shown: dict, query: str = ""):
    return client.get(
        URL + query, headers={"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    )


@pytest.fixture
def long_run(project):
    """A live run of MANY turns (three actors), scores, messages, checkpoints, a metric, an artifact."""
    with time_machine.travel(START, tick=False):
        push(project, "long", {"type": "state", "state": "running"})
    events = []
    step = (NOW - START - timedelta(minutes=5)) / MANY
    for i in range(MANY):
        ts = START + step * i
        actor = ("driver", "worker-1", "worker-2")[i % 3]
        events.append(turn(i, ts, actor, **({"parent_actor": "driver"} if actor != "driver" else {})))
        if i % 100 == 0:
            events.append({"type": "score", "score": i / MANY, "ts": ts.isoformat()})
            events.append({"type": "message", "body": f"note {i}", "ts": ts.isoformat()})
            events.append({"type": "checkpoint", "label": f"c{i}", "ts": ts.isoformat()})
            events.append(
                {"type": "metric", "key": "loss", "step": i, "value": 1 / (i + 1), "ts": ts.isoformat()}
            )
    with time_machine.travel(NOW - timedelta(minutes=1), tick=False):
        for start in range(0, len(events), 5000):
            push(project, "long", *events[start : start + 5000])
    return Run.objects.get(project=project, external_id="long")


@pytest.fixture
def now():
    """The clock stands still (within one 30-second tick and one timeline step) unless a test moves it."""
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def test_a_poll_after_a_turn_reads_the_cache_in_a_few_calls_and_writes_once(
    client_alice, project, long_run, now, monkeypatch
):
    """Issue 36, item 5: an answer reads what its later steps need with its first reads (the parted cards'
    part versions with the answer; the rows lists and the whole cards' renders with the parts'), and writes
    once when it has answered (core.softcache.batched)."""
    push(project, "long", turn(MANY, NOW - timedelta(seconds=4)))  # 1,201 turns: the pager has its 49 pages
    shown = cards_of(client_alice.get(URL).content.decode())
    push(project, "long", turn(MANY + 1, NOW - timedelta(seconds=3)))
    now.shift(timedelta(seconds=2))
    calls = []
    backend = softcache.cache

    class Recording:
        def __getattr__(self, method):
            original = getattr(backend, method)
            return lambda *args, **kwargs: calls.append(method) or original(*args, **kwargs)

    monkeypatch.setattr(softcache, "cache", Recording())
    answer = poll(client_alice, shown)
    assert answer.status_code == 200 and "turns-body" in answer.content.decode()
    reads = [c for c in calls if c in ("get", "get_many")]
    # get: the clock; get_many: the "no progress" reading (with the turn aggregates' stamp it reads first),
    # the answer (with the parts' versions), the parts (with the rows lists, the whole cards' renders and the
    # turns table's new row: `Part.reads`).
    assert calls.count("get_many") == 3 and len(reads) == 4, calls
    assert "budget" in cards_of(answer.content.decode())
    # No card rendered whole (the budget and the activity line send their parts): no render claimed.
    assert "add" not in calls and "delete_many" not in calls
    assert [c for c in calls if c not in ("get", "get_many")] == ["set_many"]


def test_a_poll_answer_is_sent_before_its_cache_writes(client_alice, project, long_run, now, monkeypatch):
    """The cache writes a poll makes are for later polls: they are made when the WSGI server closes the
    response it has sent (`request_finished`), so the viewer does not wait for them; a request whose response
    was never closed has its writes made by the thread's next request."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections
    from django.test import RequestFactory

    shown = cards_of(client_alice.get(URL).content.decode())
    push(project, "long", turn(MANY, NOW - timedelta(seconds=3)))
    now.shift(timedelta(seconds=2))
    writes: list[list[str]] = []
    backend = softcache.cache

    class Recording:
        def __getattr__(self, method):
            original = getattr(backend, method)
            if method != "set_many":
                return original
            return lambda values, *rest, **kw: writes.append(sorted(values)) or original(values, *rest, **kw)

    monkeypatch.setattr(softcache, "cache", Recording())
    cookie = f"sessionid={client_alice.cookies['sessionid'].value}"
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_X_SMRWEB_CARDS": live.cards_header(shown)}
    headers["HTTP_COOKIE"] = cookie
    # As a WSGI server runs Django (the test client closes every response itself): the database
    # connection is the test's, not closed between requests.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        handler = WSGIHandler()
        response = handler(RequestFactory().get(URL, **headers).environ, lambda status, headers: None)
        body = b"".join(response).decode()
        assert response.status_code == 200 and "turns-body" in body
        assert writes == []  # sent, nothing written yet
        response.close()
        assert len(writes) == 1 and any(":turns-card:" in key for key in writes[0])  # one write, at close
        answer_keys = [key for key in writes[0] if ":answer:" in key]
        assert len(answer_keys) == 1 and softcache.get(answer_keys[0]) is not None

        writes.clear()
        unclosed = handler(RequestFactory().get(URL, **headers).environ, lambda status, headers: None)
        assert unclosed.status_code == 200 and writes == []  # the same answer, read from the cache
        push(project, "long", turn(MANY + 1, NOW - timedelta(seconds=1)))
        now.shift(timedelta(seconds=1))
        never_closed = handler(RequestFactory().get(URL, **headers).environ, lambda status, headers: None)
        assert never_closed.status_code == 200 and writes == []
        last = handler(RequestFactory().get(URL, **headers).environ, lambda status, headers: None)
        assert len(writes) == 1 and any(":turns-card:" in key for key in writes[0])  # the unclosed one's
        last.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def test_one_new_turn_sends_only_the_changed_cards_rows_and_points(client_alice, project, long_run, now):
    page = client_alice.get(URL).content.decode()
    shown = cards_of(page)
    assert poll(client_alice, shown).status_code == 204

    push(project, "long", turn(MANY, NOW - timedelta(seconds=3)))
    now.shift(timedelta(seconds=2))
    answer = poll(client_alice, shown)
    body = answer.content.decode()
    assert answer.status_code == 200
    assert len(answer.content) <= TARGET_BYTES, len(answer.content)
    assert len(answer.content) * 10 < len(page)  # every change used to re-send the whole live part
    changed = set(cards_of(body))
    # What a turn changes: the last activity, the title's "no progress" badge, the stats, the chart, the
    # budget, the actors, the turns table (and its "no progress" banner). Nothing else is sent.
    assert {"run-activity", "run-stats", "run-timeline-card", "budget", "run-actors", "turns-card"} <= changed
    assert changed <= {
        "run-activity",
        "run-head",
        "run-stats",
        "run-timeline-card",
        "budget",
        "run-actors",
        "turns-card",
        "run-alerts",
    }
    for untouched in ("run-submissions", "artifacts-card", "run-messages", "run-checkpoints", "run-states"):
        assert f'id="{untouched}"' not in body
    # The turns table: the new row on top and the oldest shown row out; not the table.
    assert 'hx-swap-oob="afterbegin:#turns-body"' in body and f'data-turn="{MANY}"' in body
    assert len(re.findall(r"<tr ", body)) <= 4 and 'hx-swap-oob="delete"' in body
    assert '<section hx-swap-oob="true" class="card" id="turns-card">' not in body
    # The chart: a patch of the points that changed at the ends of its traces, not the figure.
    patch = json.loads(
        re.search(r'<script id="run-timeline-data"[^>]*data-figure-patch[^>]*>(.*?)</script>', body)[1]
    )
    figure = json.loads(
        re.search(r'<script id="run-timeline-data" type="application/json">(.*?)</script>', page)[1]
    )
    assert patch["base"] == [len(t["x"]) for t in figure["data"]]
    assert patch["traces"] and all(len(values) <= 2 for _, _, _, values in patch["traces"])
    bars = [i for i, t in enumerate(figure["data"]) if t["type"] == "bar" and t["yaxis"] == "y2"]
    assert {i for i, key, _, _ in patch["traces"] if key == "y"} & set(bars)  # a bar grew or was appended

    # The page applies the answer (its versions follow); the next poll is 204 again.
    cards_of(body, shown)
    assert poll(client_alice, shown).status_code == 204


def test_one_new_score_on_a_run_of_thousands_sends_a_patch_not_the_figure(
    client_alice, project, long_run, now
):
    """Past MAX_SCORE_POINTS scores the chart shows every k-th (k a power of two), the records and the last:
    a new score keeps the others in place, so the chart gets a few points, not a resampled series."""
    # 2,987 and the run's 12 make 2,999: the new score is the 3,000th, where a stride of count // 600 + 1
    # (what the chart used) would step from 5 to 6 and pick other scores all along.
    step = (NOW - START - timedelta(minutes=5)) / 2987
    rng = random.Random(4)
    scores = [
        {"type": "score", "score": rng.random(), "ts": (START + step * i).isoformat()} for i in range(2987)
    ]
    with time_machine.travel(NOW - timedelta(minutes=1), tick=False):
        push(project, "long", *scores)
    page = client_alice.get(URL).content.decode()
    shown = cards_of(page)
    push(project, "long", {"type": "score", "score": 0.5, "ts": (NOW - timedelta(seconds=3)).isoformat()})
    now.shift(timedelta(seconds=2))
    answer = poll(client_alice, shown)
    body = answer.content.decode()
    assert answer.status_code == 200 and len(answer.content) <= TARGET_BYTES, len(answer.content)
    patch = json.loads(
        re.search(r'<script id="run-timeline-data"[^>]*data-figure-patch[^>]*>(.*?)</script>', body)[1]
    )
    print("PATCH", [(i, k, keep, len(v)) for i, k, keep, v in patch["traces"]], len(answer.content))
    assert patch["traces"] and all(len(values) <= 3 for _, _, _, values in patch["traces"])


@pytest.mark.parametrize("same_process", [True, False], ids=["same-process", "other-process"])
def test_the_patch_rebuilds_the_figure_the_server_would_send(
    client_alice, project, long_run, now, monkeypatch, same_process
):
    """What the page does with a patch (smrweb.js applyPatch), done here: the result is the figure. The
    patch is the timeline card's figure part alone (the card is not rendered), made from the figure this
    process kept, or, when another process drew the page (nothing kept here), from the card's kept render."""
    page = client_alice.get(URL).content.decode()
    shown = cards_of(page)
    figure = json.loads(
        re.search(r'<script id="run-timeline-data" type="application/json">(.*?)</script>', page)[1]
    )
    if not same_process:
        localcache.clear()
    rendered: list[str] = []
    card = runs.RunPage.render_card
    monkeypatch.setattr(runs.RunPage, "render_card", lambda page, *a: rendered.append(a[0]) or card(page, *a))
    push(project, "long", turn(MANY, NOW - timedelta(seconds=3)), turn(MANY + 1, NOW - timedelta(seconds=2)))
    now.shift(timedelta(seconds=2))
    body = poll(client_alice, shown).content.decode()
    assert "run-timeline-card" not in rendered
    assert 'class="card" id="run-timeline-card"' not in body and "data-figure-patch" in body
    patch = json.loads(re.search(r"data-figure-patch[^>]*>(.*?)</script>", body)[1])
    for trace, key, keep, values in patch["traces"]:
        figure["data"][trace][key] = figure["data"][trace][key][:keep] + values
    for key, value in patch["layout"].items():
        figure["layout"][key] = value
    fresh = client_alice.get(URL).content.decode()
    assert figure == json.loads(
        re.search(r'<script id="run-timeline-data" type="application/json">(.*?)</script>', fresh)[1]
    )


def test_a_changed_budget_sends_the_whole_timeline(client_alice, project, long_run, now):
    shown = cards_of(client_alice.get(URL).content.decode())
    services.update_run_settings(project, "long", budget_usd=Decimal("2.50"))
    body = poll(client_alice, shown).content.decode()
    assert '<section hx-swap-oob="true" class="card" id="run-timeline-card">' in body
    assert "data-figure-patch" not in body
    figure = json.loads(
        re.search(r'<script id="run-timeline-data" type="application/json">(.*?)</script>', body)[1]
    )
    assert any(t["name"] == "budget $2.50" for t in figure["data"])
    assert "budget" in cards_of(body)


def test_the_timeline_keeps_its_bars_until_its_end_passes(client_alice, project, long_run, now):
    """The axis of a live run ends at `horizon` (a power-of-two step ahead): within it the bars keep their
    width and turns are patched in; once now passes it, the figure is binned anew and sent whole."""
    run = long_run
    end = horizon(run, NOW)
    age = (NOW - run.started_at).total_seconds()
    assert NOW <= end <= NOW + timedelta(seconds=age / 32)
    shown = cards_of(client_alice.get(URL).content.decode())
    now.move_to(end + timedelta(seconds=1))
    push(project, "long", turn(MANY, end))
    body = poll(client_alice, shown).content.decode()
    assert '<section hx-swap-oob="true" class="card" id="run-timeline-card">' in body


def test_the_metric_panel_follows_the_key_the_page_shows(client_alice, project, long_run, now):
    page = client_alice.get(URL).content.decode()
    shown = cards_of(page)
    assert "metric-panel" in shown and 'hx-include="#metrics-card .card-head"' in page
    head = page.split('id="metrics-card"', 1)[1].split("</div>", 1)[0]
    assert 'id="metric-key"' in head  # the poll sends the key the picker shows
    push(project, "long", {"type": "metric", "key": "loss", "step": MANY, "value": 0.001})
    body = poll(client_alice, shown, "?key=loss").content.decode()
    assert set(cards_of(body)) == {"metric-panel", "run-activity"}  # and the run's last activity
    assert 'id="run-h1"' not in body and 'id="run-last-activity"' in body
    assert "data-figure-patch" in body and f"{MANY // 100 + 1} points stored" in body
    # The key picker swaps the panel for another key; it comes with its own version.
    other = client_alice.get(
        "/projects/hill/runs/long/metrics/", {"key": "loss"}, headers={"HX-Request": "true"}
    )
    assert other.status_code == 200 and 'data-card="metric-panel"' in other.content.decode()


def test_a_pager_gets_its_card_and_the_poll_follows_the_page(client_alice, project, long_run, now):
    page = client_alice.get(URL).content.decode()
    shown = cards_of(page)
    answer = client_alice.get(
        URL + "?turns_page=2", headers={"HX-Request": "true", live.ONLY_HEADER: "turns-card"}
    ).content.decode()
    assert answer.lstrip().startswith('<section class="card" id="turns-card">')
    assert set(cards_of(answer)) == {"turns-card", "run-poll", "artifacts-card", "run-logs"}  # links follow
    cards_of(answer, shown)
    # Polling page 2: a new turn moves one row from page 1 to the top of page 2.
    assert poll(client_alice, shown, "?turns_page=2").status_code == 204
    push(project, "long", turn(MANY, NOW - timedelta(seconds=3)))
    body = poll(client_alice, shown, "?turns_page=2").content.decode()
    assert 'hx-swap-oob="afterbegin:#turns-body"' in body and f'data-turn="{MANY}"' not in body
    assert f"26–50 of {MANY + 1}" in body


def test_a_poll_never_waits_for_a_render_another_poll_is_making(
    client_alice, project, long_run, now, monkeypatch
):
    """While one poll renders a card's new version, the others answer with what is ready (here: the parts a
    turn moves, rendered on their own, not the cards) and get the card at their next poll, rather than
    holding a server thread."""
    shown = cards_of(client_alice.get(URL).content.decode())
    push(project, "long", turn(MANY, NOW - timedelta(seconds=3)))
    with monkeypatch.context() as busy:
        busy.setattr(softcache.cache, "add", lambda *args, **kwargs: False)  # every render is someone else's
        ready = poll(client_alice, shown)
        assert ready.status_code in (200, 204) and f'data-turn="{MANY}"' not in ready.content.decode()
    answer = poll(client_alice, shown)
    assert answer.status_code == 200 and f'data-turn="{MANY}"' in answer.content.decode()


def test_a_page_load_takes_the_cards_the_polls_share_and_a_hard_reload_renders_them(
    client_alice, project, long_run, now, monkeypatch
):
    """A card's version says everything it shows, so a page load serves the render kept under it (rendered
    once for every viewer) instead of rendering the page's cards again; a hard reload renders afresh."""
    client_alice.get(URL)  # renders and keeps every card
    renders = []
    original = live.Deck.render

    def counting(deck, names=None, *, fresh=False, wait=True):
        out = original(deck, names, fresh=fresh, wait=wait)
        renders.append(fresh)
        return out

    monkeypatch.setattr(live.Deck, "render", counting)
    from smrweb.dashboard.views import runs

    rendered = []
    card = runs.RunPage.render_card
    monkeypatch.setattr(runs.RunPage, "render_card", lambda page, *a: rendered.append(a[0]) or card(page, *a))
    page = client_alice.get(URL).content.decode()
    assert rendered == [] and renders == [False] and f'data-turn="{MANY - 1}"' in page
    hard = client_alice.get(URL, headers={"Cache-Control": "no-cache"}).content.decode()
    assert renders[-1] is True and "run-head" in rendered and "turns-card" in rendered
    assert cards_of(hard) == cards_of(page)


def test_a_cold_page_renders_each_card_once_in_few_cache_calls_and_waits_for_one_being_rendered(
    client_alice, project, long_run, now, monkeypatch
):
    """With nothing kept (a restart, an evicted cache), a page load claims each card, renders it, and writes
    every render and releases the claims when the page is made (core.softcache.batched: one write and one
    delete here, one pipeline on Redis); a card another request is rendering (claimed by it) is waited for and
    taken from the cache, not rendered twice."""
    from smrweb.dashboard.views import runs

    shown = cards_of(client_alice.get(URL).content.decode())
    stats_key = cachekeys.live_card(f"run-{long_run.pk}", "run-stats", shown["run-stats"])
    stats_render = softcache.cache.get(stats_key)
    assert stats_render is not None
    softcache.cache.clear()
    localcache.clear()  # a restart: nothing kept in the process either

    calls = []

    class Recording:
        """The cache, with its calls on live keys written down."""

        def __init__(self, cache):
            self._cache = cache

        def __getattr__(self, method):
            original = getattr(self._cache, method)

            def recording(*args, **kwargs):
                keys = args[0] if args and isinstance(args[0], (list, dict)) else args[:1]
                if any(str(k).startswith("live:") for k in keys):
                    calls.append((method, len(keys)))
                return original(*args, **kwargs)

            return recording

    rendered = []
    card = runs.RunPage.render_card
    monkeypatch.setattr(runs.RunPage, "render_card", lambda page, *a: rendered.append(a[0]) or card(page, *a))
    other = softcache.cache  # the other request's calls are not this page's
    other.add(cachekeys.live_claim(stats_key), 1, 30)  # another request is rendering the stats card
    finish = threading.Timer(0.3, lambda: other.set(stats_key, stats_render, 30))
    monkeypatch.setattr(softcache, "cache", Recording(softcache.cache))  # the live cards' one way to it
    finish.start()
    try:
        page = client_alice.get(URL).content.decode()
    finally:
        finish.join()
    assert cards_of(page) == shown
    assert "run-stats" not in rendered and len(rendered) == len(set(rendered)) >= 15
    made = len(rendered)
    claims = [c for c in calls if c[0] == "add"]
    assert claims == [("add", 1)] * (made + 1)  # one claim per card missing, the stats card's refused
    # Read first: the "no progress" reading the cards' versions read (with the turn aggregates' stamp it
    # starts from), the run's best score it is read from. Written in one call when the page is made: those two
    # readings, the turns table's rows, the renders and the part versions of those that have parts; then the
    # claims released.
    assert calls[:2] == [("get_many", 2), ("get_many", 1)], calls
    writes = [c for c in calls if c[0] not in ("add", "get", "get_many")]
    rows = 25  # runs.TURNS_PER_PAGE
    parted = len(set(runs.RunPage.PARTS) & set(rendered))
    assert writes == [("set_many", 2 + rows + made + parted), ("delete_many", made)]


def test_cards_with_forms_keep_the_viewers_token(client_alice, client, alice, bob, project):
    push(project, "r1", {"type": "state", "state": "running"}, turn(0, NOW - timedelta(hours=1)))
    page = client_alice.get("/projects/hill/runs/r1/").content.decode()
    assert live.CSRF_PLACEHOLDER not in page
    assert re.search(r'name="csrfmiddlewaretoken" value="[A-Za-z0-9]{64}"', page.split('id="run-actions"')[1])
    shown = cards_of(page)
    services.snooze_run(Run.objects.get(external_id="r1"), by=alice, hours=2)  # the form becomes "Unsnooze"
    client.force_login(bob)
    body = client.get(
        "/projects/hill/runs/r1/", headers={"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    ).content.decode()
    assert 'id="run-actions"' in body and "Unsnooze alerts" in body and live.CSRF_PLACEHOLDER not in body
    assert re.search(r'name="csrfmiddlewaretoken" value="[A-Za-z0-9]{64}"', body)


# --- the comparison itself ------------------------------------------------------------------------------


def card(*rows: str, head: str = "3 rows", residue: str = "") -> str:
    items = "".join(f'<!--p:r{r}--><li id="r{r}">row {r}</li><!--/p-->' for r in rows)
    return (
        f'<section id="c"><!--p:head--><span id="head">{head}</span><!--/p-->'
        f'<ul id="list"><!--rows:list-->{items}{residue}<!--/rows--></ul></section>'
    )


def test_rows_kept_in_place_are_a_longest_common_subsequence_with_or_without_the_shortcut():
    """Rows that kept their order (the shortcut: new rows on top, old ones gone below) and any other change
    (moves, swaps) find the same rows as comparing every pair does."""
    rng = random.Random(36)
    for _ in range(500):
        old = [f"r{i}" for i in rng.sample(range(40), rng.randint(0, 25))]
        shift = rng.randint(0, 5)
        new = [f"r{100 + i}" for i in range(shift)] + old[: max(len(old) - shift, 0)]
        if rng.random() < 0.5 and len(new) > 1:  # a row moved or two swapped
            i, j = rng.sample(range(len(new)), 2)
            new[i], new[j] = new[j], new[i]
        kept = live._kept_in_place(old, new)
        assert kept == live._longest_common(old, new)
        stayed = [x for x in old if x in kept]
        assert stayed == [x for x in new if x in kept]  # a common subsequence, in both orders


def test_rows_inserted_on_top_deleted_below_and_changed_in_place():
    out = live.card_changes(card("3", "2", "1"), card("5", "4", "3", "2", head="5 rows"))
    text = "".join(out)
    assert '<span hx-swap-oob="true" id="head">5 rows</span>' in text
    assert '<ul hx-swap-oob="afterbegin:#list"><li id="r5">row 5</li><li id="r4">row 4</li></ul>' in text
    assert '<li id="r1" hx-swap-oob="delete"></li>' in text
    assert 'id="r2"' not in text and 'id="r3"' not in text  # unchanged rows stay
    changed = live.card_changes(card("2", "1"), card("2", "1").replace("row 1", "row one"))
    assert changed == ['<template><li hx-swap-oob="true" id="r1">row one</li></template>']


def test_a_row_that_moved_is_taken_out_and_put_back_after_the_row_it_now_follows():
    moved = live.card_changes(card("1", "2", "3", "4"), card("3", "1", "2", "4"))
    assert moved == [
        '<template><li id="r3" hx-swap-oob="delete"></li></template>',
        '<template><ul hx-swap-oob="afterbegin:#list"><li id="r3">row 3</li></ul></template>',
    ]
    assert live.card_changes(card("1", "2", "3"), card("1", "3", "2")) == [
        '<template><li id="r2" hx-swap-oob="delete"></li></template>',
        '<template><ul hx-swap-oob="afterend:#r3"><li id="r2">row 2</li></ul></template>',
    ]


def test_lists_that_do_not_line_up_and_other_markup_changes_go_whole():
    shuffled = live.card_changes(card("1", "2", "3"), card("3", "2", "1"))  # moving two rows is no smaller
    rows = card("3", "2", "1").split("<!--rows:list-->")[1].split("<!--/rows-->")[0]
    assert shuffled == [f'<template><ul hx-swap-oob="innerHTML:#list">{rows}</ul></template>']
    assert len(live.card_changes(card("1"), card("1", residue="<li>empty</li>"))) == 1
    assert (
        live.card_changes(card("1"), card("1").replace('<section id="c">', '<section id="c" hidden>')) is None
    )
    # Relative times are kept current by the page script: a re-render later is no change.
    time = '<time datetime="2026-01-01T00:00:00+00:00" data-ago="long">{}</time>'
    ticking = f'<!--p:t--><b id="t">{time}</b><!--/p-->'
    assert live.card_changes(ticking.format("3s ago"), ticking.format("9m ago")) == []


def test_figure_patches_append_cut_and_refuse_a_new_shape():
    old = {
        "data": [{"type": "bar", "x": [1, 2, 3], "y": [5, 5, 5]}, {"type": "scatter", "x": [0], "y": [1]}],
        "layout": {"height": 560, "yaxis": {"range": [0, 1]}},
    }
    new = {
        "data": [
            {"type": "bar", "x": [1, 2, 3, 4], "y": [5, 5, 6, 1]},
            {"type": "scatter", "x": [0], "y": [1]},
        ],
        "layout": {"height": 560, "yaxis": {"range": [0, 2]}},
    }
    assert live.figure_patch(old, new) == {
        "base": [3, 1],
        "traces": [[0, "x", 3, [4]], [0, "y", 2, [6, 1]]],
        "layout": {"yaxis": {"range": [0, 2]}},
    }
    assert live.figure_patch(old, {**new, "data": new["data"][:1]}) is None  # a trace went
    restyled = {**new, "data": [{**new["data"][0], "type": "scatter"}, new["data"][1]]}
    assert live.figure_patch(old, restyled) is None


def test_the_common_prefix_of_two_arrays_is_the_one_an_item_by_item_loop_finds():
    rng = random.Random(36)
    for _ in range(2000):
        a = [rng.choice("ab") for _ in range(rng.randint(0, 12))]
        b = a[: rng.randint(0, len(a))] + [rng.choice("abc") for _ in range(rng.randint(0, 12))]
        naive = 0
        while naive < min(len(a), len(b)) and a[naive] == b[naive]:
            naive += 1
        assert live._common_prefix(a, b) == naive == live._common_prefix(b, a), (a, b)
    same = [[i, "d"] for i in range(500)]
    assert live.figure_patch({"data": [{"x": same}]}, {"data": [{"x": [*same[:499], [0, "c"]]}]}) == {
        "base": [500],
        "traces": [[0, "x", 499, [[0, "c"]]]],
        "layout": {},
    }


# --- the project page's runs block ----------------------------------------------------------------------


def test_a_change_to_one_run_sends_its_row_not_the_project_table(client_alice, project, now):
    for i in range(30):
        push(
            project, f"p{i}", {"type": "state", "state": "running"}, turn(0, NOW - timedelta(minutes=60 - i))
        )
    page = client_alice.get("/projects/hill/").content.decode()
    shown = cards_of(page)
    assert (
        set(shown) == {"project-live"}
        and live.CSRF_PLACEHOLDER not in page
        and "<!--" not in page.split("<main")[1]
    )
    headers = {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    assert client_alice.get("/projects/hill/", headers=headers).status_code == 204

    now.shift(timedelta(seconds=2))  # (the project's version is made of its runs' `updated` stamps)
    push(project, "p3", turn(1, NOW - timedelta(seconds=5)))  # one run moves on, to the top: newest first
    answer = client_alice.get("/projects/hill/", headers=headers)
    body = answer.content.decode()
    pk = Run.objects.get(external_id="p3").pk
    assert answer.status_code == 200 and f'id="run-row-{pk}"' in body
    assert len(re.findall(r'<tr data-run="', body)) == 1  # that row, not the table of 25
    assert len(answer.content) < len(page) / 10
    cards_of(body, shown)
    headers[live.CARDS_HEADER] = live.cards_header(shown)
    assert client_alice.get("/projects/hill/", headers=headers).status_code == 204


def test_a_poll_after_one_runs_turn_renders_that_row_alone(client_alice, alice, project, now, monkeypatch):
    """The server side of the test above: the other rows come from the cache (kept under every column of
    their run), so the poll renders one row and reads one run's sparkline scores, not the table's 25."""
    from smrweb.dashboard.views import projects as project_views
    from smrweb.tracking import queries

    for i in range(30):
        push(project, f"p{i}", turn(0, NOW - timedelta(minutes=60 - i)), {"type": "score", "score": i / 10})
    shown = cards_of(client_alice.get("/projects/hill/").content.decode())
    headers = {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    rendered: list[list[str]] = []
    real = project_views.render_to_string

    def spy(name, context=None, **kw):
        if name.endswith("#run-rows"):
            rendered.append([run.external_id for run, _ in context["rows"]])
        return real(name, context, **kw)

    monkeypatch.setattr(project_views, "render_to_string", spy)
    read: list[list[int]] = []
    real_histories = queries.score_histories
    monkeypatch.setattr(
        queries, "score_histories", lambda ids, **kw: real_histories(read.append(list(ids)) or read[-1], **kw)
    )
    now.shift(timedelta(seconds=2))
    push(project, "p3", turn(1, NOW - timedelta(seconds=5)))
    answer = client_alice.get("/projects/hill/", headers=headers)
    pk = Run.objects.get(external_id="p3").pk
    assert answer.status_code == 200 and f'id="run-row-{pk}"' in answer.content.decode()
    assert rendered == [["p3"]]
    assert read == [[pk]]  # its sparkline's scores alone
    # A change to a column of another run (its pin) renders that row again, as a new turn does.
    rendered.clear()
    cards_of(answer.content.decode(), shown)
    headers[live.CARDS_HEADER] = live.cards_header(shown)
    now.shift(timedelta(seconds=2))
    services.update_run_labels(Run.objects.get(external_id="p7"), by=alice, pinned=True)
    answer = client_alice.get("/projects/hill/", headers=headers)
    assert answer.status_code == 200 and "data-pinned" in answer.content.decode()
    assert rendered == [["p7"]]


# Issue 36, item 5: a poll after one run's change whose block otherwise reads the same puts that run's row
# into the kept render of the block (dashboard/views/projects.py `_changed_rows_alone`, `Deck.answer_parts`).


def _kept_block(project, shown: dict) -> str:
    """The project block's render kept under the version `shown` (alice's: whether she may roll back, UTC)."""
    from django.contrib.auth import get_user_model

    from smrweb.tracking.services.capabilities import Action, may

    viewer = f"{may(get_user_model().objects.get(username='alice'), project, Action.ROLL_BACK)}|UTC"
    key = cachekeys.live_card(
        f"project-{project.pk}", "project-live", live.card_version(shown["project-live"], viewer)
    )
    kept = softcache.get(key)
    assert kept is not None, "the block's render is kept under its version"
    return zlib.decompress(kept).decode()


def _tokenless(html: str) -> str:
    return re.sub(
        r'(name="csrfmiddlewaretoken" value=")[^"]*', r"\1", html.replace(live.CSRF_PLACEHOLDER, "")
    )


# The fourth: a table with chosen columns (a tag, a metric, a spend part), sorted by one of them, grouped.
CHOSEN = "col=tag%3Aa&col=metric%3Aloss&col=spend%3Achild_usd&sort=-col%3Ametric%3Aloss&group=tag%3Ab"


@pytest.mark.parametrize("seed, query", [(1, ""), (2, ""), (3, ""), (4, CHOSEN)])
def test_the_block_after_random_changes_is_what_a_full_render_shows(
    client_alice, alice, project, now, monkeypatch, seed, query
):
    """After random turns, metric points, scores, state changes, pins, tags and exclusions, each poll's
    answer is what comparing the kept render with a full render sends (`live.card_changes`), and the render
    it keeps for the next poll is the full render — whichever way the poll was answered (its row alone or
    the block); with chosen columns too (their values are read with the changed rows)."""
    from smrweb.dashboard.views import projects as project_views
    from smrweb.tracking.models import Submission
    from smrweb.tracking.services import submissions

    rng = random.Random(seed)
    project.regression_threshold = 0.3
    project.save()
    names = [f"p{i:02d}" for i in range(28)]  # a second page of runs too
    for i, name in enumerate(names):
        push(project, name, turn(0, NOW - timedelta(minutes=90 - i)), {"type": "score", "score": i / 30})
    real = project_views._changed_rows_alone
    ways = []
    monkeypatch.setattr(
        project_views, "_changed_rows_alone", lambda *a: ways.append(real(*a) is not None) or real(*a)
    )
    url = f"/projects/hill/?{query}" if query else "/projects/hill/"
    page = client_alice.get(url).content.decode()
    shown = cards_of(page)
    for step in range(40):
        old = _kept_block(project, shown)
        now.shift(timedelta(seconds=2))
        # Mostly the run on top (the live one a viewer watches: its row changes in place), any run else.
        top = Run.objects.order_by("-pinned", "-last_progress_at", "-id").first().external_id
        name, op = rng.choice([top] * 28 + names), rng.random()
        run = Run.objects.get(external_id=name)
        if op < 0.5:
            loss = {"type": "metric", "key": "loss", "step": step, "value": (step * 7 % 13) / 13}
            push(project, name, turn(step + 1, NOW + timedelta(seconds=2 * step)), loss)
        elif op < 0.65:
            push(project, name, {"type": "score", "score": round(rng.random(), 2)})
        elif op < 0.72:
            push(project, name, {"type": "state", "state": rng.choice(["running", "failed", "done"])})
        elif op < 0.8:
            services.update_run_labels(run, by=alice, pinned=not run.pinned)
        elif op < 0.87:
            services.set_tag(run, key=rng.choice(["a", "b"]), value=str(step), by=alice)
        elif op < 0.94:
            sub = Submission.objects.filter(run=run, excluded_at__isnull=True).first()
            if sub is not None:
                submissions.exclude_submission(sub, by=alice, reason="junk")
        else:
            push(
                project,
                name,
                {
                    "type": "agent.turn",
                    "turn": 10_000 + step,
                    "actor": "driver",
                    "cost_usd": 50,
                    "ts": NOW.isoformat(),
                },
            )  # over any budget
        headers = {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
        answer = client_alice.get(url, headers=headers)
        if answer.status_code == 204:
            continue
        body = answer.content.decode()
        cards_of(body, shown)
        kept = _kept_block(project, shown)
        # A page load now renders the block whole (and keeps that render under the same version).
        client_alice.get(url, headers={"Cache-Control": "no-cache"})
        fresh = _kept_block(project, shown)
        assert live.TICKING.sub(r"\1\2", kept) == live.TICKING.sub(r"\1\2", fresh), step
        fragments = live.card_changes(old, fresh)
        whole = live._oob(fresh)
        expected = (
            whole if fragments is None or sum(map(len, fragments)) >= len(whole) else "\n".join(fragments)
        )
        assert _tokenless(body) == _tokenless(live.strip(expected)), step
    assert sum(ways) >= 8 and not all(ways)  # both ways were taken


def _block_renders(monkeypatch) -> list[str]:
    from smrweb.dashboard.views import projects as project_views

    rendered: list[str] = []
    real = project_views.render_to_string

    def spy(name, context=None, **kw):
        rendered.append(name.split("#")[-1])
        return real(name, context, **kw)

    monkeypatch.setattr(project_views, "render_to_string", spy)
    return rendered


def test_a_poll_after_one_runs_turn_reads_neither_the_runs_page_nor_the_leaderboard(
    client_alice, project, now, monkeypatch
):
    for i in range(30):
        push(project, f"p{i}", turn(0, NOW - timedelta(minutes=60 - i)), {"type": "score", "score": i / 10})
    shown = cards_of(client_alice.get("/projects/hill/").content.decode())
    headers = {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    rendered = _block_renders(monkeypatch)
    now.shift(timedelta(seconds=2))
    push(project, "p29", turn(1, NOW - timedelta(seconds=5)))  # the newest run, on top: it stays there
    with CaptureQueriesContext(connection) as seen:
        answer = client_alice.get("/projects/hill/", headers=headers)
    pk = Run.objects.get(external_id="p29").pk
    assert answer.status_code == 200 and f'id="run-row-{pk}"' in answer.content.decode()
    assert "project-live" not in rendered and "run-rows" in rendered  # its row, not the block
    sql = [q["sql"] for q in seen.captured_queries]
    page_tags = [q for q in sql if "tracking_runtag" in q and "IN (" in q and str(pk) not in q]
    assert not page_tags and not [q for q in sql if 'ORDER BY "tracking_run"."pinned" DESC' in q]  # nor page
    # Of the submissions, besides their markers (read with the changed runs, `with_submission_markers`):
    changed_runs = [
        q for q in sql if q.startswith('SELECT "tracking_run"."id"') and "tracking_submission" in q
    ]
    board = [q for q in sql if "tracking_submission" in q and q not in changed_runs]
    assert (
        len(changed_runs) == 1 and len(board) == 1
    )  # the new row's sparkline alone: no leaderboard, no bests
    cards_of(answer.content.decode(), shown)
    headers[live.CARDS_HEADER] = live.cards_header(shown)
    assert client_alice.get("/projects/hill/", headers=headers).status_code == 204
    # The next turn, the next poll (no page load between): its row alone again.
    rendered.clear()
    now.shift(timedelta(seconds=2))
    push(project, "p29", turn(2, NOW - timedelta(seconds=1)))
    answer = client_alice.get("/projects/hill/", headers=headers)
    assert answer.status_code == 200 and f'id="run-row-{pk}"' in answer.content.decode()
    assert "project-live" not in rendered and "run-rows" in rendered


def _polls_after_one_turn(client, project, now, runs: int) -> tuple[int, int]:
    for i in range(runs):
        push(
            project,
            f"q{i:03d}",
            turn(0, NOW - timedelta(minutes=200 - i)),
            {"type": "score", "score": i / runs},
        )
    page = client.get("/projects/hill/").content.decode()
    shown = cards_of(page)
    chart = re.search(r'id="project-chart".*?"X-Smrweb-Version": "([^"]+)"', page, re.S)[1]
    now.shift(timedelta(seconds=2))
    push(project, f"q{runs - 1:03d}", turn(1, NOW - timedelta(seconds=5)))
    counts = []
    for url, headers in (
        ("/projects/hill/", {live.CARDS_HEADER: live.cards_header(shown)}),
        ("/projects/hill/chart/", {live.VERSION_HEADER: chart}),
    ):
        with CaptureQueriesContext(connection) as seen:
            answer = client.get(url, headers={"HX-Request": "true", **headers})
        assert answer.status_code == (200 if url == "/projects/hill/" else 204)
        counts.append(len(seen.captured_queries))
    return counts[0], counts[1]


@pytest.mark.parametrize("runs", [10, 100])
def test_both_project_polls_after_one_turn_cost_the_same_queries_at_10_and_100_runs(
    client_alice, project, now, runs
):
    cards, chart = _polls_after_one_turn(client_alice, project, now, runs)
    assert (cards, chart) == (10, 7)  # the changed run read with its submissions marker: one query
