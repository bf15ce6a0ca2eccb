"""The embedded store: one SQLite file shared by the processes of one machine.

- Every grant is one ``BEGIN IMMEDIATE`` transaction in WAL mode with ``synchronous=FULL``: the
  token is durable before it is returned (rule 7). Tokens come from a per-name counter in its own
  table, never deleted, so they keep growing across releases, restarts and deleted lock rows.
- Expiry is judged by this host's boot clock (CLOCK_BOOTTIME) together with the kernel's boot id:
  immune to wall-clock jumps, and a lease written in an earlier boot is expired.
- Waiters queue in arrival order. A release hands the lock straight to the next waiter that is
  still listening, in the release's own transaction (its token is counted there), then wakes that
  waiter only: SQLite has no notifications, so each waiter listens on its own FIFO. The woken
  waiter just reads its grant; nobody can barge in between. A waiter also wakes when the
  holder's lease could expire (a crashed holder releases nothing), and at least every few seconds.
- Lock-delay (rule 8) by the same boot clock: a lock whose session expired stays ungrantable
  until ``expires + lock_delay`` (the session's column). The sweep that forgets expired sessions
  moves such names to ``tenure_held``; until then the expired lock row itself says so. A release
  or close by a live session frees at once; one by an expired session frees nothing early.
- Leader election: the holder may ``proclaim`` a value (a column of its lock row). Watches are
  FIFOs too, one per watch, listed in ``tenure_observers``. Every transaction that changes a
  watched name appends the new state to ``tenure_events`` (so nothing is missed between two
  reads of a watch, even from other processes) and, after commit, writes one byte to each
  watch's FIFO. Unwatched names cost one indexed read and write no events.
- "database is locked" never reaches the user: busy transactions are retried here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar
from urllib.parse import unquote, urlsplit

import anyio
import platformdirs

from .._clock import REAL_CLOCK
from .._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ._connect import NO_OPTIONS, ConnectOptions
from ._owner_only import check_owner_only
from ._spi import (
    Busy,
    Capabilities,
    Change,
    Elections,
    Grant,
    HeldBack,
    LockInfo,
    Owner,
    Record,
    Records,
    Session,
    Store,
    Watch,
)

T = TypeVar("T")
BUSY_GIVE_UP = 60.0
"""Seconds a transaction keeps retrying a busy database before reporting the store unavailable."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenure_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    boot TEXT NOT NULL, expires REAL NOT NULL, ttl REAL NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, label TEXT NOT NULL,
    lock_delay REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tenure_tokens (name TEXT PRIMARY KEY, last INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_locks (
    name TEXT PRIMARY KEY, token INTEGER NOT NULL, session INTEGER NOT NULL,
    waiter INTEGER, value TEXT);
CREATE TABLE IF NOT EXISTS tenure_waiters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL, session INTEGER NOT NULL, wake TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tenure_waiters_name ON tenure_waiters (name, seq);
CREATE TABLE IF NOT EXISTS tenure_observers (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, wake TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tenure_observers_name ON tenure_observers (name);
CREATE TABLE IF NOT EXISTS tenure_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, prev INTEGER NOT NULL, name TEXT NOT NULL,
    token INTEGER, value TEXT, host TEXT, pid INTEGER, label TEXT, expires REAL, waiters INTEGER);
CREATE INDEX IF NOT EXISTS tenure_events_name ON tenure_events (name, seq);
CREATE TABLE IF NOT EXISTS tenure_records (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_held (
    name TEXT PRIMARY KEY, token INTEGER NOT NULL, boot TEXT NOT NULL, until REAL NOT NULL);
INSERT OR IGNORE INTO tenure_meta (key, value) VALUES ('schema', '3');
"""
# tenure_events: ``token`` NULL means freed; ``prev`` is the seq of the name's previous event
# (0: none), so a watch can tell that pruning removed events it had not read yet.

EVENTS_KEPT = 100
"""Events kept per name: a watch further behind than this reports the current state instead."""

LIVE = "s.boot = :boot AND s.expires > :now"
# Held back by lock-delay: a name swept into tenure_held, or one whose lock row belongs to a
# session that expired (in this boot: no process outlives a reboot) less than its delay ago.
HELD = (
    "SELECT h.name, h.token, h.until FROM tenure_held h"
    " WHERE h.boot = :boot AND h.until > :now {where}"
    " UNION ALL SELECT l.name, l.token, s.expires + s.lock_delay"
    " FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
    " WHERE s.boot = :boot AND s.expires <= :now AND s.expires + s.lock_delay > :now {where}"
)


def boot_id() -> str:
    """This boot's identity: leases written in another boot are expired."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _with_busy_retry(fn: Callable[[], object]) -> None:
    """For the one-time set-up in connect(), which is sync."""
    give_up = time.monotonic() + BUSY_GIVE_UP
    while True:
        try:
            fn()
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() > give_up:
                raise
            time.sleep(0.005)


def _has_column(db: sqlite3.Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in db.execute(f"PRAGMA table_info({table})"))


def _is_current(db: sqlite3.Connection) -> bool:
    return _has_column(db, "tenure_locks", "value") and _has_column(
        db, "tenure_sessions", "lock_delay"
    )


def _upgrade(db: sqlite3.Connection) -> None:
    """Schema 1 -> 2: the lock's proclaimed value; 2 -> 3: the session's lock-delay (the
    SCHEMA script has made ``tenure_held``). Checked again under the write lock, as another
    process may be upgrading the same file right now."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if not _has_column(db, "tenure_locks", "value"):
            db.execute("ALTER TABLE tenure_locks ADD COLUMN value TEXT")
        if not _has_column(db, "tenure_sessions", "lock_delay"):
            db.execute("ALTER TABLE tenure_sessions ADD COLUMN lock_delay REAL NOT NULL DEFAULT 0")
        db.execute("UPDATE tenure_meta SET value = '3' WHERE key = 'schema'")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def default_path() -> Path:
    return platformdirs.user_state_path("tenure") / "locks.db"


@dataclass
class SQLiteSession(Session):
    id: int
    ttl: float


@dataclass
class Ticket:
    name: str
    seq: int
    wake: Path
    fd: int = field(repr=False)


class SessionGone(Exception):
    pass


class SQLiteStore(Store, Elections, Records):
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
        self.wake_dir = path.with_name(path.name + "-wake")
        self._boot = boot_id()
        self._spare: list[tuple[Path, int]] = []  # FIFOs kept open for reuse by later waits
        # Within one transaction: per name changed, whether it is watched and the write ends of
        # its watches' FIFOs, written once the transaction has committed.
        self._observed: dict[str, tuple[bool, list[int]]] | None = None
        self._db = self._open()

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> SQLiteStore:
        """``sqlite://`` (the default file), ``sqlite:///relative.db``, ``sqlite:////abs.db``."""
        if options:
            raise InvalidArgument("the sqlite store is a local file: it takes no TLS or password")
        parts = urlsplit(url)
        if parts.netloc or parts.query or parts.fragment:
            raise InvalidArgument(
                f"bad SQLite store URL {url!r}: use sqlite:///relative/path or sqlite:////abs/path"
            )
        raw = unquote(parts.path)
        if raw in ("", "/"):
            path = default_path()
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            path = Path(raw[1:])
        return cls(path.absolute())

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    # -- plumbing -------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            if self.path.is_dir():
                raise StoreUnavailable(f"cannot open store {self.path}: it is a directory")
            if not self.path.parent.is_dir():
                raise StoreUnavailable(f"cannot open store {self.path}: no such directory")
            check_owner_only(self.path)
            if not self.path.exists():
                # Owner-only from the start: whoever can write this file can forge a lock.
                os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            # timeout=0: busy waits happen in _transaction, without blocking the event loop.
            db = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
            _with_busy_retry(lambda: db.execute("PRAGMA journal_mode=WAL"))
            db.execute("PRAGMA synchronous=FULL")
            _with_busy_retry(lambda: db.executescript(SCHEMA))
            if not _is_current(db):
                _with_busy_retry(lambda: _upgrade(db))
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except StoreUnavailable:
            raise
        except OSError as exc:  # (StoreUnavailable is one too: a ConnectionError)
            raise StoreUnavailable(f"cannot open store {self.path}: {exc.strerror}") from None
        return db

    def _translate(self, exc: sqlite3.Error) -> StoreUnavailable:
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            return StoreUnavailable(f"store {self.path} is read-only: {text}")
        if "not a database" in text or "malformed" in text:
            return StoreUnavailable(f"store {self.path} is not a tenure database (corrupt?)")
        if "unable to open" in text:
            return StoreUnavailable(f"cannot open store {self.path}: {text}")
        return StoreUnavailable(f"store {self.path}: {text}")

    async def _transaction(self, fn: Callable[[sqlite3.Connection, float], T]) -> T:
        """Run ``fn(db, now)`` in one write transaction; ``now`` is read once the lock is ours.

        The transaction runs on the event loop without yielding (it is short: its cost is one
        fsync), so no other task interleaves on this connection. A busy database is retried
        with async back-off: waiting never blocks the loop and "database is locked" never
        reaches the user.
        """
        db = self._db
        give_up = time.monotonic() + BUSY_GIVE_UP
        pause = 0.0001
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > give_up:
                    raise self._translate(exc) from None
                await anyio.sleep(pause)
                pause = min(pause * 2, 0.005)
                continue
            except sqlite3.Error as exc:
                raise self._translate(exc) from None
            observed: dict[str, tuple[bool, list[int]]] = {}
            self._observed = observed
            try:
                result = fn(db, REAL_CLOCK.now())
                db.execute("COMMIT")
            except BaseException as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                for _watched, fds in observed.values():
                    for fd in fds:
                        os.close(fd)
                if isinstance(exc, sqlite3.Error):
                    raise self._translate(exc) from None
                raise
            finally:
                self._observed = None
            self._wake([fd for _watched, fds in observed.values() for fd in fds])
            return result

    def _params(self, now: float, **more: object) -> dict[str, object]:
        return {"boot": self._boot, "now": now, **more}

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
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

        self._wake(await self._transaction(tx))

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, SQLiteSession)
        assert ticket is None or isinstance(ticket, Ticket)
        if ticket is not None:
            handed = self._handed_to(session, ticket)
            if handed is not None:
                self._give_back(ticket.wake, ticket.fd)
                return handed
        mine = ticket
        # A spare FIFO lets the first transaction join the queue at once if the lock is busy.
        fifo = self._spare.pop() if enqueue and mine is None and self._spare else None

        def tx(db: sqlite3.Connection, now: float) -> Grant | Busy:
            nonlocal mine
            params = self._params(now, id=session.id, name=name)
            holder = self._holder(db, name, now)
            held = [] if holder is not None else self._held(db, now, name)
            if holder is None and not held:
                head = self._live_head(db, name, now, None if mine is None else mine.seq)
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
                    mine = self._enqueue(db, session, name, mine.wake, mine.fd)
            elif enqueue and fifo is not None:
                mine = self._enqueue(db, session, name, *fifo)
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
                    self._give_back(*fifo)
                if isinstance(exc, SessionGone):
                    raise LeaseLost("the session expired") from None
                raise
            if isinstance(outcome, Busy) and enqueue and mine is None and fifo is None:
                # Busy, and we will wait: make our FIFO before our queue row, so a queued row
                # always has a listener; then try again (the uncontended path makes none).
                fifo = self._make_fifo()
                continue
            break
        if fifo is not None and not (isinstance(outcome, Busy) and outcome.ticket is not None):
            self._give_back(*fifo)
        if isinstance(outcome, Grant) and ticket is not None:
            self._give_back(ticket.wake, ticket.fd)
        return outcome

    def _handed_to(self, session: SQLiteSession, ticket: Ticket) -> Grant | None:
        """Did a release hand us the lock? One read, no write lock: the release did the work."""
        try:
            row = self._db.execute(
                "SELECT l.token FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
                " WHERE l.name = :name AND l.waiter = :seq AND s.id = :id AND " + LIVE,
                self._params(REAL_CLOCK.now(), name=ticket.name, seq=ticket.seq, id=session.id),
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
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
        return LockInfo(name, token, Owner(host, pid, label), expires - now, waiters, value)

    def _held(self, db: sqlite3.Connection, now: float, name: str | None) -> list[HeldBack]:
        """The names held back by lock-delay now (only ``name``, if given), by name."""
        query = HELD.format(where="" if name is None else "AND name = :name")
        latest: dict[str, HeldBack] = {}
        for each, token, until in db.execute(query, self._params(now, name=name)):
            if each not in latest or until - now > latest[each].free_in:
                latest[each] = HeldBack(each, token, until - now)
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

    def _enqueue(
        self, db: sqlite3.Connection, session: SQLiteSession, name: str, wake: Path, fd: int
    ) -> Ticket:
        cur = db.execute(
            "INSERT INTO tenure_waiters (name, session, wake) VALUES (?, ?, ?)",
            (name, session.id, wake.name),
        )
        assert cur.lastrowid is not None
        return Ticket(name, cur.lastrowid, wake, fd)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, Ticket)
        with anyio.move_on_after(timeout):
            await anyio.wait_readable(ticket.fd)
        with contextlib.suppress(BlockingIOError):
            os.read(ticket.fd, 4096)  # drain the wake-up bytes

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

        self._wake(await self._transaction(tx))
        self._give_back(ticket.wake, ticket.fd)

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

        self._wake(await self._transaction(tx))

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        now = REAL_CLOCK.now()
        try:
            if name is None:
                query = "SELECT name FROM tenure_locks ORDER BY name"
                names = [row[0] for row in self._db.execute(query)]
            else:
                names = [name]
            found = [self._holder(self._db, each, now) for each in names]
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        return [info for info in found if info is not None]

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        try:
            return self._held(self._db, REAL_CLOCK.now(), name)
        except sqlite3.Error as exc:
            raise self._translate(exc) from None

    async def aclose(self) -> None:
        while self._spare:
            self._drop_fifo(*self._spare.pop())
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

    # -- records ---------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        try:
            row = self._db.execute(
                "SELECT value, version FROM tenure_records WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        return None if row is None else Record(key, row[0], row[1])

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        def tx(db: sqlite3.Connection, now: float) -> Record | None:
            if version == 0:
                cur = db.execute(
                    "INSERT INTO tenure_records (key, value, version) VALUES (?, ?, 1)"
                    " ON CONFLICT (key) DO NOTHING",
                    (key, value),
                )
            else:
                cur = db.execute(
                    "UPDATE tenure_records SET value = ?, version = version + 1"
                    " WHERE key = ? AND version = ?",
                    (value, key, version),
                )
            return Record(key, value, version + 1) if cur.rowcount == 1 else None

        return await self._transaction(tx)

    async def list_records(self, prefix: str) -> list[Record]:
        try:
            rows = self._db.execute(
                "SELECT key, value, version FROM tenure_records"
                " WHERE substr(key, 1, length(?)) = ? ORDER BY key",
                (prefix, prefix),
            ).fetchall()
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        return [Record(*row) for row in rows]

    async def watch(self, name: str) -> Watch:
        wake, fd = self._make_fifo()  # listening before the row exists: writers never skip it

        def tx(db: sqlite3.Connection, now: float) -> tuple[int, int]:
            cur = db.execute(
                "INSERT INTO tenure_observers (name, wake) VALUES (?, ?)", (name, wake.name)
            )
            assert cur.lastrowid is not None
            return cur.lastrowid, self._last_event(db, name)

        try:
            row, seen = await self._transaction(tx)
        except BaseException:
            self._drop_fifo(wake, fd)
            raise
        return SQLiteWatch(self, name, row, seen, wake, fd)

    @staticmethod
    def _last_event(db: sqlite3.Connection, name: str) -> int:
        query = "SELECT coalesce(max(seq), 0) FROM tenure_events WHERE name = ?"
        return int(db.execute(query, (name,)).fetchone()[0])

    def _record(self, db: sqlite3.Connection, name: str, now: float) -> None:
        """Inside a transaction that changed ``name``: append its new state for its watches (if
        it has any), keep only the newest events, and have the watches woken after commit."""
        assert self._observed is not None, "only inside _transaction"
        if name not in self._observed:
            self._observed[name] = self._observers(db, name)
        watched, _fds = self._observed[name]
        if not watched:
            return  # a watch only reports changes after it subscribed: no event needed
        info = self._holder(db, name, now)
        db.execute(
            "INSERT INTO tenure_events"
            " (prev, name, token, value, host, pid, label, expires, waiters)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self._last_event(db, name), name)
            + (
                (None,) * 7
                if info is None
                else (
                    info.token,
                    info.value,
                    info.owner.host,
                    info.owner.pid,
                    info.owner.label,
                    now + info.expires_in,
                    info.waiters,
                )
            ),
        )
        db.execute(
            "DELETE FROM tenure_events WHERE name = :name AND seq <= (SELECT seq FROM"
            " tenure_events WHERE name = :name ORDER BY seq DESC LIMIT 1 OFFSET :keep)",
            {"name": name, "keep": EVENTS_KEPT},
        )

    def _observers(self, db: sqlite3.Connection, name: str) -> tuple[bool, list[int]]:
        """Whether ``name`` has live watches, and the write ends of their FIFOs. A watch whose
        FIFO nobody reads (its process is gone) is dropped."""
        query = "SELECT id, wake FROM tenure_observers WHERE name = ?"
        watched, fds = False, []
        for row, wake in db.execute(query, (name,)).fetchall():
            try:
                fd = self._open_fifo(wake)
            except OSError:
                # Cannot wake it now (e.g. out of descriptors): it still gets its events, at
                # its next read. A watch never fails the lock operation itself.
                watched = True
                continue
            if fd is None:
                db.execute("DELETE FROM tenure_observers WHERE id = ?", (row,))
                continue
            watched = True
            fds.append(fd)
        return watched, fds

    def _changes(self, name: str, seen: int) -> tuple[list[Change], int]:
        """The changes of ``name`` after event ``seen``, and the last event now seen."""
        db = self._db
        now = REAL_CLOCK.now()
        try:
            rows = db.execute(
                "SELECT seq, prev, token, value, host, pid, label, expires, waiters"
                " FROM tenure_events WHERE name = ? AND seq > ? ORDER BY seq",
                (name, seen),
            ).fetchall()
            if rows and rows[0][1] != seen:
                # Events this watch had not read were pruned: rather than skip some silently,
                # report where the lock stands now as one change.
                db.execute("BEGIN")
                try:
                    holder = self._holder(db, name, now)
                    last = self._last_event(db, name)
                finally:
                    db.execute("COMMIT")
                return [Change(name, holder)], last
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        changes = []
        for _seq, _prev, token, value, host, pid, label, expires, waiters in rows:
            holder = None
            if token is not None:
                owner = Owner(host, pid, label)
                holder = LockInfo(name, token, owner, max(0.0, expires - now), waiters, value)
            changes.append(Change(name, holder))
        return changes, rows[-1][0] if rows else seen

    async def _unwatch(self, name: str, row: int) -> None:
        def tx(db: sqlite3.Connection, now: float) -> None:
            db.execute("DELETE FROM tenure_observers WHERE id = ?", (row,))
            query = "SELECT 1 FROM tenure_observers WHERE name = ?"
            if db.execute(query, (name,)).fetchone() is None:
                # The last watch of the name: its events are of no use to anyone any more.
                db.execute("DELETE FROM tenure_events WHERE name = ?", (name,))

        await self._transaction(tx)

    # -- waking --------------------------------------------------------------------------

    def _make_fifo(self) -> tuple[Path, int]:
        try:
            self.wake_dir.mkdir(mode=0o700, exist_ok=True)
            path = self.wake_dir / uuid.uuid4().hex
            os.mkfifo(path, 0o600)
            # Read-write, so the FIFO never reports end-of-file while we listen (Linux).
            return path, os.open(path, os.O_RDWR | os.O_NONBLOCK)
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot create wake-up FIFO in {self.wake_dir}: {exc}"
            ) from None

    def _give_back(self, path: Path, fd: int) -> None:
        """Keep a FIFO for the next wait; stale wake-ups in it would only cause a spurious retry."""
        with contextlib.suppress(OSError):
            os.read(fd, 4096)
        self._spare.append((path, fd))

    @staticmethod
    def _drop_fifo(path: Path, fd: int) -> None:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()

    def _live_waiters(
        self, db: sqlite3.Connection, name: str, now: float
    ) -> list[tuple[int, int, str]]:
        return db.execute(
            "SELECT w.seq, w.session, w.wake FROM tenure_waiters w"
            " JOIN tenure_sessions s ON s.id = w.session"
            " WHERE w.name = :name AND " + LIVE + " ORDER BY w.seq",
            self._params(now, name=name),
        ).fetchall()

    def _listener(self, db: sqlite3.Connection, seq: int, wake: str) -> int | None:
        """The write end of a waiter's FIFO; None (and its queue row dropped) if nobody reads
        it any more: its process is gone, though its session has not expired yet."""
        try:
            fd = self._open_fifo(wake)
        except OSError as exc:
            raise StoreUnavailable(f"cannot wake a waiter in {self.wake_dir}: {exc}") from None
        if fd is None:
            db.execute("DELETE FROM tenure_waiters WHERE seq = ?", (seq,))
        return fd

    def _open_fifo(self, wake: str) -> int | None:
        """The write end of a FIFO in the wake directory; None (and the FIFO removed) if nobody
        reads it any more. Other errors are raised."""
        try:
            return os.open(self.wake_dir / wake, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno not in (errno.ENXIO, errno.ENOENT):
                raise
        with contextlib.suppress(OSError):
            (self.wake_dir / wake).unlink()
        return None

    def _live_head(
        self, db: sqlite3.Connection, name: str, now: float, mine: int | None
    ) -> int | None:
        """The first waiter for a free ``name`` that is still there to take it (dead ones are
        dropped on the way, so a waiter killed while queued never holds up the queue)."""
        for seq, _session, wake in self._live_waiters(db, name, now):
            if seq == mine:
                return seq
            fd = self._listener(db, seq, wake)
            if fd is not None:
                os.close(fd)
                return int(seq)
        return None

    def _hand_over(self, db: sqlite3.Connection, name: str, now: float) -> int | None:
        """Inside a transaction that freed ``name``: grant it to the first live waiter.

        Returns the open write end of that waiter's FIFO, to be written once the transaction
        has committed. Waiters whose FIFO nobody reads any more (their process is gone) are
        dropped on the way, so a dead waiter never holds up the queue.
        """
        for seq, session, wake in self._live_waiters(db, name, now):
            fd = self._listener(db, seq, wake)
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

    @staticmethod
    def _wake(fds: list[int]) -> None:
        """After commit: one byte to each handed-to waiter's or watch's FIFO."""
        for fd in fds:
            try:
                os.write(fd, b"!")
            except BlockingIOError:
                pass  # its pipe is full of earlier wake-ups: it wakes anyway
            except OSError:
                pass  # its reader went away since the check (EPIPE): nobody left to wake
            finally:
                os.close(fd)


class SQLiteWatch(Watch):
    """Reads the name's events after the last one it saw; waits on its own FIFO for more."""

    def __init__(
        self, store: SQLiteStore, name: str, row: int, seen: int, wake: Path, fd: int
    ) -> None:
        self._store = store
        self._name = name
        self._row = row
        self._seen = seen
        self._wake = wake
        self._fd = fd
        self._closed = False

    async def next(self, timeout: float) -> list[Change]:
        if self._closed:
            raise RuntimeError("this watch is closed")
        deadline = anyio.current_time() + timeout
        while True:
            # Drain before reading: a byte written after this read (after its commit) wakes us.
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 4096)
            changes, self._seen = self._store._changes(self._name, self._seen)
            left = deadline - anyio.current_time()
            if changes or left <= 0:
                return changes
            with anyio.move_on_after(left):
                await anyio.wait_readable(self._fd)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._store._unwatch(self._name, self._row)
        except StoreUnavailable:
            pass  # its FIFO goes below: the next writer of the name drops the row as dead
        finally:
            self._store._drop_fifo(self._wake, self._fd)
