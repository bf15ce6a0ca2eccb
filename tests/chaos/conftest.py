"""The chaos tests' own servers: a Redis primary with an asynchronous replica, started once for
the module's fail-over and clock-jump runs (both fault the servers, so not the shared Redis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tenure.chaos import RedisControl
from tenure.stores.redis.server import RedisServer


@pytest.fixture(scope="module")
def redis_pair() -> Iterator[RedisControl]:
    missing = RedisServer.missing()
    if missing:
        pytest.skip(f"Redis not available (missing {', '.join(missing)})")
    control = RedisControl()
    control.start()
    try:
        yield control
    finally:
        control.close()
