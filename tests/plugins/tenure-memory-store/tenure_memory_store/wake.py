"""Waking a task of any event loop from any thread: a memory store is shared by every client of
the process, and each sync client runs its own loop in a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Callable

import anyio


def waker() -> Callable[[Callable[[], object]], None]:
    """A thread-safe, non-blocking way to run a function on the current event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio
        trio = importlib.import_module("trio")
        token = trio.lowlevel.current_trio_token()

        def on_trio(fn: Callable[[], object]) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(fn)

        return on_trio

    def on_asyncio(fn: Callable[[], object]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there any more
            loop.call_soon_threadsafe(fn)

    return on_asyncio


class Bell:
    """What one task waits on (a waiter's ticket, a watch): `ring` from any thread wakes it;
    a ring before `wait` is kept, so none is lost between a read and the wait."""

    def __init__(self) -> None:
        self._call = waker()
        self._event = anyio.Event()

    def ring(self) -> None:
        # Late-bound: a ring arriving after `wait` reset the event rings the new one.
        self._call(lambda: self._event.set())

    async def wait(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await self._event.wait()
        self._event = anyio.Event()  # in the waiter's own loop, as anyio requires
