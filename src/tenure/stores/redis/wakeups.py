"""A session's hand-overs on one Redis server, read by one blocking connection (`WakeUps`).

A release hands the lock to the first waiter in the same script and pushes
``<request id> <token>`` to that waiter's session's list (``P:w:<session>``). One task per
session and server pops the list (``BLPOP``) while any of the session's waiters waits, and wakes
the waiter the push is for. With a list per waiter, each waiter held a blocking connection of
its own: a thousand waiters of one client were a thousand connections, 22 kB each.

A push is only a shortcut: the grant is in the lock's key, and a waiter that misses its push
(it stopped waiting as it came) finds the grant at its next attempt. So a push for nobody
waiting is dropped, and cancelling a waiter never cuts a ``BLPOP`` mid-answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import anyio

READ_S = 1.0
"""Seconds one ``BLPOP`` blocks: a reader whose last waiter left ends this long after at most."""
SILENT_S = READ_S + 5.0
"""A ``BLPOP`` unanswered this long (a stuck server, a dead link) ends the reader: its waiters
attempt again, and the next wait reads on a new connection."""
ERROR_PAUSE_S = 0.1
"""After a failed read its waiters are woken this much later (they attempt again, and their
call reports the error): no tight loop against a server that is down."""


class _Reader:
    """One session's list on one server: its waiters by request id, and the task popping it."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[str | None]] = {}
        self.task: asyncio.Future[None] | None = None


class WakeUps:
    """The hand-overs of every session of one client on one server (``blocking``: the client
    whose connections may block; ``key``: a session's list)."""

    def __init__(
        self, blocking: Any, key: Callable[[str], str], failing: tuple[type[BaseException], ...]
    ) -> None:
        self._blocking = blocking
        self._key = key
        self._failing = failing
        self._readers: dict[str, _Reader] = {}

    async def pop(self, rid: str) -> str | None:
        """The token a hand-over pushed for the request ``rid`` (``<session>/<n>``); None when
        the read failed. Waits until one comes: the caller's cancel scope ends the wait."""
        sid = rid.partition("/")[0]
        reader = self._readers.setdefault(sid, _Reader())
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        reader.waiting[rid] = future
        if reader.task is None or reader.task.done():
            reader.task = asyncio.ensure_future(self._read(sid, reader))
        try:
            return await future
        finally:
            if reader.waiting.get(rid) is future:
                del reader.waiting[rid]

    async def _read(self, sid: str, reader: _Reader) -> None:
        key = self._key(sid)
        try:
            while reader.waiting:
                with anyio.fail_after(SILENT_S):
                    got = await self._blocking.blpop([key], timeout=READ_S)
                if got is None:
                    continue
                rid, _, token = str(got[1]).partition(" ")
                future = reader.waiting.pop(rid, None)
                if future is not None and not future.done():
                    future.set_result(token)
        except self._failing:
            await anyio.sleep(ERROR_PAUSE_S)
            for future in reader.waiting.values():
                if not future.done():
                    future.set_result(None)
            reader.waiting.clear()
        finally:
            if self._readers.get(sid) is reader and not reader.waiting:
                del self._readers[sid]

    async def aclose(self) -> None:
        """Stop every reader (their connections are closed with the client's pool)."""
        tasks = [r.task for r in self._readers.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, *self._failing):
                await task
        self._readers.clear()
