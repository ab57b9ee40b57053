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
