"""A cache that is down is a miss, never an error, and the rule has one home (`core.softcache`): the reads
kept under a version (`queries.kept`), the run's turn aggregates (`queries.timeline`) and the live cards
(`dashboard.live`) ask it, and so does forgetting those aggregates on the write path. No other module
reads the cache in its own try/except, apart from those that use it for correctness (leases, claims,
rate limits)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.cache import cache

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run
from smrweb.tracking.queries import kept, timeline

ROOT = Path(kept.__file__).resolve().parents[3]
# What may import the cache itself: the rule's home and the modules that need the cache for
# correctness (leases and claims); the live cards ask softcache, their render claims included.
CACHE_USERS = {
    "smrweb/core/softcache.py",
    "smrweb/sources/sync.py",
    "smrweb/tasks.py",
}


@pytest.fixture
def cache_down(settings):
    """A Redis nobody listens on: every call fails to connect."""
    settings.CACHES = {
        "default": {"BACKEND": "smrweb.core.rediscache.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}
    }
    with pytest.raises(Exception):  # noqa: B017 - whatever the client raises: the premise holds
        cache.get("anything")


@pytest.mark.django_db
def test_a_cache_that_is_down_is_a_miss_for_kept_reads_and_turn_aggregates(project, cache_down):
    built = []
    assert kept.kept("probe", "v1", lambda: built.append(1) or "read") == "read"
    assert kept.kept("probe", "v1", lambda: built.append(1) or "read") == "read"
    assert built == [1, 1]  # nothing kept, read again: slower, never an error
    events = [{"type": "agent.turn", "turn": n, "actor": "driver", "cost_usd": 0.1} for n in range(3)]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    run = Run.objects.get()
    assert timeline.turns_after(run, run.started_at.replace(year=2000))[0] == 3
    timeline.forget_turn_aggregates(run)  # the write path forgets them: with the cache down, nothing to do
    assert services.attribute_turns(run, {"driver": "child_work"}) == 3


def test_the_rule_has_one_home():
    imports = re.compile(r"^\s*from django\.core\.cache import|^\s*import django\.core\.cache", re.M)
    users = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "smrweb").rglob("*.py")
        if imports.search(path.read_text())
    }
    assert users == CACHE_USERS


def test_live_cards_with_the_cache_down_render_every_card_and_answer_whole(cache_down):
    """The live cards ask softcache too: down, every request's render claims are its own (nobody waits
    for a render that will never be kept), nothing is recalled, and a poll gets whole cards."""
    from smrweb.dashboard import live

    renders = []

    def card(name: str, version: str) -> live.Card:
        return live.Card(name, version, lambda: renders.append(name) or f'<div id="{name}">{version}</div>')

    deck = live.Deck("probe", [card("a", "v1"), card("b", "v1")])
    assert deck.render() == {"a": '<div id="a">v1</div>', "b": '<div id="b">v1</div>'}
    assert renders == ["a", "b"]
    later = live.Deck("probe", [card("a", "v2"), card("b", "v1")])
    answer = later.answer({"a": "v1", "b": "v1"})
    assert answer is not None and "v2" in answer and renders == ["a", "b", "a"]


@pytest.fixture(params=["locmem", "redis"])
def any_cache(request, settings, monkeypatch):
    """softcache over the suite's local-memory cache (set_many/delete_many per batch) and over the suite's
    Redis (core.rediscache: one pipeline per batch)."""
    from django.core.cache import caches

    from smrweb.core import softcache

    if request.param == "redis":
        request.getfixturevalue("redis_server")
        settings.CACHES = {
            "default": {"BACKEND": "smrweb.core.rediscache.RedisCache", "LOCATION": settings.REDIS_URL}
        }
    backend = caches.create_connection("default")
    monkeypatch.setattr(softcache, "cache", backend)
    backend.delete_many([f"batch-test:{k}" for k in "abcdnx"])
    yield backend
    backend.delete_many([f"batch-test:{k}" for k in "abcdnx"])


def test_a_batch_writes_when_it_ends_and_reads_its_own_writes(any_cache):
    from smrweb.core import softcache

    any_cache.set("batch-test:c", "there before", 30)
    value = {"list": [1]}
    with softcache.batched():
        softcache.set("batch-test:a", value, 30)
        value["list"].append(2)  # changed after it was written: written as it was
        softcache.set_many({"batch-test:b": "b", "batch-test:n": 5}, 30)
        softcache.delete("batch-test:c")
        with softcache.batched():  # nested: the outer block writes
            softcache.set("batch-test:d", "d", 30)
        assert any_cache.get_many(["batch-test:a", "batch-test:b", "batch-test:d"]) == {}  # not yet
        assert any_cache.get("batch-test:c") == "there before"
        assert softcache.get("batch-test:a") == {"list": [1]}  # the block reads its own writes
        assert softcache.get("batch-test:c", "gone") == "gone"
        assert softcache.get_many(["batch-test:a", "batch-test:c", "batch-test:n", "batch-test:x"]) == {
            "batch-test:a": {"list": [1]},
            "batch-test:n": 5,
        }
    assert any_cache.get_many([f"batch-test:{k}" for k in "abcdnx"]) == {
        "batch-test:a": {"list": [1]},
        "batch-test:b": "b",
        "batch-test:d": "d",
        "batch-test:n": 5,
    }
    assert any_cache.incr("batch-test:n") == 6  # an int is stored as the cache stores ints


def test_a_value_set_with_an_encoding_is_encoded_when_the_block_is_written(any_cache):
    """`set_many(…, encode=…)` in a block holds the values as they are: each is encoded once, when the block
    is written (a poll's renders are compressed after its answer is sent), and the block's own read of
    one sees it encoded, as a read of the cache would; outside a block it is encoded when set."""
    import zlib

    from smrweb.core import softcache

    encoded = []

    def encode(text: str) -> bytes:
        encoded.append(text)
        return zlib.compress(text.encode(), 1)

    with softcache.batched():
        softcache.set_many({"batch-test:a": "render a", "batch-test:b": "render b"}, 30, encode=encode)
        softcache.set("batch-test:c", "plain", 30)
        assert encoded == []  # nothing encoded while the block is open
        assert zlib.decompress(softcache.get("batch-test:a")) == b"render a"  # its own read: encoded
        softcache.set("batch-test:b", "overwritten", 30)  # a later plain write wins
        softcache.set_many({"batch-test:d": "gone"}, 30, encode=encode)
        softcache.delete("batch-test:d")
        assert any_cache.get("batch-test:a") is None
        encoded.clear()
    assert encoded == ["render a"]  # once each, at the write; the overwritten and deleted ones never
    found = any_cache.get_many([f"batch-test:{k}" for k in "abcd"])
    assert zlib.decompress(found.pop("batch-test:a")) == b"render a"
    assert found == {"batch-test:b": "overwritten", "batch-test:c": "plain"}
    softcache.set_many({"batch-test:n": "outside"}, 30, encode=encode)
    assert encoded == ["render a", "outside"] and zlib.decompress(any_cache.get("batch-test:n")) == b"outside"


def test_a_claim_released_in_a_batch_is_its_own_to_take_again(any_cache):
    """A render claim released in the block is not released until it ends: taking it again in the same
    block is taking back its own (not waiting for itself), and another's claim stays refused."""
    from smrweb.core import softcache

    any_cache.add("batch-test:b", "another request's", 30)
    with softcache.batched():
        assert softcache.add_many(["batch-test:a", "batch-test:b"], 1, 30, down=True) == ["batch-test:a"]
        softcache.delete_many(["batch-test:a"])
        assert any_cache.get("batch-test:a") == 1  # still claimed until the block ends
        assert softcache.add("batch-test:a", 1, 30, down=True)
        assert softcache.add_many(["batch-test:a", "batch-test:b"], 1, 30, down=True) == []
    assert any_cache.get("batch-test:a") == 1 and any_cache.get("batch-test:b") == "another request's"


def test_a_read_ahead_goes_with_the_read_before_it_and_serves_one_later_read(any_cache, monkeypatch):
    """`get_many(keys, also=…)` inside a block reads `also` in the same round trip and holds each for the
    block's next read of it, found or missing (no round trip for it); once: a later read asks again; the
    block's own writes win over what it read ahead; outside a block `also` is not read."""
    from smrweb.core import softcache

    calls, inside = [], []  # the calls softcache makes (locmem's get_many calls its own get: not counted)
    real_get, real_get_many = any_cache.get, any_cache.get_many

    def get(key, *args, **kwargs):
        if not inside:
            calls.append(("get", key))
        return real_get(key, *args, **kwargs)

    def get_many(keys, **kwargs):
        calls.append(("get_many", *keys))
        inside.append(1)
        try:
            return real_get_many(keys, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(any_cache, "get", get)
    monkeypatch.setattr(any_cache, "get_many", get_many)
    any_cache.set_many({"batch-test:a": "a", "batch-test:b": "b", "batch-test:c": "c"}, 30)
    with softcache.batched():
        assert softcache.get_many(["batch-test:a"], also=["batch-test:b", "batch-test:x"]) == {
            "batch-test:a": "a"
        }
        assert calls == [("get_many", "batch-test:a", "batch-test:b", "batch-test:x")]  # one round trip
        any_cache.set("batch-test:b", "changed since", 30)
        assert softcache.get("batch-test:b") == "b"  # read ahead: no round trip
        assert softcache.get("batch-test:x", "none") == "none"  # read ahead as missing
        assert len(calls) == 1
        assert softcache.get("batch-test:b") == "changed since"  # held once: asked again
        softcache.get_many(["batch-test:a"], also=["batch-test:c"])
        softcache.set("batch-test:c", "written here", 30)
        assert softcache.get_many(["batch-test:c", "batch-test:a"]) == {
            "batch-test:c": "written here",  # the block's own write
            "batch-test:a": "a",
        }
    calls.clear()
    assert softcache.get_many(["batch-test:a"], also=["batch-test:b"]) == {"batch-test:a": "a"}
    assert calls == [("get_many", "batch-test:a")]  # outside a block: nothing to hold it for


def test_a_batch_with_the_cache_down_ends_quietly(cache_down):
    from smrweb.core import softcache

    with softcache.batched():
        softcache.set("batch-test:a", 1, 30)
        assert softcache.get("batch-test:a") == 1
        assert softcache.add_many(["batch-test:b"], 1, 30, down=True) == ["batch-test:b"]
        assert softcache.add_many(["batch-test:c"], 1, 30, down=False) == []
        assert softcache.get_many(["batch-test:b"], also=["batch-test:c"]) == {}  # a miss, quietly
        assert softcache.get("batch-test:c") is None
    assert softcache.get("batch-test:a") is None


@pytest.mark.django_db
def test_pages_write_once_and_the_api_as_it_goes(client_alice, api, project, monkeypatch):
    """The middleware batches a dashboard page's cache writes (one write when it has answered); the API's
    requests write as they go (the write path's forgets are not held back)."""
    from smrweb.core import softcache

    flushed = []
    write = softcache._write
    monkeypatch.setattr(
        softcache, "_write", lambda writes, deletes: flushed.append(len(writes)) or write(writes, deletes)
    )
    events = [{"type": "agent.turn", "turn": n, "actor": "driver", "cost_usd": 0.1} for n in range(3)]
    assert (
        api.post(f"/api/v1/projects/{project.slug}/runs/r1/events", events, format="json").status_code == 200
    )
    assert flushed == []
    assert client_alice.get(f"/projects/{project.slug}/runs/r1/").status_code == 200
    assert len(flushed) == 1 and flushed[0] >= 20  # every card's render, the rows, the readings: one write


def test_two_requests_waiting_for_each_others_renders_do_not_wait_out_the_limit():
    """Each of two requests (each in its own batch, as a page is) claims and renders one card, then needs the
    card the other claimed. A request writes what it rendered before it waits (`softcache.flush`): each
    finds the other's render, and no card is rendered twice (held writes would make both wait out
    RENDER_WAIT_SECONDS and then render the other's card themselves)."""
    import threading

    from smrweb.core import softcache
    from smrweb.dashboard import live

    rendered, claimed = [], threading.Barrier(2)

    def deck() -> live.Deck:
        def card(name: str) -> live.Card:
            return live.Card(name, "v1", lambda: rendered.append(name) or f'<div id="{name}">v1</div>')

        return live.Deck("mutual-wait-test", [card("x"), card("y")])

    def request(first: str, then: str, out: dict) -> None:
        with softcache.batched():
            page = deck()
            page.render([first])  # claimed and rendered by this request; its write held by the batch
            claimed.wait(timeout=10)  # both hold a claim now
            out.update(page.render([then]))

    results: dict[str, dict] = {"a": {}, "b": {}}
    threads = [
        threading.Thread(target=request, args=("x", "y", results["a"])),
        threading.Thread(target=request, args=("y", "x", results["b"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {"a": {"y": '<div id="y">v1</div>'}, "b": {"x": '<div id="x">v1</div>'}}
    assert sorted(rendered) == ["x", "y"]  # each once: each request found the other's render
