"""`SQLiteStore`: the contract's calls, each one ``BEGIN IMMEDIATE`` transaction on the store's
file (``docs/stores/sqlite.md`` tells how grants, the queue and lock-delay work)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote

import anyio

from ..._clock import REAL_CLOCK
from ..._errors import InvalidArgument, LeaseLost
from .._connect import NO_OPTIONS, ConnectOptions
from .._kit import parse_url
from .._spi import (
    Busy,
    Capabilities,
    Change,
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
)
from . import events, records
from .connection import Errors, begin, connect
from .files import default_path, wake_directory
from .queue import Queue, Ticket
from .schema import HELD, LIVE, boot_id
from .wake import Fifos, drain, drop, wake_up

T = TypeVar("T")
USAGE = "sqlite:///relative/path or sqlite:////abs/path"


@dataclass
class SQLiteSession(Session):
    id: int
    ttl: float


class SessionGone(Exception):
    pass


REVOCATION = "SELECT name, token, host, pid, label, user, at, reason, at_once, until"
"""A row of ``tenure_revocations`` as `_revocation` reads it (``FROM …`` follows)."""


def _revocation(row: tuple[Any, ...], now: float) -> Revocation:
    name, token, host, pid, label, user, at, reason, at_once, until = row
    by = Holder(host, pid, label)
    return Revocation(name, token, by, user, at, reason, bool(at_once), max(0.0, until - now))


class SQLiteStore(Store, Elections, Records, Revocations):
    """The embedded store (``sqlite:///path``): one file shared by the processes of one machine."""

    scheme: ClassVar[str] = "sqlite"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="one",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes="one machine only; expiry and lock-delay by the host's boot clock (a reboot ends"
        " a lock-delay: no process outlives it); waiters woken through FIFOs",
    )

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wake_dir = wake_directory(path)
        self._boot = boot_id()
        self._fifos = Fifos(self.wake_dir)
        self._queue = Queue(self._fifos, self._boot)
        self._touched: events.Touched | None = None  # within a transaction: what it changed
        self._errors = Errors(path)
        self._db = connect(path, self._errors)

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> SQLiteStore:
        """``sqlite://`` (the default file), ``sqlite:///relative.db``, ``sqlite:////abs.db``."""
        if options:
            raise InvalidArgument("the sqlite store is a local file: it takes no TLS or password")
        checked = parse_url(url, ("sqlite",), "SQLite", "", fragment=None)
        parts = checked.parts
        if parts.netloc or parts.query or parts.fragment:
            raise checked.bad(f"use {USAGE}")
        raw = unquote(parts.path)
        if "\0" in raw:
            raise checked.bad("the path holds a NUL byte (%00)")
        if raw in ("", "/"):
            path = default_path()
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            path = Path(raw[1:])
            # A trailing "/" (or "." / "..") names a directory: refused here, in one line,
            # rather than opened as a file or failing later on the empty name of "/".
            if raw.endswith("/") or path.name in ("", ".", ".."):
                raise checked.bad(f"the path {raw[1:]!r} names a directory, not a file")
        return cls(path.absolute())

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    # -- plumbing -------------------------------------------------------------------------

    async def _transaction(self, fn: Callable[[sqlite3.Connection, float], T]) -> T:
        """Run ``fn(db, now)`` in one write transaction; ``now`` is read once the lock is ours.

        The transaction runs on the event loop without yielding (it is short: its cost is one
        fsync), so no other task interleaves on this connection; only waiting for a busy
        database yields (`begin`). The watches of what it changed are woken once committed.
        """
        db = self._db
        await begin(db, self._errors)
        touched = self._touched = events.Touched(self._fifos, self._holder)
        try:
            result = fn(db, REAL_CLOCK.now())
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            touched.abandon()
            if isinstance(exc, sqlite3.Error):
                raise self._errors.of(exc) from None
            raise
        finally:
            self._touched = None
        wake_up(touched.fds())
        return result

    def _record(self, db: sqlite3.Connection, name: str, now: float) -> None:
        """Inside a transaction that changed ``name``: its watches get its new state."""
        assert self._touched is not None, "only inside _transaction"
        self._touched.record(db, name, now)

    def _params(self, now: float, **more: object) -> dict[str, object]:
        return {"boot": self._boot, "now": now, **more}

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        def tx(db: sqlite3.Connection, now: float) -> int:
            self._sweep(db, now)
            cur = db.execute(
                "INSERT INTO tenure_sessions (boot, expires, ttl, host, pid, label, lock_delay)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (self._boot, now + ttl, ttl, owner.host, owner.pid, owner.label, lock_delay),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

        return SQLiteSession(await self._transaction(tx), ttl)

    def _sweep(self, db: sqlite3.Connection, now: float) -> None:
        """Forget expired sessions and what they held (their counters stay); names still
        within their lock-delay move to ``tenure_held``."""
        dead = "SELECT id FROM tenure_sessions s WHERE NOT (" + LIVE + ")"
        params = self._params(now)
        db.execute("DELETE FROM tenure_held WHERE NOT (boot = :boot AND until > :now)", params)
        db.execute(
            "INSERT INTO tenure_held (name, token, boot, until)"
            " SELECT l.name, l.token, s.boot, s.expires + s.lock_delay"
            " FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
            " WHERE s.boot = :boot AND s.expires <= :now AND s.expires + s.lock_delay > :now"
            " ON CONFLICT (name) DO UPDATE SET token = excluded.token, until = excluded.until",
            params,
        )
        freed = db.execute(
            f"DELETE FROM tenure_locks WHERE session IN ({dead}) RETURNING name", params
        )
        names = [row[0] for row in freed.fetchall()]
        db.execute(f"DELETE FROM tenure_waiters WHERE session IN ({dead})", params)
        db.execute("DELETE FROM tenure_sessions AS s WHERE NOT (" + LIVE + ")", params)
        db.execute(
            "DELETE FROM tenure_revocations WHERE session NOT IN (SELECT id FROM tenure_sessions)"
            " AND NOT (boot = :boot AND until > :now)",
            params,
        )
        for name in names:
            self._record(db, name, now)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, SQLiteSession)

        def tx(db: sqlite3.Connection, now: float) -> bool:
            cur = db.execute(
                "UPDATE tenure_sessions AS s SET expires = :new WHERE id = :id AND " + LIVE,
                self._params(now, new=now + session.ttl, id=session.id),
            )
            return cur.rowcount == 1

        return await self._transaction(tx)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, SQLiteSession)

        def tx(db: sqlite3.Connection, now: float) -> list[int]:
            # Closing is a release, but not for a session that has already expired: the sweep
            # holds its names back (and forgets it) first.
            self._sweep(db, now)
            query = "SELECT name FROM tenure_locks WHERE session = ?"
            names = [row[0] for row in db.execute(query, (session.id,))]
            db.execute("DELETE FROM tenure_locks WHERE session = ?", (session.id,))
            db.execute("DELETE FROM tenure_waiters WHERE session = ?", (session.id,))
            db.execute("DELETE FROM tenure_sessions WHERE id = ?", (session.id,))
            fds = []
            for name in names:
                self._record(db, name, now)
                if (fd := self._hand_over(db, name, now)) is not None:
                    fds.append(fd)
            return fds

        wake_up(await self._transaction(tx))

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, SQLiteSession)
        assert ticket is None or isinstance(ticket, Ticket)
        if ticket is not None:
            handed = self._handed_to(session, ticket)
            if handed is not None:
                self._fifos.give_back(ticket.wake, ticket.fd)
                return handed
        mine = ticket
        # A spare FIFO lets the first transaction join the queue at once if the lock is busy.
        fifo = self._fifos.spare() if enqueue and mine is None else None

        def tx(db: sqlite3.Connection, now: float) -> Grant | Busy:
            nonlocal mine
            if mine is not None and (handed := self._handed_over(db, now, session, mine)):
                return handed  # handed to us since the unlocked read above
            params = self._params(now, id=session.id, name=name)
            holder = self._holder(db, name, now)
            held = [] if holder is not None else self._held(db, now, name)
            if holder is None and not held:
                head = self._queue.live_head(db, name, now, None if mine is None else mine.seq)
                if head is None or (mine is not None and head == mine.seq):
                    return self._grant(db, now, session, name, mine)
            alive = db.execute(
                "SELECT 1 FROM tenure_sessions s WHERE id = :id AND " + LIVE, params
            ).fetchone()
            if alive is None:
                raise SessionGone
            if mine is not None:
                still = db.execute(
                    "SELECT 1 FROM tenure_waiters WHERE seq = ?", (mine.seq,)
                ).fetchone()
                if still is None:  # our place was dropped (e.g. swept): queue again at the end
                    mine = self._queue.enqueue(db, session.id, name, mine.wake, mine.fd)
            elif enqueue and fifo is not None:
                mine = self._queue.enqueue(db, session.id, name, *fifo)
            if held:  # nobody hands it over when the delay ends: come back then
                retry = held[0].free_in + 0.001
            elif holder is None:
                # Free but others ahead: poll gently, in case those ahead died without a wake-up.
                retry = Busy.AHEAD_POLL
            else:  # if the holder expires, its lock-delay follows
                retry = max(0.0, holder.expires_in) + self._delay_of(db, name) + 0.001
            return Busy(holder=holder, ticket=mine, retry_in=retry)

        while True:
            try:
                outcome = await self._transaction(tx)
            except BaseException as exc:
                if fifo is not None:
                    self._fifos.give_back(*fifo)
                if isinstance(exc, SessionGone):
                    raise LeaseLost("the session expired") from None
                raise
            if isinstance(outcome, Busy) and enqueue and mine is None and fifo is None:
                # Busy, and we will wait: make our FIFO before our queue row, so a queued row
                # always has a listener; then try again (the uncontended path makes none).
                fifo = self._fifos.make()
                continue
            break
        if fifo is not None and not (isinstance(outcome, Busy) and outcome.ticket is not None):
            self._fifos.give_back(*fifo)
        if isinstance(outcome, Grant) and ticket is not None:
            self._fifos.give_back(ticket.wake, ticket.fd)
        return outcome

    def _handed_to(self, session: SQLiteSession, ticket: Ticket) -> Grant | None:
        """Did a release hand us the lock? One read, no write lock: the release did the work.
        A release may still hand it over after this read: the transaction asks again."""
        with self._errors.on(sqlite3.Error):
            return self._handed_over(self._db, REAL_CLOCK.now(), session, ticket)

    def _handed_over(
        self, db: sqlite3.Connection, now: float, session: SQLiteSession, ticket: Ticket
    ) -> Grant | None:
        row = db.execute(
            "SELECT l.token FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
            " WHERE l.name = :name AND l.waiter = :seq AND s.id = :id AND " + LIVE,
            self._params(now, name=ticket.name, seq=ticket.seq, id=session.id),
        ).fetchone()
        # Our session renewed by its keeper, not by this grant: its deadline stands as it is.
        return None if row is None else Grant(token=int(row[0]), renewed_session=False)

    def _holder(self, db: sqlite3.Connection, name: str, now: float) -> LockInfo | None:
        row = db.execute(
            "SELECT l.token, s.host, s.pid, s.label, s.expires,"
            " (SELECT count(*) FROM tenure_waiters w WHERE w.name = l.name), l.value"
            " FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
            " WHERE l.name = :name AND " + LIVE,
            self._params(now, name=name),
        ).fetchone()
        if row is None:
            return None
        token, host, pid, label, expires, waiters, value = row
        return LockInfo(name, token, Holder(host, pid, label), expires - now, waiters, value)

    def _held(self, db: sqlite3.Connection, now: float, name: str | None) -> list[LockDelay]:
        """The names held back by lock-delay now (only ``name``, if given), by name."""
        query = HELD.format(where="" if name is None else "AND name = :name")
        latest: dict[str, LockDelay] = {}
        for each, token, until in db.execute(query, self._params(now, name=name)).fetchall():
            if each not in latest or until - now > latest[each].free_in:
                why = db.execute(
                    REVOCATION + " FROM tenure_revocations WHERE name = ? AND token = ?",
                    (each, token),
                ).fetchone()
                revoked = None if why is None else _revocation(why, now)
                latest[each] = LockDelay(each, token, until - now, revoked)
        return sorted(latest.values(), key=lambda held: held.name)

    @staticmethod
    def _delay_of(db: sqlite3.Connection, name: str) -> float:
        query = (
            "SELECT s.lock_delay FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
            " WHERE l.name = ?"
        )
        row = db.execute(query, (name,)).fetchone()
        return 0.0 if row is None else float(row[0])

    def _grant(
        self,
        db: sqlite3.Connection,
        now: float,
        session: SQLiteSession,
        name: str,
        ticket: Ticket | None,
    ) -> Grant:
        # The grant renews the session (so the holder's deadline counts from this request) and
        # proves it alive in the same statement.
        renewed = db.execute(
            "UPDATE tenure_sessions AS s SET expires = :new WHERE id = :id AND " + LIVE,
            self._params(now, new=now + session.ttl, id=session.id),
        )
        if renewed.rowcount != 1:
            raise SessionGone
        token = self._next_token(db, name)
        # A row left by an expired holder (the caller saw no live one): freeing it is a change.
        if db.execute("DELETE FROM tenure_locks WHERE name = ?", (name,)).rowcount:
            self._record(db, name, now)
        db.execute("DELETE FROM tenure_held WHERE name = ?", (name,))  # its delay has passed
        db.execute(
            "INSERT INTO tenure_locks (name, token, session) VALUES (?, ?, ?)",
            (name, token, session.id),
        )
        if ticket is not None:
            db.execute("DELETE FROM tenure_waiters WHERE seq = ?", (ticket.seq,))
        self._record(db, name, now)
        return Grant(token=token, renewed_session=True)

    @staticmethod
    def _next_token(db: sqlite3.Connection, name: str) -> int:
        """The per-name counter: its row is never deleted, so tokens never repeat."""
        (token,) = db.execute(
            "INSERT INTO tenure_tokens (name, last) VALUES (?, 1)"
            " ON CONFLICT (name) DO UPDATE SET last = last + 1 RETURNING last",
            (name,),
        ).fetchone()
        return int(token)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, Ticket)
        await anyio.wait_readable(ticket.fd)  # the caller's scope ends it after ``timeout``
        drain(ticket.fd)

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, Ticket)

        def tx(db: sqlite3.Connection, now: float) -> list[int]:
            db.execute("DELETE FROM tenure_waiters WHERE seq = ?", (ticket.seq,))
            # A release may have handed us the lock as we gave up: pass it on.
            handed = db.execute(
                "DELETE FROM tenure_locks WHERE name = ? AND waiter = ?", (ticket.name, ticket.seq)
            )
            if handed.rowcount == 0:
                return []
            self._record(db, ticket.name, now)
            fd = self._hand_over(db, ticket.name, now)
            return [] if fd is None else [fd]

        wake_up(await self._transaction(tx))
        self._fifos.give_back(ticket.wake, ticket.fd)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, SQLiteSession)

        def tx(db: sqlite3.Connection, now: float) -> list[int]:
            # Only a live session's release frees the name: one that expired ended without a
            # release, and its lock row now holds the name back.
            cur = db.execute(
                "DELETE FROM tenure_locks WHERE name = :name AND token = :token AND session = :id"
                " AND session IN (SELECT id FROM tenure_sessions s WHERE " + LIVE + ")",
                self._params(now, name=name, token=token, id=session.id),
            )
            if cur.rowcount == 0:
                return []  # not ours (any more): nothing to release, nobody to wake
            self._record(db, name, now)
            fd = self._hand_over(db, name, now)
            return [] if fd is None else [fd]

        wake_up(await self._transaction(tx))

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        now = REAL_CLOCK.now()
        with self._errors.on(sqlite3.Error):
            if name is None:
                query = "SELECT name FROM tenure_locks ORDER BY name"
                names = [row[0] for row in self._db.execute(query)]
            else:
                names = [name]
            found = [self._holder(self._db, each, now) for each in names if each.startswith(prefix)]
        return [info for info in found if info is not None]

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        with self._errors.on(sqlite3.Error):
            return self._held(self._db, REAL_CLOCK.now(), name)

    async def aclose(self) -> None:
        self._fifos.close()
        self._db.close()

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, SQLiteSession)

        def tx(db: sqlite3.Connection, now: float) -> bool:
            # The check (this session, alive, with this token) and the write are one statement.
            cur = db.execute(
                "UPDATE tenure_locks SET value = :value"
                " WHERE name = :name AND token = :token AND session = :id AND session IN"
                " (SELECT id FROM tenure_sessions s WHERE " + LIVE + ")",
                self._params(now, value=value, name=name, token=token, id=session.id),
            )
            if cur.rowcount != 1:
                return False
            self._record(db, name, now)
            return True

        return await self._transaction(tx)

    async def watch(self, name: str) -> Watch:
        wake, fd = self._fifos.make()  # listening before the row exists: writers never skip it

        def tx(db: sqlite3.Connection, now: float) -> tuple[int, int]:
            cur = db.execute(
                "INSERT INTO tenure_observers (name, wake) VALUES (?, ?)", (name, wake.name)
            )
            assert cur.lastrowid is not None
            return cur.lastrowid, events.last_event(db, name)

        try:
            row, seen = await self._transaction(tx)
        except BaseException:
            drop(wake, fd)
            raise
        return events.SQLiteWatch(
            name,
            seen,
            (wake, fd),
            changes=lambda after: self._changes(name, after),
            unwatch=lambda: self._unwatch(name, row),
        )

    def _changes(self, name: str, seen: int) -> tuple[list[Change], int]:
        now = REAL_CLOCK.now()
        with self._errors.on(sqlite3.Error):
            return events.read_changes(self._db, name, seen, now, self._holder)

    async def _unwatch(self, name: str, row: int) -> None:
        def tx(db: sqlite3.Connection, now: float) -> None:
            db.execute("DELETE FROM tenure_observers WHERE id = ?", (row,))
            query = "SELECT 1 FROM tenure_observers WHERE name = ?"
            if db.execute(query, (name,)).fetchone() is None:
                # The last watch of the name: its events are of no use to anyone any more.
                db.execute("DELETE FROM tenure_events WHERE name = ?", (name,))

        await self._transaction(tx)

    # -- revocations -----------------------------------------------------------------------

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        def tx(db: sqlite3.Connection, now: float) -> tuple[Revocation | None, list[int]]:
            self._sweep(db, now)
            row = db.execute(
                "SELECT l.token, l.session, s.expires + s.lock_delay"
                " FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
                " WHERE l.name = :name AND " + LIVE,
                self._params(now, name=name),
            ).fetchone()
            if row is None or (token is not None and row[0] != token):
                return None, []
            held, session, delayed_until = int(row[0]), int(row[1]), float(row[2])
            # Out of the session: its renewals no longer extend the lock, nor does a release
            # or close free it. Unless at once, the name is held back as if the session had
            # ended now without a release: until its expiry as it stands, plus its lock-delay.
            db.execute("DELETE FROM tenure_locks WHERE name = ?", (name,))
            until = now if record.now else delayed_until
            fds: list[int] = []
            if record.now:
                db.execute("DELETE FROM tenure_held WHERE name = ?", (name,))
            else:
                db.execute(
                    "INSERT INTO tenure_held (name, token, boot, until) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (name) DO UPDATE SET token = excluded.token,"
                    " until = excluded.until",
                    (name, held, self._boot, until),
                )
            by = record.by
            db.execute(
                "INSERT OR REPLACE INTO tenure_revocations (name, token, session, boot, until,"
                " host, pid, label, user, at, reason, at_once)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, held, session, self._boot, until, by.host, by.pid, by.label,
                 record.user, record.at, record.reason, int(record.now)),
            )  # fmt: skip
            self._record(db, name, now)
            if record.now and (fd := self._hand_over(db, name, now)) is not None:
                fds.append(fd)
            return replace(record, token=held, free_in=until - now), fds

        revoked, fds = await self._transaction(tx)
        wake_up(fds)
        return revoked

    async def revoked(self, session: Session) -> list[Revocation]:
        assert isinstance(session, SQLiteSession)
        now = REAL_CLOCK.now()
        with self._errors.on(sqlite3.Error):
            query = REVOCATION + " FROM tenure_revocations WHERE session = ?"
            return [_revocation(row, now) for row in self._db.execute(query, (session.id,))]

    # -- records ---------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        with self._errors.on(sqlite3.Error):
            return records.read(self._db, key)

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        return await self._transaction(lambda db, now: records.write(db, key, value, version))

    async def list_records(self, prefix: str) -> list[Record]:
        with self._errors.on(sqlite3.Error):
            return records.listed(self._db, prefix)

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        assert isinstance(session, SQLiteSession)

        def tx(db: sqlite3.Connection, now: float) -> bool:
            # The check (this session, alive, with this token) as proclaim makes it, in the
            # write transaction that writes the record: nobody can take the lock in between.
            held = db.execute(
                "SELECT 1 FROM tenure_locks WHERE name = :name AND token = :token"
                " AND session = :id AND session IN (SELECT id FROM tenure_sessions s WHERE "
                + LIVE
                + ")",
                self._params(now, name=name, token=token, id=session.id),
            ).fetchone()
            if held is None:
                return False
            records.put(db, key, value)
            return True

        return await self._transaction(tx)

    # -- hand-over -------------------------------------------------------------------------

    def _hand_over(self, db: sqlite3.Connection, name: str, now: float) -> int | None:
        """Inside a transaction that freed ``name``: grant it to the first live waiter.

        Returns the open write end of that waiter's FIFO, to be written once the transaction
        has committed. Waiters whose FIFO nobody reads any more (their process is gone) are
        dropped on the way, so a dead waiter never holds up the queue.
        """
        for seq, session, wake in self._queue.live(db, name, now):
            fd = self._queue.listener(db, seq, wake)
            if fd is None:
                continue
            db.execute("DELETE FROM tenure_waiters WHERE seq = ?", (seq,))
            db.execute("DELETE FROM tenure_held WHERE name = ?", (name,))  # only a stale one
            token = self._next_token(db, name)
            db.execute(
                "INSERT OR REPLACE INTO tenure_locks (name, token, session, waiter)"
                " VALUES (?, ?, ?, ?)",
                (name, token, session, seq),
            )
            self._record(db, name, now)
            return fd
        return None
