"""A read-write lock: many readers or one writer, in arrival order, with one token counter.

Written once over the lock recipe, so it runs on every store. Everybody, reader or writer,
joins one line: the lock ``rwlock/<name>/gate`` (the store's queue is FIFO). The gate's fencing
token is the token of every grant, read or write: one counter, growing in grant order.

- A **reader** holds the gate only while it takes one of ``readers`` reader slots, the locks
  ``rwlock/<name>/<i>`` (a free one at once, else the first the store grants it), then lets the
  gate go and keeps its slot. Its lease is the slot's, showing the gate's token.
- A **writer** takes the gate and keeps it for its whole hold, so no reader passes while it
  writes. Before it is granted it waits out every reader slot held (or held back) then — it
  lists them; while it holds the gate nobody can take another — and lets each go once it has it.
  Its lease is the gate's.

So a writer is never granted beside a reader or another writer, and writers are not starved: a
writer in line stops every reader behind it, the readers ahead of it finish, and it goes. A
grant must come on the session that holds the gate (else the gate was lost meanwhile and its
token is not the grant's): if not, it is given back and the caller queues again.

The fence: a resource keeps the latest write token ``W`` and the highest token it admitted
``H``. It admits a read whose token is at least ``W`` (and raises ``H``), a write whose token is
at least ``H`` (and sets both): so it refuses a reader or writer from before the latest write,
and a writer from before a reader it has served (``SQLFence.admit_read``/``admit_write``).

Not reentrant, no upgrade: a client that holds the read (or write) lock of a name and asks for
its write lock would wait for itself, so that is refused at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import anyio

from ._arguments import check_arguments
from ._errors import InvalidArgument, NotAcquired
from ._handles import AsyncHandle, Handle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._lock import acquire
from ._names import MAX_NAME_BYTES, check_name, reserve
from ._semaphore import check_count, first_granted, free_slot, give_back
from ._state import DEFAULT_TTL

if TYPE_CHECKING:
    from ._pool import SessionPool

PREFIX = "rwlock/"
reserve(PREFIX, "rwlock", "read-write locks")
L = TypeVar("L", bound=LeaseBase)
DEFAULT_READERS = 16
"""Readers at once by default; more wait in line (a waiter at the head queues on each slot)."""
Mode = Literal["read", "write"]


class RWLeaseBase(LeaseBase):
    """A read or write grant of a read-write lock; its token is the gate's (see the module)."""

    mode: str = ""
    """"read" or "write"."""
    index: int = -1
    """A reader's place, 0 to ``readers - 1`` (-1 for a writer)."""

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"<RWLease {self.mode} {self.name!r} token={self.token} {state}>"


class AsyncRWLease(RWLeaseBase, AsyncLease):
    """A read or write grant of the async API."""


class RWLease(RWLeaseBase, Lease):
    """A read or write grant of the sync API."""


RL = TypeVar("RL", bound=RWLeaseBase)


def check_readers(name: str, readers: object) -> int:
    check_name(name)
    readers = check_count(readers, "readers")
    if len(slot_name(name, readers - 1).encode()) > MAX_NAME_BYTES:
        raise InvalidArgument(f"read-write lock name is too long: {name[:40]!r}…")
    return readers


def gate_name(name: str) -> str:
    return f"{PREFIX}{name}/gate"


def slot_name(name: str, slot: int) -> str:
    return f"{PREFIX}{name}/{slot}"


def is_slot(lock: str, name: str) -> bool:
    """``lock`` is one of ``name``'s reader slots (not its gate, nor another lock's slot)."""
    rest = lock.removeprefix(f"{PREFIX}{name}/")
    return rest != lock and rest.isdigit()


