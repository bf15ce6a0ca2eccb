"""Redis fixtures: one real ``redis-server`` for single-instance tests and three independent ones
for Redlock, each started once for the whole test session; a fresh key prefix per test.

The namespace is the URL's ``?prefix=`` option (``t_<uuid>``): every key of the store starts
with it. Loaded by ``tests/conftest.py``; the conformance suite then runs on ``redis_store_url``
and ``redlock_store_url`` too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tenure.stores.redis.server import REDIS_SERVER, RedisServer


def _start(count: int) -> list[RedisServer]:
    try:
        servers = [RedisServer() for _ in range(count)]
    except RuntimeError as exc:
        pytest.skip(f"Redis not available ({REDIS_SERVER}): {exc}")
    for server in servers:
        server.start()
    return servers


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Shared by all tests: do not stop or kill it (start your own ``RedisServer`` for that)."""
    servers: list[RedisServer] = []
    try:
        servers = _start(1)
        yield servers[0]
    finally:
        for server in servers:
            server.close()


@pytest.fixture(scope="session")
def redlock_servers() -> Iterator[list[RedisServer]]:
    """Three independent servers. A test that stops, kills or pauses one must start (resume) it
    again in a ``finally`` (``redlock_healthy``)."""
    servers: list[RedisServer] = []
    try:
        servers = _start(3)
        yield servers
    finally:
        for server in servers:
            server.close()


def redlock_healthy(servers: list[RedisServer]) -> None:
    for server in servers:
        if server.paused:
            server.resume()
        server.start()


def fresh_prefix() -> str:
    return f"t_{uuid.uuid4().hex}"


@pytest.fixture
def redis_store_url(redis_server: RedisServer) -> str:
    return f"redis://{redis_server.endpoint}/0?prefix={fresh_prefix()}"


@pytest.fixture
def redlock_store_url(redlock_servers: list[RedisServer]) -> str:
    hosts = ",".join(server.endpoint for server in redlock_servers)
    return f"redlock://{hosts}/0?prefix={fresh_prefix()}"
