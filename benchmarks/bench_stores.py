#!/usr/bin/env python3
"""Benchmark tenure's etcd, PostgreSQL, ZooKeeper and Redis stores against their floors and the
locks users pick.

Run from the repository root (needs /usr/bin/etcd, PostgreSQL in /usr/local/bin, Debian's
zookeeper and redis-server packages, the store launchers (``tenure.stores.<store>.server``),
and the ``bench`` extra for the comparison libraries):

    .venv/bin/python benchmarks/bench_stores.py                  # all four stores, ~10 minutes
    .venv/bin/python benchmarks/bench_stores.py --quick          # short run, ~3 minutes
    .venv/bin/python benchmarks/bench_stores.py --smoke          # does every row work? (CI)
    .venv/bin/python benchmarks/bench_stores.py --only redis --json out.json

Per store (a real 3-member etcd cluster, one PostgreSQL server, a real 3-server ZooKeeper
ensemble, one redis-server, all on 127.0.0.1), three parts, every variant side by side (see
benchmarks/README.md for what every row means):

1. uncontended acquire+release cycle in one process, against the floor: the bare round trips the
   protocol needs, on the same client library;
2. N processes contending for one lock, each holding it for a fixed short time, with the store
   server's CPU over the run;
3. fail-over: SIGKILL the holder, time until the next holder is granted the lock (TTL 2 s);
   tenure twice: with its default lock-delay (one TTL) and with ``lock_delay=0``.

A comparison library that is not installed, or fails to import, gets a row saying so. Every
measured process is a fresh subprocess of this script (``--worker KIND``), with PR_SET_PDEATHSIG,
stopped in ``finally`` blocks; the servers are stopped in ``finally`` blocks too. The ZooKeeper
and Redis variants live in ``_zk_redis.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from _common import (
    SMOKE_SETTLE_S,
    SMOKE_STORES_HELP,
    SMOKE_TTL,
    BenchError,
    Child,
    Refresher,
    Smoke,
    acquired_per_s,
    analyse_contention,
    children,
    contend_loop,
    cycle_loop,
    cycle_loop_async,
    die_with_parent,
    each,
    emit,
    f,
    failover_trial,
    fan_out,
    first_trial,
    group_cpu_s,
    median_round,
    progress,
    read_command,
    report_failover,
    run_parts,
    skip_args,
    table,
    verdict,
)

LOCK_NAME = "bench"
CYCLE_TTL = 30.0
FAILOVER_TTL = 2.0
POLL_S = 0.05  # the retry interval of the user's loop around etcd3gw's non-blocking Lock
DISTS = (
    *("httpx", "psycopg", "aetcd", "etcd3gw", "tooz", "psycopg2-binary", "etcd3", "kazoo"),
    *("redis", "sherlock", "python-redis-lock", "pottery"),
)
PURE_PROTOBUF = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}

STORES = ("etcd", "postgres", "zookeeper", "redis")
FLOOR = {
    "etcd": "etcd-grpc-floor",
    "postgres": "pg-floor",
    "zookeeper": "zk-floor",
    "redis": "redis-floor",
}
CYCLE_VARIANTS = {
    "etcd": [
        "tenure-async",
        "tenure-sync",
        "tenure-async-http",
        "tenure-async-nodelay",
        "etcd-grpc-floor",
        "etcd-floor",
        "aetcd",
        "etcd3gw",
        "tooz-etcd3gw",
        "python-etcd3",
    ],
    "postgres": [
        "tenure-async",
        "tenure-async-nodelay",
        "tenure-sync",
        "pg-floor",
        "tooz-postgresql",
    ],
    "zookeeper": [
        "tenure-async",
        "tenure-async-nodelay",
        "tenure-sync",
        "zk-floor",
        "kazoo-lock",
        "tooz-zookeeper",
    ],
    "redis": [
        "tenure-async",
        "tenure-async-nodelay",
        "tenure-sync",
        "redis-floor",
        "redis-floor-sync",
        "redis-py-lock",
        "sherlock",
        "python-redis-lock",
        "pottery",
        "tooz-redis",
    ],
}
REDIS_PEERS = ["redis-py-lock", "sherlock", "python-redis-lock", "pottery", "tooz-redis"]
CONTEND_VARIANTS = {
    "etcd": [
        "tenure-sync",
        "tenure-async",
        "tenure-async-http",
        "aetcd",
        "tooz-etcd3gw",
        "etcd3gw",
        "python-etcd3",
    ],
    "postgres": ["tenure-sync", "tenure-async", "tooz-postgresql"],
    "zookeeper": [
        "tenure-sync",
        "tenure-async",
        "tenure-async-nodelay",
        "kazoo-lock",
        "tooz-zookeeper",
    ],
    "redis": ["tenure-sync", "tenure-async", *REDIS_PEERS],
}
# tenure-sync keeps the default lock-delay (one TTL): after a crash nobody gets the name for
# lock_delay more seconds, by design; tenure-sync-nodelay (lock_delay=0) is the bare fail-over.
TENURE_FAILOVER = ["tenure-sync", "tenure-sync-nodelay"]
FAILOVER_VARIANTS = {
    "etcd": [*TENURE_FAILOVER, "aetcd", "tooz-etcd3gw", "etcd3gw", "python-etcd3"],
    "postgres": [*TENURE_FAILOVER, "tooz-postgresql"],
    "zookeeper": [*TENURE_FAILOVER, "kazoo-lock", "tooz-zookeeper"],
    "redis": [*TENURE_FAILOVER, *REDIS_PEERS],
}
ASYNC_VARIANTS = {
    *("tenure-async", "tenure-async-http", "tenure-async-nodelay", "aetcd"),
    *("etcd-grpc-floor", "etcd-floor", "pg-floor", "redis-floor"),
}
PEER_MODULES = {
    "aetcd": "aetcd",
    "etcd3gw": "etcd3gw",
    "tooz-etcd3gw": "tooz.drivers.etcd3gw",
    "tooz-postgresql": "tooz.drivers.pgsql",
    "python-etcd3": "etcd3",
    "kazoo-lock": "kazoo.recipe.lock",
    "tooz-zookeeper": "tooz.drivers.zookeeper",
    "redis-py-lock": "redis.lock",
    "sherlock": "sherlock",
    "python-redis-lock": "redis_lock",
    "pottery": "pottery",
    "tooz-redis": "tooz.drivers.redis",
}

DESCRIBE = {
    "tenure-async": "async with tenure.connect_async(url): lease = await client.lock(name, "
    "ttl=30).acquire(); await lease.release()",
    "tenure-async-nodelay": "tenure-async with lock_delay=0: what the default lock-delay costs",
    "tenure-sync": "tenure.connect(url); lease = client.lock(name, ttl=30).acquire(); "
    "lease.release()",
    "tenure-async-http": "tenure-async on etcd's JSON gateway (etcd://..?transport=http)",
    "etcd-grpc-floor": "the floor: grpc.aio unary calls (tenure's generated messages, built up "
    "front), one etcd lease made up front, 2 txns per cycle: [compare create_revision = 0; put "
    "key with the lease + range(first by create revision)], [compare create_revision; delete]",
    "etcd-floor": "the same 2 txns on the JSON gateway (httpx.AsyncClient, JSON bodies)",
    "pg-floor": "psycopg AsyncConnection (autocommit), 2 statements per cycle, each its own "
    "transaction: WITH t AS (UPDATE tokens .. RETURNING last) INSERT INTO locks .. ON CONFLICT "
    "DO UPDATE .. RETURNING token; DELETE FROM locks WHERE name, token, session RETURNING name",
    "aetcd": "aetcd.Client (gRPC, asyncio); lock = client.lock(key, ttl=30); await "
    "lock.acquire(timeout=None); await lock.release()  [a new etcd lease per acquire]",
    "etcd3gw": "etcd3gw.client (JSON gateway, requests); lock = client.lock(name, ttl=30); "
    "lock.acquire() (non-blocking: a user's loop retries every 50 ms); lock.release()  "
    "[a new etcd lease per attempt]",
    "tooz-etcd3gw": "tooz coordinator 'etcd3+http://..?lock_timeout=30'; "
    "lock = coord.get_lock(name); lock.acquire(blocking=True); lock.release()  "
    "[etcd3gw underneath: a new lease per attempt, retries after 1 s]",
    "tooz-postgresql": "tooz coordinator 'postgresql://..'; lock.acquire(blocking=True) = "
    "pg_advisory_lock(2 bytes of md5(name)) on a new connection; release() unlocks, closes it",
    "python-etcd3": "etcd3.client (gRPC); lock = client.lock(name, ttl=30); "
    "lock.acquire(timeout=5) in a loop; lock.release()  [a new lease per attempt]",
    "zk-floor": "kazoo (sync), one session: create(parent/n-, ephemeral, sequence); delete(node)",
    "kazoo-lock": "kazoo Lock(path, id) recipe: acquire() (create + get_children + a watch on "
    "the predecessor when waiting); release() (delete)",
    "tooz-zookeeper": "tooz coordinator 'zookeeper://..?timeout=30': get_lock(name) = kazoo's "
    "Lock; acquire(blocking=True); release()",
    "redis-floor": "redis.asyncio (tenure's client stack): SET key token NX PX 30000; "
    "compare-delete script by EVALSHA",
    "redis-floor-sync": "redis-py (sync): the same two commands",
    "redis-py-lock": "redis-py Lock(name, timeout=30): acquire() polls SET NX PX every 0.1 s "
    "(default sleep); release() compare-delete by EVALSHA",
    "sherlock": "sherlock RedisLock(name, expire=30): acquire() polls a SETNX+EXPIRE script "
    "every 0.1 s, gives up after 10 s (counted as a timeout; the loop asks again); release()",
    "python-redis-lock": "redis_lock.Lock(conn, name, expire=30): SET NX EX, else BLPOP on a "
    "signal list the releaser pushes to; client with socket_timeout=None (see notes)",
    "pottery": "pottery Redlock(key, masters={one server}, auto_release_time=30): acquire() "
    "retries after a random 0-0.2 s; release()",
    "tooz-redis": "tooz coordinator 'redis://..?lock_timeout=30': redis-py's Lock underneath "
    "(polls every 0.1 s)",
}

TARGET_RATIO = {"etcd": 1.3, "postgres": 1.5, "zookeeper": 1.3, "redis": 1.15}
TARGET_JAIN = 0.99
WARM_UP_S = {"zookeeper": 5.0}  # unrecorded floor cycles first: the JVM's JIT warms up
# A peer's own defect with the libraries pip installs today, known by its message (README, "Fail-
# over with lock-delay"): a smoke run says so in one line instead of failing. Any other failure
# of that peer still fails it.
KNOWN_FAILURES = {
    "python-etcd3": "wait() missing 1 required positional argument: 'delay_since_first_attempt'",
}


# -- lock variants used by the workers ------------------------------------------------------------


class SyncLock(Protocol):
    timeouts: int

    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def keep(self) -> None: ...
    def close(self) -> None: ...


class AsyncLock(Protocol):
    timeouts: int

    async def open(self) -> None: ...
    async def acquire(self) -> None: ...
    async def release(self) -> None: ...
    async def keep(self) -> None: ...
    async def aclose(self) -> None: ...


def first_endpoint(cfg: dict[str, Any]) -> tuple[str, int]:
    host, _, port = str(cfg["endpoints"][0]).rpartition(":")
    return host, int(port)


class TenureSync:
    def __init__(self, cfg: dict[str, Any]) -> None:
        import tenure

        self.timeouts = 0
        self._ttl = float(cfg["ttl"])
        self._client = tenure.connect(cfg["url"], lock_delay=cfg.get("lock_delay"))
        self._lease: tenure.Lease | None = None

    def acquire(self) -> None:
        self._lease = self._client.lock(LOCK_NAME, ttl=self._ttl).acquire()

    def release(self) -> None:
        assert self._lease is not None
        self._lease.release()
        self._lease = None

    def keep(self) -> None:
        pass  # tenure's session keeper renews the lease

    def close(self) -> None:
        self._client.close()


class Etcd3gwLock:
    def __init__(self, cfg: dict[str, Any]) -> None:
        import etcd3gw

        self.timeouts = 0
        host, port = first_endpoint(cfg)
        self._client = etcd3gw.client(host=host, port=port)
        self._ttl = int(cfg["ttl"])
        self._lock = self._client.lock(id=f"{cfg['ns']}/{LOCK_NAME}", ttl=self._ttl)
        self._refresher: Refresher | None = None

    def acquire(self) -> None:
        while not self._lock.acquire():  # no blocking acquire: what a user would write
            time.sleep(POLL_S)

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        self._refresher = Refresher(self._lock.refresh, self._ttl)
        self._refresher.start()

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
        self._client.session.close()


class ToozLock:
    def __init__(self, cfg: dict[str, Any], driver: str) -> None:
        from tooz import coordination

        self.timeouts = 0
        ttl = int(cfg["ttl"])
        if driver == "etcd3gw":
            url = f"etcd3+http://{cfg['endpoints'][0]}?lock_timeout={ttl}"
        elif driver in ("zookeeper", "redis"):
            from _zk_redis import tooz_url

            url = tooz_url(cfg, driver)
        else:
            url = cfg["dsn"]
        self._coord = coordination.get_coordinator(url, uuid.uuid4().hex.encode())
        self._coord.start(start_heart=bool(cfg.get("heart")))  # heartbeat refreshes held locks
        self._lock = self._coord.get_lock(f"{cfg['ns']}-{LOCK_NAME}".encode())

    def acquire(self) -> None:
        if not self._lock.acquire(blocking=True):
            raise BenchError("tooz: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        pass  # the coordinator's heart (started for holders) refreshes

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._coord.stop()


class Etcd3Lock:
    def __init__(self, cfg: dict[str, Any]) -> None:
        import etcd3  # type: ignore[import-untyped]

        self.timeouts = 0
        host, port = first_endpoint(cfg)
        self._client = etcd3.client(host=host, port=port)
        self._ttl = int(cfg["ttl"])
        self._lock = self._client.lock(f"{cfg['ns']}-{LOCK_NAME}", ttl=self._ttl)
        self._refresher: Refresher | None = None

    def acquire(self) -> None:
        # Its waiter watches the key from "now", not from the revision it read: a release in
        # between is missed, so a bounded wait (counted as a timeout) and ask again.
        while not self._lock.acquire(timeout=5):
            self.timeouts += 1

    def release(self) -> None:
        self._lock.release()

    def keep(self) -> None:
        self._refresher = Refresher(self._lock.refresh, self._ttl)
        self._refresher.start()

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
        self._client.close()


def make_sync_lock(variant: str, cfg: dict[str, Any]) -> SyncLock:
    if variant in TENURE_FAILOVER:
        return TenureSync(cfg)
    if variant == "etcd3gw":
        return Etcd3gwLock(cfg)
    if variant == "tooz-etcd3gw":
        return ToozLock(cfg, "etcd3gw")
    if variant == "tooz-postgresql":
        return ToozLock(cfg, "postgresql")
    if variant == "python-etcd3":
        return Etcd3Lock(cfg)
    if variant in ("tooz-zookeeper", "tooz-redis"):
        return ToozLock(cfg, variant.removeprefix("tooz-"))
    from _zk_redis import SYNC

    if variant in SYNC:
        return SYNC[variant](cfg)
    raise BenchError(f"no sync lock variant {variant!r}")


class TenureAsync:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._cfg = cfg
        self._stack = contextlib.AsyncExitStack()
        self._lease: Any = None

    async def open(self) -> None:
        import tenure

        delay = 0.0 if self._cfg["variant"] == "tenure-async-nodelay" else None  # None: default
        self._client = await self._stack.enter_async_context(
            tenure.connect_async(self._cfg["url"], lock_delay=delay)
        )

    async def acquire(self) -> None:
        self._lease = await self._client.lock(LOCK_NAME, ttl=float(self._cfg["ttl"])).acquire()

    async def release(self) -> None:
        await self._lease.release()

    async def keep(self) -> None:
        pass

    async def aclose(self) -> None:
        await self._stack.aclose()


class AetcdLock:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._cfg = cfg
        self._keeper: Any = None

    async def open(self) -> None:
        import aetcd  # type: ignore[import-untyped]

        host, port = first_endpoint(self._cfg)
        self._client = aetcd.Client(host=host, port=port)
        await self._client.connect()
        key = f"/{self._cfg['ns']}/{LOCK_NAME}".encode()
        self._lock = self._client.lock(key, ttl=int(self._cfg["ttl"]))

    async def acquire(self) -> None:
        await self._lock.acquire(timeout=None)

    async def release(self) -> None:
        await self._lock.release()

    async def keep(self) -> None:
        import asyncio

        async def refresh() -> None:
            while True:
                await asyncio.sleep(float(self._cfg["ttl"]) / 3)
                with contextlib.suppress(Exception):
                    await self._lock.refresh()

        self._keeper = asyncio.get_running_loop().create_task(refresh())

    async def aclose(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
        await self._client.close()


class EtcdGrpcFloor:
    """The two txns a grant and a release need, as raw gRPC calls with messages built up front:
    the fastest native client doing a lock's round trips (etcd's floor)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._cfg = cfg
        self._prefix = f"{cfg['ns']}/locks/{LOCK_NAME}/".encode()
        self._key = self._prefix + b"0000000000000001"
        self._rev = 0

    async def open(self) -> None:
        import grpc

        from tenure.stores.etcd.keys import prefix_end
        from tenure.stores.etcd.proto import rpc_pb2 as pb

        self._pb = pb
        self._channel = grpc.aio.insecure_channel(self._cfg["endpoints"][0])

        def unary(method: str, request: Any, response: Any) -> Any:
            return self._channel.unary_unary(
                f"/etcdserverpb.{method}",
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            )

        self._txn = unary("KV/Txn", pb.TxnRequest, pb.TxnResponse)
        self._revoke = unary("Lease/LeaseRevoke", pb.LeaseRevokeRequest, pb.LeaseRevokeResponse)
        grant = unary("Lease/LeaseGrant", pb.LeaseGrantRequest, pb.LeaseGrantResponse)
        self._lease = (await grant(pb.LeaseGrantRequest(TTL=int(CYCLE_TTL)))).ID
        value = b'{"host": "bench", "pid": 1, "label": ""}'
        put = pb.PutRequest(key=self._key, value=value, lease=self._lease)
        first = pb.RangeRequest(
            key=self._prefix,
            range_end=prefix_end(self._prefix),
            limit=1,
            sort_order=pb.RangeRequest.ASCEND,
            sort_target=pb.RangeRequest.CREATE,
        )
        absent = pb.Compare(key=self._key, target=pb.Compare.CREATE, create_revision=0)
        self._grant = pb.TxnRequest(
            compare=[absent],
            success=[pb.RequestOp(request_put=put), pb.RequestOp(request_range=first)],
        )

    async def acquire(self) -> None:
        answer = await self._txn(self._grant)
        if not answer.succeeded:
            raise BenchError("etcd-grpc-floor: the key was there")
        self._rev = answer.header.revision

    async def release(self) -> None:
        pb = self._pb
        held = pb.Compare(key=self._key, target=pb.Compare.CREATE, create_revision=self._rev)
        delete = pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=self._key))
        await self._txn(pb.TxnRequest(compare=[held], success=[delete]))

    async def keep(self) -> None:
        pass

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._revoke(self._pb.LeaseRevokeRequest(ID=self._lease))
        await self._channel.close()


