"""The sync client, ``connect``: a blocking facade over ``AsyncClient``, which it runs on a
`LoopThread` of its own. One implementation of every recipe, and the loop thread is also what
renews sync leases while the caller's thread does its work."""

from __future__ import annotations

import atexit
import contextlib
import functools
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from ._client import AsyncClient
from ._decorators import P, R, Skipped, check_kind, giving, not_run, slot_of
from ._election import AsyncLeadership, Leader
from ._errors import NotAcquired, TenureError
from ._lease import AsyncLease, LostCallback, end_of_hold
from ._lock import check_arguments
from ._loop_thread import LoopThread
from ._once import AsyncRun, Slot, check_policy, check_slot, one_line
from ._options import (
    DEFAULT_TTL,
    CampaignKeywords,
    ClientOptions,
    ConnectKeywords,
    DecoratorLockKeywords,
    LockKeywords,
    OnceKeywords,
    PartitionKeywords,
    PermitKeywords,
    ReadKeywords,
    Unpack,
)
from ._partitions import AsyncMember, PartitionChange
from ._rwlock import DEFAULT_READERS, AsyncRWLease, check_readers
from ._semaphore import AsyncPermit, check_semaphore
from ._values import Capabilities, HeldBack, LockInfo

T = TypeVar("T")
HeldT = TypeVar("HeldT", bound="Lease")


class Lease:
    """A sync view of a lease: the same names as ``AsyncLease``, with a blocking release."""

    def __init__(self, inner: AsyncLease, client: Client) -> None:
        self._inner = inner
        self._client = client

    def __repr__(self) -> str:
        return repr(self._inner)

    name = property(lambda self: self._inner.name)
    token = property(lambda self: self._inner.token)
    ttl = property(lambda self: self._inner.ttl)
    deadline = property(lambda self: self._inner.deadline)
    lost = property(lambda self: self._inner.lost)
    lost_reason = property(lambda self: self._inner.lost_reason)
    released = property(lambda self: self._inner.released)
    clock = property(lambda self: self._inner.clock)
    stop_by = property(lambda self: self._inner.stop_by)
    at_risk = property(lambda self: self._inner.at_risk)
    loss = property(lambda self: self._inner.loss)

    def remaining(self) -> float:
        return self._inner.remaining()

    def check(self) -> None:
        self._inner.check()

    def on_lost(self, callback: Callable[[Lease], Any]) -> None:
        """Call ``callback(lease)`` once on loss; it runs on the client's event-loop thread."""
        cb: LostCallback = lambda _inner: callback(self)  # noqa: E731
        self._inner.on_lost(cb)

    def on_at_risk(self, callback: Callable[[Lease], Any]) -> None:
        """Call ``callback(lease)`` each time renewals become overdue; see ``AsyncLease``."""
        cb: LostCallback = lambda _inner: callback(self)  # noqa: E731
        self._inner.on_at_risk(cb)

    def release(self) -> None:
        self._client._call(self._inner.release)


class Permit(Lease):
    """A sync view of a semaphore's permit: a lease on one slot (see ``AsyncPermit``)."""

    _inner: AsyncPermit

    semaphore = property(lambda self: self._inner.semaphore)
    slot = property(lambda self: self._inner.slot)
    permits = property(lambda self: self._inner.permits)


class RWLease(Lease):
    """A sync view of a read or write grant of a read-write lock (see ``AsyncRWLease``)."""

    _inner: AsyncRWLease

    mode = property(lambda self: self._inner.mode)
    slot = property(lambda self: self._inner.slot)


class Leadership(Lease):
    """A sync view of a leadership: a lease whose token is the term, with a value."""

    _inner: AsyncLeadership

    term = property(lambda self: self._inner.term)
    value = property(lambda self: self._inner.value)

    def proclaim(self, value: str) -> None:
        self._client._call(self._inner.proclaim, value)

    def resign(self) -> None:
        self._client._call(self._inner.resign)


class Run:
    """A sync view of ``AsyncRun``: true if this process is to run the slot."""

    def __init__(self, inner: AsyncRun, client: Client) -> None:
        self._inner = inner
        self._client = client
        self.lease = Lease(inner.lease, client) if inner.lease is not None else None

    def __bool__(self) -> bool:
        return bool(self._inner)

    def __repr__(self) -> str:
        return repr(self._inner)

    state = property(lambda self: self._inner.state)
    slot = property(lambda self: self._inner.slot)
    token = property(lambda self: self._inner.token)
    attempt = property(lambda self: self._inner.attempt)

    def complete(self, exit_code: int = 0, error: str | None = None) -> Slot:
        """See ``AsyncRun.complete``."""
        return self._client._call(self._inner.complete, exit_code, error)

    def abandon(self) -> None:
        self._client._call(self._inner.abandon)


