"""Sessions on every store: a name is granted once per session (locks are not reentrant),
closing a session hands its locks on at once, and a store that cannot be reached is one line
of ``StoreUnavailable`` that names where and shows no password."""

from __future__ import annotations

import socket
from uuid import uuid4

import anyio
import pytest

import tenure
from tenure import StoreUnavailable
from tenure._url import open_store
from tenure.stores._registry import REGISTRY, StoreEntry
from tenure.stores._spi import Busy, Grant, Holder

pytestmark = pytest.mark.anyio


async def test_one_session_acquiring_a_name_twice_gets_it_once(store_url: str) -> None:
    store = open_store(store_url)
    try:
        session = await store.open_session(10, Holder("h", 1, "twice"))
        first = await store.attempt(session, "twice", None, enqueue=True)
        second = await store.attempt(session, "twice", None, enqueue=True)
        assert isinstance(first, Grant) and isinstance(second, Busy)
        assert second.holder is not None and second.holder.token == first.token
        assert second.ticket is not None
        [info] = await store.locks("twice")
        assert info.token == first.token
        await store.release(session, "twice", first.token)
        again = await store.attempt(session, "twice", second.ticket, enqueue=True)
        assert isinstance(again, Grant) and again.token > first.token
        await store.release(session, "twice", again.token)
        assert await store.locks("twice") == []
        await store.close_session(session)
    finally:
        await store.aclose()


async def test_closing_a_session_hands_its_locks_on(store_url: str) -> None:
    """Closing a client ends its session as a release would: every lock it held goes at once
    to the waiter next in line, lock-delay or not."""
    names = ["close-1", "close-2"]
    async with tenure.connect_async(store_url) as b:
        got: dict[str, tuple[float, int]] = {}
        async with anyio.create_task_group() as tg:
            async with tenure.connect_async(store_url, lock_delay=60) as a:
                held = {name: (await a.lock(name, ttl=30).acquire()).token for name in names}

                async def waiter(name: str) -> None:
                    async with b.lock(name, ttl=30) as lease:
                        got[name] = (anyio.current_time(), lease.token)

                for name in names:  # never released: closing the client ends them
                    tg.start_soon(waiter, name)
                with anyio.fail_after(10):
                    for name in names:
                        while not (infos := await b.locks(name)) or infos[0].waiters < 1:
                            await anyio.sleep(0.01)
            closed = anyio.current_time()
        assert sorted(got) == names
        for name in names:
            granted_at, token = got[name]
            assert granted_at - closed < 0.5 and token > held[name]
        assert await b.lock_delays() == []


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert isinstance(port, int)
    return port


def unreachable(entry: StoreEntry, password: str) -> tuple[str, int]:
    """A URL of ``entry``'s store at closed loopback ports (Redlock: a quorum of them), with a
    user and ``password``, and the first of its ports."""
    ports = [closed_port() for _ in range(3 if entry.key == "redlock" else 1)]
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    path = {"postgres": "/db", "redis": "/0", "redlock": "/0"}.get(entry.key, "")
    url = f"{entry.schemes[0]}://tenure:{password}@{hosts}{path}"
    return entry.namespaced(url, f"t_{uuid4().hex[:12]}"), ports[0]


@pytest.mark.parametrize("entry", REGISTRY, ids=[entry.key for entry in REGISTRY])
async def test_an_unreachable_store_is_one_line_without_the_password(entry: StoreEntry) -> None:
    if entry.default_port is None:
        pytest.skip(f"the {entry.key} store is a file: no server to be unreachable")
    secret = "s3cret-pw"
    url, port = unreachable(entry, secret)
    shown = open_store(url)
    try:
        assert "s3cret" not in shown.url and "***" in shown.url
    finally:
        await shown.aclose()
    with anyio.fail_after(10), pytest.raises(StoreUnavailable) as raised:  # gives up by itself
        async with tenure.connect_async(url) as client:
            assert "s3cret" not in client.url
            await client.lock("x", ttl=5).acquire(wait=False)
    message = str(raised.value)
    assert "\n" not in message and "s3cret" not in message
    assert f"127.0.0.1:{port}" in message  # where it tried
    assert isinstance(raised.value, ConnectionError)