class EtcdFloor:
    """The two txns a grant and a release need on the JSON gateway, and nothing else."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from tenure.stores.etcd.keys import b64, prefix_end

        self.timeouts = 0
        self._cfg = cfg
        prefix = f"{cfg['ns']}/locks/{LOCK_NAME}/".encode()
        self._key = b64(prefix + b"0000000000000001")
        self._prefix, self._end = b64(prefix), b64(prefix_end(prefix))
        self._value = b64(b'{"host": "bench", "pid": 1, "label": ""}')
        self._rev = 0

    async def open(self) -> None:
        import httpx

        self._http = httpx.AsyncClient(base_url=f"http://{self._cfg['endpoints'][0]}/v3/")
        answer = await self._post("lease/grant", {"TTL": str(int(CYCLE_TTL))})
        self._lease = str(answer["ID"])

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._http.post(path, json=body)
        answer: dict[str, Any] = response.json()
        if response.status_code != 200 or "error" in answer:
            raise BenchError(f"etcd {path}: {answer}")
        return answer

    async def acquire(self) -> None:
        put = {"request_put": {"key": self._key, "value": self._value, "lease": self._lease}}
        first = {
            "request_range": {
                "key": self._prefix,
                "range_end": self._end,
                "limit": "1",
                "sort_order": "ASCEND",
                "sort_target": "CREATE",
            }
        }
        compare = [
            {"key": self._key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        ]
        body = {"compare": compare, "success": [put, first], "failure": []}
        answer = await self._post("kv/txn", body)
        if not answer.get("succeeded"):
            raise BenchError("etcd-floor: the key was there")
        self._rev = int(answer["header"]["revision"])

    async def release(self) -> None:
        compare = [
            {
                "key": self._key,
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": str(self._rev),
            }
        ]
        body = {"compare": compare, "success": [{"request_delete_range": {"key": self._key}}]}
        await self._post("kv/txn", body)

    async def keep(self) -> None:
        pass

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._post("lease/revoke", {"ID": self._lease})
        await self._http.aclose()


class PgFloor:
    """The two statements a grant and a release need, each its own transaction, one connection."""

    GRANT = (
        "WITH t AS (UPDATE {s}.tokens SET last = last + 1 WHERE name = %(name)s RETURNING last)"
        " INSERT INTO {s}.locks (name, token, session, waiter) SELECT %(name)s, last, 1, NULL"
        " FROM t ON CONFLICT (name) DO UPDATE SET token = excluded.token,"
        " session = excluded.session, waiter = NULL RETURNING token"
    )
    RELEASE = (
        "DELETE FROM {s}.locks WHERE name = %(name)s AND token = %(token)s AND session = 1"
        " RETURNING name"
    )

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.timeouts = 0
        self._cfg = cfg
        self._token = 0

    async def open(self) -> None:
        import psycopg
        from psycopg import sql

        s = sql.Identifier(self._cfg["ns"])
        self._conn = await psycopg.AsyncConnection.connect(self._cfg["dsn"], autocommit=True)
        setup = (
            "CREATE SCHEMA {s};"
            " CREATE TABLE {s}.tokens (name text PRIMARY KEY, last bigint NOT NULL);"
            " CREATE TABLE {s}.locks (name text PRIMARY KEY, token bigint NOT NULL,"
            " session bigint NOT NULL, waiter bigint);"
            " INSERT INTO {s}.tokens (name, last) VALUES ('bench', 0)"
        )
        await self._conn.execute(sql.SQL(setup).format(s=s))
        self._grant = sql.SQL(self.GRANT).format(s=s)
        self._release = sql.SQL(self.RELEASE).format(s=s)

    async def acquire(self) -> None:
        cur = await self._conn.execute(self._grant, {"name": LOCK_NAME})
        row = await cur.fetchone()
        assert row is not None
        self._token = int(row[0])

    async def release(self) -> None:
        cur = await self._conn.execute(self._release, {"name": LOCK_NAME, "token": self._token})
        await cur.fetchone()

    async def keep(self) -> None:
        pass

    async def aclose(self) -> None:
        await self._conn.close()


def make_async_lock(variant: str, cfg: dict[str, Any]) -> AsyncLock:
    if variant in ("tenure-async", "tenure-async-nodelay"):
        return TenureAsync(cfg)
    if variant == "tenure-async-http":
        return TenureAsync({**cfg, "url": cfg["url"] + "?transport=http"})
    if variant == "etcd-grpc-floor":
        return EtcdGrpcFloor(cfg)
    if variant == "aetcd":
        return AetcdLock(cfg)
    if variant == "etcd-floor":
        return EtcdFloor(cfg)
    if variant == "pg-floor":
        return PgFloor(cfg)
    if variant == "redis-floor":
        from _zk_redis import RedisFloor

        return RedisFloor(cfg)
    raise BenchError(f"no async lock variant {variant!r}")


def run_async(cfg: dict[str, Any], body: Callable[[AsyncLock], Awaitable[dict[str, Any]]]) -> Any:
    """Open the async variant of ``cfg``, run ``body`` with it, close it (asyncio: aetcd's)."""
    import anyio

    async def main() -> dict[str, Any]:
        lock = make_async_lock(cfg["variant"], cfg)
        await lock.open()
        try:
            return await body(lock)
        finally:
            await lock.aclose()

    return anyio.run(main)


# -- workers (run as subprocesses of this script) -------------------------------------------------


def worker_probe(cfg: dict[str, Any]) -> dict[str, Any]:
    """Import each module; say how it went."""
    import importlib

    found: dict[str, str] = {}
    for module in cfg["modules"]:
        try:
            importlib.import_module(module)
            found[module] = "ok"
        except ModuleNotFoundError as exc:
            found[module] = f"not installed ({exc.name})"
        except Exception as exc:
            text = " ".join(str(exc).split())
            found[module] = f"fails to import: {type(exc).__name__}: {text[:160]}"
    return found


def worker_cycle(cfg: dict[str, Any]) -> dict[str, Any]:
    warmup, max_cycles, seconds = int(cfg["warmup"]), int(cfg["max_cycles"]), float(cfg["seconds"])
    if cfg["variant"] in ASYNC_VARIANTS:

        async def body(lock: AsyncLock) -> dict[str, Any]:
            return await cycle_loop_async(lock.acquire, lock.release, warmup, max_cycles, seconds)

        result: dict[str, Any] = run_async(cfg, body)
        return result
    lock = make_sync_lock(cfg["variant"], cfg)
    try:
        return cycle_loop(lock.acquire, lock.release, warmup, max_cycles, seconds)
    finally:
        lock.close()


def worker_contend(cfg: dict[str, Any]) -> dict[str, Any]:
    hold = float(cfg["hold_s"])
    mono = time.monotonic  # CLOCK_MONOTONIC: one clock for every process on Linux
    records: list[tuple[float, float, float]] = []  # (asked, got, about to release)
    if cfg["variant"] in ASYNC_VARIANTS:
        import anyio

        async def body(lock: AsyncLock) -> dict[str, Any]:
            emit("ready")
            command = await anyio.to_thread.run_sync(read_command)
            end = float(command.split()[1])
            cpu0 = time.process_time()
            while mono() < end:
                asked = mono()
                await lock.acquire()
                got = mono()
                await anyio.sleep(hold)
                releasing = mono()
                await lock.release()
                records.append((asked, got, releasing))
            cpu = time.process_time() - cpu0
            return {"records": records, "timeouts": lock.timeouts, "cpu_s": cpu}

        result: dict[str, Any] = run_async(cfg, body)
        return result
    return contend_loop(make_sync_lock(cfg["variant"], cfg), hold)


def worker_failover(cfg: dict[str, Any]) -> dict[str, Any]:
    """``holder``: take the lock, keep it alive, wait to be SIGKILLed. ``waiter``: ask, block,
    report when it got the lock."""
    holder = cfg["role"] == "holder"
    if cfg["variant"] in ASYNC_VARIANTS:
        import anyio

        async def body(lock: AsyncLock) -> dict[str, Any]:
            if holder:
                await lock.acquire()
                await lock.keep()
                emit(f"held {time.monotonic()!r}")
                await anyio.sleep(3600)  # until SIGKILL
                return {}
            emit("asking")
            await lock.acquire()
            got = time.monotonic()
            await lock.release()
            return {"got": got}

        result: dict[str, Any] = run_async(cfg, body)
        return result
    lock = make_sync_lock(cfg["variant"], cfg)
    try:
        if holder:
            lock.acquire()
            lock.keep()
            emit(f"held {time.monotonic()!r}")
            time.sleep(3600)  # until SIGKILL
            return {}
        emit("asking")
        lock.acquire()
        got = time.monotonic()
        lock.release()
        return {"got": got}
    finally:
        lock.close()


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "probe": worker_probe,
    "cycle": worker_cycle,
    "contend": worker_contend,
    "failover": worker_failover,
}


