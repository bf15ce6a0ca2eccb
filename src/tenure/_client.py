"""The client: a connection to one store, and the maker of every primitive's handle.

``ClientBase`` is written once; `AsyncClient` (``connect_async``) and the blocking `Client`
(``tenure.connect``, in ``tenure._sync``) are its two kinds. Each primitive is one `maker`
line: ``client.lock(...)`` is the handle class of the client's kind, given the client's
`SessionPool` (the recipes need a session, the store and the clock, nothing of the client).
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType

import anyio

from ._clock import REAL_CLOCK, Clock
from ._election import AsyncElection, Election
from ._errors import InvalidArgument
from ._idempotent import AsyncIdempotent, Idempotent
from ._lock import AsyncLock, Lock
from ._loop_thread import LoopThread
from ._modes import Async, io, maker
from ._names import check_name
from ._once import AsyncOnce, Once, SlotRecord, history, jobs
from ._options import ClientOptions, ConnectKeywords, Unpack
from ._partitions import AsyncPartitionGroup, PartitionGroup
from ._pool import SessionPool
from ._rwlock import AsyncRWLock, RWLock
from ._semaphore import AsyncSemaphore, Semaphore
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, Timing
from ._values import Capabilities, Holder, LockDelay, LockInfo, Revocation
from ._versioned import AsyncVersioned, Versioned
from .stores._spi import Store, revocations_of


class ClientBase:
    """A connection to one store: the handles it makes, and what the store holds now."""

    def __init__(
        self,
        store: Store,
        *,
        drift: float = DEFAULT_DRIFT,
        margin: float = DEFAULT_MARGIN,
        label: str = "",
        clock: Clock = REAL_CLOCK,
        lock_delay: float | None = None,
        portal: LoopThread | None = None,
    ) -> None:
        ClientOptions(drift, margin, label, clock, lock_delay=lock_delay)  # checked
        self.store = store
        self.clock = clock
        self.drift = drift
        self.margin = margin
        self.lock_delay = lock_delay
        """The client's lock-delay (None: one TTL, at most 15 s; see ``tenure.Timing``)."""
        self.holder = Holder(socket.gethostname(), os.getpid(), label)
        """Who this client's grants show as their holder."""
        self._pool = SessionPool(store, self.holder, clock, drift, margin, lock_delay, portal)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    def _portal(self) -> LoopThread:
        assert self._pool.portal is not None
        return self._pool.portal

    @property
    def url(self) -> str:
        """The store's URL, credentials masked."""
        return self.store.url

    @property
    def capabilities(self) -> Capabilities:
        """What the store promises (``grade``: "efficiency" means not for correctness)."""
        return self.store.capabilities

    def timing(self, ttl: float, lock_delay: float | None = None) -> Timing:
        """The timing of a lease with this TTL (``InvalidArgument`` if bad): the client's drift,
        margin and lock-delay unless ``lock_delay`` is given."""
        return self._pool.timing(ttl, lock_delay)

    # -- the primitives: one line each ----------------------------------------------------------

    lock = maker(Lock, AsyncLock)
    semaphore = maker(Semaphore, AsyncSemaphore)
    rwlock = maker(RWLock, AsyncRWLock)
    election = maker(Election, AsyncElection)
    once = maker(Once, AsyncOnce)
    idempotent = maker(Idempotent, AsyncIdempotent)
    versioned = maker(Versioned, AsyncVersioned)
    partitions = maker(PartitionGroup, AsyncPartitionGroup)

    # -- what the store holds now ----------------------------------------------------------

    async def _locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        """Who holds what, as the store sees it now (only names starting with ``prefix``)."""
        if name is not None:
            check_name(name)
        if not isinstance(prefix, str):
            raise InvalidArgument(f"prefix must be a string, got {prefix!r}")
        return await self.store.locks(name, prefix)

    locks = io(_locks)

    async def _lock_delays(self, name: str | None = None) -> list[LockDelay]:
        """Names free but kept from everyone by lock-delay now, and until when."""
        if name is not None:
            check_name(name)
        return await self.store.lock_delays(name)

    lock_delays = io(_lock_delays)

    async def _revoke(
        self, name: str, *, reason: str = "", now: bool = False, token: int | None = None
    ) -> Revocation | None:
        """End the current grant of lock ``name`` (only if its token is ``token``, if given)
        for an operator, safely (docs/revoke.md): its holder loses the lease at its next
        renewal, and nobody is granted the name until the old lease could no longer be
        acting — its TTL from its last renewal, plus its lock-delay; the next token is higher.
        ``now=True`` frees the name at once: only when the old holder is known to be dead.
        Returns the `Revocation` as the store recorded it, or None if the name is not held.
        ``InvalidArgument`` if the store cannot revoke (``capabilities.revoke``)."""
        check_name(name)
        if not isinstance(reason, str) or not reason.isprintable():
            raise InvalidArgument(f"reason must be printable text, got {reason!r}")
        if token is not None and (isinstance(token, bool) or not isinstance(token, int)):
            raise InvalidArgument(f"token must be an integer, got {token!r}")
        record = Revocation(name, 0, self.holder, _user(), time.time(), reason, bool(now))
        return await revocations_of(self.store).revoke(name, token, record)

    revoke = io(_revoke)

    async def _history(self, job: str | None = None) -> list[SlotRecord]:
        """Every recorded slot of ``job``, in slot-key order; with no job, every job's slots
        (ordered by job, then slot: what ``tenure serve`` shows)."""
        return await history(self.store, job)

    history = io(_history)

    async def _jobs(self) -> list[str]:
        """The jobs with at least one recorded slot (``history`` shows each), sorted."""
        return await jobs(self.store)

    jobs = io(_jobs)


def _user() -> str:
    """The name of the user this process runs as (recorded with a revocation)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


class AsyncClient(ClientBase, Async):
    """The async client. Use as ``async with tenure.connect_async(url) as client``."""

    async def __aenter__(self) -> AsyncClient:
        await self._pool.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()
        await self._pool.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        """Release every lock held through this client and end its sessions."""
        await self._pool.close_sessions()
        await self.store.aclose()


@asynccontextmanager
async def connect_async(
    url: str | None = None, **options: Unpack[ConnectKeywords]
) -> AsyncIterator[AsyncClient]:
    """Open a store by URL (default: $TENURE_STORE, else the embedded SQLite file).

    ``require="correctness"`` refuses an efficiency-grade store (Redis) with ``InvalidArgument``,
    and ``"elections"`` or ``"records"`` (alone or in a tuple) a store that does not offer them;
    ``client.capabilities`` says what the store promises. ``tls``, ``ca``, ``cert``, ``key``,
    ``username`` and ``password`` override the URL's (docs/production.md). ``lock_delay``:
    seconds a name is granted to nobody after a lease on it ends without a release (default:
    one TTL, at most 15 s; docs/stop-by.md). ``drift``, ``margin``, ``label``, ``clock``: see
    ``tenure._options.ConnectKeywords``.
    """
    checked = ClientOptions.of(**options)  # before the store is opened (or created)
    async with AsyncClient(checked.open_store(url), **checked.client_keywords()) as client:
        yield client
