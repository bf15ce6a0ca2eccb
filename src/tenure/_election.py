"""Leader election: a recipe on the lock, written once for every store.

A leadership is a lease on the election's name whose token is the **term**, plus a value the
leader proclaims (who leads, where to reach it). ``election.acquire()`` (a campaign) waits for
the lock and proclaims; ``release()`` steps down (the next campaigner is granted at once); a
leader that cannot renew
loses its lease by its own deadline — before the store can grant the next term (rule 3) — and
the loss reaches the code as for any lease. Followers read ``leader`` or ``observe`` the
changes, woken by the store's watch or notifications, never by a fast poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio

from . import _observe
from ._arguments import check_arguments
from ._errors import InvalidArgument, LeaseLost
from ._handles import AsyncHandle, Handle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._lock import SAFETY_NAP, acquire
from ._modes import current_caller, io, io_iter
from ._names import check_plain
from ._state import DEFAULT_TTL, Loss
from ._values import Holder, LockInfo
from .stores._spi import Store, elections_of

if TYPE_CHECKING:
    from ._pool import SessionPool

MAX_VALUE = 4096
"""Longest value a leader may proclaim, in characters (it travels in every change notice)."""


def check_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"a leader's value must be a string, not {type(value).__name__}")
    if len(value) > MAX_VALUE or "\x00" in value:
        raise InvalidArgument(
            f"a leader's value must be at most {MAX_VALUE} characters, without NUL"
        )
    return value


@dataclass(frozen=True)
class Leader:
    """Who leads an election now: its term (the lease's token), value and holder."""

    name: str
    term: int
    value: str | None
    holder: Holder

    @classmethod
    def of(cls, info: LockInfo | None) -> Leader | None:
        """The leader a lock shows (None if nobody holds it)."""
        if info is None:
            return None
        return cls(info.name, info.token, info.value, info.holder)


class LeadershipBase(LeaseBase):
    """A won campaign: a lease whose token is the term, with the leader's value; ``release()``
    steps down at once (the next campaigner is elected without waiting for expiry)."""

    value: str | None = None
    _leading = False
    """True from the campaign's proclaim until the term ends (what observers were told)."""

    def __repr__(self) -> str:
        state = "lost" if self.lost else "stepped down" if self.released else "leading"
        return f"<Leadership {self.name!r} term={self.term} {state} value={self.value!r}>"

    @property
    def term(self) -> int:
        """The election's word for the token: strictly greater than every earlier term."""
        return self.token

    async def _proclaim(self, value: str) -> None:
        """Change the leader's value without giving up the term (``LeaseLost`` if it is over)."""
        value = check_value(value)
        self.check()
        if not await self._set_value(value):
            self._mark_lost("the store says this term is over", Loss.GONE)
            self.check()
        self.value = value

    proclaim = io(_proclaim)

    def _begin_term(self) -> None:
        """Tell observers this process leads now (once the value is proclaimed)."""
        self._leading = True
        if _observe.listeners:
            _observe.leading(self._keeper.store, self.name, self.term)

    def _end_term(self) -> None:
        if self._leading:
            self._leading = False
            if _observe.listeners:
                _observe.leading(self._keeper.store, self.name, None)

    def _mark_lost(self, reason: str, loss: Loss) -> None:
        super()._mark_lost(reason, loss)
        self._end_term()

    def _mark_closed(self) -> None:
        super()._mark_closed()
        self._end_term()

    async def _release(self) -> None:
        self._end_term()
        await super()._release()


class AsyncLeadership(LeadershipBase, AsyncLease):
    """A leadership of the async API."""


class Leadership(LeadershipBase, Lease):
    """A leadership of the sync API."""


LS = TypeVar("LS", bound=LeadershipBase)


async def campaign(
    pool: SessionPool,
    name: str,
    value: str,
    ttl: float,
    *,
    wait: bool,
    timeout: float | None,
    lock_delay: float | None,
    make: type[LS],
) -> LS:
    """Wait to lead ``name`` (``NotAcquired`` after ``timeout``), then proclaim ``value``."""
    value = check_value(value)
    lead = await acquire(
        pool, name, ttl, wait=wait, timeout=timeout, on_wait=None, make=make,
        lock_delay=lock_delay, kind="election",
    )  # fmt: skip
    try:
        await lead._proclaim(value)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await lead._release()
        raise
    lead._begin_term()
    return lead


async def leader(store: Store, name: str) -> Leader | None:
    found = await store.locks(name)
    return Leader.of(found[0] if found else None)


RECHECK_MIN, RECHECK_MAX = 0.05, 1.0
"""Seconds an observer waits before reading again a leader whose time is up but who is still
there: from the least, doubled each time up to the most (`observe`)."""


async def observe(store: Store, name: str) -> AsyncIterator[Leader | None]:
    """The current leader (or None), then every change: each term, each proclaimed value, each
    time nobody leads. Subscribed before the first read, so nothing after it is missed. An
    expiry that the store does not announce (SQL stores) is found by reading again when the
    leader could have expired."""
    watch = await elections_of(store).watch(name)
    try:
        found = await store.locks(name)
        last = Leader.of(found[0] if found else None)
        expires_in = found[0].expires_in if found else SAFETY_NAP
        backoff = RECHECK_MIN
        yield last
        while True:
            timeout = max(expires_in, 0.0) + 0.001
            if expires_in <= 0 and last is not None:
                # A store that rounds the time left down (etcd: whole seconds) says 0 for a
                # leader with up to a second left: re-reads of one still there back off, not
                # one per round trip until it renews.
                timeout, backoff = backoff, min(backoff * 2, RECHECK_MAX)
            else:
                backoff = RECHECK_MIN
            changes = await watch.next(min(timeout, SAFETY_NAP))
            seen = [Leader.of(change.holder) for change in changes]
            if not changes:  # nothing announced: has the leader expired meanwhile?
                found = await store.locks(name)
                seen = [Leader.of(found[0] if found else None)]
            for now in seen:
                if now != last:
                    last = now
                    yield now
            if changes:  # learn how long the current leader may last without a renewal
                found = await store.locks(name)
            expires_in = found[0].expires_in if found else SAFETY_NAP
    finally:
        with anyio.CancelScope(shield=True):
            await watch.aclose()


class ElectionHandle(Handle[LS]):
    """An election: at most one leader at a time, each term greater than the last."""

    given_as = "leadership"
    kind = "election"
    _leadership: type[LS]

    def __init__(
        self,
        pool: SessionPool,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        value: str | None = None,
        wait: bool = True,
        timeout: float | None = None,
        lock_delay: float | None = None,
    ) -> None:
        """Election ``name``: ``acquire()`` campaigns (waits to lead, unless ``wait`` is False,
        at most ``timeout`` seconds) and proclaims ``value`` (default: host and pid), with
        leases of ``ttl`` seconds; ``leader()`` and ``observe()`` follow whoever leads.
        ``lock_delay``: as for a lock."""
        check_arguments(name, ttl, timeout, pool.drift, pool.margin)
        pool.timing(ttl, lock_delay)
        holder = pool.holder
        self.value = check_value(f"{holder.host} pid {holder.pid}" if value is None else value)
        super().__init__(pool, name, wait=wait, timeout=timeout)
        self.ttl = float(ttl)
        self.lock_delay = lock_delay

    async def _take(self, wait: bool, timeout: float | None) -> LS:
        check_plain(self.name)  # (a recipe's own election may be followed, not led)
        elections_of(self._pool.store)
        caller = current_caller()
        if self._pool.holds(self.name, caller):
            raise InvalidArgument(f"this caller leads {self.name!r} already (no reentry)")
        leadership = await campaign(
            self._pool, self.name, self.value, self.ttl, wait=wait, timeout=timeout,
            lock_delay=self.lock_delay, make=self._leadership,
        )  # fmt: skip
        leadership.caller = caller
        return leadership

    async def _leader(self) -> Leader | None:
        """The current leader (None if nobody leads)."""
        return await leader(self._pool.store, self.name)

    leader = io(_leader)

    def _observe(self) -> AsyncIterator[Leader | None]:
        """The current leader, then every change (``for leader in election.observe()``)."""
        return observe(self._pool.store, self.name)

    observe = io_iter(_observe)


class AsyncElection(ElectionHandle[AsyncLeadership], AsyncHandle[AsyncLeadership]):
    """``async with client.election(name, value=...) as leadership``; ``async for leader in
    election.observe()``. The body is cancelled if the leadership is lost."""

    _leadership = AsyncLeadership


class Election(ElectionHandle[Leadership], SyncHandle[Leadership]):
    """``with client.election(name, value=...) as leadership``; ``election.leader()``."""

    _leadership = Leadership


__all__ = [
    "AsyncElection", "AsyncLeadership", "Election", "Leader", "Leadership", "LeaseLost",
    "campaign", "check_value", "leader", "observe",
]  # fmt: skip
