"""The TCP chaos proxy on real loopback sockets: each mode, the threaded handle, and a lease lost
through a blackholed link to PostgreSQL."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import uuid4

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

import tenure
from tenure.stores.postgres.server import PostgresServer
from tenure.testing import ChaosProxy

pytestmark = pytest.mark.anyio

QUIET = 0.3  # how long "no answer" is waited for


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Echo:
    """An echo server that records every byte it received."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.port = 0

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            try:
                async for data in stream:
                    self.received += data
                    await stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass


@asynccontextmanager
async def echo_proxy() -> AsyncIterator[tuple[Echo, ChaosProxy]]:
    echo = Echo()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    echo.port = listener.extra(SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, echo.handle)
        async with ChaosProxy("127.0.0.1", echo.port) as proxy:
            yield echo, proxy
        tg.cancel_scope.cancel()


async def connect(proxy: ChaosProxy) -> SocketStream:
    return await anyio.connect_tcp("127.0.0.1", proxy.port)


async def roundtrip(stream: SocketStream, data: bytes) -> bytes:
    await stream.send(data)
    with anyio.fail_after(2):
        return await BufferedByteReceiveStream(stream).receive_exactly(len(data))


async def no_answer(stream: SocketStream) -> bool:
    """True if nothing arrives within QUIET seconds."""
    with anyio.move_on_after(QUIET):
        await stream.receive()
        return False
    return True


async def test_pass_forwards_both_ways_and_counts() -> None:
    async with echo_proxy() as (echo, proxy), await connect(proxy) as stream:
        assert proxy.address == f"127.0.0.1:{proxy.port}"
        assert await roundtrip(stream, b"hello") == b"hello"
        assert bytes(echo.received) == b"hello"
        assert proxy.connections == 1
        assert proxy.bytes_forwarded == 10


async def test_delay_holds_each_direction() -> None:
    async with echo_proxy() as (_, proxy), await connect(proxy) as stream:
        proxy.delay(0.2)
        start = time.monotonic()
        assert await roundtrip(stream, b"slow") == b"slow"
        assert time.monotonic() - start >= 0.4  # 0.2 out, 0.2 back
        proxy.heal()
        start = time.monotonic()
        assert await roundtrip(stream, b"fast") == b"fast"
        assert time.monotonic() - start < 0.2


async def test_blackhole_drops_everything_but_keeps_the_connection_open() -> None:
    async with echo_proxy() as (echo, proxy), await connect(proxy) as stream:
        assert await roundtrip(stream, b"a") == b"a"
        proxy.set_mode("blackhole")
        await stream.send(b"dropped")
        await stream.send(b"still open")  # no error: the partition looks alive
        assert await no_answer(stream)
        assert bytes(echo.received) == b"a"  # the requests never reached the server
        proxy.heal()
        # Bytes dropped during the blackhole are lost: only the new ones come back.
        assert await roundtrip(stream, b"after") == b"after"
        assert bytes(echo.received) == b"aafter"
        async with await connect(proxy) as second:
            assert await roundtrip(second, b"new") == b"new"


async def test_hold_delivers_everything_in_order_after_the_partition() -> None:
    async with echo_proxy() as (echo, proxy), await connect(proxy) as stream:
        assert await roundtrip(stream, b"a") == b"a"
        proxy.set_mode("hold")
        await stream.send(b"held ")
        await stream.send(b"then more")
        assert await no_answer(stream)
        assert bytes(echo.received) == b"a"  # nothing reached the server yet
        proxy.heal()
        with anyio.fail_after(2):
            got = await BufferedByteReceiveStream(stream).receive_exactly(len(b"held then more"))
        assert got == b"held then more"  # nothing lost, nothing reordered
        assert bytes(echo.received) == b"aheld then more"


async def test_blackhole_swallows_a_new_connection_silently() -> None:
    async with echo_proxy() as (echo, proxy):
        proxy.set_mode("blackhole")
        async with await connect(proxy) as stream:  # accepted: looks alive
            await stream.send(b"hi")
            assert await no_answer(stream)
        assert proxy.connections == 1
        assert bytes(echo.received) == b""


