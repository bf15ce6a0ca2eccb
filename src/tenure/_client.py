"""Clients: ``connect_async`` (the implementation) and ``connect`` (its sync facade).

The sync client runs an ``AsyncClient`` on a private event loop in a daemon thread and calls into
it through an anyio blocking portal: one implementation of every recipe, and the loop thread is
also what renews sync leases while the caller's thread does its work.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import socket
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, TypeVar, cast

import anyio
from anyio.abc import TaskGroup

from ._clock import REAL_CLOCK, Clock
from ._election import AsyncLeadership, Leader, campaign, check_value, leader, observe
from ._errors import LeaseLost, TenureError
from ._lease import AsyncLease, LostCallback
from ._lock import AsyncHold, WaitCallback, acquire, check_arguments
from ._names import check_label, check_name
from ._once import (
    AsyncOnce,
    AsyncRun,
    Policy,
    Slot,
    check_policy,
    check_slot,
    claim,
    history,
    one_line,
)
from ._session import SessionKeeper
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, Timing
from ._url import Require, open_store
from ._values import Capabilities, HeldBack, LockInfo, Owner
from .stores._connect import ConnectOptions
from .stores._spi import Store

T = TypeVar("T")
DEFAULT_TTL = 30.0


def _check_options(
    drift: float, margin: float, label: str, lock_delay: float | None = None
) -> None:
    Timing(DEFAULT_TTL, drift, margin, lock_delay)
    check_label(label)


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
        _check_options(drift, margin, label, lock_delay)
        self.store = store
        self.clock = clock
        self.drift = drift
        self.margin = margin
        self.lock_delay = lock_delay
        """The client's lock-delay (None: one TTL, at most 15 s; see ``tenure.Timing``)."""
        self.owner = Owner(socket.gethostname(), os.getpid(), label)
        self._sessions: dict[tuple[float, float], SessionKeeper] = {}
        self._session_lock = anyio.Lock()
        self._tg: TaskGroup | None = None

    @property
    def url(self) -> str:
        return self.store.url

    @property
    def capabilities(self) -> Capabilities:
        """What the store promises (``grade``: "efficiency" means not for correctness)."""
        return self.store.capabilities

    async def __aenter__(self) -> AsyncClient:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with anyio.CancelScope(shield=True):
            await self.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        # The body's own exception is not the keepers' business: passing it in would come out
        # wrapped in an ExceptionGroup. It propagates unchanged from here.
        await self._tg.__aexit__(None, None, None)
        return None

    async def aclose(self) -> None:
        """Release every lock held through this client and end its sessions."""
        keepers, self._sessions = list(self._sessions.values()), {}
        for keeper in keepers:
            await keeper.close()
        await self.store.aclose()

    def timing(self, ttl: float, lock_delay: float | None = None) -> Timing:
        """The timing of a lease with this TTL (``InvalidArgument`` if bad): the client's drift,
        margin and lock-delay unless ``lock_delay`` is given."""
        delay = self.lock_delay if lock_delay is None else lock_delay
        return Timing(ttl, self.drift, self.margin, delay)

    async def _session(self, ttl: float, lock_delay: float | None = None) -> SessionKeeper:
        """The live session for this TTL and lock-delay, opened (and its keeper started) on
        first use."""
        if self._tg is None:
            raise TenureError("use the client as `async with tenure.connect_async(...)`")
        timing = self.timing(ttl, lock_delay)
        key = (timing.ttl, timing.hold_back)
        keeper = self._sessions.get(key)
        if keeper is not None and not keeper.expired():
            return keeper  # the common case, without a checkpoint
        async with self._session_lock:
            keeper = self._sessions.get(key)
            if keeper is None or keeper.expired():
                keeper = await SessionKeeper.open(self.store, timing, self.owner, self.clock)
                self._sessions[key] = keeper
                self._tg.start_soon(keeper.run)
            return keeper

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
            self, name, ttl, wait=wait, timeout=timeout, on_wait=on_wait, lock_delay=lock_delay
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

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        """Who holds what, as the store sees it now."""
        if name is not None:
            check_name(name)
        return await self.store.locks(name)

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        """Names free but held back by lock-delay, as the store sees it now."""
        if name is not None:
            check_name(name)
        return await self.store.held_back(name)

    # -- leader election ------------------------------------------------------------------

    async def campaign(
        self, name: str, value: str, ttl: float = DEFAULT_TTL, *, timeout: float | None = None
    ) -> AsyncLeadership:
        """Wait to lead election ``name``, proclaiming ``value``; ``resign()`` to step down.

        The leadership's ``term`` is its fencing token: strictly greater than every earlier
        term. Loss reaches the code as for a lease (``lost``, ``on_lost``, ``check()``).
        """
        timeout = check_arguments(name, ttl, timeout, self.drift, self.margin)
        return await campaign(self, name, value, ttl, timeout)

    def lead(
        self, name: str, value: str, ttl: float = DEFAULT_TTL, *, timeout: float | None = None
    ) -> AsyncHold[AsyncLeadership]:
        """``async with client.lead(name, value) as leadership``: the body is cancelled if the
        leadership is lost; leaving the block resigns."""
        check_arguments(name, ttl, timeout, self.drift, self.margin)
        check_value(value)
        return AsyncHold(lambda: self.campaign(name, value, ttl, timeout=timeout))

    async def leader(self, name: str) -> Leader | None:
        """The current leader of election ``name`` (None if nobody leads)."""
        return await leader(self.store, check_name(name))

    def observe(self, name: str) -> AsyncIterator[Leader | None]:
        """The current leader, then every change (``async for leader in client.observe(n)``)."""
        return observe(self.store, check_name(name))

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
        return await claim(self, job, slot, ttl=ttl, policy=policy, wait=wait, timeout=timeout)

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
        return await history(self, job)


