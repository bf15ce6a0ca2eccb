"""Keepers: where a fenced HTTP service remembers the highest token it admitted per resource.

`tenure.fence.http`'s middleware admits each request's token in a keeper before the app sees
the request. A keeper admits an equal or higher token (and remembers a higher one) and refuses a
lower one with ``tenure.StaleToken``, atomically:

- `MemoryKeeper`: one process; a dict under a lock. Forgets everything when the process ends.
- `SQLKeeper` / `AsyncSQLKeeper`: `SQLFence`'s table on the service's own sqlite3 or psycopg
  database, one short transaction per admission.
- ``RedisFence`` / ``AsyncRedisFence`` (``tenure.fence.redis``) are keepers as they are: one Lua
  script per admission compares and raises. So is ``FileFence`` (``tenure.fence.files``).

A keeper apart from the data only orders *admissions*: a request admitted just before a newer
holder's request can still write after it. Admitting in the same transaction as the write closes
that gap (docs/fencing-http.md).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._tokens import check, refused
from .sql import SQLFence

if TYPE_CHECKING:
    import psycopg

__all__ = ["AsyncKeeper", "AsyncSQLKeeper", "Keeper", "MemoryKeeper", "SQLKeeper"]


class Keeper(Protocol):
    """Admits tokens from blocking code (a WSGI service; an ASGI one runs it in a thread)."""

    def admit(self, resource: str, token: int) -> None:
        """Admit ``token`` for ``resource`` and remember it if it is the highest, or raise
        ``tenure.StaleToken`` if a higher one was admitted before."""


class AsyncKeeper(Protocol):
    """Admits tokens on the event loop (an ASGI service)."""

    async def admit(self, resource: str, token: int) -> None:
        """`Keeper.admit`, awaited."""


class MemoryKeeper:
    """The highest token per resource in this process's memory: for a service of one process.

    Every worker process of a service has its own memory; run one process, or use `SQLKeeper`
    or ``RedisFence``. The memory is lost on restart: a stale holder is then admitted once more.
    """

    def __init__(self) -> None:
        self._highest: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit(self, resource: str, token: int) -> None:
        """See `Keeper.admit`."""
        check(resource, token)
        with self._lock:
            highest = self._highest.get(resource, token)
            if token < highest:
                raise refused(type(self).__name__, resource, token, highest)
            self._highest[resource] = token

    def highest(self, resource: str) -> int | None:
        """The highest token admitted for ``resource``, or None if none was."""
        with self._lock:
            return self._highest.get(resource)


class SQLKeeper:
    """Admits in `SQLFence`'s table, one transaction per admission, on connections made by
    ``connect`` (a sqlite3 or psycopg connection; each is closed after its admission).

    The table must exist (``fence.ensure_table``). A sqlite3 connection must not use
    ``autocommit=False`` (see `SQLFence.fenced`).
    """

    def __init__(self, connect: Callable[[], Any], fence: SQLFence | None = None) -> None:
        self.connect = connect
        self.fence = fence if fence is not None else SQLFence()

    def admit(self, resource: str, token: int) -> None:
        """See `Keeper.admit`."""
        conn = self.connect()
        try:
            with self.fence.fenced(conn, resource, token):
                pass
        finally:
            conn.close()


class AsyncSQLKeeper:
    """`SQLKeeper` on ``psycopg.AsyncConnection``\\ s: ``connect`` is awaited for each admission,
    e.g. ``lambda: psycopg.AsyncConnection.connect(dsn)``."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[psycopg.AsyncConnection[Any]]],
        fence: SQLFence | None = None,
    ) -> None:
        self.connect = connect
        self.fence = fence if fence is not None else SQLFence()

    async def admit(self, resource: str, token: int) -> None:
        """See `AsyncKeeper.admit`."""
        conn = await self.connect()
        try:
            async with self.fence.fenced_async(conn, resource, token):
                pass
        finally:
            await conn.close()