def run_worker(kind: str, config: str) -> int:
    die_with_parent()
    result = WORKERS[kind](json.loads(config))
    emit("result " + json.dumps(result))
    return 0


# -- the parent side: servers, children, and the measurements ------------------------------------


def child(kind: str, config: dict[str, Any], log: Path, env: dict[str, str] | None = None) -> Child:
    """A worker subprocess of this script."""
    return Child(__file__, kind, config, log, env)


@dataclass
class Settings:
    rounds: int
    cycle_seconds: float
    max_cycles: int
    warmup: int
    procs: int
    hold_s: float
    contend_seconds: float
    failover_trials: int
    failover_ttl: float
    root: Path
    smoke: bool = False  # variants side by side, a short warm-up, waiters settle briefly


@dataclass
class Peer:
    """Whether a variant can run here, and with which extra environment."""

    status: str  # "ok", "not installed (...)", "fails to import: ..."
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""


def probe_peers(root: Path, stores: Sequence[str]) -> dict[str, Peer]:
    """Import each comparison library of ``stores`` in a fresh subprocess of its own (never in
    this process, and never two in one: aetcd and python-etcd3 register the same .proto files)."""
    wanted = {v for store in stores for v in CYCLE_VARIANTS[store] + CONTEND_VARIANTS[store]}
    modules = {v: m for v, m in PEER_MODULES.items() if v in wanted}

    def probe(module: str, env: dict[str, str] | None = None) -> str:
        with children() as kids:
            log = root / f"probe-{module}-{len(env or {})}.log"
            kids.append(child("probe", {"modules": [module]}, log, env))
            return str(kids[0].result(timeout=120)[module])

    with ThreadPoolExecutor(len(modules)) as pool:
        found = dict(zip(modules, pool.map(probe, modules.values()), strict=True))
    peers = {variant: Peer(status) for variant, status in found.items()}
    etcd3 = peers.get("python-etcd3", Peer("ok"))
    # protobuf's own advice for old generated code: the pure-Python implementation.
    if etcd3.status.startswith("fails to import") and probe("etcd3", PURE_PROTOBUF) == "ok":
        peers["python-etcd3"] = Peer(
            "ok",
            PURE_PROTOBUF,
            f"python-etcd3 {etcd3.status}; it runs here only with "
            "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python (pure-Python protobuf, slower)",
        )
    return peers