async def test_reset_aborts_current_connections_and_refuses_new_ones() -> None:
    async with echo_proxy() as (_, proxy), await connect(proxy) as stream:
        assert await roundtrip(stream, b"x") == b"x"
        proxy.set_mode("reset")
        with anyio.fail_after(1), pytest.raises(anyio.BrokenResourceError):
            await stream.receive()  # ECONNRESET, not a clean EOF
        with anyio.fail_after(1), pytest.raises((anyio.BrokenResourceError, OSError)):
            async with await connect(proxy) as fresh:
                await fresh.receive()
                await fresh.send(b"y")  # pragma: no cover - receive raises first
        assert proxy.connections == 2
        proxy.heal()
        async with await connect(proxy) as healed:
            assert await roundtrip(healed, b"z") == b"z"


async def test_retarget_resets_current_connections_and_sends_new_ones_elsewhere() -> None:
    async with echo_proxy() as (first, proxy), await connect(proxy) as stream:
        assert await roundtrip(stream, b"a") == b"a"
        second = Echo()
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        second.port = listener.extra(SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, second.handle)
            proxy.retarget("127.0.0.1", second.port)
            with anyio.fail_after(1), pytest.raises(anyio.BrokenResourceError):
                await stream.receive()  # the old link is reset, not silently kept
            async with await connect(proxy) as fresh:
                assert await roundtrip(fresh, b"b") == b"b"
            tg.cancel_scope.cancel()
        assert (bytes(first.received), bytes(second.received)) == (b"a", b"b")


async def test_lose_responses_delivers_requests_and_drops_answers() -> None:
    async with echo_proxy() as (echo, proxy), await connect(proxy) as stream:
        proxy.set_mode("lose_responses")
        await stream.send(b"request")
        assert await no_answer(stream)
        assert bytes(echo.received) == b"request"  # the store got it; the client got nothing


async def test_unknown_mode_is_rejected() -> None:
    proxy = ChaosProxy("127.0.0.1", 1)
    with pytest.raises(ValueError, match="unknown mode"):
        proxy.set_mode("partition")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        proxy.delay(-1)
    assert proxy.mode == "pass"


def test_threaded_handle_from_sync_code(sync_echo: int) -> None:
    with ChaosProxy("127.0.0.1", sync_echo).start_in_thread() as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as sock:
            sock.sendall(b"ping")
            assert sock.recv(16) == b"ping"
            proxy.set_mode("blackhole")
            assert proxy.mode == "blackhole"
            sock.sendall(b"lost")
            sock.settimeout(QUIET)
            with pytest.raises(socket.timeout):
                sock.recv(16)
            proxy.heal()
            sock.settimeout(2)
            sock.sendall(b"back")
            assert sock.recv(16) == b"back"
        assert proxy.connections == 1
        port = proxy.port
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_lease_is_lost_by_its_deadline_through_a_blackhole(postgres: PostgresServer) -> None:
    assert postgres.port is not None
    async with ChaosProxy("127.0.0.1", postgres.port) as proxy:
        dsn = postgres.dsn.replace(f":{postgres.port}/", f":{proxy.port}/")
        url = f"{dsn}?schema=t_{uuid4().hex[:12]}"
        async with tenure.connect_async(url) as client:
            with pytest.raises(tenure.LeaseLost):
                async with client.lock("through-proxy", ttl=1.5) as lease:
                    acquired = time.monotonic()
                    deadline = lease.deadline
                    proxy.set_mode("blackhole")
                    await anyio.sleep(10)  # cancelled when the lease is lost
                    pytest.fail("the body was not cancelled")  # pragma: no cover
            lost_after = time.monotonic() - acquired
            assert lease.lost
            assert lost_after <= 1.5 + 0.25, lost_after
            assert client.clock.now() >= deadline  # not before its deadline either
            proxy.heal()
    assert proxy.connections >= 1
