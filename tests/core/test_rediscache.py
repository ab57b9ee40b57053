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
