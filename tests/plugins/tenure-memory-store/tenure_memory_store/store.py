"""`MemoryStore`: the store contract over a `Space` of this process's memory. Each call is one
step under the space's lock; waiters and watches are woken by bells (anyio events), not polls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tenure.stores import (
    NO_OPTIONS,
    Busy,
    Capabilities,
    Change,
    ConnectOptions,
    Elections,
    Grant,
    Holder,
    InvalidArgument,
    LeaseLost,
    LockDelay,
    LockInfo,
    Record,
    Records,
    Revocation,
    Revocations,
    Session,
    Store,
    Watch,
    parse_url,
)

from .space import Lease, Space, Tap, Ticket, space

USAGE = "memory://NAME"


@dataclass
class MemorySession(Session):
    id: int
    ttl: float


class MemoryStore(Store, Elections, Records, Revocations):
    scheme: ClassVar[str] = "memory"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="one",
        durable_tokens=False,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes="one process only: its state, tokens and records end with the process; expiry"
        " and lock-delay by the process's monotonic clock",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self._space: Space = space(name)

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> MemoryStore:
        if options:
            raise InvalidArgument("the memory store is in this process: no TLS or password")
        checked = parse_url(url, ("memory",), "memory", USAGE)
        name = checked.parts.netloc + checked.parts.path
        if not name or checked.parts.query:
            raise checked.bad("a name and nothing more")
        return cls(name)

    @property
    def url(self) -> str:
        return f"memory://{self.name}"

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        with self._space.changing() as now:
            lease = Lease(next(self._space.ids), ttl, owner, lock_delay, now + ttl)
            self._space.sessions[lease.id] = lease
        return MemorySession(lease.id, ttl)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, MemorySession)
        with self._space.changing() as now:
            lease = self._space.sessions.get(session.id)
            if lease is None:
                return False
            lease.expires = now + lease.ttl
            return True

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, MemorySession)
        with self._space.changing() as now:  # an expired session was swept: held back
            lease = self._space.sessions.get(session.id)
            if lease is not None:
                self._space.end(lease, now, released=True)

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, MemorySession)
        assert ticket is None or isinstance(ticket, Ticket)
        space = self._space
        with space.changing() as now:
            lease = space.sessions.get(session.id)
            if lease is None:
                raise LeaseLost("the session expired")
            holder = space.holder(name, now)
            held = space.lock_delays(name, now) if holder is None else None
            head = space.head(name)
            if holder is None and held is None and (head is None or head is ticket):
                if ticket is not None:  # the next in line sleeps on: the name is taken
                    space.dequeue(ticket, call_next=False)
                return Grant(space.grant(name, lease, now), renewed_session=True)
            queue = space.queues.setdefault(name, [])
            if ticket is None and enqueue:
                ticket = Ticket(name, session.id)
            if ticket is not None and ticket not in queue:
                queue.append(ticket)  # a first wait, or a place its session lost: at the end
            if not queue:
                del space.queues[name]
            if held is not None:  # nobody hands it over when the delay ends: come back then
                retry = held.free_in + 0.001
            elif holder is None:  # free, others ahead: in case the one ahead went silently
                retry = Busy.AHEAD_POLL
            else:  # if the holder expires, its lock-delay follows
                delay = space.sessions[space.locks[name].session].lock_delay
                retry = max(0.0, holder.expires_in) + delay + 0.001
            return Busy(holder, ticket, retry)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, Ticket)
        await ticket.bell.wait(timeout)

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, Ticket)
        with self._space.changing():
            self._space.dequeue(ticket)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, MemorySession)
        with self._space.changing() as now:  # an expired session's names were swept
            if self._holds(session, name, token):
                self._space.free(name, now)

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        with self._space.changing() as now:
            names = sorted(self._space.locks) if name is None else [name]
            found = [self._space.holder(each, now) for each in names if each.startswith(prefix)]
        return [info for info in found if info is not None]

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        with self._space.changing() as now:
            names = sorted(self._space.held) if name is None else [name]
            found = [self._space.lock_delays(each, now) for each in names]
        return [held for held in found if held is not None]

    async def aclose(self) -> None:
        pass  # nothing to close: the space outlives its stores

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, MemorySession)
        with self._space.changing() as now:
            if not self._holds(session, name, token):
                return False
            self._space.locks[name].value = value
            self._space.changed(name, now)
            return True

    async def watch(self, name: str) -> Watch:
        tap = Tap(name)  # its bell rings in this task's event loop
        with self._space.changing():
            self._space.taps.setdefault(name, []).append(tap)
        return MemoryWatch(self._space, tap)

    # -- revocations -----------------------------------------------------------------------

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        with self._space.changing() as now:
            held = self._space.locks.get(name)
            if held is None or (token is not None and held.token != token):
                return None
            return self._space.revoke(name, record, now)

    async def revoked(self, session: Session) -> list[Revocation]:
        assert isinstance(session, MemorySession)
        with self._space.changing() as now:
            kept = self._space.revocations.values()
            return [self._space.revocation(each, now) for each in kept if each[0] == session.id]

    # -- records ---------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        with self._space.changing():
            return self._space.records.get(key)

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        with self._space.changing():
            current = self._space.records.get(key)
            if (current.version if current is not None else 0) != version:
                return None
            written = self._space.records[key] = Record(key, value, version + 1)
            return written

    async def list_records(self, prefix: str) -> list[Record]:
        with self._space.changing():
            found = [r for k, r in self._space.records.items() if k.startswith(prefix)]
        return sorted(found, key=lambda record: record.key)

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        assert isinstance(session, MemorySession)
        with self._space.changing():
            if not self._holds(session, name, token):
                return False
            current = self._space.records.pop(key, None)
            if value is not None:
                version = current.version + 1 if current is not None else 1
                self._space.records[key] = Record(key, value, version)
            return True

    def _holds(self, session: MemorySession, name: str, token: int) -> bool:
        """Inside ``changing()``: the session holds ``name`` with ``token`` now."""
        held = self._space.locks.get(name)
        return held is not None and (held.session, held.token) == (session.id, token)


class MemoryWatch(Watch):
    """The changes of one name, appended by the space as it makes them, rung by the tap's bell."""

    def __init__(self, space: Space, tap: Tap) -> None:
        self._space, self._tap = space, tap

    async def next(self, timeout: float) -> list[Change]:
        if not self._has_changes():
            await self._tap.bell.wait(timeout)
        with self._space.changing():
            taken, self._tap.changes = self._tap.changes, []
        return taken

    def _has_changes(self) -> bool:
        with self._space.lock:
            return bool(self._tap.changes)

    async def aclose(self) -> None:
        with self._space.changing():
            taps = self._space.taps.get(self._tap.name, [])
            if self._tap in taps:
                taps.remove(self._tap)
            if not taps:
                self._space.taps.pop(self._tap.name, None)