class Member:
    """A sync view of ``AsyncMember``: one member of a partition group."""

    def __init__(self, inner: AsyncMember, client: Client) -> None:
        self._inner = inner
        self._client = client

    def __repr__(self) -> str:
        return repr(self._inner)

    id = property(lambda self: self._inner.id)
    group = property(lambda self: self._inner.group)
    items = property(lambda self: self._inner.items)
    weight = property(lambda self: self._inner.weight)

    @property
    def owned(self) -> dict[str, Lease]:
        """Item → its lease, for the items this member holds now."""
        return {item: Lease(lease, self._client) for item, lease in self._inner.owned.items()}

    @property
    def members(self) -> dict[str, float]:
        return self._inner.members

    def assignment(self) -> dict[str, str]:
        return self._inner.assignment()

    def changes(self) -> Iterator[PartitionChange[Lease]]:
        """Every change of what this member owns, as a blocking iterator; a ``leaving`` item is
        released when you ask for the next change."""
        changes = self._inner.changes()
        try:
            while True:
                try:
                    change = self._client._call(changes.__anext__)
                except StopAsyncIteration:
                    return
                yield PartitionChange(change.item, change.kind, Lease(change.lease, self._client))
        finally:
            if self._client._thread.alive:
                self._client._call(changes.aclose)


