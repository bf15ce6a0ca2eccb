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
from dataclasses import dataclass, replace
from typing import ClassVar

from .._errors import InvalidArgument
from .._values import Capabilities, Change, Holder, LockDelay, LockInfo, Record, Revocation
from ._connect import NO_OPTIONS, ConnectOptions

__all__ = [
    "Busy",
    "Capabilities",
    "Change",
    "Elections",
    "Grant",
    "Holder",
    "LockDelay",
    "LockInfo",
    "Record",
    "Records",
    "Revocation",
    "Revocations",
    "Session",
    "Store",
    "Watch",
    "elections_of",
    "offers",
    "records_of",
    "revocations_of",
]  # fmt: skip


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


class Session(ABC):
    """A store's handle on one session."""

    ttl: float


class Store(ABC):
    """One coordination service: the calls locks and sessions need. Elections and records are
    layers a store adds by also implementing `Elections` and `Records`. Instances are created
    by ``tenure._url.open_store``."""

    capabilities: ClassVar[Capabilities]
    """The guarantees the class declares; ``elections``, ``records`` and ``revoke`` are set
    here, from what the class implements (`offers`)."""
    scheme: ClassVar[str]
    times_its_wait: ClassVar[bool] = False
    """`wait` blocks in the server for its ``timeout`` and returns by itself: the caller does
    not cut it off then (an answer cancelled on its way, a hand-over in it, would be lost)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("capabilities")
        if isinstance(declared, Capabilities):
            derived = offers(cls)
            cls.capabilities = replace(
                declared,
                elections=derived["elections"],
                records=derived["records"],
                revoke=derived["revoke"],
            )

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
    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        """Create a session that expires ``ttl`` seconds after this call unless kept alive.

        Lock-delay (rule 8): when the session ends *without* a release of a lock it holds (it
        expired, or the store declared it gone), that name is granted to nobody until
        ``lock_delay`` seconds after the end, judged by the store's own state and clock; it
        may start later than the end, never earlier. ``release`` and ``close_session`` free a
        name at once. Meanwhile ``attempt`` answers ``Busy`` with ``holder`` None, queued
        waiters keep their places, and ``lock_delays`` lists the name."""

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
        """Return when ``attempt`` is worth repeating. The caller cancels it after ``timeout``
        seconds (the store need not time it), unless the store `times_its_wait`."""

    @abstractmethod
    async def leave(self, ticket: object) -> None:
        """Leave the queue (gave up or cancelled). Idempotent."""

    @abstractmethod
    async def release(self, session: Session, name: str, token: int) -> None:
        """Delete the lock only if it is still held by this session with this token."""

    @abstractmethod
    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        """The locks currently held (one, if ``name`` is given) whose names start with
        ``prefix``. Filter by name before reading each holder: a prefix is how a recipe reads
        its own few locks among many (a partition group's members)."""

    @abstractmethod
    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        """The names held back by lock-delay now (one, if ``name`` is given), none held."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close connections. Sessions are closed by the client first."""


class Elections(ABC):
    """Leader election on top of locks: a store that implements these offers ``elections``."""

    @abstractmethod
    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        """Set the value of ``name`` if this session still holds it with this token, atomically
        with that check; False if it does not (lost or released). Reported by watches."""

    @abstractmethod
    async def watch(self, name: str) -> Watch:
        """Subscribe to the changes of ``name`` (see `Watch`); woken by the store, not a poll."""


class Records(ABC):
    """Small conditional records beside the locks (``tenure.once``'s slots): a store that
    implements these offers ``records``."""

    @abstractmethod
    async def read_record(self, key: str) -> Record | None:
        """The record ``key``, or None if there is none."""

    @abstractmethod
    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        """Write ``value`` if the record's version is still ``version`` (0: only if there is no
        record), atomically with that check and durably before returning the written record;
        None if the version differs (someone wrote since), and then nothing is written."""

    @abstractmethod
    async def list_records(self, prefix: str) -> list[Record]:
        """Every record whose key starts with ``prefix``, in key order."""

    @abstractmethod
    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        """Write ``value`` to the record ``key`` (None: delete it) only if ``session`` still
        holds ``name`` with ``token``, atomically with that check (the store's own compare: a
        lock handed over, expired or revoked refuses it) and durably before returning; False if
        it does not hold it, and then nothing is written. The state that travels with a lock
        (``lease.state``, docs/state.md): its holder writes, the next holder reads."""


class Revocations(ABC):
    """An operator's safe end of one grant (``tenure revoke``, docs/revoke.md): a store that
    implements these offers ``revoke``.

    A revocation ends one lock's grant, not its session: the session's other locks are kept,
    and its later renewals no longer extend the revoked one. Unless ``now``, the name stays
    granted to nobody until the old lease could no longer be acting, by the store's own state
    and clock: until the session's expiry as it stands at the revocation, plus the session's
    lock-delay; ``lock_delays`` lists it meanwhile, with the revocation. The next grant takes
    the next token, as always."""

    @abstractmethod
    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        """Revoke the current grant of ``name`` (only if its token is ``token``, when given),
        atomically with that check, and keep ``record`` (its ``token`` and ``free_in`` are the
        store's to fill in) for the holder's session to read with `revoked`. ``record.now``:
        free the name at once, as a release does. None if the name is not held (or not with
        ``token``), and then nothing changes."""

    @abstractmethod
    async def revoked(self, session: Session) -> list[Revocation]:
        """The grants of ``session`` that were revoked and that it may still believe it holds.
        The session keeper reads this after every confirmed ``keep_alive`` and before it
        extends its deadline, so a revoked grant is lost at the next renewal."""


def offers(store: type[Store]) -> dict[str, bool]:
    """The capabilities a store class has by what it implements, never by what it says."""
    return {
        "elections": issubclass(store, Elections),
        "records": issubclass(store, Records),
        "revoke": issubclass(store, Revocations),
    }


def elections_of(store: Store) -> Elections:
    """``store`` as an `Elections`; one ``InvalidArgument`` if it does not offer them."""
    if isinstance(store, Elections):
        return store
    raise InvalidArgument(f"the {store.scheme} store offers no leader election")


def records_of(store: Store) -> Records:
    """``store`` as a `Records`; one ``InvalidArgument`` if it keeps none."""
    if isinstance(store, Records):
        return store
    raise InvalidArgument(
        f"the {store.scheme} store keeps no records, which tenure once and cron need: use a"
        " store that offers records (sqlite, postgresql, etcd, zookeeper or redis)"
    )


def revocations_of(store: Store) -> Revocations:
    """``store`` as `Revocations`; one ``InvalidArgument`` if it cannot revoke a grant."""
    if isinstance(store, Revocations):
        return store
    raise InvalidArgument(
        f"the {store.scheme} store cannot revoke a grant safely (docs/revoke.md): stop the"
        " holder's process, or wait out its TTL"
    )