async def acquire_read(
    pool: SessionPool,
    name: str,
    readers: int,
    ttl: float,
    *,
    wait: bool,
    timeout: float | None,
    lock_delay: float | None,
    make: type[RL],
) -> RL:
    """A read grant of ``name`` (arguments already checked); ``NotAcquired`` if a writer holds
    it or others are in line and ``wait`` is False, or if ``timeout`` passes."""
    _refuse_reentry(pool, name, "read")
    give_up = _give_up(pool, timeout)
    while True:
        gate = await _gate(pool, name, ttl, wait, give_up, lock_delay, AsyncLease)
        try:
            slots = lambda i: slot_name(name, i)  # noqa: E731
            got = await free_slot(pool, slots, readers, ttl, lock_delay, make)
            if got is None and wait:
                left = _left(pool, give_up)
                got = await first_granted(pool, slots, readers, ttl, left, lock_delay, make)
            if got is None:
                raise NotAcquired(
                    f"read-write lock {name!r}: all {readers} readers' slots held", None
                )
            slot, lease = got
            if lease.same_session(gate) and not lease.lost:
                return _shown(lease, name, "read", gate.token, slot)
            await give_back([lease])  # the gate's session died meanwhile: queue again
        finally:
            await give_back([gate])


async def acquire_write(
    pool: SessionPool,
    name: str,
    ttl: float,
    *,
    wait: bool,
    timeout: float | None,
    lock_delay: float | None,
    make: type[RL],
) -> RL:
    """The write grant of ``name`` (arguments already checked); ``NotAcquired`` as for a read."""
    _refuse_reentry(pool, name, "write")
    give_up = _give_up(pool, timeout)
    while True:
        gate = await _gate(pool, name, ttl, wait, give_up, lock_delay, make)
        try:
            waited_out = await _wait_out(pool, name, gate, ttl, wait, give_up, lock_delay)
        except BaseException:
            await give_back([gate])
            raise
        if waited_out and not gate.lost:
            return _shown(gate, name, "write", gate.token, -1)
        await give_back([gate])  # the gate's session died meanwhile: queue again


async def _gate(
    pool: SessionPool,
    name: str,
    ttl: float,
    wait: bool,
    give_up: float,
    lock_delay: float | None,
    make: type[L],
) -> L:
    try:
        return await acquire(
            pool, gate_name(name), ttl, wait=wait, timeout=_left(pool, give_up), on_wait=None,
            make=make, lock_delay=lock_delay,
        )  # fmt: skip
    except NotAcquired as exc:
        raise NotAcquired(f"read-write lock {name!r}: held or others in line", exc.lock) from None


async def _readers_now(pool: SessionPool, name: str) -> list[str]:
    """The reader slots held or held back now (with the gate held, no reader takes another)."""
    held = [info.name for info in await pool.store.locks(None, f"{PREFIX}{name}/")]
    held += [back.name for back in await pool.store.lock_delays()]
    return sorted({lock for lock in held if is_slot(lock, name)})


async def _wait_out(
    pool: SessionPool,
    name: str,
    gate: LeaseBase,
    ttl: float,
    wait: bool,
    give_up: float,
    lock_delay: float | None,
) -> bool:
    """Take each reader slot held now once its reader is gone, and let it go at once. False if
    one came on another session than the gate's; ``NotAcquired`` if one is still held when
    ``wait`` is False or the time is up."""
    readers = await _readers_now(pool, name)
    granted: list[LeaseBase] = []

    async def take(slot: str) -> None:
        granted.append(
            await acquire(
                pool, slot, ttl, wait=wait, timeout=None, on_wait=None, lock_delay=lock_delay
            )
        )

    try:
        if not wait:
            for slot in readers:
                try:
                    await take(slot)
                except NotAcquired as exc:
                    raise NotAcquired(f"read-write lock {name!r} has readers", exc.lock) from None
        else:
            left = _left(pool, give_up)
            with anyio.move_on_after(math.inf if left is None else left) as scope:
                async with anyio.create_task_group() as group:
                    for slot in readers:
                        group.start_soon(take, slot)
            if scope.cancelled_caught:
                raise NotAcquired(f"read-write lock {name!r}: readers still hold it", None)
    finally:
        await give_back(granted)
    return all(lease.same_session(gate) for lease in granted)