class Client:
    """The sync client. ``client = tenure.connect()``; close it with ``client.close()``."""

    def __init__(self, make: Callable[[], AsyncClient]) -> None:
        self._thread = LoopThread("tenure-loop")
        try:
            self._async = self._thread.enter(make())
        except BaseException:
            self._thread.close()
            raise
        self._finalizer = weakref.finalize(self, self._thread.close)
        atexit.register(self._finalizer)

    @property
    def url(self) -> str:
        return self._async.url

    @property
    def capabilities(self) -> Capabilities:
        """What the store promises (``grade``: "efficiency" means not for correctness)."""
        return self._async.capabilities

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every lock held through this client and stop its thread. Idempotent."""
        self._finalizer()
        atexit.unregister(self._finalizer)

    def _call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``func`` on the loop; if this thread is interrupted (Ctrl-C), cancel it there,
        and release (or abandon) what it still granted rather than leave it held by nobody."""
        return self._thread.call(func, *args, on_late=self._undo, **kwargs)

    def _undo(self, late: object) -> None:
        if isinstance(late, AsyncLease):  # a permit or a leadership too
            self._call(late.release)
        elif isinstance(late, AsyncRun):
            self._call(late.abandon)
        elif isinstance(late, AsyncMember):  # joined a partition group as Ctrl-C came
            self._call(late.__aexit__, None, None, None)

    def acquire(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[LockKeywords]
    ) -> Lease:
        """Acquire ``name``; release with ``lease.release()``. See ``AsyncClient.acquire``
        (``wait=True``, ``timeout=None``, ``on_wait=None``, ``lock_delay=None``)."""
        return Lease(self._call(self._async.acquire, name, ttl, **options), self)

    @contextmanager
    def _hold(self, lease: Lease) -> Iterator[Lease]:
        try:
            yield lease
        except BaseException:
            lease.release()
            raise
        error = end_of_hold(lease._inner, None)
        lease.release()
        if error is not None:
            raise error

    def lock(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[LockKeywords]
    ) -> AbstractContextManager[Lease]:
        """``with client.lock(name, ttl=30) as lease``: released on exit; raises if lost."""
        timeout, lock_delay = options.get("timeout"), options.get("lock_delay")
        check_arguments(name, ttl, timeout, self._async.drift, self._async.margin)
        self._async.timing(ttl, lock_delay)
        client = self

        @contextmanager
        def hold() -> Iterator[Lease]:
            with client._hold(client.acquire(name, ttl, **options)) as held:
                yield held

        return hold()

    # -- semaphores ------------------------------------------------------------------------

    def acquire_permit(
        self, name: str, permits: int, ttl: float = DEFAULT_TTL, **options: Unpack[PermitKeywords]
    ) -> Permit:
        """One of ``permits`` permits of semaphore ``name``; release with ``permit.release()``.
        See ``AsyncClient.acquire_permit`` (``wait=True``, ``timeout=None``, ``lock_delay``)."""
        return Permit(self._call(self._async.acquire_permit, name, permits, ttl, **options), self)

    def semaphore(
        self, name: str, permits: int, ttl: float = DEFAULT_TTL, **options: Unpack[PermitKeywords]
    ) -> AbstractContextManager[Permit]:
        """``with client.semaphore(name, 3) as permit``: released on exit; raises if lost."""
        check_arguments(name, ttl, options.get("timeout"), self._async.drift, self._async.margin)
        check_semaphore(name, permits)
        self._async.timing(ttl, options.get("lock_delay"))
        return self._taken(lambda: self.acquire_permit(name, permits, ttl, **options))

    # -- read-write locks ------------------------------------------------------------------

    def acquire_read(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[ReadKeywords]
    ) -> RWLease:
        """A read lock of ``name``; release with ``lease.release()``. See
        ``AsyncClient.acquire_read`` (``readers=16``, ``wait=True``, ``timeout=None``)."""
        return RWLease(self._call(self._async.acquire_read, name, ttl, **options), self)

    def acquire_write(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[PermitKeywords]
    ) -> RWLease:
        """The write lock of ``name``; release with ``lease.release()``. See
        ``AsyncClient.acquire_write``."""
        return RWLease(self._call(self._async.acquire_write, name, ttl, **options), self)

    def read_lock(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[ReadKeywords]
    ) -> AbstractContextManager[RWLease]:
        """``with client.read_lock(name) as lease``: released on exit; raises if lost."""
        check_arguments(name, ttl, options.get("timeout"), self._async.drift, self._async.margin)
        check_readers(name, options.get("readers", DEFAULT_READERS))
        self._async.timing(ttl, options.get("lock_delay"))
        return self._taken(lambda: self.acquire_read(name, ttl, **options))

    def write_lock(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[PermitKeywords]
    ) -> AbstractContextManager[RWLease]:
        """``with client.write_lock(name) as lease``: released on exit; raises if lost."""
        check_arguments(name, ttl, options.get("timeout"), self._async.drift, self._async.margin)
        check_readers(name, DEFAULT_READERS)
        self._async.timing(ttl, options.get("lock_delay"))
        return self._taken(lambda: self.acquire_write(name, ttl, **options))

    @contextmanager
    def _taken(self, take: Callable[[], HeldT]) -> Iterator[HeldT]:
        """A block that takes a lease on entry (``take``) and holds it as ``_hold`` does."""
        lease = take()
        with self._hold(lease):
            yield lease

    def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        return self._call(self._async.locks, name, prefix)

    def held_back(self, name: str | None = None) -> list[HeldBack]:
        return self._call(self._async.held_back, name)

    # -- leader election ------------------------------------------------------------------

    def campaign(
        self, name: str, value: str, ttl: float = DEFAULT_TTL, **options: Unpack[CampaignKeywords]
    ) -> Leadership:
        """Wait to lead election ``name``; see ``AsyncClient.campaign`` (``timeout=None``,
        ``lock_delay=None``)."""
        return Leadership(self._call(self._async.campaign, name, value, ttl, **options), self)

    @contextmanager
    def lead(
        self, name: str, value: str, ttl: float = DEFAULT_TTL, **options: Unpack[CampaignKeywords]
    ) -> Iterator[Leadership]:
        """``with client.lead(name, value) as leadership``: resigns on exit; raises if lost."""
        leadership = self.campaign(name, value, ttl, **options)
        with self._hold(leadership):
            yield leadership

    def leader(self, name: str) -> Leader | None:
        return self._call(self._async.leader, name)

    # -- once per slot --------------------------------------------------------------------

    def claim(
        self, job: str, slot: str, ttl: float = DEFAULT_TTL, **options: Unpack[OnceKeywords]
    ) -> Run:
        """See ``AsyncClient.claim`` (``policy="at-least-once"``, ``wait=False``,
        ``timeout=None``); end a true result with ``run.complete(exit_code)``."""
        return Run(self._call(self._async.claim, job, slot, ttl, **options), self)

    @contextmanager
    def once(
        self, job: str, slot: str, ttl: float = DEFAULT_TTL, **options: Unpack[OnceKeywords]
    ) -> Iterator[Run]:
        """``with client.once(job, slot) as run: if run: ...``: leaving the block records done
        (or failed, with the block's exception, which propagates); a lost lease records
        nothing and raises ``LeaseLost``."""
        run = self.claim(job, slot, ttl, **options)
        if not run:
            yield run
            return
        try:
            yield run
        except BaseException as exc:
            with contextlib.suppress(TenureError):
                run.complete(error=one_line(exc))
            raise
        run.complete()

    @contextmanager
    def partitions(
        self,
        group: str,
        items: Iterable[str],
        ttl: float = DEFAULT_TTL,
        **options: Unpack[PartitionKeywords],
    ) -> Iterator[Member]:
        """``with client.partitions(group, items) as member``; see ``AsyncClient.partitions``
        (``weight=1.0``, ``member=None``, ``lock_delay=None``)."""
        # Made on the loop: its events and cancel scopes belong to the loop's thread.
        inner = self._thread.call_sync(lambda: self._async.partitions(group, items, ttl, **options))
        self._call(inner.__aenter__)
        try:
            yield Member(inner, self)
        finally:
            self._call(inner.__aexit__, None, None, None)

    def history(self, job: str) -> list[Slot]:
        return self._call(self._async.history, job)

    # -- decorators -----------------------------------------------------------------------

    def exclusive(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[DecoratorLockKeywords]
    ) -> Callable[[Callable[P, R]], Callable[P, R | Skipped]]:
        """``@client.exclusive(name)``: each call runs the function only while holding lock
        ``name``, or returns a `Skipped` if it is held elsewhere (``wait=False``, the default)
        or ``timeout`` passes; ``LeaseLost`` if the lease was lost while it ran. A ``lease``
        parameter of the function is given the lease. See ``tenure._decorators``."""
        timeout, lock_delay = options.get("timeout"), options.get("lock_delay")
        check_arguments(name, ttl, timeout, self._async.drift, self._async.margin)
        self._async.timing(ttl, lock_delay)
        wait = options.get("wait", False)
        lock_options = LockKeywords(wait=wait, timeout=timeout, lock_delay=lock_delay)

        def decorate(func: Callable[P, R]) -> Callable[P, R | Skipped]:
            check_kind(func, want_async=False, decorator="exclusive")
            hand = giving(func, "lease")

            @functools.wraps(func)
            def exclusively(*args: P.args, **kwargs: P.kwargs) -> R | Skipped:
                try:
                    lease = self.acquire(name, ttl, **lock_options)
                except NotAcquired as exc:
                    return Skipped(name, "held", holder=exc.holder)
                with self._hold(lease):
                    result = func(*args, **kwargs, **hand(lease))
                return result

            return exclusively

        return decorate

    def once_per(
        self,
        job: str,
        slot: str | Callable[[], str],
        ttl: float = DEFAULT_TTL,
        **options: Unpack[OnceKeywords],
    ) -> Callable[[Callable[P, R]], Callable[P, R | Skipped]]:
        """``@client.once_per(job, slot=…)``: each call runs the function for the slot only
        if no runner has (``client.once``), or returns a `Skipped`. ``slot``: the key, or a
        function of no arguments giving it at each call. A ``run`` parameter is given the run."""
        check_arguments(job, ttl, options.get("timeout"), self._async.drift, self._async.margin)
        check_policy(options.get("policy", "at-least-once"))
        key_of = slot_of(slot)

        def decorate(func: Callable[P, R]) -> Callable[P, R | Skipped]:
            check_kind(func, want_async=False, decorator="once_per")
            hand = giving(func, "run")

            @functools.wraps(func)
            def once(*args: P.args, **kwargs: P.kwargs) -> R | Skipped:
                key = check_slot(key_of())
                with self.once(job, key, ttl, **options) as run:
                    if not run:
                        return not_run(job, key, run.state, run.slot)
                    result = func(*args, **kwargs, **hand(run))
                return result

            return once

        return decorate

    def observe(self, name: str) -> Iterator[Leader | None]:
        """The current leader, then every change, as a blocking iterator."""
        changes = self._async.observe(name)
        try:
            while True:
                try:
                    yield self._call(changes.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            if self._thread.alive:
                self._call(changes.aclose)  # type: ignore[attr-defined]


def connect(url: str | None = None, **options: Unpack[ConnectKeywords]) -> Client:
    """Open a store by URL (default: $TENURE_STORE, else the embedded SQLite file): the
    blocking client. The options are ``connect_async``'s (``require``, TLS and credentials,
    ``lock_delay``, ``drift``, ``margin``, ``label``, ``clock``)."""
    checked = ClientOptions.of(**options)  # before the store is opened (or created)
    store = checked.open_store(url)
    return Client(lambda: AsyncClient.of(store, checked))
