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

    def write_many(self, writes: dict[str, tuple[float | None, bytes | int]], deletes) -> None:
        """Set `writes` (key -> (timeout, value serialized as Django's serializer does: ints bare, else
        pickled); Django's timeout rules) and delete `deletes` in one transaction: one round trip
        (core.softcache.batched), where set_many per timeout and delete_many make one each."""
        client = self._cache.get_client(None, write=True)
        pipeline = client.pipeline()
        keys = {key: self.make_and_validate_key(key) for key in [*writes, *deletes]}
        if writes:
            pipeline.mset({keys[key]: value for key, (_, value) in writes.items()})
            for key, (timeout, _) in writes.items():
                if (seconds := self.get_backend_timeout(timeout)) is not None:
                    pipeline.expire(keys[key], seconds)
        if deletes:
            pipeline.delete(*(keys[key] for key in deletes))
        pipeline.execute()

    def add_many(self, keys: list[str], value, timeout: float) -> list[str]:
        """`add` of each of `keys` (a positive `timeout`), in one round trip: the keys that were free."""
        seconds = self.get_backend_timeout(timeout)
        if not seconds:
            raise ValueError("add_many needs a positive timeout")
        pipeline = self._cache.get_client(None, write=True).pipeline(transaction=False)
        dumped = self._cache._serializer.dumps(value)
        for key in keys:
            pipeline.set(self.make_and_validate_key(key), dumped, ex=seconds, nx=True)
        return [key for key, added in zip(keys, pipeline.execute(), strict=True) if added]
