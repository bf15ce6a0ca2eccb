"""A semaphore: at most ``permits`` holders of one name at a time, each permit a lock of its own.

Written once over the lock recipe, so it runs on every store. Permit slot ``i`` of semaphore
``name`` is the lock ``semaphore/<name>/<i>``: the store's own mutual exclusion keeps each slot
to one holder, so there are never more holders than slots below ``permits``, whatever else
fails. Each grant's token is that slot lock's fencing token: it grows strictly per slot, and a
resource fences a permit by the pair (``permit.name``, ``permit.token``) — the slot — not by
the semaphore's name, since two holders of different slots hold tokens of different counters.

Arrival order: a waiter first queues for the semaphore's gate, the lock
``semaphore/<name>/queue`` (the store's queue is FIFO), and only the gate's holder looks for a
slot: a free one at once, else it queues on every slot and takes the first the store grants it
(woken by the store). A caller that does not wait skips the gate and takes a slot only if it
is free with nobody queued on it. The gate protects no work: it holds nothing back after a
holder dies (no lock-delay), and a stale gate holder costs order, never safety.

Changing ``permits`` for a name in use: a grant takes a slot below its own ``permits``. So a
lower count applies to new grants at once (holders of higher slots keep theirs until they
release), a higher count lets its callers take the new slots, and with several counts in use
at once there are at most as many holders as the largest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio

from ._arguments import check_arguments
from ._errors import InvalidArgument, NotAcquired
from ._handles import AsyncHandle, Handle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._lock import acquire
from ._names import MAX_NAME_BYTES, check_name, reserve
from ._state import DEFAULT_TTL, Loss

if TYPE_CHECKING:
    from ._pool import SessionPool

MAX_PERMITS = 256
"""A waiter at the head of the line queues on every slot: keep that bounded."""
PREFIX = "semaphore/"
reserve(PREFIX, "semaphore", "semaphores")
L = TypeVar("L", bound=LeaseBase)


class PermitBase(LeaseBase):
    """One permit of a semaphore: a lease on one slot (its name and token are the slot's)."""

    semaphore: str = ""
    """The semaphore's name."""
    index: int = -1
    """Which of the permits, 0 to ``permits - 1``."""
    permits: int = 0
    """The count this permit was asked with."""

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"<Permit {self.index} of {self.semaphore!r} token={self.token} {state}>"


class AsyncPermit(PermitBase, AsyncLease):
    """A permit of the async API."""


class Permit(PermitBase, Lease):
    """A permit of the sync API."""


PL = TypeVar("PL", bound=PermitBase)


def check_count(count: object, what: str = "permits") -> int:
    """A count of slots (a semaphore's permits, a read-write lock's readers): 1 to 256."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgument(f"{what} must be a whole number, got {count!r}")
    if not 1 <= count <= MAX_PERMITS:
        raise InvalidArgument(f"{what} must be 1 to {MAX_PERMITS}, got {count}")
    return count


def check_semaphore(name: str, permits: object) -> int:
    """The semaphore's name and count are fit, and so are its slots' names."""
    check_name(name)
    permits = check_count(permits)
    if len(slot_name(name, permits - 1).encode()) > MAX_NAME_BYTES:
        raise InvalidArgument(f"semaphore name is too long for its permits: {name[:40]!r}…")
    return permits


def gate_name(name: str) -> str:
    return f"{PREFIX}{name}/queue"


def slot_name(name: str, slot: int) -> str:
    return f"{PREFIX}{name}/{slot}"


async def acquire_permit(
    pool: SessionPool,
    name: str,
    permits: int,
    ttl: float,
    *,
    wait: bool,
    timeout: float | None,
    lock_delay: float | None,
    make: type[PL],
) -> PL:
    """A permit of ``name``: ``NotAcquired`` if all are held and ``wait`` is False or
    ``timeout`` passes (arguments already checked). Its slot shows the count it was asked
    with (``tenure ls`` says how many are free)."""
    permit = await _take(
        pool, name, permits, ttl, wait=wait, timeout=timeout, lock_delay=lock_delay, make=make
    )
    try:
        if not await permit._set_value(str(permits)):
            permit._mark_lost("the store says the permit's slot is no longer held", Loss.GONE)
    except BaseException:
        await give_back([permit])
        raise
    return permit


async def _take(
    pool: SessionPool,
    name: str,
    permits: int,
    ttl: float,
    *,
    wait: bool,
    timeout: float | None,
    lock_delay: float | None,
    make: type[PL],
) -> PL:
    if not wait:
        return await _free_slot(pool, name, permits, ttl, lock_delay, make)
    give_up = None if timeout is None else pool.clock.now() + timeout
    try:
        gate: AsyncLease = await acquire(
            pool, gate_name(name), ttl, wait=True, timeout=timeout, on_wait=None, lock_delay=0.0
        )
    except NotAcquired:
        raise NotAcquired(f"semaphore {name!r}: others are ahead in line", None) from None
    try:
        try:
            return await _free_slot(pool, name, permits, ttl, lock_delay, make)
        except NotAcquired:
            left = None if give_up is None else max(0.0, give_up - pool.clock.now())
            return await _first_granted(pool, name, permits, ttl, left, lock_delay, make)
    finally:
        with anyio.CancelScope(shield=True):
            await gate._release()


async def _free_slot(
    pool: SessionPool, name: str, permits: int, ttl: float, lock_delay: float | None, make: type[PL]
) -> PL:
    """A slot free now with nobody queued on it (the lowest), or ``NotAcquired``."""
    got = await free_slot(pool, lambda i: slot_name(name, i), permits, ttl, lock_delay, make)
    if got is None:
        raise NotAcquired(f"semaphore {name!r}: all {permits} permits are held", None)
    return _named(got[1], name, got[0], permits)


async def _first_granted(
    pool: SessionPool,
    name: str,
    permits: int,
    ttl: float,
    timeout: float | None,
    lock_delay: float | None,
    make: type[PL],
) -> PL:
    got = await first_granted(
        pool, lambda i: slot_name(name, i), permits, ttl, timeout, lock_delay, make
    )
    if got is None:
        raise NotAcquired(f"semaphore {name!r}: all {permits} permits are held", None)
    return _named(got[1], name, got[0], permits)


# -- slots: shared with the read-write lock's reader slots ----------------------------------------


async def free_slot(
    pool: SessionPool,
    slot_of: Callable[[int], str],
    count: int,
    ttl: float,
    lock_delay: float | None,
    make: type[L],
) -> tuple[int, L] | None:
    """The lowest of slots ``slot_of(0 .. count-1)`` free now with nobody queued on it."""
    for slot in range(count):
        try:
            lease = await acquire(
                pool, slot_of(slot), ttl, wait=False, timeout=None, on_wait=None, make=make,
                lock_delay=lock_delay,
            )  # fmt: skip
        except NotAcquired:
            continue
        return slot, lease
    return None


async def first_granted(
    pool: SessionPool,
    slot_of: Callable[[int], str],
    count: int,
    ttl: float,
    timeout: float | None,
    lock_delay: float | None,
    make: type[L],
) -> tuple[int, L] | None:
    """Queue on every slot; keep the first grant, give back any other that came with it
    (None if ``timeout`` passes first)."""
    granted: list[tuple[int, L]] = []
    try:
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            async with anyio.create_task_group() as group:

                async def take(slot: int) -> None:
                    lease = await acquire(
                        pool, slot_of(slot), ttl, wait=True, timeout=None, on_wait=None,
                        make=make, lock_delay=lock_delay,
                    )  # fmt: skip
                    granted.append((slot, lease))
                    group.cancel_scope.cancel()  # the others leave their queues

                for slot in range(count):
                    group.start_soon(take, slot)
    except BaseException:  # cancelled from outside: nothing granted may stay held
        await give_back([lease for _, lease in granted])
        raise
    if not granted:
        return None
    await give_back([lease for _, lease in granted[1:]])
    return granted[0]


async def give_back(leases: Sequence[LeaseBase]) -> None:
    """Release ``leases``, shielded: a grant nobody keeps must not stay held."""
    with anyio.CancelScope(shield=True):
        for lease in leases:
            await lease._release()


def _named(lease: PL, name: str, index: int, permits: int) -> PL:
    lease.semaphore, lease.index, lease.permits = name, index, permits
    return lease


class SemaphoreHandle(Handle[PL]):
    """A semaphore: at most ``permits`` holders at a time, in arrival order."""

    given_as = "permit"
    kind = "semaphore"
    _permit: type[PL]

    def __init__(
        self,
        pool: SessionPool,
        name: str,
        permits: int,
        ttl: float = DEFAULT_TTL,
        *,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> None:
        """Semaphore ``name`` of ``permits`` permits, each a lease of ``ttl`` seconds on a slot
        of its own (fence by ``permit.name`` and ``permit.token``: the slot's). A changed count
        applies to new grants. ``wait``, ``timeout``, ``lock_delay``: as for a lock."""
        check_arguments(name, ttl, timeout, pool.drift, pool.margin)
        self.permits = check_semaphore(name, permits)
        pool.timing(ttl, lock_delay)
        super().__init__(pool, name, wait=wait, timeout=timeout)
        self.ttl = float(ttl)
        self.lock_delay = lock_delay

    async def _take(self, wait: bool, timeout: float | None) -> PL:
        return await acquire_permit(
            self._pool, self.name, self.permits, self.ttl, wait=wait, timeout=timeout,
            lock_delay=self.lock_delay, make=self._permit,
        )  # fmt: skip


class AsyncSemaphore(SemaphoreHandle[AsyncPermit], AsyncHandle[AsyncPermit]):
    """``async with client.semaphore(name, 3) as permit``: one of 3 permits; the body is
    cancelled if the permit is lost."""

    _permit = AsyncPermit


class Semaphore(SemaphoreHandle[Permit], SyncHandle[Permit]):
    """``with client.semaphore(name, 3) as permit``: one of 3 permits."""

    _permit = Permit
