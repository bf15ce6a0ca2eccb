"""Fixtures for the HTTP fence: each keeper on its real backing (memory, a SQLite file, the
shared PostgreSQL server, the shared Redis server), and `serve`: a fenced app on a real server."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio
from http_servers import flask_app, starlette_app, uvicorn_serving, waitress_serving

from tenure.fence import (
    Admission,
    ASGIFence,
    AsyncKeeper,
    AsyncRedisFence,
    AsyncSQLKeeper,
    Keeper,
    MemoryKeeper,
    RedisFence,
    SQLFence,
    SQLKeeper,
    WSGIFence,
)
from tenure.stores.postgres.server import PostgresServer
from tenure.stores.redis.server import RedisServer


@dataclass
class Keeping:
    """One keeper kind: its blocking keeper, its async twin (if it has one), and a look at the
    highest token it keeps for a resource, read from its backing directly."""

    name: str
    blocking: Callable[[], Keeper]
    awaiting: Callable[[], AsyncKeeper] | None
    highest: Callable[[str], int | None]
    closers: list[Callable[[], Any]] = field(default_factory=list)


def _memory() -> Keeping:
    keeper = MemoryKeeper()
    return Keeping("memory", lambda: keeper, None, keeper.highest)


def _sqlite(path: Path) -> Keeping:
    fence = SQLFence(f"fence_{uuid.uuid4().hex[:12]}")

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    db = connect()
    fence.ensure_table(db)
    db.close()
    return Keeping("sqlite", lambda: SQLKeeper(connect, fence), None, _reader(connect, fence))


def _postgres(dsn: str) -> Keeping:
    fence = SQLFence(f"fence_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(dsn) as db:
        fence.ensure_table(db)
    return Keeping(
        "postgres",
        lambda: SQLKeeper(lambda: psycopg.connect(dsn), fence),
        lambda: AsyncSQLKeeper(lambda: psycopg.AsyncConnection.connect(dsn), fence),
        _reader(lambda: psycopg.connect(dsn), fence),
    )


def _reader(connect: Callable[[], Any], fence: SQLFence) -> Callable[[str], int | None]:
    def highest(resource: str) -> int | None:
        db = connect()
        try:
            p = "?" if isinstance(db, sqlite3.Connection) else "%s"
            cur = db.cursor()
            cur.execute(f"SELECT token FROM {fence.table} WHERE resource = {p}", (resource,))
            rows = cur.fetchall()
            return int(rows[0][0]) if rows else None
        finally:
            db.close()

    return highest


def _redis(endpoint: str) -> Keeping:
    prefix = f"t_{uuid.uuid4().hex}:"
    url = f"redis://{endpoint}/0"
    reader = RedisFence(redis.Redis.from_url(url), prefix=prefix)
    keeping = Keeping(
        "redis",
        lambda: RedisFence(redis.Redis.from_url(url), prefix=prefix),
        lambda: AsyncRedisFence(redis.asyncio.Redis.from_url(url), prefix=prefix),
        reader.highest,
    )
    keeping.closers.append(reader.client.close)
    return keeping


KEEPERS = ["memory", "sqlite", "postgres", "redis"]


@pytest.fixture(params=KEEPERS)
def keeping(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Keeping]:
    """Each keeper kind in turn, on a fresh table, file or key prefix."""
    kind = request.param
    if kind == "memory":
        found = _memory()
    elif kind == "sqlite":
        found = _sqlite(tmp_path / "service.db")
    elif kind == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres")
        found = _postgres(server.dsn)
    else:
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        found = _redis(redis_server.endpoint)
    yield found
    for close in found.closers:
        close()


@dataclass
class Service:
    """A fenced app on a real server: its URL and the admissions its handler was given."""

    url: str
    seen: list[Admission | None]


MODES = ["wsgi", "asgi", "asgi-async"]
"""waitress + Flask + WSGIFence; uvicorn + Starlette + ASGIFence with the blocking keeper (run
in a thread), and with the async one."""


@contextmanager
def serving(mode: str, keeper: Any, **options: Any) -> Iterator[Service]:
    seen: list[Admission | None] = []
    if mode == "wsgi":
        app = flask_app(seen)
        app.wsgi_app = WSGIFence(app.wsgi_app, keeper, **options)  # type: ignore[method-assign]
        with waitress_serving(app) as url:
            yield Service(url, seen)
    else:
        with uvicorn_serving(ASGIFence(starlette_app(seen), keeper, **options)) as url:
            yield Service(url, seen)


ASYNC_KEEPERS = ["postgres", "redis"]

MODE_KEEPERS = [
    pytest.param(mode, kind, id=f"{mode}-{kind}")
    for mode in MODES
    for kind in (ASYNC_KEEPERS if mode == "asgi-async" else KEEPERS)
]
"""Every mode with every keeper it can use: ``parametrize(("mode", "keeping"), MODE_KEEPERS,
indirect=["keeping"])``."""


def keeper_for(mode: str, keeping: Keeping) -> Any:
    """The keeper ``mode`` uses: the async twin for "asgi-async", else the blocking one."""
    if mode == "asgi-async":
        assert keeping.awaiting is not None
        return keeping.awaiting()
    return keeping.blocking()