class Server:
    """The store under test, started with the project's launchers; ``close()`` stops it."""

    def __init__(self, store: str) -> None:
        self.store = store
        self._stack = contextlib.ExitStack()
        self._made = itertools.count(1)  # next() is atomic: variants may run side by side
        self.endpoints: list[str] = []
        self.dsn = ""
        self.pgids: list[int] = []
        try:
            if store == "etcd":
                from tenure.stores.etcd.server import EtcdCluster

                cluster = self._stack.enter_context(EtcdCluster(members=3))
                self.cluster = cluster
                leader = cluster.leader()
                # Every client talks to the leader first (no forwarding hop for anyone).
                ordered = [leader] + [m for m in cluster.members if m is not leader]
                self.endpoints = [m.endpoint for m in ordered]
                self.pgids = [m.proc.pid for m in cluster.members if m.proc is not None]
                self.describe = f"3-member etcd cluster {', '.join(self.endpoints)} (leader first)"
            elif store == "zookeeper":
                from tenure.stores.zookeeper.server import ZooKeeperEnsemble

                ensemble = self._stack.enter_context(ZooKeeperEnsemble(servers=3))
                # Every client connects to the leader only (no forwarding hop for anyone).
                self.endpoints = [ensemble.leader().endpoint]
                self.pgids = [s.proc.pid for s in ensemble.servers if s.proc is not None]
                self.describe = (
                    f"3-server ZooKeeper ensemble {', '.join(ensemble.endpoints)}; every client "
                    f"connects to the leader {self.endpoints[0]}"
                )
            elif store == "redis":
                from tenure.stores.redis.server import RedisServer

                redis = self._stack.enter_context(RedisServer())
                self.endpoints = [redis.endpoint]
                assert redis.proc is not None
                self.pgids = [redis.proc.pid]
                self.describe = f"one redis-server at {redis.endpoint} (no persistence)"
            else:
                from tenure.stores.postgres.server import PostgresServer

                pg = self._stack.enter_context(PostgresServer())
                self.dsn = pg.dsn
                assert pg.proc is not None
                self.pgids = [pg.proc.pid]
                self.describe = f"PostgreSQL at {pg.dsn}"
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def config(self, variant: str, **extra: Any) -> dict[str, Any]:
        """A worker's configuration, with a fresh namespace (etcd), schema (PostgreSQL), chroot
        (ZooKeeper) or key prefix (Redis)."""
        ns = f"b{next(self._made):03d}_{variant.replace('-', '_')}"
        cfg: dict[str, Any] = {"variant": variant, "store": self.store, "ns": ns, **extra}
        if self.store == "etcd":
            cfg["endpoints"] = self.endpoints
            cfg["url"] = f"etcd://{','.join(self.endpoints)}/{ns}"
        elif self.store == "zookeeper":
            cfg["zk"] = self.endpoints[0]
            cfg["url"] = f"zookeeper://{cfg['zk']}/{ns}"
        elif self.store == "redis":
            cfg["host"], _, cfg["port"] = self.endpoints[0].rpartition(":")
            cfg["url"] = f"redis://{self.endpoints[0]}/0?prefix={ns}"
        else:
            cfg["dsn"] = self.dsn
            cfg["url"] = f"{self.dsn}?schema={ns}"
        return cfg

    def cpu_s(self) -> float:
        return group_cpu_s(self.pgids)

    def clean(self) -> int:
        """Between variants: revoke every etcd lease left on the cluster (and with them their
        keys), so that no variant pays for another's leftovers. Returns how many there were."""
        if self.store != "etcd":
            return 0
        import httpx

        base = f"http://{self.endpoints[0]}/v3/"
        with httpx.Client(base_url=base, timeout=10) as http:
            leases = http.post("lease/leases", json={}).json().get("leases", [])

            def revoke(lease: dict[str, Any]) -> None:
                http.post("lease/revoke", json={"ID": lease["ID"]})

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(revoke, leases))
        return len(leases)


