"""A TCP chaos proxy: partitions between a tenure client and a store endpoint, without root.

Used by tenure's own tests and by ``tenure chaos``, and public so that you can test your own
loss handling: point the client at the proxy instead of the store, then switch the proxy's mode.
It listens on a free port of 127.0.0.1 and forwards each accepted connection to the target. The
mode applies at once to every current and future connection:

``pass``            forward bytes both ways (the default; ``heal()`` returns to it).
``delay``           forward, but hold each chunk ``seconds`` in each direction (chunks of one
                    direction are held one after another, so a burst adds up).
``hold``            keep connections open and hold every byte both ways until the mode
                    changes, then deliver them in order: a partition as TCP lives through it
                    (it sends the bytes again until the path heals).
``blackhole``       keep connections open but drop every byte both ways: a partition that looks
                    alive. Dropped bytes are lost for good; after ``heal()`` new bytes flow again.
                    (A chunk is judged when the proxy reads it, so bytes still in flight at
                    the switch may pass.)
``reset``           abort every current connection with a RST (SO_LINGER 0), both to the client
                    and to the target, and reset each new connection as soon as it is accepted.
``lose_responses``  forward client→server bytes, drop server→client bytes: the request reaches
                    the store, the answer is lost.

Example::

    async with ChaosProxy("127.0.0.1", store_port) as proxy:
        async with tenure.connect_async(f"postgresql://postgres@{proxy.address}/postgres") as c:
            async with c.lock("job", ttl=5):
                proxy.set_mode("blackhole")  # the lease is lost by its deadline; body cancelled
        proxy.heal()

From sync code, ``ChaosProxy(host, port).start_in_thread()`` runs it on an event loop of its own
in a daemon thread and returns a handle with the same switches and ``close()``.
"""

from __future__ import annotations

import socket
import struct
from contextlib import suppress
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from .._loop_thread import LoopThread

Mode = Literal["pass", "delay", "hold", "blackhole", "reset", "lose_responses"]
MODES: tuple[Mode, ...] = ("pass", "delay", "hold", "blackhole", "reset", "lose_responses")
CHUNK = 65536


def _rst_on_close(stream: SocketStream) -> None:
    """Make closing ``stream`` send a RST instead of a FIN."""
    with suppress(OSError):
        raw = stream.extra(SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@dataclass(eq=False)
class _Link:
    client: SocketStream
    server: SocketStream
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def abort(self) -> None:
        """Reset both sides (the handler closes them when its scope is cancelled)."""
        _rst_on_close(self.client)
        _rst_on_close(self.server)
        self.scope.cancel()


class ChaosProxy:
    """Forward 127.0.0.1:``port`` to ``target_host:target_port`` under a switchable fault mode."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.port = 0  # chosen when started
        self.mode: Mode = "pass"
        self.delay_seconds = 0.0
        self.connections = 0  # accepted so far, including those reset at once
        self.bytes_forwarded = 0  # handed to the other side, both directions
        self._links: set[_Link] = set()
        self._tg: TaskGroup | None = None

    @property
    def address(self) -> str:
        """``host:port`` to connect to instead of the target."""
        return f"{self.listen_host}:{self.port}"

    def set_mode(self, mode: Mode, seconds: float = 0.0) -> None:
        """Switch every current and future connection to ``mode`` (``seconds``: for ``delay``)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        self.mode, self.delay_seconds = mode, seconds
        if mode == "reset":
            for link in list(self._links):
                link.abort()

    def delay(self, seconds: float) -> None:
        """Hold every byte for ``seconds`` before passing it on."""
        self.set_mode("delay", seconds)

    def heal(self) -> None:
        """Pass traffic again at once: no cut, no delay."""
        self.set_mode("pass")

    def retarget(self, target_host: str, target_port: int) -> None:
        """Forward new connections to another target and reset the current ones: a fail-over
        behind one address, as a virtual IP or a fail-over-aware proxy would make it."""
        self.target_host, self.target_port = target_host, target_port
        for link in list(self._links):
            link.abort()

    async def __aenter__(self) -> ChaosProxy:
        listener = await anyio.create_tcp_listener(local_host=self.listen_host, local_port=0)
        self.port = listener.extra(SocketAttribute.local_port)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._serve, listener)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None

    async def _serve(self, listener: anyio.abc.Listener[SocketStream]) -> None:
        async with listener:
            await listener.serve(self._handle)

    def _drops(self, response: bool) -> bool:
        return self.mode in ("blackhole", "reset") or (response and self.mode == "lose_responses")

    async def _handle(self, client: SocketStream) -> None:
        self.connections += 1
        async with client:
            if self.mode == "reset":
                _rst_on_close(client)
                return
            try:
                server = await anyio.connect_tcp(self.target_host, self.target_port)
            except OSError:
                _rst_on_close(client)
                return
            async with server:
                link = _Link(client, server)
                self._links.add(link)
                try:
                    with link.scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._pipe, link, client, server, False)
                            tg.start_soon(self._pipe, link, server, client, True)
                finally:
                    self._links.discard(link)

    async def _pipe(
        self, link: _Link, src: SocketStream, dst: SocketStream, response: bool
    ) -> None:
        """Copy ``src`` to ``dst`` under the current mode; an error on either side resets both."""
        try:
            while True:
                try:
                    data = await src.receive(CHUNK)
                except anyio.EndOfStream:
                    if not self._drops(response):
                        await dst.send_eof()
                    return
                if self.mode == "delay" and self.delay_seconds > 0:
                    await anyio.sleep(self.delay_seconds)
                while self.mode == "hold":
                    await anyio.sleep(0.005)
                if self._drops(response):
                    continue
                self.bytes_forwarded += len(data)
                await dst.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            link.abort()

    def start_in_thread(self) -> ThreadedChaosProxy:
        """Run this proxy on its own event loop in a daemon thread (for sync tests)."""
        thread = LoopThread("chaos-proxy")
        try:
            thread.enter(self)
        except BaseException:
            thread.close()
            raise
        return ThreadedChaosProxy(self, thread)


class ThreadedChaosProxy:
    """A handle on a :class:`ChaosProxy` running in a thread: the same switches, and ``close()``."""

    def __init__(self, proxy: ChaosProxy, thread: LoopThread) -> None:
        self.proxy = proxy
        self._thread = thread

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def address(self) -> str:
        """``host:port`` to connect to instead of the target."""
        return self.proxy.address

    @property
    def mode(self) -> Mode:
        return self.proxy.mode

    @property
    def connections(self) -> int:
        return self.proxy.connections

    @property
    def bytes_forwarded(self) -> int:
        return self.proxy.bytes_forwarded

    def set_mode(self, mode: Mode, seconds: float = 0.0) -> None:
        self._thread.call_sync(self.proxy.set_mode, mode, seconds)

    def delay(self, seconds: float) -> None:
        """Hold every byte for ``seconds`` before passing it on."""
        self.set_mode("delay", seconds)

    def heal(self) -> None:
        """Pass traffic again at once: no cut, no delay."""
        self.set_mode("pass")

    def retarget(self, target_host: str, target_port: int) -> None:
        self._thread.call_sync(self.proxy.retarget, target_host, target_port)

    def close(self) -> None:
        self._thread.close()

    def __enter__(self) -> ThreadedChaosProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
