"""The cache backend keeps one redis-py client per pool (smrweb/core/rediscache.py)."""

from __future__ import annotations

import pytest
import redis
from django.core.cache import caches


@pytest.fixture
def count_clients(monkeypatch):
    built = []
    original = redis.Redis.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting)
    return built


def redis_cache(settings, backend: str = "smrweb.core.rediscache.RedisCache"):
    """(The suite's cache is local memory; these tests point it at the suite's Redis.)"""
    settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": settings.REDIS_URL}}
    return caches.create_connection("default")


def cache_calls(cache, prefix: str) -> None:
    for i in range(20):
        cache.set(f"{prefix}:{i}", {"i": i}, 30)
        assert cache.get(f"{prefix}:{i}") == {"i": i}
        assert cache.add(f"{prefix}:{i}", "taken", 30) is False
    first = [f"{prefix}:{i}" for i in range(3)]
    assert cache.get_many(first) == {key: {"i": i} for i, key in enumerate(first)}
    cache.delete_many([f"{prefix}:{i}" for i in range(20)])
    assert cache.get(f"{prefix}:0", "gone") == "gone"


def test_many_cache_calls_build_one_client(redis_server, settings, count_clients):
    cache = redis_cache(settings)
    cache_calls(cache, "rediscache-test-kept")
    assert len(count_clients) == 1


def test_djangos_own_backend_builds_a_client_per_call(redis_server, settings, count_clients):
    """Why the backend exists: the premise, checked against the Django in the lock file."""
    django_backend = redis_cache(settings, "django.core.cache.backends.redis.RedisCache")
    cache_calls(django_backend, "rediscache-test-django")
    assert len(count_clients) > 60


def test_a_kept_client_survives_its_connections_being_killed(redis_server, settings):
    cache = redis_cache(settings)
    cache.set("rediscache-test-killed", "before", 30)
    client = cache._cache.get_client(write=True)
    own = client.client_id()
    redis_server.client_kill_filter(_id=own)  # as a Redis restart or an idle timeout would
    assert cache.get("rediscache-test-killed") == "before"
    cache.set("rediscache-test-killed", "after", 30)
    assert cache.get("rediscache-test-killed") == "after"
    assert client.client_id() != own  # a new connection, through the same client
    cache.delete("rediscache-test-killed")


@pytest.fixture
def round_trips(monkeypatch):
    """The commands sent to Redis, one entry per round trip (a pipeline is one)."""
    sent = []
    command, pipeline = redis.Redis.execute_command, redis.client.Pipeline.execute

    def one(self, *args, **kwargs):
        sent.append([args[0]])
        return command(self, *args, **kwargs)

    def many(self, *args, **kwargs):
        sent.append([c[0][0] for c in self.command_stack])
        return pipeline(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "execute_command", one)
    monkeypatch.setattr(redis.client.Pipeline, "execute", many)
    return sent


def test_write_many_sets_with_each_timeout_and_deletes_in_one_round_trip(redis_server, settings, round_trips):
    import pickle

    cache = redis_cache(settings)
    prefix = "rediscache-test-write"
    cache.set(f"{prefix}:old", "going", 30)
    cache.set(f"{prefix}:kept", "stays", 30)
    writes = {
        f"{prefix}:a": (30, pickle.dumps({"a": 1})),
        f"{prefix}:n": (None, 7),  # an int, bare as Django stores it: incr works on it
        f"{prefix}:gone": (0, pickle.dumps("never")),  # Django's rule: a timeout of 0 is not kept
    }
    round_trips.clear()
    cache.write_many(writes, {f"{prefix}:old"})
    assert round_trips == [["MSET", "EXPIRE", "EXPIRE", "DEL"]]  # one pipeline (MULTI … EXEC)
    assert cache.get(f"{prefix}:a") == {"a": 1} and cache.get(f"{prefix}:kept") == "stays"
    assert cache.get(f"{prefix}:old", "-") == "-" and cache.get(f"{prefix}:gone", "-") == "-"
    assert cache.incr(f"{prefix}:n") == 8
    raw = redis_server
    assert 0 < raw.ttl(cache.make_key(f"{prefix}:a")) <= 30 and raw.ttl(cache.make_key(f"{prefix}:n")) == -1
    cache.delete_many([f"{prefix}:a", f"{prefix}:n", f"{prefix}:kept"])


def test_add_many_takes_the_free_keys_in_one_round_trip(redis_server, settings, round_trips):
    cache = redis_cache(settings)
    keys = [f"rediscache-test-add:{i}" for i in range(3)]
    cache.delete_many(keys)
    cache.add(keys[1], "someone else's", 30)
    round_trips.clear()
    assert cache.add_many(keys, 1, 10) == [keys[0], keys[2]]
    assert len(round_trips) == 1 and round_trips[0].count("SET") == 3
    assert cache.get(keys[1]) == "someone else's" and cache.get(keys[0]) == 1
    assert 0 < redis_server.ttl(cache.make_key(keys[0])) <= 10
    with pytest.raises(ValueError):
        cache.add_many(keys, 1, 0)
    cache.delete_many(keys)
