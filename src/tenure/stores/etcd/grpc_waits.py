"""Every waiter's watch of one `GrpcTransport` on one gRPC Watch stream (`SharedWatches`).

A waiter watches the key before its own in a lock's queue for a delete. With one stream per
waiter, a thousand waiters of one client were a thousand streams on the member's channel, each
with grpc's own task and buffers (18 kB a waiter), and the session's keep-alive beside them
went unanswered until the lease ended. etcd multiplexes watches on one stream by watch id: the
waiters' creates and cancels go out through one writer, their events come back through one
reader, which wakes the waiter the event is for.

etcd answers a stream's create requests in the order they were sent (etcd's own client relies
on it): the ids are matched to the waiters by that order. Anything that ends the stream (the
member lost, a stale token, the transport moving to another member) wakes every waiter on it:
each attempts again, as after any wake-up, and its next wait opens a stream anew.
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .grpc_transport import GrpcTransport


class _Waiter:
    """One waiter's watch: its id once etcd created it, and its wake-up (a bare future)."""

    __slots__ = ("future", "gone", "watch_id")

    def __init__(self, future: asyncio.Future[bool]) -> None:
        self.future = future
        """Its result: True for an event or etcd's cancel of the watch, False for the end of
        the stream."""
        self.watch_id: int | None = None
        self.gone = False
        """The waiter stopped waiting before its id came: the id is cancelled when it does."""

    def wake(self, by_its_watch: bool = True) -> None:
        if not self.future.done():
            self.future.set_result(by_its_watch)


class _Stream:
    """One Watch stream on one member, with its writer and reader tasks."""

    def __init__(self, transport: GrpcTransport, index: int, call: Any, token: str) -> None:
        self.index, self.call, self.token = index, call, token
        self._transport = transport
        self._outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: collections.deque[_Waiter] = collections.deque()
        self._by_id: dict[int, _Waiter] = {}
        self.ended = False
        self.stale_token = False
        self._tasks = [asyncio.ensure_future(self._write()), asyncio.ensure_future(self._read())]

    def add(self, request: Any, waiter: _Waiter) -> None:
        """Queue ``waiter``'s create request: its id is the answer to come in this order."""
        self._pending.append(waiter)
        self._outbox.put_nowait(request)

    def remove(self, waiter: _Waiter) -> None:
        """``waiter`` stopped waiting: its watch is cancelled (now, or once its id comes)."""
        waiter.gone = True
        if waiter.watch_id is not None and self._by_id.pop(waiter.watch_id, None) is waiter:
            self._cancel(waiter.watch_id)

    def _cancel(self, watch_id: int) -> None:
        if not self.ended:
            self._outbox.put_nowait(self._transport.watch_cancel(watch_id))

    async def _write(self) -> None:
        try:
            while True:
                await self._transport.grpc_await(self.call.write(await self._outbox.get()))
        except asyncio.CancelledError:
            raise
        except Exception:  # the stream broke: the reader sees it too
            self.end()

    async def _read(self) -> None:
        grpc = self._transport.grpc
        try:
            while True:
                reply = await self._transport.grpc_await(self.call.read())
                if reply is grpc.aio.EOF:
                    break
                self._answer(reply)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError:
            self._transport.skip(self.index)
        except Exception:  # a broken stream only wakes its waiters
            pass
        self.end()

    def _answer(self, reply: Any) -> None:
        watch_id = int(reply.watch_id)
        if reply.created:
            waiter = self._pending.popleft() if self._pending else None
            if waiter is None:
                return
            if reply.canceled:
                # Refused at creation: a stale token (renewed before the next stream opens),
                # or a refusal said as "permission denied", which the stream's token may be
                # behind too: the next wait opens a new stream with the token in use then.
                self.stale_token = self._transport.is_stale_token(reply.cancel_reason)
                waiter.wake(by_its_watch=False)
                self.end()
                return
            waiter.watch_id = watch_id
            if waiter.gone:
                self._cancel(watch_id)
            else:
                self._by_id[watch_id] = waiter
            return
        if reply.events or reply.canceled:
            waiter = self._by_id.pop(watch_id, None)
            if waiter is not None:
                waiter.wake()
                if not reply.canceled:
                    self._cancel(watch_id)  # one event is all a waiter wants

    def end(self) -> None:
        """Wake every waiter on this stream; later waits open another."""
        if self.ended:
            return
        self.ended = True
        for waiter in [*self._pending, *self._by_id.values()]:
            waiter.wake(by_its_watch=False)
        self._pending.clear()
        self._by_id.clear()
        self.call.cancel()

    async def aclose(self) -> None:
        """Cancels the stream and its tasks. grpc's own read and write end when the cancelled
        call says so and its status comes back after: the transport's ``aclose`` waits for
        those (`grpc_ends`); for a stream replaced in use they come back while the loop runs."""
        self.end()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class SharedWatches:
    """The waiters' watches of one transport, on one stream to the member in use."""

    def __init__(self, transport: GrpcTransport) -> None:
        self._transport = transport
        self._stream: _Stream | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None

    async def _current(self) -> _Stream | None:
        """The stream to the member in use, opened if need be; None if none can be."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # streams belong to the loop that made them
            self._loop, self._stream, self._opening = loop, None, asyncio.Lock()
        assert self._opening is not None
        async with self._opening:
            stream = self._stream
            transport = self._transport
            if stream is not None and (stream.ended or stream.index != transport.current):
                await stream.aclose()
                if stream.stale_token:
                    await transport.fresh_token_for_watch(stream.token)
                stream = self._stream = None
            if stream is None:
                opened = await transport.open_watch_stream()
                if opened is None:
                    return None
                stream = self._stream = _Stream(transport, *opened)
            return stream

    async def wait(self, request: Any) -> bool:
        """`Transport.wait_event` on the shared stream: True for an event of the watch
        ``request`` creates (or etcd's cancel of it), False when the stream ended or could not
        be opened. The caller bounds the time; a waiter cancelled first has its watch
        cancelled."""
        stream = await self._current()
        if stream is None:
            return False
        waiter = _Waiter(asyncio.get_running_loop().create_future())
        stream.add(request, waiter)
        try:
            return await waiter.future
        finally:
            stream.remove(waiter)

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
