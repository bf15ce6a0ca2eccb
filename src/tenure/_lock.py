"""The lock recipe: acquire over the store contract, and the ``async with`` hold.

Written once for every store. A waiting caller joins the store's queue, sleeps until the store
wakes it (or until the holder could have expired), and leaves the queue on timeout or
cancellation, so no failed acquire leaves a trace.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio

from ._errors import InvalidArgument, LeaseLost, NotAcquired
from ._lease import AsyncLease, end_of_hold
from ._names import check_name
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, Loss, Timing
from .stores._spi import Busy, LockInfo

if TYPE_CHECKING:
    from ._pool import SessionPool
    from ._session import SessionKeeper

WaitCallback = Callable[[LockInfo | None], None]
L = TypeVar("L", bound=AsyncLease)
MAX_NAP = 2.0
"""Longest sleep between attempts on a store that cannot wake waiters (bounded polling)."""
SAFETY_NAP = 10.0
"""Longest sleep between attempts on a store that wakes its waiters (in case a wake-up is lost)."""


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


def check_arguments(
    name: str,
    ttl: float,
    timeout: float | None,
    drift: float = DEFAULT_DRIFT,
    margin: float = DEFAULT_MARGIN,
) -> float | None:
    """Refuse a bad lock name, TTL or timeout before anything is opened or acquired."""
    check_name(name)
    Timing(ttl, drift, margin)
    return check_timeout(timeout)


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
) -> L:
    clock = pool.clock
    give_up = math.inf if timeout is None else clock.now() + timeout
    ticket: object | None = None
    keeper: SessionKeeper | None = None
    last_holder: object = ()
    try:
        while True:
            if keeper is None or keeper.expired():
                if ticket is not None and keeper is not None:
                    await _leave(keeper, ticket)
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
                return lease  # no checkpoint between the grant and here
            ticket = outcome.ticket
            seen = None if outcome.holder is None else (outcome.holder.token, outcome.holder.owner)
            if on_wait is not None and seen != last_holder:
                last_holder = seen  # report a new holder, not every tick of its time left
                on_wait(outcome.holder)
            left = give_up - clock.now()
            if not wait or left <= 0:
                holder = outcome.holder
                who = f" by {holder.owner.host} pid {holder.owner.pid}" if holder else ""
                raise NotAcquired(f"lock {name!r} is held{who}", holder)
            # Woken by the store, a waiter still tries again when the holder could have expired
            # and now and then in case a wake-up was lost; without wake-ups it polls.
            cap = SAFETY_NAP if keeper.store.capabilities.native_wait else MAX_NAP
            nap = min(left, cap, outcome.retry_in if outcome.retry_in is not None else cap)
            assert ticket is not None
            await keeper.store.wait(ticket, outcome, max(nap, 0.0))
    except BaseException:
        if ticket is not None and keeper is not None:
            await _leave(keeper, ticket)
        raise


async def _leave(keeper: SessionKeeper, ticket: object) -> None:
    with anyio.CancelScope(shield=True):
        await keeper.store.leave(ticket)


class AsyncHold(Generic[L]):
    """``async with client.lock(name) as lease``: the body is cancelled if the lease is lost."""

    def __init__(self, acquire: Callable[[], Awaitable[L]]) -> None:
        self._acquire = acquire
        self._lease: L | None = None
        self._scope: anyio.CancelScope | None = None

    async def __aenter__(self) -> L:
        lease = await self._acquire()
        self._lease = lease
        self._scope = anyio.CancelScope()
        self._scope.__enter__()
        lease.cancel_on_loss(self._scope)
        return lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._lease is not None and self._scope is not None
        lease = self._lease
        swallowed = bool(self._scope.__exit__(exc_type, exc, tb))
        error = end_of_hold(lease, None if swallowed else exc)
        await lease.release()
        if error is not None:
            raise error from None
        return swallowed
