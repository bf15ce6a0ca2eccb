"""The sync client, ``connect``: the blocking kind of `ClientBase` (``tenure._modes``).

It runs an event loop in a thread of its own (`LoopThread`): every blocking call runs there
and waits, and the same loop renews the client's leases while the caller's thread works. No
member is written here: the handles, grants and queries are the async ones' code.
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._client import AsyncClient, ClientBase
from ._clock import REAL_CLOCK, Clock
from ._loop_thread import LoopThread
from ._modes import Blocking
from ._options import ClientOptions, ConnectKeywords, Unpack
from ._pool import SessionPool
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN
from .stores._spi import Store


@asynccontextmanager
async def _open(pool: SessionPool, store: Store) -> AsyncIterator[None]:
    """The sync client's life on its loop: as an `AsyncClient`'s ``async with``."""
    async with pool:
        try:
            yield
        finally:
            await pool.close_sessions()
            await store.aclose()


class Client(ClientBase, Blocking):
    """The sync client: ``client = tenure.connect()``; close it with ``client.close()`` (or use
    it as ``with tenure.connect() as client``)."""

    def __init__(
        self,
        store: Store,
        *,
        drift: float = DEFAULT_DRIFT,
        margin: float = DEFAULT_MARGIN,
        label: str = "",
        clock: Clock = REAL_CLOCK,
        lock_delay: float | None = None,
    ) -> None:
        thread = LoopThread("tenure-loop")
        try:
            super().__init__(
                store,
                drift=drift,
                margin=margin,
                label=label,
                clock=clock,
                lock_delay=lock_delay,
                portal=thread,
            )
            thread.enter(_open(self._pool, store))
        except BaseException:
            thread.close()
            raise
        self._finalizer = weakref.finalize(self, thread.close)
        atexit.register(self._finalizer)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every lock held through this client and stop its thread. Idempotent."""
        self._finalizer()
        atexit.unregister(self._finalizer)


def connect(url: str | None = None, **options: Unpack[ConnectKeywords]) -> Client:
    """Open a store by URL (default: $TENURE_STORE, else the embedded SQLite file): the
    blocking client. The options are ``connect_async``'s (``require``, TLS and credentials,
    ``lock_delay``, ``drift``, ``margin``, ``label``, ``clock``)."""
    checked = ClientOptions.of(**options)  # before the store is opened (or created)
    return Client(checked.open_store(url), **checked.client_keywords())


__all__ = ["AsyncClient", "Client", "connect"]
