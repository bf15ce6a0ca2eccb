"""An event loop in a daemon thread, for sync callers of async code: the sync client, and the
test harness's proxies, guards and observers. One implementation of the hand-off."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, TypeVar, cast

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from ._errors import TenureError

T = TypeVar("T")
_Entry = tuple[AbstractAsyncContextManager[Any], "Future[Any]"]


class LoopThread:
    """Starts the loop when made. `call` runs a coroutine function there and waits for it;
    `enter` enters an async context manager there, kept open until `close`; `spawn` starts a
    background task, cancelled at `close`. A daemon thread: a process that exits without
    closing it is not held up by it."""

    def __init__(self, name: str) -> None:
        ready: Future[None] = Future()
        self._requests: MemoryObjectSendStream[_Entry] | None = None
        self._thread = threading.Thread(
            target=anyio.run, args=(self._main, ready), name=name, daemon=True
        )
        self._thread.start()
        ready.result()

    async def _main(self, ready: Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._spawned: set[anyio.CancelScope] = set()
        send, receive = anyio.create_memory_object_stream[_Entry](math.inf)
        self._requests = send
        # Managers are entered and left by this task, as their cancel scopes require, inside
        # the task group of the spawned tasks; those are cancelled before the managers are left.
        async with anyio.create_task_group() as tg, AsyncExitStack() as stack, receive:
            self._tg: TaskGroup = tg
            ready.set_result(None)
            async for manager, entered in receive:  # until `close` closes the stream
                try:
                    entered.set_result(await stack.enter_async_context(manager))
                except BaseException as exc:
                    entered.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
            for scope in list(self._spawned):
                scope.cancel()
            while self._spawned:
                await anyio.sleep(0.001)

    async def _spawn(self, func: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        with anyio.CancelScope() as scope:
            self._spawned.add(scope)
            try:
                await func(*args)
            finally:
                self._spawned.discard(scope)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def call(
        self,
        func: Callable[..., Awaitable[T]],
        *args: Any,
        on_late: Callable[[T], object] | None = None,
        **kwargs: Any,
    ) -> T:
        """``await func(*args, **kwargs)`` on the loop. If this thread is interrupted (Ctrl-C),
        the task is cancelled there and waited for; a result it still produced is handed to
        ``on_late`` (so a lock granted just as the interrupt came is not left held), then the
        interrupt goes on. A task cancelled by `close` raises ``TenureError``.

        The hand-off is as light as it can be, since every blocking call makes it twice (there
        and back): one callback scheduled on the loop that starts the task, and an event the
        task's end sets — not `asyncio.run_coroutine_threadsafe`'s chained futures. (An event,
        not a bare lock: an interrupt raised just after the wait returned leads to a second
        wait, which must return at once.)"""
        scopes: list[anyio.CancelScope] = []
        tasks: list[asyncio.Task[T | None]] = []
        done = threading.Event()

        async def run() -> T | None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                return await func(*args, **kwargs)
            return None  # cancelled by `cancel`

        def start() -> None:
            task = self._loop.create_task(run())
            task.add_done_callback(lambda _: done.set())
            tasks.append(task)

        def cancel() -> None:  # runs after `start` (the loop keeps their order)
            for scope in scopes:
                scope.cancel()
            if not scopes:  # not begun yet: cancelled before its first step
                tasks[0].cancel()

        if not self.alive:
            raise TenureError("the client is closed")
        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop is closed
            raise TenureError("the client is closed") from None
        try:
            done.wait()
        except BaseException:
            self._loop.call_soon_threadsafe(cancel)
            done.wait()
            task = tasks[0]
            if not task.cancelled() and task.exception() is None:
                late = task.result()
                if late is not None and on_late is not None:
                    on_late(late)
            raise
        task = tasks[0]
        if task.cancelled() or (scopes and scopes[0].cancelled_caught):
            raise TenureError("the client is closing")
        return cast(T, task.result())

    def soon(self, func: Callable[[], object]) -> None:
        """``func()`` on the loop's thread: at once if called there, else as its next callback
        (nothing if the loop is gone). For what only that thread may do, such as cancelling."""
        if threading.get_ident() == self._thread.ident:
            func()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(func)

    def call_sync(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on the loop's thread (for objects only that thread may touch)."""

        async def run() -> T:
            return func(*args)

        return self.call(run)

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter ``manager`` on the loop; it is left (in reverse order) by `close`."""
        if not self.alive or self._requests is None:
            raise TenureError("the client is closed")
        entered: Future[Any] = Future()
        self._loop.call_soon_threadsafe(self._requests.send_nowait, (manager, entered))
        return cast(T, entered.result())

    def spawn(self, func: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        """Run ``func(*args)`` as a task of the loop until it ends or `close` cancels it."""

        async def start() -> None:  # from a task of the loop: anyio needs one to start another
            self._tg.start_soon(self._spawn, func, *args)

        self.call(start)

    def close(self) -> None:
        """Cancel the tasks, leave what was entered, stop the loop and wait. Idempotent."""
        if self.alive and self._requests is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already gone
                self._loop.call_soon_threadsafe(self._requests.close)
            self._thread.join()
