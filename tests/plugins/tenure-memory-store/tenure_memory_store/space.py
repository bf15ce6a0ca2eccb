"""One namespace's state (``memory://NAME``): sessions, locks, their queues and counters,
lock-delays, watches and records. Every change is made under the space's thread lock, without
awaiting, by the calls of `tenure_memory_store.store`; bells are rung once the lock is left."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from tenure.stores import Change, Holder, LockDelay, LockInfo, Record, Revocation

from .wake import Bell

clock = time.monotonic
"""The store's clock: every session's expiry and every lock-delay is judged by it alone."""


@dataclass
class Lease:
    """A session as the store keeps it."""

    id: int
    ttl: float
    owner: Holder
    lock_delay: float
    expires: float


@dataclass
class Held:
    token: int
    session: int
    value: str | None = None


@dataclass(eq=False)
class Ticket:
    """A place in one name's queue; rung when the one ahead of it goes."""

    name: str
    session: int
    bell: Bell = field(default_factory=Bell)


@dataclass(eq=False)
class Tap:
    """One watch of a name: the changes it has not read yet, and the bell that says so."""

    name: str
    changes: list[Change] = field(default_factory=list)
    bell: Bell = field(default_factory=Bell)


@dataclass
class Space:
    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    sessions: dict[int, Lease] = field(default_factory=dict)
    locks: dict[str, Held] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    """The last token of each name: never forgotten, so tokens only grow."""
    held: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Names held back by lock-delay: the token of the lease that ended, and when they are
    free (on `clock`)."""
    queues: dict[str, list[Ticket]] = field(default_factory=dict)
    taps: dict[str, list[Tap]] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    revocations: dict[str, tuple[int, Revocation, float]] = field(default_factory=dict)
    """The latest revocation of each name: the revoked grant's session, the record, and until
    when (on `clock`) the name is held back for it."""
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _ring: list[Bell] = field(default_factory=list)

    @contextmanager
    def changing(self) -> Iterator[float]:
        """Hold the lock for one call; its ``now``. Expired sessions are swept first, and the
        bells the call asked for are rung after the lock is left."""
        with self.lock:
            now = clock()
            self._sweep(now)
            try:
                yield now
            finally:
                ring, self._ring = self._ring, []
        for bell in ring:
            bell.ring()

    # -- reading --------------------------------------------------------------------------

    def holder(self, name: str, now: float) -> LockInfo | None:
        held = self.locks.get(name)
        if held is None:
            return None
        lease = self.sessions[held.session]
        waiters = len(self.queues.get(name, ()))
        return LockInfo(name, held.token, lease.owner, lease.expires - now, waiters, held.value)

    def lock_delays(self, name: str, now: float) -> LockDelay | None:
        token, until = self.held.get(name, (0, now))
        if until <= now:
            self.held.pop(name, None)
            return None
        revoked = self.revocations.get(name)
        why = None
        if revoked is not None and revoked[1].token == token:
            why = self.revocation(revoked, now)
        return LockDelay(name, token, until - now, why)

    @staticmethod
    def revocation(kept: tuple[int, Revocation, float], now: float) -> Revocation:
        _, record, until = kept
        return replace(record, free_in=max(0.0, until - now))

    def head(self, name: str) -> Ticket | None:
        queue = self.queues.get(name)
        return queue[0] if queue else None

    # -- changing -------------------------------------------------------------------------

    def grant(self, name: str, lease: Lease, now: float) -> int:
        token = self.tokens[name] = self.tokens.get(name, 0) + 1
        lease.expires = now + lease.ttl  # the grant renews the session
        self.locks[name] = Held(token, lease.id)
        self.held.pop(name, None)
        self.changed(name, now)
        return token

    def free(self, name: str, now: float) -> None:
        """A release: the name is free at once; the first in its queue is told."""
        del self.locks[name]
        self.changed(name, now)
        self.call_next(name)

    def call_next(self, name: str) -> None:
        if (head := self.head(name)) is not None:
            self._ring.append(head.bell)

    def dequeue(self, ticket: Ticket, *, call_next: bool = True) -> None:
        queue = self.queues.get(ticket.name, [])
        if ticket not in queue:
            return
        was_head = queue[0] is ticket
        queue.remove(ticket)
        if not queue:
            del self.queues[ticket.name]
        if call_next and was_head and ticket.name not in self.locks:
            self.call_next(ticket.name)

    def end(self, lease: Lease, now: float, *, released: bool) -> None:
        """Forget a session: its names are freed (``released``) or held back by its
        lock-delay, counted from when it expired; its places in queues are given up."""
        del self.sessions[lease.id]
        for name, (session, _, until) in list(self.revocations.items()):
            if session == lease.id and until <= now:
                del self.revocations[name]
        for name, held in list(self.locks.items()):
            if held.session != lease.id:
                continue
            until = lease.expires + lease.lock_delay
            if not released and until > now:
                self.held[name] = (held.token, until)
                del self.locks[name]
                self.changed(name, now)
            else:
                self.free(name, now)
        for queue in list(self.queues.values()):
            for ticket in [t for t in queue if t.session == lease.id]:
                self.dequeue(ticket)
                self._ring.append(ticket.bell)  # so it learns its session is gone

    def revoke(self, name: str, record: Revocation, now: float) -> Revocation:
        """End the grant of ``name`` outside its session: held back until the session's
        expiry as it stands plus its lock-delay, or (``record.now``) freed at once."""
        held = self.locks.pop(name)
        lease = self.sessions[held.session]
        until = now if record.now else lease.expires + lease.lock_delay
        if record.now:
            self.held.pop(name, None)
            self.call_next(name)
        else:
            self.held[name] = (held.token, until)
        kept = (held.session, replace(record, token=held.token), until)
        self.revocations[name] = kept
        self.changed(name, now)
        return self.revocation(kept, now)

    def changed(self, name: str, now: float) -> None:
        change = Change(name, self.holder(name, now))
        for tap in self.taps.get(name, []):
            tap.changes.append(change)
            self._ring.append(tap.bell)

    def _sweep(self, now: float) -> None:
        for lease in [s for s in self.sessions.values() if s.expires <= now]:
            self.end(lease, now, released=False)


_SPACES: dict[str, Space] = {}
_SPACES_LOCK = threading.Lock()


def space(name: str) -> Space:
    """The process's space ``name``, made on first use and kept for the process's life, so
    that tokens keep growing when every store of the name has been closed and opened again."""
    with _SPACES_LOCK:
        return _SPACES.setdefault(name, Space(name))