def _refuse_reentry(pool: SessionPool, name: str, mode: str) -> None:
    for lease in pool.held():
        if isinstance(lease, RWLeaseBase) and lease.name == name and not lease.released:
            if mode == "read" and lease.mode == "read":
                continue  # many readers, this client among them
            raise InvalidArgument(
                f"this client holds the {lease.mode} lock of {name!r}: release it before asking"
                f" for its {mode} lock (no reentry, no upgrade)"
            )


def _shown(lease: RL, name: str, mode: str, token: int, index: int) -> RL:
    lease.name, lease.token, lease.mode, lease.index = name, token, mode, index
    return lease


def _give_up(pool: SessionPool, timeout: float | None) -> float:
    return math.inf if timeout is None else pool.clock.now() + timeout


def _left(pool: SessionPool, give_up: float) -> float | None:
    return None if give_up == math.inf else max(0.0, give_up - pool.clock.now())


class RWSideHandle(Handle[RL]):
    """One side of a read-write lock: its read lock (shared) or its write lock (alone)."""

    kind = "rwlock"
    _lease: type[RL]

    def __init__(
        self,
        pool: SessionPool,
        name: str,
        mode: Mode,
        ttl: float,
        *,
        readers: int,
        wait: bool,
        timeout: float | None,
        lock_delay: float | None,
    ) -> None:
        super().__init__(pool, name, wait=wait, timeout=timeout)
        self.mode = mode
        self.ttl, self.readers, self.lock_delay = ttl, readers, lock_delay

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mode} {self.name!r}>"

    async def _take(self, wait: bool, timeout: float | None) -> RL:
        if self.mode == "read":
            return await acquire_read(
                self._pool, self.name, self.readers, self.ttl, wait=wait, timeout=timeout,
                lock_delay=self.lock_delay, make=self._lease,
            )  # fmt: skip
        return await acquire_write(
            self._pool, self.name, self.ttl, wait=wait, timeout=timeout,
            lock_delay=self.lock_delay, make=self._lease,
        )  # fmt: skip


class AsyncRWSide(RWSideHandle[AsyncRWLease], AsyncHandle[AsyncRWLease]):
    """``async with rwlock.read as lease`` (or ``.write``); the body is cancelled on loss."""

    _lease = AsyncRWLease


class RWSide(RWSideHandle[RWLease], SyncHandle[RWLease]):
    """``with rwlock.read as lease`` (or ``.write``)."""

    _lease = RWLease


S = TypeVar("S", bound=RWSideHandle[Any])


class RWLockBase(Generic[S]):
    """A read-write lock: ``read`` and ``write``, each a handle with the verbs of every lock."""

    _side: type[S]

    def __init__(
        self,
        pool: SessionPool,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        readers: int = DEFAULT_READERS,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> None:
        """Read-write lock ``name``: up to ``readers`` readers at once or one writer, in
        arrival order for both, leases of ``ttl`` seconds, one token counter for both kinds
        (fence with ``SQLFence.admit_read`` / ``admit_write``). ``wait``, ``timeout``,
        ``lock_delay``: as for a lock, for both sides."""
        check_arguments(name, ttl, timeout, pool.drift, pool.margin)
        readers = check_readers(name, readers)
        pool.timing(ttl, lock_delay)
        self.name = name

        def side(mode: Mode) -> S:
            return self._side(
                pool, name, mode, float(ttl), readers=readers, wait=wait, timeout=timeout,
                lock_delay=lock_delay,
            )  # fmt: skip

        self.read: S = side("read")
        """The read lock: shared with other readers, never with a writer."""
        self.write: S = side("write")
        """The write lock: no reader nor other writer beside it."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class AsyncRWLock(RWLockBase[AsyncRWSide]):
    """``client.rwlock(name)`` of the async API: ``async with lock.read as lease``."""

    _side = AsyncRWSide


class RWLock(RWLockBase[RWSide]):
    """``client.rwlock(name)`` of the sync API: ``with lock.write as lease``."""

    _side = RWSide