@asynccontextmanager
async def connect_async(
    url: str | None = None,
    *,
    drift: float = DEFAULT_DRIFT,
    margin: float = DEFAULT_MARGIN,
    label: str = "",
    clock: Clock = REAL_CLOCK,
    require: Require = None,
    tls: bool | None = None,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    username: str | None = None,
    password: str | None = None,
    lock_delay: float | None = None,
) -> AsyncIterator[AsyncClient]:
    """Open a store by URL (default: $TENURE_STORE, else the embedded SQLite file).

    ``require="correctness"`` refuses an efficiency-grade store (Redis) with ``InvalidArgument``,
    and ``"elections"`` or ``"records"`` (alone or in a tuple) a store that does not offer them;
    ``client.capabilities`` says what the store promises. ``tls``, ``ca``, ``cert``, ``key``,
    ``username`` and ``password`` override the URL's (docs/production.md). ``lock_delay``:
    seconds a name is granted to nobody after a lease on it ends without a release (default:
    one TTL, at most 15 s; docs/stop-by.md).
    """
    _check_options(drift, margin, label, lock_delay)  # before the store is opened (or created)
    options = ConnectOptions(tls, ca, cert, key, username, password)
    store = open_store(url, require, options)
    async with AsyncClient(
        store, drift=drift, margin=margin, label=label, clock=clock, lock_delay=lock_delay
    ) as client:
        yield client


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


class Client:
    """The sync client. ``client = tenure.connect()``; close it with ``client.close()``."""

    def __init__(self, make: Callable[[], AsyncClient]) -> None:
        ready: Future[tuple[asyncio.AbstractEventLoop, AsyncClient, anyio.Event]] = Future()
        self._thread = threading.Thread(
            target=anyio.run, args=(_serve, make, ready), name="tenure-loop", daemon=True
        )
        self._thread.start()
        self._loop, self._async, closing = ready.result()
        self._finalizer = weakref.finalize(self, _stop, self._loop, closing, self._thread)
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
        """Run ``func`` on the loop; if this thread is interrupted (Ctrl-C), cancel it there.

        The task always finishes and hands back its result, so a lease granted just as the
        interrupt came is released here rather than left held by nobody. (A plain asyncio
        hand-off: it costs about a third less than an anyio portal call, on every call.)
        """
        scopes: list[anyio.CancelScope] = []

        async def run() -> T | None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                return await func(*args, **kwargs)
            return None

        if not self._thread.is_alive():
            raise TenureError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            result = future.result()
        except BaseException:
            if future.done():
                raise  # the task's own error
            self._loop.call_soon_threadsafe(_cancel, scopes)
            late = future.result()
            if isinstance(late, AsyncLease):
                self._call(late.release)
            elif isinstance(late, AsyncRun):
                self._call(late.abandon)
            raise
        if result is None and scopes and scopes[0].cancelled_caught:
            raise TenureError("the client is closing")
        return cast(T, result)

    def acquire(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        on_wait: WaitCallback | None = None,
        lock_delay: float | None = None,
    ) -> Lease:
        """Acquire ``name``; release with ``lease.release()``. See ``AsyncClient.acquire``."""
        inner = self._call(
            self._async.acquire,
            name,
            ttl,
            wait=wait,
            timeout=timeout,
            on_wait=on_wait,
            lock_delay=lock_delay,
        )
        return Lease(inner, self)

    @contextmanager
    def _hold(self, lease: Lease) -> Iterator[Lease]:
        try:
            yield lease
        except BaseException:
            lease.release()
            raise
        lost = lease.lost
        lease.release()
        if lost:
            raise LeaseLost(
                f"lease on {lease.name!r} (token {lease.token}) lost: {lease.lost_reason}"
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
    ) -> AbstractContextManager[Lease]:
        """``with client.lock(name, ttl=30) as lease``: released on exit; raises if lost."""
        check_arguments(name, ttl, timeout, self._async.drift, self._async.margin)
        self._async.timing(ttl, lock_delay)
        client = self

        @contextmanager
        def hold() -> Iterator[Lease]:
            lease = client.acquire(
                name, ttl, wait=wait, timeout=timeout, on_wait=on_wait, lock_delay=lock_delay
            )
            with client._hold(lease) as held:
                yield held

        return hold()

    def locks(self, name: str | None = None) -> list[LockInfo]:
        return self._call(self._async.locks, name)

    def held_back(self, name: str | None = None) -> list[HeldBack]:
        return self._call(self._async.held_back, name)

    # -- leader election ------------------------------------------------------------------

    def campaign(
        self, name: str, value: str, ttl: float = DEFAULT_TTL, *, timeout: float | None = None
    ) -> Leadership:
        """Wait to lead election ``name``; see ``AsyncClient.campaign``."""
        return Leadership(self._call(self._async.campaign, name, value, ttl, timeout=timeout), self)

    @contextmanager
    def lead(
        self, name: str, value: str, ttl: float = DEFAULT_TTL, *, timeout: float | None = None
    ) -> Iterator[Leadership]:
        """``with client.lead(name, value) as leadership``: resigns on exit; raises if lost."""
        leadership = self.campaign(name, value, ttl, timeout=timeout)
        with self._hold(leadership):
            yield leadership

    def leader(self, name: str) -> Leader | None:
        return self._call(self._async.leader, name)

    # -- once per slot --------------------------------------------------------------------

    def claim(
        self,
        job: str,
        slot: str,
        ttl: float = DEFAULT_TTL,
        *,
        policy: Policy = "at-least-once",
        wait: bool = False,
        timeout: float | None = None,
    ) -> Run:
        """See ``AsyncClient.claim``; end a true result with ``run.complete(exit_code)``."""
        inner = self._call(
            self._async.claim, job, slot, ttl, policy=policy, wait=wait, timeout=timeout
        )
        return Run(inner, self)

    @contextmanager
    def once(
        self,
        job: str,
        slot: str,
        ttl: float = DEFAULT_TTL,
        *,
        policy: Policy = "at-least-once",
        wait: bool = False,
        timeout: float | None = None,
    ) -> Iterator[Run]:
        """``with client.once(job, slot) as run: if run: ...``: leaving the block records done
        (or failed, with the block's exception, which propagates); a lost lease records
        nothing and raises ``LeaseLost``."""
        run = self.claim(job, slot, ttl, policy=policy, wait=wait, timeout=timeout)
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

    def history(self, job: str) -> list[Slot]:
        return self._call(self._async.history, job)

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
            if self._thread.is_alive():
                self._call(changes.aclose)  # type: ignore[attr-defined]


