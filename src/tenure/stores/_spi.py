"""The store contract: what every store implements, and nothing more.

Locks, sessions and their timing are recipes written once (``tenure._lock``,
``tenure._session``); a store only answers these calls. All are async; a store whose client is
blocking runs it in a worker thread. Every call raises ``StoreUnavailable`` (translated from the
driver's errors) when the store cannot be reached; nothing else escapes.

A session is one client's liveness with the store. ``open_session`` creates it with a TTL judged
by the store's clock; ``keep_alive`` renews it (and so every lock it holds) and answers False once
the store says it is gone. A lock is asked for with ``attempt``; a caller that will wait is put in
the store's queue (its ``ticket``) and calls ``wait`` until ``attempt`` grants it or it gives up
with ``leave``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ._connect import NO_OPTIONS, ConnectOptions


@dataclass(frozen=True)
class Capabilities:
    """What a store can promise, declared in code (the docs' store table is made from these)."""

    grade: Literal["correctness", "efficiency"]
    """'efficiency': fine to avoid duplicate work, not for correctness (e.g. Redis)."""
    machines: Literal["one", "many"]
    """Whether clients on different machines can share locks."""
    durable_tokens: bool
    """A token is committed durably before it is returned and never reissued after a crash."""
    store_judges_expiry: bool
    """Expiry is decided by the store's clock (rule 2), not by a client's."""
    fair: bool
    """Waiters are served in arrival order."""
    native_wait: bool
    """Waiters are woken by the store (watch, notify, kernel), not by polling alone."""
    notes: str = ""


@dataclass(frozen=True)
class Owner:
    """Who holds a session: shown by ``tenure ls`` and to waiters."""

    host: str
    pid: int
    label: str = ""


@dataclass(frozen=True)
class LockInfo:
    """One lock as the store sees it now."""

    name: str
    token: int
    owner: Owner
    expires_in: float
    """Seconds until the store would expire the holder's lease, if not renewed."""
    waiters: int = 0
    value: str | None = None
    """What the holder proclaimed (leader election: who leads, where); None if nothing."""


@dataclass(frozen=True)
class HeldBack:
    """A name that is free but not grantable yet: its last lease ended without a release and
    its lock-delay has not passed (DESIGN rule 8)."""

    name: str
    token: int
    """The token of the lease that ended (0 if the store no longer knows it)."""
    free_in: float
    """Seconds until the store grants the name again, by the store's clock."""


@dataclass(frozen=True)
class Change:
    """One change of a lock, as a `Watch` reports it: its state right after the change."""

    name: str
    holder: LockInfo | None
    """The holder and its value after the change (``expires_in`` may be 0: unknown); None when
    the lock was released or freed."""


@dataclass(frozen=True)
class Grant:
    token: int
    renewed_session: bool
    """True if granting also renewed the session, so its deadline counts from this request."""


@dataclass(frozen=True)
class Busy:
    holder: LockInfo | None
    """The current holder, where the store knows it (None: free but others are ahead)."""
    ticket: object | None
    """Place in the queue (None if the caller did not ask to wait)."""
    retry_in: float | None = None
    """Seconds after which ``attempt`` is worth repeating even without a wake-up."""

    AHEAD_POLL: ClassVar[float] = 2.0
    """``retry_in`` while the lock is free but live waiters are ahead: if the lock was freed by
    expiry, nobody hands it over, and the one ahead may itself be asleep until its own retry."""
    extra: dict[str, object] = field(default_factory=dict)


class Watch(ABC):
    """A subscription to the changes of one lock name (``Store.watch``).

    Subscribed before the caller first reads the lock's state, so no change after that read is
    missed. Every grant (each token), every proclaimed value and every release of the name is
    reported, in the order the store made them; an expiry that nobody writes (SQL stores) is not
    an event: the caller re-reads when the holder could have expired.
    """

    @abstractmethod
    async def next(self, timeout: float) -> list[Change]:
        """The changes since the last call, oldest first; wait up to ``timeout`` seconds for
        one (an empty list: none came)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Unsubscribe (idempotent)."""


@dataclass(frozen=True)
class Record:
    """A small durable record (``tenure.once``'s slots): text, and a version the store changes
    on every write, so that a write can be made conditional on what the writer last read."""

    key: str
    value: str
    version: int
    """Positive; a write of the record makes it different (not necessarily larger)."""


class Session(ABC):
    """A store's handle on one session."""

    ttl: float


class Store(ABC):
    """One coordination service. Instances are created by ``tenure._url.open_store``."""

    capabilities: ClassVar[Capabilities]
    scheme: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> Store:
        """Parse the store's URL (``InvalidArgument`` if malformed) and make the store;
        ``options`` (keyword arguments of ``tenure.connect``) override the URL's TLS and
        credentials (see ``tenure.stores._connect``)."""

    @property
    @abstractmethod
    def url(self) -> str:
        """The store's URL for display, with any password redacted."""

    @abstractmethod
    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
        """Create a session that expires ``ttl`` seconds after this call unless kept alive.

        Lock-delay (rule 8): when the session ends *without* a release of a lock it holds (it
        expired, or the store declared it gone), that name is granted to nobody until
        ``lock_delay`` seconds after the end, judged by the store's own state and clock; it
        may start later than the end, never earlier. ``release`` and ``close_session`` free a
        name at once. Meanwhile ``attempt`` answers ``Busy`` with ``holder`` None, queued
        waiters keep their places, and ``held_back`` lists the name."""

    @abstractmethod
    async def keep_alive(self, session: Session) -> bool:
        """Renew the session and all it holds; False if the store says it is gone."""

    @abstractmethod
    async def close_session(self, session: Session) -> None:
        """End the session and release everything it holds. Idempotent."""

    @abstractmethod
    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        """Grant ``name`` to the session if it is free and the caller is next in line.

        With ``ticket`` None this is a first attempt: if busy and ``enqueue``, join the queue and
        return the ticket in ``Busy``; if busy and not ``enqueue``, leave no trace. Raises
        ``LeaseLost`` if the session is gone.
        """

    @abstractmethod
    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        """Return when ``attempt`` is worth repeating, or after ``timeout`` seconds."""

    @abstractmethod
    async def leave(self, ticket: object) -> None:
        """Leave the queue (gave up or cancelled). Idempotent."""

    @abstractmethod
    async def release(self, session: Session, name: str, token: int) -> None:
        """Delete the lock only if it is still held by this session with this token."""

    @abstractmethod
    async def locks(self, name: str | None = None) -> list[LockInfo]:
        """The locks currently held (one, if ``name`` is given)."""

    @abstractmethod
    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        """The names held back by lock-delay now (one, if ``name`` is given), none held."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close connections. Sessions are closed by the client first."""

    # -- leader election -------------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        """Set the value of ``name`` if this session still holds it with this token, atomically
        with that check; False if it does not (lost or released). Reported by watches."""
        raise NotImplementedError(f"{type(self).__name__} has no leader election yet")

    async def watch(self, name: str) -> Watch:
        """Subscribe to the changes of ``name`` (see `Watch`); woken by the store, not a poll."""
        raise NotImplementedError(f"{type(self).__name__} has no leader election yet")

    # -- records (conditional writes) ------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        """The record ``key``, or None if there is none."""
        raise self._no_records()

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        """Write ``value`` if the record's version is still ``version`` (0: only if there is no
        record), atomically with that check and durably before returning the written record;
        None if the version differs (someone wrote since), and then nothing is written."""
        raise self._no_records()

    async def list_records(self, prefix: str) -> list[Record]:
        """Every record whose key starts with ``prefix``, in key order."""
        raise self._no_records()

    def _no_records(self) -> Exception:
        from .._errors import InvalidArgument

        return InvalidArgument(
            f"the {self.scheme} store keeps no records, which tenure once and cron need: use "
            "sqlite, postgresql, etcd, zookeeper or redis"
        )
