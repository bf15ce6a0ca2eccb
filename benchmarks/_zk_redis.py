"""The ZooKeeper and Redis variants of ``bench_stores.py``: floors and the locks users pick.

Each class is one way to take and give back the lock named ``bench`` in a worker process, with
the shape ``bench_stores.py`` drives (``acquire``, ``release``, ``keep``, ``close``; the async
floor has ``open`` and ``aclose``). A config carries ``ns`` (a fresh namespace per run), ``ttl``
and the server's address: ``zk`` (the ensemble leader's ``host:port``) or ``host``/``port``.
What each row does is in benchmarks/README.md.
"""

from __future__ import annotations

import uuid
from typing import Any

from _common import BenchError, Refresher

LOCK_NAME = "bench"

# The bare compare-delete every Redis recipe releases with (redis-py's own Lock uses the same).
COMPARE_DELETE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


# -- ZooKeeper ------------------------------------------------------------------------------------


def kazoo_client(cfg: dict[str, Any]) -> Any:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]

    client = KazooClient(hosts=cfg["zk"], timeout=float(cfg["ttl"]))
    client.start(timeout=30)
    return client


class ZkFloor:
    """kazoo, sync: create an ephemeral sequential node, delete it. Nothing else."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._client = kazoo_client(cfg)
        self._parent = f"/{cfg['ns']}/{LOCK_NAME}"
        self._client.ensure_path(self._parent)
        self._node = ""

    def acquire(self) -> None:
        self._node = self._client.create(self._parent + "/n-", ephemeral=True, sequence=True)

    def release(self) -> None:
        self._client.delete(self._node)

    def keep(self) -> None:
        pass

    def close(self) -> None:
        self._client.stop()
        self._client.close()


class KazooLock:
    """kazoo's ``Lock`` recipe; kazoo's own pings keep the session (and the node) alive."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._client = kazoo_client(cfg)
        self._lock = self._client.Lock(f"/{cfg['ns']}/{LOCK_NAME}", uuid.uuid4().hex)

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise BenchError("kazoo: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        pass

    def close(self) -> None:
        self._client.stop()
        self._client.close()


# -- Redis ----------------------------------------------------------------------------------------


def redis_client(cfg: dict[str, Any], **options: Any) -> Any:
    import redis

    return redis.Redis(host=cfg["host"], port=int(cfg["port"]), **options)


def lock_key(cfg: dict[str, Any]) -> str:
    return f"{cfg['ns']}:{LOCK_NAME}"


class RedisFloorSync:
    """redis-py, sync: ``SET key token NX PX ttl``, then compare-delete by ``EVALSHA``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._redis = redis_client(cfg)
        self._delete = self._redis.register_script(COMPARE_DELETE)
        self._key, self._px = lock_key(cfg), int(float(cfg["ttl"]) * 1000)
        self._token = ""

    def acquire(self) -> None:
        self._token = uuid.uuid4().hex
        if not self._redis.set(self._key, self._token, nx=True, px=self._px):
            raise BenchError("redis-floor-sync: the key was there")

    def release(self) -> None:
        self._delete(keys=[self._key], args=[self._token])

    def keep(self) -> None:
        pass

    def close(self) -> None:
        self._redis.close()


class RedisFloor:
    """The same two commands on ``redis.asyncio``, the client stack tenure's Redis store uses."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._cfg = cfg
        self._key, self._px = lock_key(cfg), int(float(cfg["ttl"]) * 1000)
        self._token = ""

    async def open(self) -> None:
        from redis.asyncio import Redis

        self._redis = Redis(host=self._cfg["host"], port=int(self._cfg["port"]))
        self._delete = self._redis.register_script(COMPARE_DELETE)

    async def acquire(self) -> None:
        self._token = uuid.uuid4().hex
        if not await self._redis.set(self._key, self._token, nx=True, px=self._px):
            raise BenchError("redis-floor: the key was there")

    async def release(self) -> None:
        await self._delete(keys=[self._key], args=[self._token])

    async def keep(self) -> None:
        pass

    async def aclose(self) -> None:
        await self._redis.aclose()


class RedisPyLock:
    """redis-py's ``Lock`` with its defaults: a blocking acquire polls every 0.1 s."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._redis = redis_client(cfg)
        self._lock = self._redis.lock(lock_key(cfg), timeout=float(cfg["ttl"]))
        self._refresher: Refresher | None = None

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise BenchError("redis-py: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        self._refresher = Refresher(self._lock.reacquire, float(self._lock.timeout))
        self._refresher.start()

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
        self._redis.close()


class SherlockLock:
    """sherlock's ``RedisLock``, defaults: polls every 0.1 s, gives up after 10 s (a timeout,
    counted; the loop asks again)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import sherlock  # type: ignore[import-untyped]

        self.timeouts = 0
        self._redis = redis_client(cfg)
        self._lock = sherlock.RedisLock(
            LOCK_NAME, client=self._redis, namespace=cfg["ns"], expire=int(cfg["ttl"])
        )
        self._refresher: Refresher | None = None

    def acquire(self) -> None:
        import sherlock

        while True:
            try:
                self._lock.acquire()
                return
            except sherlock.LockTimeoutException:
                self.timeouts += 1

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        self._refresher = Refresher(self._lock.renew, float(self._lock.expire))
        self._refresher.start()

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
        self._redis.close()


class PythonRedisLock:
    """python-redis-lock: waits in ``BLPOP`` (timeout = expire) on a signal list the releaser
    pushes to. Its client has no socket timeout: with redis-py 8's default (5 s, retried) a
    ``BLPOP`` longer than that ends in ``TimeoutError`` instead of the lock; ``socket_timeout=None``
    is redis-py's own setting for blocking reads."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import redis_lock  # type: ignore[import-untyped]

        self.timeouts = 0
        self._redis = redis_client(cfg, socket_timeout=None)
        self._lock = redis_lock.Lock(
            self._redis, lock_key(cfg), expire=int(cfg["ttl"]), auto_renewal=bool(cfg.get("heart"))
        )

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise BenchError("python-redis-lock: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        pass  # auto_renewal=True (holders of the fail-over part): its thread extends every 2/3 TTL

    def close(self) -> None:
        self._redis.close()


class PotteryLock:
    """pottery's ``Redlock`` on the one server; a blocking acquire retries after a random
    0-0.2 s."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from pottery import Redlock

        self.timeouts = 0
        self._redis = redis_client(cfg)
        self._lock = Redlock(
            key=lock_key(cfg), masters={self._redis}, auto_release_time=float(cfg["ttl"])
        )
        self._refresher: Refresher | None = None

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise BenchError("pottery: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        self._refresher = Refresher(self._lock.extend, float(self._lock.auto_release_time))
        self._refresher.start()

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
        self._redis.close()


def tooz_url(cfg: dict[str, Any], driver: str) -> str:
    ttl = int(cfg["ttl"])
    if driver == "zookeeper":
        return f"zookeeper://{cfg['zk']}?timeout={ttl}"
    return f"redis://{cfg['host']}:{cfg['port']}?lock_timeout={ttl}"


SYNC = {
    "zk-floor": ZkFloor,
    "kazoo-lock": KazooLock,
    "redis-floor-sync": RedisFloorSync,
    "redis-py-lock": RedisPyLock,
    "sherlock": SherlockLock,
    "python-redis-lock": PythonRedisLock,
    "pottery": PotteryLock,
}
ASYNC = {"redis-floor": RedisFloor}
