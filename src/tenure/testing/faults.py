"""A store wrapper that injects faults into the calls a client makes.

store = FaultyStore(tenure._url.open_store(url))
async with tenure.AsyncClient(store) as client:
    ...
    store.hang_keep_alive = True     # renewals never answer: the lease is lost at its deadline
    store.fail_keep_alive = True     # renewals raise StoreUnavailable: retried, then lost
    store.drop_sessions = True       # the store answers that the session is gone: lost at once
    store.drop_next_session = True   # the same for the next renewal only (one session is lost)
    store.break_keep_alive = True    # renewals raise an unexpected error (a bug): lost at once
    store.refuse_sessions = True     # new sessions cannot be opened (the store is out of reach)
    store.fail_attempts = True       # lock attempts raise StoreUnavailable (a store too slow)
    store.refuse_proclaims = True    # a leader's term ends at the store as it proclaims
    store.unguarded_state = True     # lease.state writes skip the store's grant check (a store
                                     # that does not fence: tenure chaos's positive control)
"""

from __future__ import annotations

import anyio

from .._errors import StoreUnavailable
from ..stores._connect import NO_OPTIONS, ConnectOptions
from ..stores._spi import (
    Busy,
    Elections,
    Grant,
    Holder,
    LockDelay,
    LockInfo,
    Record,
    Records,
    Revocation,
    Revocations,
    Session,
    Store,
    Watch,
    elections_of,
    records_of,
    revocations_of,
)


class FaultyStore(Store, Elections, Records, Revocations):
    """Offers what the wrapped store offers (its capabilities); a call it lacks is refused."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.hang_keep_alive = False
        self.fail_keep_alive = False
        self.drop_sessions = False
        self.drop_next_session = False
        self.break_keep_alive = False
        self.refuse_sessions = False
        self.fail_attempts = False
        self.refuse_proclaims = False
        self.unguarded_state = False
        self.keep_alive_calls = 0
        self.sessions_opened = 0
        self.capabilities = inner.capabilities  # type: ignore[misc]
        self.times_its_wait = inner.times_its_wait  # type: ignore[misc]
        self.scheme = inner.scheme  # type: ignore[misc]

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> FaultyStore:
        from .._url import open_store

        return cls(open_store(url, options=options))

    @property
    def url(self) -> str:
        return self.inner.url

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        if self.refuse_sessions:
            raise StoreUnavailable("injected fault: cannot open a session")
        self.sessions_opened += 1
        return await self.inner.open_session(ttl, owner, lock_delay)

    async def keep_alive(self, session: Session) -> bool:
        self.keep_alive_calls += 1
        if self.hang_keep_alive:
            await anyio.sleep_forever()
        if self.fail_keep_alive:
            raise StoreUnavailable("injected fault: keep-alive failed")
        if self.break_keep_alive:
            raise RuntimeError("injected fault: a bug in the store")
        if self.drop_sessions or self.drop_next_session:
            self.drop_next_session = False
            return False
        return await self.inner.keep_alive(session)

    async def close_session(self, session: Session) -> None:
        await self.inner.close_session(session)

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        if self.fail_attempts:
            raise StoreUnavailable("faulty store: attempt refused")
        return await self.inner.attempt(session, name, ticket, enqueue)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        await self.inner.wait(ticket, busy, timeout)

    async def leave(self, ticket: object) -> None:
        await self.inner.leave(ticket)

    async def release(self, session: Session, name: str, token: int) -> None:
        await self.inner.release(session, name, token)

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        return await self.inner.locks(name, prefix)

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        return await self.inner.lock_delays(name)

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        if self.refuse_proclaims:  # the term ended at the store just before (as by expiry)
            await self.inner.release(session, name, token)
            return False
        return await elections_of(self.inner).proclaim(session, name, token, value)

    async def watch(self, name: str) -> Watch:
        return await elections_of(self.inner).watch(name)

    async def read_record(self, key: str) -> Record | None:
        return await records_of(self.inner).read_record(key)

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        return await records_of(self.inner).write_record(key, value, version)

    async def list_records(self, prefix: str) -> list[Record]:
        return await records_of(self.inner).list_records(prefix)

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        records = records_of(self.inner)
        if not self.unguarded_state:
            return await records.write_held_record(session, name, token, key, value)
        # The write as a store without the compare would make it: over whatever is there now,
        # whoever holds the lock (``value`` None: an empty record).
        while True:
            current = await records.read_record(key)
            written = await records.write_record(
                key, value or "", 0 if current is None else current.version
            )
            if written is not None:
                return True

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        return await revocations_of(self.inner).revoke(name, token, record)

    async def revoked(self, session: Session) -> list[Revocation]:
        return await revocations_of(self.inner).revoked(session)

    async def aclose(self) -> None:
        await self.inner.aclose()
