"""The async client, ``connect_async``: the one implementation of the API. It checks the
caller's arguments and hands the work to the recipes (``_lock``, ``_election``, ``_once``) with
its `SessionPool`; ``tenure._sync`` is the blocking facade over it."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType

import anyio

from ._clock import REAL_CLOCK, Clock
from ._decorators import P, R, Skipped, check_kind, giving, not_run, slot_of
from ._election import AsyncLeadership, Leader, campaign, check_value, leader, observe
from ._errors import InvalidArgument, NotAcquired
from ._lease import AsyncLease
from ._lock import AsyncHold, WaitCallback, acquire, check_arguments
from ._names import check_name
from ._once import AsyncOnce, AsyncRun, Policy, Slot, check_policy, check_slot, claim, history
from ._options import DEFAULT_TTL, ClientOptions, ConnectKeywords, Unpack
from ._partitions import AsyncMember, bell_lock, check_group, check_items, check_weight
from ._pool import SessionPool
from ._rwlock import DEFAULT_READERS, AsyncRWLease, acquire_read, acquire_write, check_readers
from ._semaphore import AsyncPermit, acquire_permit, check_semaphore
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, Timing
from ._values import Capabilities, HeldBack, LockInfo, Owner
from .stores._spi import Store, elections_of


class AsyncClient:
    """A connection to one store. Use as ``async with tenure.connect_async(url) as client``."""

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
        ClientOptions(drift, margin, label, clock, lock_delay=lock_delay)  # checked
        self.store = store
        self.clock = clock
        self.drift = drift
        self.margin = margin
        self.lock_delay = lock_delay
        """The client's lock-delay (None: one TTL, at most 15 s; see ``tenure.Timing``)."""
        self.owner = Owner(socket.gethostname(), os.getpid(), label)
        self._pool = SessionPool(store, self.owner, clock, drift, margin, lock_delay)

    @classmethod
    def of(cls, store: Store, options: ClientOptions) -> AsyncClient:
        return cls(
            store,
            drift=options.drift,
            margin=options.margin,
            label=options.label,
            clock=options.clock,
            lock_delay=options.lock_delay,
        )

    @property
    def url(self) -> str:
        return self.store.url

    @property
    def capabilities(self) -> Capabilities:
        """What the store promises (``grade``: "efficiency" means not for correctness)."""
        return self.store.capabilities

    async def __aenter__(self) -> AsyncClient:
        await self._pool.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with anyio.CancelScope(shield=True):
            await self.aclose()
        await self._pool.__aexit__(exc_type, exc, tb)
        return None

    async def aclose(self) -> None:
        """Release every lock held through this client and end its sessions."""
        await self._pool.close_sessions()
        await self.store.aclose()

    def timing(self, ttl: float, lock_delay: float | None = None) -> Timing:
        """The timing of a lease with this TTL (``InvalidArgument`` if bad): the client's drift,
        margin and lock-delay unless ``lock_delay`` is given."""
        return self._pool.timing(ttl, lock_delay)

    async def acquire(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        on_wait: WaitCallback | None = None,
        lock_delay: float | None = None,
    ) -> AsyncLease:
        """Acquire ``name`` and return its lease; release it with ``await lease.release()``.

        Raises ``NotAcquired`` if it is held and ``wait`` is False or ``timeout`` passes.
        ``on_wait(holder)`` is called whenever the holder seen while waiting changes.
        ``lock_delay``: seconds nobody is granted ``name`` after this lease ends without a
        release (default: the client's).
        """
        timeout = check_arguments(name, ttl, timeout, self.drift, self.margin)
        self.timing(ttl, lock_delay)
        return await acquire(
            self._pool,
            name,
            ttl,
            wait=wait,
            timeout=timeout,
            on_wait=on_wait,
            lock_delay=lock_delay,
        )

    def lock(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        on_wait: WaitCallback | None = None,
        lock_delay: float | None = None,
    ) -> AsyncHold[AsyncLease]:
        """``async with client.lock(name, ttl=30) as lease``; a lost lease cancels the body."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        self.timing(ttl, lock_delay)
        return AsyncHold(
            lambda: self.acquire(
                name, ttl, wait=wait, timeout=timeout, on_wait=on_wait, lock_delay=lock_delay
            )
        )

    # -- semaphores ------------------------------------------------------------------------

    async def acquire_permit(
        self,
        name: str,
        permits: int,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncPermit:
        """One of ``permits`` permits of semaphore ``name``, in arrival order; release it with
        ``await permit.release()``. A permit is a lease on one slot: its ``token`` grows per
        slot, so fence by (``permit.name``, ``permit.token``). ``NotAcquired`` as for
        ``acquire``. See ``tenure._semaphore`` (also for changing ``permits``)."""
        timeout = check_arguments(name, ttl, timeout, self.drift, self.margin)
        permits = check_semaphore(name, permits)
        self.timing(ttl, lock_delay)
        return await acquire_permit(
            self._pool, name, permits, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay
        )

    def semaphore(
        self,
        name: str,
        permits: int,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncHold[AsyncPermit]:
        """``async with client.semaphore(name, 3) as permit``: at most 3 holders at a time; the
        body is cancelled if the permit is lost; leaving the block releases it."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        check_semaphore(name, permits)
        self.timing(ttl, lock_delay)
        return AsyncHold(
            lambda: self.acquire_permit(
                name, permits, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay
            )
        )

    # -- read-write locks ------------------------------------------------------------------

    async def acquire_read(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        readers: int = DEFAULT_READERS,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncRWLease:
        """A read lock of ``name``, shared with up to ``readers`` others and never with a
        writer, in arrival order with the writers; release with ``await lease.release()``. Its
        ``token`` is from one counter with the writers' (``SQLFence.admit_read``). See
        ``tenure._rwlock``."""
        timeout = check_arguments(name, ttl, timeout, self.drift, self.margin)
        readers = check_readers(name, readers)
        self.timing(ttl, lock_delay)
        return await acquire_read(
            self._pool, name, readers, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay
        )

    async def acquire_write(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncRWLease:
        """The write lock of ``name``: no reader nor other writer beside it; readers who came
        later wait for it. Fence writes with ``SQLFence.admit_write``. See ``tenure._rwlock``."""
        timeout = check_arguments(name, ttl, timeout, self.drift, self.margin)
        check_readers(name, DEFAULT_READERS)
        self.timing(ttl, lock_delay)
        return await acquire_write(
            self._pool, name, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay
        )

    def read_lock(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        readers: int = DEFAULT_READERS,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncHold[AsyncRWLease]:
        """``async with client.read_lock(name) as lease``: the body is cancelled on loss."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        check_readers(name, readers)
        self.timing(ttl, lock_delay)
        return AsyncHold(
            lambda: self.acquire_read(
                name, ttl, readers=readers, wait=wait, timeout=timeout, lock_delay=lock_delay
            )
        )

    def write_lock(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncHold[AsyncRWLease]:
        """``async with client.write_lock(name) as lease``: the body is cancelled on loss."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        check_readers(name, DEFAULT_READERS)
        self.timing(ttl, lock_delay)
        return AsyncHold(
            lambda: self.acquire_write(name, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay)
        )

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        """Who holds what, as the store sees it now (only names starting with ``prefix``)."""
        if name is not None:
            check_name(name)
        if not isinstance(prefix, str):
            raise InvalidArgument(f"prefix must be a string, got {prefix!r}")
        return await self.store.locks(name, prefix)

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        """Names free but held back by lock-delay, as the store sees it now."""
        if name is not None:
            check_name(name)
        return await self.store.held_back(name)

    # -- leader election ------------------------------------------------------------------

    async def campaign(
        self,
        name: str,
        value: str,
        ttl: float = DEFAULT_TTL,
        *,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncLeadership:
        """Wait to lead election ``name``, proclaiming ``value``; ``resign()`` to step down.

        The leadership's ``term`` is its fencing token: strictly greater than every earlier
        term. Loss reaches the code as for a lease (``lost``, ``on_lost``, ``check()``).
        ``lock_delay``: as for ``acquire`` (the client's unless given).
        """
        timeout = check_arguments(name, ttl, timeout, self.drift, self.margin)
        self.timing(ttl, lock_delay)
        return await campaign(self._pool, name, value, ttl, timeout, lock_delay)

    def lead(
        self,
        name: str,
        value: str,
        ttl: float = DEFAULT_TTL,
        *,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> AsyncHold[AsyncLeadership]:
        """``async with client.lead(name, value) as leadership``: the body is cancelled if the
        leadership is lost; leaving the block resigns."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        self.timing(ttl, lock_delay)
        check_value(value)
        return AsyncHold(
            lambda: self.campaign(name, value, ttl, timeout=timeout, lock_delay=lock_delay)
        )

    async def leader(self, name: str) -> Leader | None:
        """The current leader of election ``name`` (None if nobody leads)."""
        return await leader(self.store, check_name(name))

    def observe(self, name: str) -> AsyncIterator[Leader | None]:
        """The current leader, then every change (``async for leader in client.observe(n)``)."""
        return observe(self.store, check_name(name))

    # -- partitions -----------------------------------------------------------------------

    def partitions(
        self,
        group: str,
        items: Iterable[str],
        ttl: float = DEFAULT_TTL,
        *,
        weight: float = 1.0,
        member: str | None = None,
        lock_delay: float | None = None,
    ) -> AsyncMember:
        """``async with client.partitions(group, items) as member``: join ``group``, which
        splits ``items`` among its members (each item owned by one, with its own lease and
        fencing token: ``member.owned``); ``async for change in member.changes()`` says what
        comes and goes. ``weight``: this member's share relative to the others'; ``member``:
        its id (default: a random one). See docs/partitions.md."""
        check_group(group)
        found = check_items(group, items)
        check_arguments(bell_lock(group), ttl, None, self.drift, self.margin)
        self.timing(ttl, lock_delay)
        elections_of(self.store)  # membership is an election per member
        return AsyncMember(self._pool, group, found, ttl, check_weight(weight), member, lock_delay)

    # -- once per slot --------------------------------------------------------------------

    async def claim(
        self,
        job: str,
        slot: str,
        ttl: float = DEFAULT_TTL,
        *,
        policy: Policy = "at-least-once",
        wait: bool = False,
        timeout: float | None = None,
    ) -> AsyncRun:
        """Claim slot ``slot`` of ``job`` to run it here, unless it is over or (without
        ``wait``) running elsewhere; see ``tenure._once``. A true result holds the slot's lease:
        end it with ``await run.complete(exit_code)`` (or ``abandon()``)."""
        timeout = check_arguments(job, ttl, timeout, self.drift, self.margin)
        check_slot(slot)
        check_policy(policy)
        return await claim(
            self._pool, job, slot, ttl=ttl, policy=policy, wait=wait, timeout=timeout
        )

    def once(
        self,
        job: str,
        slot: str,
        ttl: float = DEFAULT_TTL,
        *,
        policy: Policy = "at-least-once",
        wait: bool = False,
        timeout: float | None = None,
    ) -> AsyncOnce:
        """``async with client.once(job, slot) as run: if run: ...``: the block runs the slot
        at most once per policy; leaving it records done (or failed, with its exception)."""
        check_arguments(job, ttl, timeout, self.drift, self.margin)
        check_slot(slot)
        check_policy(policy)
        return AsyncOnce(
            lambda: self.claim(job, slot, ttl, policy=policy, wait=wait, timeout=timeout)
        )

    async def history(self, job: str) -> list[Slot]:
        """Every recorded slot of ``job``, in slot-key order."""
        return await history(self.store, job)

    # -- decorators -----------------------------------------------------------------------

    def exclusive(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = False,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R | Skipped]]]:
        """``@client.exclusive(name)`` on a coroutine function: each call runs it only while
        holding lock ``name`` (cancelled if the lease is lost), or returns a `Skipped` if it is
        held elsewhere (``wait=False``, the default) or ``timeout`` passes. A ``lease``
        parameter of the function is given the lease. See ``tenure._decorators``."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        self.timing(ttl, lock_delay)

        def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | Skipped]]:
            check_kind(func, want_async=True, decorator="exclusive")
            hand = giving(func, "lease")

            @functools.wraps(func)
            async def exclusively(*args: P.args, **kwargs: P.kwargs) -> R | Skipped:
                hold = self.lock(name, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay)
                async with AsyncExitStack() as stack:
                    try:
                        lease = await stack.enter_async_context(hold)
                    except NotAcquired as exc:
                        return Skipped(name, "held", holder=exc.holder)
                    return await func(*args, **kwargs, **hand(lease))

            return exclusively

        return decorate

    def once_per(
        self,
        job: str,
        slot: str | Callable[[], str],
        ttl: float = DEFAULT_TTL,
        *,
        policy: Policy = "at-least-once",
        wait: bool = False,
        timeout: float | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R | Skipped]]]:
        """``@client.once_per(job, slot=…)`` on a coroutine function: each call runs it for
        the slot only if no runner has (``client.once``: done or failed is recorded, as its
        exception), or returns a `Skipped`. ``slot``: the key, or a function of no arguments
        giving it at each call (today's date, say). A ``run`` parameter is given the run."""
        check_arguments(job, ttl, timeout, self.drift, self.margin)
        check_policy(policy)
        key_of = slot_of(slot)

        def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | Skipped]]:
            check_kind(func, want_async=True, decorator="once_per")
            hand = giving(func, "run")

            @functools.wraps(func)
            async def once(*args: P.args, **kwargs: P.kwargs) -> R | Skipped:
                key = check_slot(key_of())
                async with self.once(
                    job, key, ttl, policy=policy, wait=wait, timeout=timeout
                ) as run:
                    if not run:
                        return not_run(job, key, run.state, run.slot)
                    result = await func(*args, **kwargs, **hand(run))
                return result  # (a loss that cancelled the call raised LeaseLost on the way)

            return once

        return decorate


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
    async with AsyncClient.of(checked.open_store(url), checked) as client:
        yield client
