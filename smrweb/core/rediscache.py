"""Django's Redis cache backend, keeping one redis-py client per connection pool.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache call, and each one
copies redis-py's ~170 response callbacks into a fresh dict: ~0.25 ms a call. A cold run page makes
about 60 cache calls (a read and a write per card), so that was ~16 ms of it. The client holds no
connection of its own (the pool does, and is thread-safe), so one client per pool serves every call.
"""

from __future__ import annotations

from django.core.cache.backends import redis as django_redis


class _KeptClientCacheClient(django_redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))  # pools live as long as this object: ids stay theirs
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = _KeptClientCacheClient