def _cancel(scopes: list[anyio.CancelScope]) -> None:
    for scope in scopes:
        scope.cancel()


async def _serve(
    make: Callable[[], AsyncClient],
    ready: Future[tuple[asyncio.AbstractEventLoop, AsyncClient, anyio.Event]],
) -> None:
    """The sync client's event-loop thread: hold the async client open until told to close."""
    closing = anyio.Event()
    try:
        async with make() as client:
            ready.set_result((asyncio.get_running_loop(), client, closing))
            await closing.wait()
    except BaseException as exc:
        if ready.done():
            raise
        ready.set_exception(exc)  # the caller of connect() raises it


def _stop(loop: asyncio.AbstractEventLoop, closing: anyio.Event, thread: threading.Thread) -> None:
    """Close the async client (releasing its locks) and wait for the loop thread to end."""
    if thread.is_alive():
        with contextlib.suppress(RuntimeError):  # the loop is already gone
            loop.call_soon_threadsafe(closing.set)
        thread.join()


def connect(
    url: str | None = None,
    *,
    drift: float = DEFAULT_DRIFT,
    margin: float = DEFAULT_MARGIN,
    label: str = "",
    clock: Clock = REAL_CLOCK,
    require: Require = None,
    tls: bool | None = None,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    username: str | None = None,
    password: str | None = None,
    lock_delay: float | None = None,
) -> Client:
    """Open a store by URL (default: $TENURE_STORE, else the embedded SQLite file).

    ``require="correctness"`` refuses an efficiency-grade store (Redis) with ``InvalidArgument``,
    and ``"elections"`` or ``"records"`` (alone or in a tuple) a store that does not offer them;
    ``client.capabilities`` says what the store promises. ``tls``, ``ca``, ``cert``, ``key``,
    ``username`` and ``password`` override the URL's (docs/production.md). ``lock_delay``:
    seconds a name is granted to nobody after a lease on it ends without a release (default:
    one TTL, at most 15 s; docs/stop-by.md).
    """
    _check_options(drift, margin, label, lock_delay)  # before the store is opened (or created)
    options = ConnectOptions(tls, ca, cert, key, username, password)
    store = open_store(url, require, options)
    return Client(
        lambda: AsyncClient(
            store, drift=drift, margin=margin, label=label, clock=clock, lock_delay=lock_delay
        )
    )