class Bench:
    def __init__(self, settings: Settings, server: Server, peers: dict[str, Peer]) -> None:
        self.s = settings
        self.server = server
        self.peers = peers
        self._logs = itertools.count(1)

    def log(self, label: str) -> Path:
        path = self.s.root / f"{self.server.store}-{next(self._logs):03d}-{label}"
        path.mkdir()
        return path

    def clean(self) -> int:
        """``Server.clean`` between two variants; none while variants run side by side (a smoke
        run: it would revoke the others' leases), which clean once at the end."""
        return 0 if self.s.smoke else self.server.clean()

    def each_variant(
        self,
        variants: Sequence[str],
        run: Callable[[str], dict[str, Any]],
        part: str,
        done: Callable[[dict[str, Any]], str],
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """``run`` for every variant that can run here, one after the other (side by side in a
        smoke run): the results, and the last line of each failure (its worker died)."""
        store = self.server.store
        failed: dict[str, str] = {}

        def one(variant: str) -> dict[str, Any] | None:
            try:
                result = run(variant)
            except BenchError as exc:
                failed[variant] = last_line(exc)
                self.clean()
                progress(f"{store} {part} {variant} failed: {failed[variant]}")
                return None
            progress(f"{store} {part} {variant}: {done(result)}")
            return result

        found = each([v for v in variants if self.available(v)], one, self.s.smoke)
        return [r for r in found if r is not None], failed

    def available(self, variant: str) -> bool:
        peer = self.peers.get(variant)
        return peer is None or peer.status == "ok"

    def env(self, variant: str) -> dict[str, str] | None:
        peer = self.peers.get(variant)
        return peer.env if peer is not None and peer.env else None

    def warm_up(self) -> None:
        """A JVM store (ZooKeeper) runs slowly until its JIT has compiled the hot paths: run the
        floor, unrecorded, before anything is measured, so no variant pays for the warm-up."""
        seconds = WARM_UP_S.get(self.server.store, 0.0)
        if not seconds:
            return
        if self.s.smoke:
            seconds = SMOKE_SETTLE_S
        floor = FLOOR[self.server.store]
        config = self.server.config(
            floor, ttl=CYCLE_TTL, warmup=0, max_cycles=self.s.max_cycles, seconds=seconds
        )
        with children() as kids:
            kids.append(child("cycle", config, self.log("warm-up") / "worker.log"))
            kids[0].result(timeout=seconds + 90)
        progress(f"{self.server.store}: server warmed up ({seconds:g} s of {floor})")

    # part 1 ------------------------------------------------------------------------------------

    def cycles(self) -> dict[str, list[dict[str, Any]]]:
        variants = [v for v in CYCLE_VARIANTS[self.server.store] if self.available(v)]
        rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for r in range(self.s.rounds):
            shift = r % len(variants)
            order = variants[shift:] + variants[:shift]  # rotate: no fixed first/last

            def one(variant: str, r: int = r) -> None:
                workdir = self.log(f"cycle-{variant}")
                config = self.server.config(
                    variant,
                    ttl=CYCLE_TTL,
                    warmup=self.s.warmup,
                    max_cycles=self.s.max_cycles,
                    seconds=self.s.cycle_seconds,
                )
                with children() as kids:
                    kids.append(child("cycle", config, workdir / "worker.log", self.env(variant)))
                    result = kids[0].result(timeout=self.s.cycle_seconds + 90)
                result["round"] = r
                result["leases_left"] = self.clean()
                rounds[variant].append(result)
                progress(
                    f"{self.server.store} round {r + 1}/{self.s.rounds} {variant}: "
                    f"{result['cycles_per_s']:.0f}/s"
                )

            each(order, one, self.s.smoke)
        return rounds

    # part 2 ------------------------------------------------------------------------------------

    def contend(self, variant: str) -> dict[str, Any]:
        workdir = self.log(f"contend-{variant}")
        config = self.server.config(variant, ttl=CYCLE_TTL, hold_s=self.s.hold_s)
        with children() as kids:
            for i in range(self.s.procs):
                kids.append(child("contend", config, workdir / f"worker{i}.log", self.env(variant)))
            for kid in kids:
                if kid.expect(timeout=90) != "ready":
                    raise BenchError("worker not ready")
            cpu0, t0 = self.server.cpu_s(), time.monotonic()
            start = t0
            end = start + self.s.contend_seconds
            for kid in kids:
                kid.send(f"go {end!r}")
            results = [kid.result(timeout=self.s.contend_seconds + 90) for kid in kids]
            cpu1, t1 = self.server.cpu_s(), time.monotonic()
        out = analyse_contention(variant, results, start, end, self.s.procs, self.s.hold_s)
        out["server_cpu"] = (cpu1 - cpu0) / (t1 - t0)
        out["server_cpu_s_per_acquisition"] = (cpu1 - cpu0) / max(1, out["acquisitions"])
        out["leases_left"] = self.clean()
        return out

    # part 3 ------------------------------------------------------------------------------------

    def failover(self, variant: str) -> dict[str, Any]:
        ttl = self.s.failover_ttl
        trials: list[dict[str, float]] = []
        delay: dict[str, Any] = {}
        if variant in TENURE_FAILOVER:
            import tenure

            asked = 0.0 if variant == "tenure-sync-nodelay" else None  # None: the default
            delay = {"lock_delay": asked}
            delay["lock_delay_s"] = tenure.Timing(ttl, lock_delay=asked).lock_delay
        for _ in range(self.s.failover_trials):
            workdir = self.log(f"failover-{variant}")
            config = self.server.config(variant, ttl=ttl, heart=True, **delay)
            settle = SMOKE_SETTLE_S if self.s.smoke else 1.0
            trials.append(failover_trial(__file__, config, workdir, self.env(variant), settle))
            self.clean()
        return {"variant": variant, "ttl_s": ttl, "trials": trials, **delay}


# -- output ---------------------------------------------------------------------------------------


def report_cycles(
    store: str, rounds: dict[str, list[dict[str, Any]]], peers: dict[str, Peer]
) -> tuple[str, dict[str, float]]:
    # Ratio to the floor per round (measured seconds apart), then the median over rounds.
    ratios = ratios_to(rounds, FLOOR[store])
    # The best peer: the library row (not tenure's, not a floor) with the most cycles/s.
    libraries = [v for v in rounds if not v.startswith("tenure") and "floor" not in v]
    best = max(libraries, key=lambda v: median_round(rounds[v])["cycles_per_s"], default=None)
    to_best = ratios_to(rounds, best) if best else {}
    target = TARGET_RATIO[store]
    rows = []
    for variant in CYCLE_VARIANTS[store]:
        if variant not in rounds:
            continue  # listed under the table
        med = median_round(rounds[variant])
        spread = [r["cycles_per_s"] for r in rounds[variant]]
        mark = ""
        if variant.startswith("tenure"):
            mark = f"<= {target}x {verdict(ratios[variant] <= target)}"
        rows.append(
            [
                variant,
                f(med["cycles_per_s"]),
                f"{f(min(spread))}-{f(max(spread))}",
                f(med["cycle_us"]["p50"], 0),
                f(med["cycle_us"]["p99"], 0),
                f(med["acquire_us"]["p50"], 0),
                f(med["release_us"]["p50"], 0),
                f(med["cpu_per_cycle_us"], 0),
                str(med["leases_left"]) if store == "etcd" else "-",
                f"{ratios[variant]:.2f}x",
                f"{to_best[variant]:.2f}x" if best else "-",
                mark,
            ]
        )
    headers = [
        "variant",
        "cycles/s",
        "range/s",
        "p50 us",
        "p99 us",
        "acq p50",
        "rel p50",
        "cpu us",
        "leases left",
        "vs floor",
        "vs best peer",
        "target",
    ]
    text = table(headers, rows)
    if best:
        text += f"\nbest peer: {best} (vs: cycle time relative to its, per round, median)"
    # Issue 28's targets within tenure's rows: the sync API within 1.3x of the async one, the
    # default lock-delay within 1.1x of lock_delay=0.
    for slow, fast, limit in (
        ("tenure-sync", "tenure-async", 1.3),
        ("tenure-async", "tenure-async-nodelay", 1.1),
    ):
        if slow in rounds and fast in rounds:
            x = ratios_to(rounds, fast)[slow]
            text += f"\n{slow} vs {fast}: {x:.2f}x, target <= {limit}x {verdict(x <= limit)}"
    missing = skipped(CYCLE_VARIANTS[store], peers)
    if missing:
        text += "\n" + missing
    width = max(len(v) for v in CYCLE_VARIANTS[store])
    legend = "\n".join(f"  {v:<{width}} {DESCRIBE[v]}" for v in CYCLE_VARIANTS[store])
    notes = "".join(f"\n  note: {p.note}" for v, p in peers.items() if p.note and v in rounds)
    return text + "\n\nwhat each row does per cycle:\n" + legend + notes, ratios


def ratios_to(rounds: dict[str, list[dict[str, Any]]], base: str) -> dict[str, float]:
    """Each variant's cycle time relative to ``base``'s: per round (the rows of one round run
    seconds apart), then the median over the rounds."""
    ratios: dict[str, float] = {}
    for variant, results in rounds.items():
        per_round = []
        for result in results:
            ref = next(x for x in rounds[base] if x["round"] == result["round"])
            per_round.append(ref["cycles_per_s"] / result["cycles_per_s"])
        ratios[variant] = statistics.median(per_round)
    return ratios


def report_contention(store: str, results: list[dict[str, Any]], s: Settings) -> str:
    peers = [r for r in results if not r["variant"].startswith("tenure")]
    best_peer_p50 = min((r["handoff_s"]["p50"] for r in peers), default=float("nan"))
    rows = []
    for r in results:
        ms = {k: v * 1e3 for k, v in r["wait_s"].items()}
        ho = {k: v * 1e3 for k, v in r["handoff_s"].items()}
        jain_cell = f"{r['jain']:.4f}"
        if r["variant"].startswith("tenure"):
            jain_cell += f" {verdict(r['jain'] >= TARGET_JAIN)}"
        rows.append(
            [
                r["variant"],
                f(r["per_s"]),
                jain_cell,
                f(ms["p50"], 1),
                f(ms["p99"], 1),
                f(ms["max"], 1),
                f(ho["p50"], 2),
                f(ho["p99"], 2),
                f"{r['server_cpu'] * 100:.0f}",
                f(r["server_cpu_s_per_acquisition"] * 1e3, 1),
                f(r["cpu_s_per_acquisition"] * 1e6),
                str(r["leases_left"]) if store == "etcd" else "-",
                str(r["overlaps"]),
                str(r["timeouts"]),
            ]
        )
    text = table(
        [
            "variant",
            "acq/s",
            "Jain",
            "wait p50 ms",
            "wait p99 ms",
            "wait max",
            "handoff p50 ms",
            "handoff p99 ms",
            "server %core",
            "server ms/acq",
            "client cpu us/acq",
            "leases left",
            "overlaps",
            "timeouts",
        ],
        rows,
    )
    counts = "\n".join(
        f"  {r['variant']:<17} {' '.join(str(c) for c in r['counts'])}"
        f"   (min {min(r['counts'])}, max {max(r['counts'])})"
        for r in results
    )
    lines = [
        text,
        "",
        f"targets: Jain >= {TARGET_JAIN}; release->next grant well under the peers'. "
        f"Ceiling: 1 / hold = {1.0 / s.hold_s:,.0f} acq/s.",
    ]
    for r in results:
        if not r["variant"].startswith("tenure") or not peers:
            continue
        mine = r["handoff_s"]["p50"]
        ok = mine * 2 <= best_peer_p50
        lines.append(
            f"release->next grant p50: {r['variant']} {mine * 1e3:.2f} ms vs the best peer "
            f"{best_peer_p50 * 1e3:.2f} ms (the peer's is {best_peer_p50 / mine:.2f}x tenure's): "
            f"{verdict(ok)} (ok = at most half the best peer's)"
        )
    best = max(peers, key=lambda r: float(r["per_s"]), default=None)
    for r in results:
        if best is not None and r["variant"].startswith("tenure"):
            lines.append(
                f"acquisitions/s: {r['variant']} {r['per_s']:,.0f} vs the best peer "
                f"{best['variant']} {best['per_s']:,.0f} ({r['per_s'] / best['per_s']:.2f}x): "
                f"{verdict(r['per_s'] > best['per_s'])} (ok = more than every peer)"
            )
    lines.append(f"per-process acquisition counts:\n{counts}")
    return "\n".join(lines)


def skipped(
    variants: Sequence[str], peers: dict[str, Peer], failed: dict[str, str] | None = None
) -> str:
    """Lines for the variants without a row: not installed, failing to import, or failed."""
    lines = [
        f"  {v}: {peers[v].status}" for v in variants if v in peers and peers[v].status != "ok"
    ]
    lines += [f"  {v}: failed: {why}" for v, why in (failed or {}).items()]
    return ("no row:\n" + "\n".join(lines)) if lines else ""


def last_line(exc: BaseException) -> str:
    """The last non-empty line of a worker failure (its exception, from its stderr)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


# -- main -----------------------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run, about 3 minutes")
    p.add_argument("--smoke", action="store_true", help=SMOKE_STORES_HELP)
    p.add_argument("--only", choices=STORES, help="one store only")
    p.add_argument("--json", type=Path, metavar="PATH", help="also save raw numbers as JSON")
    p.add_argument("--rounds", type=int, help="rounds of part 1 (default 3, quick 1)")
    p.add_argument("--cycle-seconds", type=float, help="seconds per variant per round (2 / 0.5)")
    p.add_argument("--procs", type=int, default=8, help="contending processes")
    p.add_argument("--hold-ms", type=float, default=1.0, help="hold time under contention")
    p.add_argument("--contend-seconds", type=float, help="per variant (default 10, quick 3)")
    p.add_argument("--failover-trials", type=int, help="per variant (default 3, quick 1)")
    p.add_argument("--skip", action="append", default=[], choices=["cycles", "contend", "failover"])
    p.add_argument("--worker", nargs=2, metavar=("KIND", "CONFIG"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def bench_store(
    store: str,
    settings: Settings,
    peers: dict[str, Peer],
    skip: list[str],
    smoke: Smoke | None = None,
) -> Any:
    out: dict[str, Any] = {}
    server = Server(store)
    try:
        print(f"\n######## {store}: {server.describe}")
        bench = Bench(settings, server, peers)
        if smoke is not None:
            for variant, peer in peers.items():
                if peer.status != "ok" and variant in CYCLE_VARIANTS[store]:
                    smoke.skip(f"{store} {variant}", peer.status)
        bench.warm_up()

        def cycles() -> str:
            cycle_rounds = bench.cycles()
            text, ratios = report_cycles(store, cycle_rounds, peers)
            out["cycles"] = {"rounds": cycle_rounds, "ratio_to_floor": ratios}
            for variant, results in cycle_rounds.items() if smoke is not None else ():
                value = median_round(results)["cycles_per_s"] if results else None
                smoke.number(f"{store} cycles {variant}", value)
            return text

        def contend() -> str:
            variants = CONTEND_VARIANTS[store]
            contended, failed = bench.each_variant(
                variants, bench.contend, "contention", lambda r: f"{r['per_s']:.0f} acq/s"
            )
            out["contention"] = contended
            out["contention_failed"] = failed
            if smoke is not None:
                check_part(smoke, bench, variants, "contention", contended, failed)
            return (
                report_contention(store, contended, settings)
                + "\n"
                + skipped(variants, peers, failed)
            )

        def failover() -> str:
            variants = FAILOVER_VARIANTS[store]
            overs, broken = bench.each_variant(
                variants, bench.failover, "fail-over", lambda _: "done"
            )
            out["failover"] = overs
            out["failover_failed"] = broken
            if smoke is not None:
                check_part(smoke, bench, variants, "fail-over", overs, broken)
            return "\n".join(
                [
                    report_failover(overs),
                    "  tenure-sync: tenure.connect(url), the default lock-delay (one TTL); "
                    "tenure-sync-nodelay: tenure.connect(url, lock_delay=0)",
                    skipped(variants, peers, broken),
                ]
            )

        s, rounds = settings, settings.rounds
        parts = {
            "cycles": (
                f"\n== {store} 1. uncontended acquire+release cycle, one process, one name "
                f"({rounds} round{'s' * (rounds > 1)} x {s.cycle_seconds:g} s per variant, "
                f"order rotated per round; median round shown) ==",
                cycles,
            ),
            "contend": (
                f"\n== {store} 2. {s.procs} processes contending for one lock, "
                f"{s.contend_seconds:g} s each, holding {s.hold_s * 1e3:g} ms (sleep) per "
                "acquisition ==",
                contend,
            ),
            "failover": (
                f"\n== {store} 3. fail-over: SIGKILL the holder (TTL {s.failover_ttl:g} s, holders "
                f"of lease-per-lock libraries refresh every TTL/3), time to the waiter's grant ==",
                failover,
            ),
        }
        run_parts([part for key, part in parts.items() if key not in skip], settings.smoke)
        if settings.smoke:
            server.clean()  # once: parts and variants ran side by side
    finally:
        server.close()
    return out


def check_part(
    smoke: Smoke,
    bench: Bench,
    variants: Sequence[str],
    part: str,
    results: list[dict[str, Any]],
    failed: dict[str, str],
) -> None:
    """A smoke run: each variant of ``part`` that can run here produced its number (acq/s, or
    the first trial's fail-over), or failed in a way known of its library (``KNOWN_FAILURES``)."""
    found = {r["variant"]: r for r in results}
    for variant in (v for v in variants if bench.available(v)):
        row = f"{bench.server.store} {part} {variant}"
        why = failed.get(variant)
        if why is not None and KNOWN_FAILURES.get(variant, "\0") in why:
            smoke.skip(row, f"fails in its own code here: {why}")
        elif why is not None:
            smoke.fail(row, why)
        elif part == "contention":
            smoke.number(row, acquired_per_s(found.get(variant)))
        else:
            smoke.number(row, first_trial(found.get(variant)))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return run_worker(*args.worker)
    quick, smoke = args.quick, args.smoke
    if smoke and not args.only:  # one store per process, each with its own server
        return fan_out(__file__, [["--only", store, *skip_args(args.skip)] for store in STORES])
    root = Path(tempfile.mkdtemp(prefix="tenure-bench-stores-"))
    settings = Settings(
        rounds=args.rounds or (1 if quick or smoke else 3),
        cycle_seconds=args.cycle_seconds or (0.05 if smoke else 0.5 if quick else 2.0),
        max_cycles=20 if smoke else 200_000,
        warmup=2 if smoke else 20 if quick else 50,
        procs=2 if smoke else args.procs,
        hold_s=args.hold_ms / 1e3,
        contend_seconds=args.contend_seconds or (0.5 if smoke else 3.0 if quick else 10.0),
        failover_trials=args.failover_trials or (1 if quick or smoke else 3),
        failover_ttl=SMOKE_TTL if smoke else FAILOVER_TTL,
        root=root,
        smoke=smoke,
    )
    checks = Smoke() if smoke else None
    began = time.monotonic()
    stores = [args.only] if args.only else list(STORES)
    out: dict[str, Any] = {}
    try:
        peers = probe_peers(root, stores)
        versions = {}
        for dist in DISTS:
            with contextlib.suppress(Exception):
                from importlib.metadata import version

                versions[dist] = version(dist)
        env = {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
            "quick": quick,
            "versions": versions,
            "peers": {v: p.__dict__ for v, p in peers.items()},
        }
        out = {"env": env, "settings": {**settings.__dict__, "root": str(root)}}
        print(
            f"tenure store benchmark — Python {env['python']}, {env['cpus']} CPUs, "
            f"load {env['loadavg_at_start'][0]:.2f}; everything on 127.0.0.1\n"
            f"libraries: {', '.join(f'{k} {v}' for k, v in versions.items())}\n"
            "comparison libraries: " + "; ".join(f"{v}: {p.status}" for v, p in peers.items())
        )
        for store in stores:
            out[store] = bench_store(store, settings, peers, args.skip, checks)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["elapsed_s"] = time.monotonic() - began
    print(f"\ntotal {out['elapsed_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
        print(f"raw numbers saved to {args.json}")
    return 0 if checks is None else checks.exit_code()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every worker and server stopped, temp dirs removed", file=sys.stderr)
        sys.exit(130)
