"""Leader election: a recipe on the lock, written once for every store.

A leadership is a lease on the election's name whose token is the **term**, plus a value the
leader proclaims (who leads, where to reach it). ``campaign`` waits for the lock and proclaims;
``resign`` releases it (the next campaigner is granted at once); a leader that cannot renew
loses its lease by its own deadline — before the store can grant the next term (rule 3) — and
the loss reaches the code as for any lease. Followers read ``leader`` or ``observe`` the
changes, woken by the store's watch or notifications, never by a fast poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ._errors import InvalidArgument, LeaseLost
from ._lease import AsyncLease
from ._lock import SAFETY_NAP, acquire
from ._values import LockInfo, Owner
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
    """Who leads an election now: its term (the lease's token), value and session owner."""

    name: str
    term: int
    value: str | None
    holder: Owner

    @classmethod
    def of(cls, info: LockInfo | None) -> Leader | None:
        if info is None:
            return None
        return cls(info.name, info.token, info.value, info.owner)


class AsyncLeadership(AsyncLease):
    """A won campaign: a lease whose token is the term, with the leader's value."""

    value: str | None = None

    def __repr__(self) -> str:
        state = "lost" if self.lost else "resigned" if self.released else "leading"
        return f"<Leadership {self.name!r} term={self.term} {state} value={self.value!r}>"

    @property
    def term(self) -> int:
        return self.token

    async def proclaim(self, value: str) -> None:
        """Change the leader's value without giving up the term (``LeaseLost`` if it is over)."""
        value = check_value(value)
        self.check()
        if not await self.set_value(value):
            self._mark_lost("the store says this term is over")
            self.check()
        self.value = value

    async def resign(self) -> None:
        """Step down at once: the next campaigner is elected without waiting for expiry."""
        await self.release()


async def campaign(
    pool: SessionPool,
    name: str,
    value: str,
    ttl: float,
    timeout: float | None,
    lock_delay: float | None = None,
) -> AsyncLeadership:
    """Wait to lead ``name`` (``NotAcquired`` after ``timeout``), then proclaim ``value``."""
    value = check_value(value)
    lead = await acquire(
        pool, name, ttl, wait=True, timeout=timeout, on_wait=None, make=AsyncLeadership,
        lock_delay=lock_delay,
    )  # fmt: skip
    try:
        await lead.proclaim(value)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await lead.release()
        raise
    return lead


async def leader(store: Store, name: str) -> Leader | None:
    found = await store.locks(name)
    return Leader.of(found[0] if found else None)


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
        yield last
        while True:
            changes = await watch.next(min(max(expires_in, 0.0) + 0.001, SAFETY_NAP))
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


__all__ = ["AsyncLeadership", "Leader", "LeaseLost", "campaign", "check_value", "leader", "observe"]
