"""The lock recipe: acquire over the store contract, and the lock's handle (`Lock`, `AsyncLock`).

Written once for every store. A waiting caller joins the store's queue, sleeps until the store
wakes it (or until the holder could have expired), and leaves the queue on timeout or
cancellation, so no failed acquire leaves a trace.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

from . import _observe
from ._arguments import check_arguments, check_timeout
from ._errors import InvalidArgument, LeaseLost, NotAcquired, StoreUnavailable
from ._handles import AsyncHandle, Handle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._modes import current_caller
from ._names import check_plain, kind_of
from ._state import DEFAULT_TTL, Loss
from .stores._spi import Busy, LockInfo

if TYPE_CHECKING:
    from ._pool import SessionPool
    from ._session import SessionKeeper

log = logging.getLogger("tenure")
WaitCallback = Callable[[LockInfo | None], None]
L = TypeVar("L", bound=LeaseBase)
MAX_NAP = 2.0
"""Longest sleep between attempts on a store that cannot wake waiters (bounded polling)."""
SAFETY_NAP = 10.0
"""Longest sleep between attempts on a store that wakes its waiters (in case a wake-up is lost)."""


async def acquire(
    pool: SessionPool,
    name: str,
    ttl: float,
    *,
    wait: bool,
    timeout: float | None,
    on_wait: WaitCallback | None,
    make: type[L] = AsyncLease,  # type: ignore[assignment]
    lock_delay: float | None = None,
    kind: str | None = None,
) -> L:
    """Take lock ``name`` for a lease of class ``make`` (see the module doc); ``kind``: what
    observers call it (default: what its name says, `kind_of`)."""
    clock = pool.clock
    give_up = math.inf if timeout is None else clock.now() + timeout
    ticket: object | None = None
    keeper: SessionKeeper | None = None
    last_holder: object = ()
    woken: float | None = None  # when the last wait ended: the hand-over is measured from it
    try:
        while True:
            if keeper is None or keeper.expired():
                if ticket is not None and keeper is not None:
                    await _leave_lost(keeper, ticket)
                    ticket = None
                keeper = await pool.session(ttl, lock_delay)
            t_sent = clock.now()
            try:
                # Shielded: a grant made by the store must reach us, or nobody would release it.
                with anyio.CancelScope(shield=True):
                    outcome = await keeper.store.attempt(keeper.handle, name, ticket, wait)
            except LeaseLost:
                keeper.lose("the store says the session is gone", Loss.GONE)
                continue
            if not isinstance(outcome, Busy):
                ticket = None  # the store removed it from the queue with the grant
                lease = make(keeper, name, outcome.token)  # from now on told of loss
                if outcome.renewed_session:
                    keeper.confirm_grant(t_sent)
                if keeper.expired():  # the session died meanwhile: the grant is worthless
                    continue
                if woken is not None and _observe.listeners:
                    seconds = clock.now() - woken
                    _observe.handed_over(kind or kind_of(name), keeper.store, name, seconds)
                return lease  # no checkpoint between the grant and here
            ticket = outcome.ticket
            seen = None if outcome.holder is None else (outcome.holder.token, outcome.holder.holder)
            if on_wait is not None and seen != last_holder:
                last_holder = seen  # report a new holder, not every tick of its time left
                on_wait(outcome.holder)
            left = give_up - clock.now()
            if not wait or left <= 0:
                holder = outcome.holder
                who = f" by {holder.holder.host} pid {holder.holder.pid}" if holder else ""
                raise NotAcquired(f"lock {name!r} is held{who}", holder)
            # Woken by the store, a waiter still tries again when the holder could have expired
            # and now and then in case a wake-up was lost; without wake-ups it polls.
            cap = SAFETY_NAP if keeper.store.capabilities.native_wait else MAX_NAP
            nap = min(left, cap, outcome.retry_in if outcome.retry_in is not None else cap)
            assert ticket is not None
            await _wait(keeper, ticket, outcome, max(nap, 0.0))
            woken = clock.now() if _observe.listeners else None
    except BaseException:
        if ticket is not None and keeper is not None:
            await _leave(keeper, ticket)
        raise


async def _wait(keeper: SessionKeeper, ticket: object, busy: Busy, nap: float) -> None:
    """The store's wait for ``ticket``, for ``nap`` seconds at most, cut short when the session
    is lost: the ticket died with it, and the caller must queue again on a new session at once,
    not when the nap ends."""
    scope = keeper.cut_at_end(math.inf if keeper.store.times_its_wait else nap)
    try:
        with scope:
            await keeper.store.wait(ticket, busy, nap)
    finally:
        keeper.uncut(scope)


async def _leave(keeper: SessionKeeper, ticket: object) -> None:
    with anyio.CancelScope(shield=True):
        await keeper.store.leave(ticket)


async def _leave_lost(keeper: SessionKeeper, ticket: object) -> None:
    """Leave the queue of a lost session, if the store can be reached: if not, the store drops
    the ticket with the session, and the caller queues again on a new one."""
    try:
        await _leave(keeper, ticket)
    except StoreUnavailable as exc:
        log.info("tenure: could not leave the queue of a lost session (%s)", exc)


class LockHandle(Handle[L]):
    """A lock: one holder at a time, in arrival order, each grant with a fencing token."""

    _lease: type[L]

    def __init__(
        self,
        pool: SessionPool,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        on_wait: WaitCallback | None = None,
        lock_delay: float | None = None,
    ) -> None:
        """Lock ``name``, held by leases of ``ttl`` seconds. ``acquire`` waits its turn unless
        ``wait`` is False, at most ``timeout`` seconds; ``on_wait(holder)`` is called whenever
        the holder seen while waiting changes; ``lock_delay``: seconds nobody is granted the
        name after a lease ends without a release (default: the client's)."""
        check_arguments(name, ttl, timeout, pool.drift, pool.margin)
        check_plain(name)
        pool.timing(ttl, lock_delay)
        super().__init__(pool, name, wait=wait, timeout=timeout)
        self.ttl = float(ttl)
        self.lock_delay = lock_delay
        self.on_wait = on_wait

    async def _take(self, wait: bool, timeout: float | None) -> L:
        caller = current_caller()
        if self._pool.holds(self.name, caller):
            raise InvalidArgument(
                f"this caller holds lock {self.name!r} already: release it first (no reentry)"
            )
        lease = await acquire(
            self._pool, self.name, self.ttl, wait=wait, timeout=timeout, on_wait=self.on_wait,
            make=self._lease, lock_delay=self.lock_delay,
        )  # fmt: skip
        lease.caller = caller
        return lease


class AsyncLock(LockHandle[AsyncLease], AsyncHandle[AsyncLease]):
    """``async with client.lock(name, ttl=30) as lease``, or ``await lock.acquire()``; a lost
    lease cancels the body of the block."""

    _lease = AsyncLease


class Lock(LockHandle[Lease], SyncHandle[Lease]):
    """``with client.lock(name, ttl=30) as lease``, or ``lock.acquire()``; leaving a block whose
    lease was lost raises ``LeaseLost``."""

    _lease = Lease


__all__ = ["AsyncLock", "Lock", "LockHandle", "acquire", "check_arguments", "check_timeout"]
