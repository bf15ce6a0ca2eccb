"""What grpc still owes an event loop, and waiting for it before the loop may close.

grpc's asyncio layer (``grpc.aio``) runs each operation of a call (a write, a read, a stream's
final status) in its core; one poller thread takes their completions and hands each to the loop
that started it. A completion that comes back after that loop closed fails in whatever loop runs
then ("Event loop is closed" from ``PollerCompletionQueue._handle_events``: a later client's
loop, or a later test), and the completions behind it wait. So nothing of grpc's may be owed to
a loop when a client on it is done: `GrpcTransport` never cancels one of grpc's tasks (it cancels
the *call*, and the task ends when the core says so), and waits for its tasks in ``aclose``.

One task it does not start: each stream has a task of grpc's own that waits for its status, and
a stream cancelled here has its status still to come back. `LiveStreams` counts the streams
made per loop; the status waits left over, beyond the streams still live, are the owed ones.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import anyio

STATUS_WAIT = "_AioCall._handle_status_once_received"
"""The name of grpc's task that waits for a stream's status (tests/stores/etcd checks it)."""


def waits_for_status(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is grpc's wait for one stream's status."""
    return getattr(task.get_coro(), "__qualname__", "") == STATUS_WAIT


class LiveStreams:
    """The stream calls made through `made`, per event loop (threads run loops of their own:
    each sync client has one), for as long as they live."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[Any]]
        self._calls = weakref.WeakKeyDictionary()

    def made(self, call: Any) -> Any:
        """``call``, a stream just made on the running loop, counted there."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._calls.setdefault(loop, weakref.WeakSet()).add(call)
        return call

    def live(self, loop: asyncio.AbstractEventLoop) -> int:
        """The streams made on ``loop`` whose status is not known yet."""
        with self._lock:
            calls = list(self._calls.get(loop, ()))
        return sum(not call.done() for call in calls)

    async def settled(self, timeout: float) -> None:
        """Until each stream cancelled on the running loop has its status back: grpc's status
        waits there are no more than the streams still live. Bounded by ``timeout``: a
        stream made on this loop by someone else's grpc code counts as owed until it ends."""
        loop = asyncio.get_running_loop()
        with anyio.move_on_after(timeout):
            while True:
                waiting = [task for task in asyncio.all_tasks(loop) if waits_for_status(task)]
                if len(waiting) <= self.live(loop):
                    return
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)


STREAMS = LiveStreams()
"""Every `GrpcTransport`'s streams, in this process."""
