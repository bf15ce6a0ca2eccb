"""The PostgreSQL store: ``postgresql://user@host:5432/db?schema=tenure``.

- Tables live in their own schema (``schema=`` in the URL, default ``tenure``), created on first
  use and versioned in its ``meta`` table. The rest of the URL is psycopg's connection string.
- Expiry is judged by the server's clock: a session row carries ``expires timestamptz``, set and
  compared with ``clock_timestamp()``, never a client's wall clock. ``keep_alive`` is one UPDATE
  of that row, which renews every lock the session holds (a lock row names its session).
- Every grant, release and queue change is one transaction that first locks the name's row in
  ``tokens``, so they are serialised per name. That row is also the fencing counter: it is never
  deleted, and its increment commits with the grant (rule 7), so tokens keep growing across
  releases and server restarts. A grant that finds the holder's session expired locks that
  session row first: a renewal racing with it either lands before (the holder lives) or fails.
- Waiters queue in ``waiters`` in arrival order. A release hands the lock straight to the first
  live waiter in its own transaction (its token is counted there) and ``NOTIFY``\\ s that
  waiter's own channel, delivered on commit: one release wakes one waiter. Each store listens
  on one dedicated connection; a waiter is live while its session is and while that listening
  connection is (``pg_stat_activity``), so a dead process never holds up the queue. When no
  notification comes, the waiter polls (``Busy.retry_in``: when the holder's lease would expire).
- psycopg's errors are translated here: ``StoreUnavailable`` (one line, password redacted).
  A broken connection is dropped and reopened by the next call; nothing is ever renewed on the
  client's behalf, so the session keeper's deadline governs.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio

from .._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ._spi import Busy, Capabilities, Grant, LockInfo, Owner, Session, Store

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: from_url says so
    psycopg = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection, Notify
    from psycopg.sql import Composed

T = TypeVar("T")
SCHEMA_VERSION = 1
DEFAULT_SCHEMA = "tenure"
CONNECT_TIMEOUT = 5
"""Seconds to wait for a connection, unless the URL sets ``connect_timeout``."""
CALL_TIMEOUT = 10.0
"""Seconds one store call may take before the store is reported unavailable."""
RETRIES = 5
"""Times a transaction is retried after a deadlock or serialization failure."""
SETUP_LOCK = 0x7465_6E75_7265  # 'tenure': one advisory lock serialises schema creation
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
OWN_PARAMS = ("schema",)

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.sessions (
    id bigserial PRIMARY KEY, expires timestamptz NOT NULL, ttl float8 NOT NULL,
    host text NOT NULL, pid integer NOT NULL, label text NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_expires ON {s}.sessions (expires);
CREATE TABLE IF NOT EXISTS {s}.tokens (name text PRIMARY KEY, last bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.locks (
    name text PRIMARY KEY, token bigint NOT NULL, session bigint NOT NULL, waiter bigint);
CREATE INDEX IF NOT EXISTS locks_session ON {s}.locks (session);
CREATE TABLE IF NOT EXISTS {s}.waiters (
    seq bigserial PRIMARY KEY, name text NOT NULL, session bigint NOT NULL,
    channel text NOT NULL, listener integer NOT NULL);
CREATE INDEX IF NOT EXISTS waiters_name ON {s}.waiters (name, seq);
CREATE INDEX IF NOT EXISTS waiters_session ON {s}.waiters (session);
INSERT INTO {s}.meta (key, value) VALUES ('schema', '1') ON CONFLICT (key) DO NOTHING;
"""

LIVE_WAITER = (
    "s.expires > clock_timestamp()"
    " AND w.listener IN (SELECT pid FROM pg_stat_activity)"  # its process still listens
)

QUERIES = {
    "version": "SELECT value FROM {s}.meta WHERE key = 'schema'",
    "sweep": (
        "WITH dead AS (DELETE FROM {s}.sessions WHERE expires <= clock_timestamp() RETURNING id),"
        " w AS (DELETE FROM {s}.waiters WHERE session IN (SELECT id FROM dead)),"
        " l AS (DELETE FROM {s}.locks WHERE session IN (SELECT id FROM dead))"
        " SELECT count(*) FROM dead"
    ),
    "open": (
        "INSERT INTO {s}.sessions (expires, ttl, host, pid, label)"
        " VALUES (clock_timestamp() + %(ttl)s * interval '1 second',"
        " %(ttl)s, %(host)s, %(pid)s, %(label)s) RETURNING id"
    ),
    "renew": (
        "UPDATE {s}.sessions SET expires = clock_timestamp() + ttl * interval '1 second'"
        " WHERE id = %(id)s AND expires > clock_timestamp()"
    ),
    "alive": "SELECT 1 FROM {s}.sessions WHERE id = %(id)s AND expires > clock_timestamp()",
    "lock_name": "SELECT last FROM {s}.tokens WHERE name = %(name)s FOR UPDATE",
    "new_name": (
        "INSERT INTO {s}.tokens (name, last) VALUES (%(name)s, 0) ON CONFLICT (name) DO NOTHING"
    ),
    "lock_names": (
        "SELECT name FROM {s}.tokens WHERE name = ANY(%(names)s) ORDER BY name FOR UPDATE"
    ),
    "holder": (
        "SELECT l.token, l.session, l.waiter, s.host, s.pid, s.label,"
        " extract(epoch FROM s.expires - clock_timestamp())::float8"
        " FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session"
        " WHERE l.name = %(name)s"
    ),
    # Before a holder is judged expired, its session row is locked (FOR SHARE): a renewal of
    # it either committed before (and counts) or waits for us, and then finds it expired.
    "holder_locked": (
        "SELECT l.token, l.session, l.waiter, s.host, s.pid, s.label,"
        " extract(epoch FROM s.expires - clock_timestamp())::float8"
        " FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session"
        " WHERE l.name = %(name)s FOR SHARE OF s"
    ),
    "queued": "SELECT count(*) FROM {s}.waiters WHERE name = %(name)s",
    "head": (
        "SELECT w.seq FROM {s}.waiters w JOIN {s}.sessions s ON s.id = w.session"
        " WHERE w.name = %(name)s AND " + LIVE_WAITER + " ORDER BY w.seq LIMIT 1"
    ),
    # One statement: renew the session (proving it alive), count the token, take the lock
    # (replacing a row left by an expired holder), leave the queue.
    "grant": (
        "WITH s AS (UPDATE {s}.sessions SET expires = clock_timestamp() + ttl * interval '1 second'"
        " WHERE id = %(id)s AND expires > clock_timestamp() RETURNING id),"
        " t AS (UPDATE {s}.tokens SET last = last + 1"
        " WHERE name = %(name)s AND EXISTS (SELECT 1 FROM s) RETURNING last),"
        " l AS (INSERT INTO {s}.locks (name, token, session, waiter)"
        " SELECT %(name)s, last, %(id)s, NULL FROM t ON CONFLICT (name) DO UPDATE"
        " SET token = excluded.token, session = excluded.session, waiter = NULL"
        " RETURNING token),"
        " q AS (DELETE FROM {s}.waiters WHERE seq = %(seq)s AND EXISTS (SELECT 1 FROM l))"
        " SELECT token FROM l"
    ),
    "enqueue": (
        "INSERT INTO {s}.waiters (name, session, channel, listener)"
        " VALUES (%(name)s, %(id)s, %(channel)s, %(listener)s) RETURNING seq"
    ),
    "requeue": "UPDATE {s}.waiters SET listener = %(listener)s WHERE seq = %(seq)s RETURNING seq",
    "dequeue": "DELETE FROM {s}.waiters WHERE seq = %(seq)s RETURNING seq",
    "drop_dead_waiters": (
        "DELETE FROM {s}.waiters w WHERE w.name = %(name)s AND NOT EXISTS"
        " (SELECT 1 FROM {s}.sessions s WHERE s.id = w.session AND " + LIVE_WAITER + ")"
    ),
    "next_waiter": (
        "SELECT w.seq, w.session, w.channel FROM {s}.waiters w"
        " JOIN {s}.sessions s ON s.id = w.session"
        " WHERE w.name = %(name)s AND " + LIVE_WAITER + " ORDER BY w.seq LIMIT 1"
    ),
    "hand_over": (
        "WITH t AS (UPDATE {s}.tokens SET last = last + 1 WHERE name = %(name)s RETURNING last)"
        " INSERT INTO {s}.locks (name, token, session, waiter)"
        " SELECT %(name)s, last, %(session)s, %(seq)s FROM t ON CONFLICT (name) DO UPDATE"
        " SET token = excluded.token, session = excluded.session, waiter = excluded.waiter"
    ),
    "notify": "SELECT pg_notify(%(channel)s, '')",
    "release": (
        "DELETE FROM {s}.locks WHERE name = %(name)s AND token = %(token)s"
        " AND session = %(id)s RETURNING name"
    ),
    "handed_back": (
        "DELETE FROM {s}.locks WHERE name = %(name)s AND waiter = %(seq)s RETURNING name"
    ),
    "held_names": "SELECT name FROM {s}.locks WHERE session = %(id)s ORDER BY name",
    "leave_all": "DELETE FROM {s}.waiters WHERE session = %(id)s",
    "release_all": (
        "DELETE FROM {s}.locks WHERE session = %(id)s AND name = ANY(%(names)s) RETURNING name"
    ),
    "close": "DELETE FROM {s}.sessions WHERE id = %(id)s",
    "locks": (
        "SELECT l.name, l.token, s.host, s.pid, s.label,"
        " extract(epoch FROM s.expires - clock_timestamp())::float8,"
        " (SELECT count(*) FROM {s}.waiters w WHERE w.name = l.name)"
        " FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session"
        " WHERE s.expires > clock_timestamp() AND (%(name)s::text IS NULL OR l.name = %(name)s)"
        " ORDER BY l.name"
    ),
}


@dataclass
class PostgresSession(Session):
    id: int
    ttl: float


@dataclass(eq=False)
class Ticket:
    """A place in the queue, and the channel its wake-up comes on."""

    name: str
    seq: int
    channel: str
    listener: int
    """Backend pid of the listening connection named in the queue row."""
    woken: bool = False
    event: anyio.Event = field(default_factory=anyio.Event, repr=False)


class SessionGone(Exception):
    pass


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in the user info and in the query)."""
    parts = urlsplit(url)
    netloc = re.sub(r"^([^@/]*?):[^@/]*@", r"\1:***@", parts.netloc)
    query = "&".join(
        f"{key}=***" if key == "password" else f"{key}={value}"
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class PostgresStore(Store):
    scheme: ClassVar[str] = "postgresql"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="many",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes="expiry by the server's clock; waiters woken by LISTEN/NOTIFY",
    )

    def __init__(self, dsn: str, schema: str = DEFAULT_SCHEMA, shown: str | None = None) -> None:
        self._dsn = dsn
        self._shown = redact(shown if shown is not None else dsn)
        self._password = _password(dsn)
        self._add_connect_timeout = "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn)
        self.schema = schema
        ident = sql.Identifier(schema)
        self._q: dict[str, Composed] = {k: sql.SQL(v).format(s=ident) for k, v in QUERIES.items()}
        self._setup = sql.SQL(SCHEMA).format(s=ident)
        self._lock = anyio.Lock()  # one command at a time on the command connection
        self._conn: AsyncConnection[Any] | None = None
        self._listen_lock = anyio.Lock()  # LISTEN and reading notifications take turns
        self._listen_conn: AsyncConnection[Any] | None = None
        self._listen_pid = 0
        self._listening: set[str] = set()  # channels LISTENed on the current connection
        self._tickets: dict[str, Ticket] = {}  # channel -> the ticket waiting on it
        self._waiting: set[Ticket] = set()  # tickets inside wait()
        self._reader: Ticket | None = None  # the waiter reading notifications for all
        self._reading: anyio.CancelScope | None = None
        self._listen_pending = 0
        self._owed: list[Callable[[AsyncConnection[Any]], Awaitable[None]]] = []
        """Releases and leaves whose outcome is in doubt (the store went away): done again,
        idempotently, in the next call's transaction, so no lock stays held by nobody."""
        self.notifications = 0
        """Notifications received (a release wakes one waiter: one notification)."""

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """``postgresql://[user[:password]@]host[:port][/db][?schema=NAME&libpq params]``."""
        if psycopg is None:
            raise InvalidArgument(
                "the PostgreSQL store needs psycopg: pip install 'tenure[postgres]'"
            )
        shown = redact(url)
        try:
            parts = urlsplit(url)
            pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
        except ValueError as exc:
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: {exc}") from None
        if parts.fragment:
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: no #fragment allowed")
        schemas = [value for key, value in pairs if key == "schema"]
        if len(schemas) > 1:
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: schema given twice")
        schema = schemas[0] if schemas else DEFAULT_SCHEMA
        if not IDENTIFIER.fullmatch(schema):
            raise InvalidArgument(
                f"bad schema name {schema!r} in PostgreSQL store URL: use letters, digits"
                " and _ (not first), at most 63"
            )
        rest = urlencode([(key, value) for key, value in pairs if key not in OWN_PARAMS])
        dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
        try:
            psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            reason = _one_line(exc, _password(url))
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: {reason}") from None
        return cls(dsn, schema, shown=url)

    @property
    def url(self) -> str:
        return self._shown

    # -- plumbing -------------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {CALL_TIMEOUT:g}s"
        else:
            reason = _one_line(exc, self._password)
        return StoreUnavailable(f"PostgreSQL store {self._shown}: {reason}")

    async def _connect(self) -> AsyncConnection[Any]:
        if self._add_connect_timeout:
            return await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            )
        return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)

    async def _command_connection(self) -> AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        self._conn = None
        conn = await self._connect()
        try:
            # A client paused inside a transaction must not hold a name's row for long.
            await conn.execute("SET idle_in_transaction_session_timeout = 10000")
            await self._ensure_schema(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    async def _ensure_schema(self, conn: AsyncConnection[Any]) -> None:
        try:
            row = await (await conn.execute(self._q["version"])).fetchone()
        except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                await conn.execute(self._setup)
            row = await (await conn.execute(self._q["version"])).fetchone()
        version = int(row[0]) if row is not None else 0
        if version != SCHEMA_VERSION:
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: schema {self.schema!r} has version {version},"
                f" this tenure knows version {SCHEMA_VERSION}"
            )

    async def _drop_command_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    async def _run(
        self, fn: Callable[[AsyncConnection[Any]], Awaitable[T]], *, single: bool = False
    ) -> T:
        """Run ``fn(conn)`` in one transaction on the command connection (reopened if needed).

        ``single``: ``fn`` is one idempotent statement, run as it is (one round trip).
        Deadlocks and serialization failures are retried; psycopg's errors come out as
        ``StoreUnavailable``; a call that fails or is interrupted drops the connection, so the
        next call starts from a fresh one in a known state.
        """
        async with self._lock:
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    reused = self._conn is not None
                    conn = await self._command_connection()
                    retries = 0
                    while True:
                        began = False
                        try:
                            owed = list(self._owed)
                            if single and not owed:
                                return await fn(conn)  # its own transaction; safe to repeat
                            async with conn.transaction():
                                began = True
                                for cleanup in owed:
                                    await cleanup(conn)
                                result = await fn(conn)
                            del self._owed[: len(owed)]
                            return result
                        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                            if retries == RETRIES:
                                raise
                            retries += 1
                            await anyio.sleep(0.001 * 2**retries)
                        except psycopg.OperationalError:
                            if (began and not single) or not reused:
                                raise
                            # An idle connection that died meanwhile (e.g. the server
                            # restarted) fails at its first statement, BEGIN unless ``single``:
                            # nothing was done, or nothing that harms if done twice. Once more
                            # on a fresh one.
                            await self._drop_command_connection()
                            reused = False
                            conn = await self._command_connection()
            except (SessionGone, StoreUnavailable):
                raise
            except (psycopg.Error, TimeoutError, OSError) as exc:
                await self._drop_command_connection()
                raise self._unavailable(exc) from exc
            except BaseException:
                await self._drop_command_connection()
                raise

    @staticmethod
    async def _one(
        conn: AsyncConnection[Any], query: Composed, params: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        cur = await conn.execute(query, params)
        return await cur.fetchone() if cur.description is not None else None

    async def _lock_name(self, conn: AsyncConnection[Any], name: str) -> None:
        """Lock ``name``'s counter row for this transaction (creating it at 0 if new)."""
        if await self._one(conn, self._q["lock_name"], {"name": name}) is None:
            await conn.execute(self._q["new_name"], {"name": name})
            await conn.execute(self._q["lock_name"], {"name": name})

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner) -> Session:
        params = {"ttl": ttl, "host": owner.host, "pid": owner.pid, "label": owner.label}

        async def tx(conn: AsyncConnection[Any]) -> int:
            await conn.execute(self._q["sweep"])  # forget expired sessions (counters stay)
            row = await self._one(conn, self._q["open"], params)
            assert row is not None
            return int(row[0])

        return PostgresSession(await self._run(tx), ttl)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, PostgresSession)

        async def tx(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(self._q["renew"], {"id": session.id})
            return cur.rowcount == 1

        return await self._run(tx, single=True)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, PostgresSession)
        q = self._q

        async def tx(conn: AsyncConnection[Any]) -> None:
            params: dict[str, Any] = {"id": session.id}
            first = True
            while True:
                cur = await conn.execute(q["held_names"], params)
                names = [row[0] for row in await cur.fetchall()]
                if names:
                    await conn.execute(q["lock_names"], {"names": names})  # in name order
                if first:  # after this, no release can hand us another lock
                    await conn.execute(q["leave_all"], params)
                    first = False
                if not names:
                    break
                cur = await conn.execute(q["release_all"], {**params, "names": names})
                for (name,) in await cur.fetchall():
                    await self._hand_over(conn, name)
            await conn.execute(q["close"], params)

        await self._run(tx)

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, PostgresSession)
        assert ticket is None or isinstance(ticket, Ticket)
        mine = ticket
        channel: str | None = None
        listener = 0
        if mine is not None:
            listener = await self._listen(mine.channel)  # again, if the listener reconnected

        granting: int | None = None  # a token counted in a transaction not known committed

        async def tx(conn: AsyncConnection[Any]) -> Grant | Busy:
            nonlocal mine, granting
            granting = None
            q = self._q
            params: dict[str, Any] = {"id": session.id, "name": name}
            await self._lock_name(conn, name)
            row = await self._one(conn, q["holder"], params)
            if row is not None and row[6] <= 0:  # looks expired: make sure, under a lock
                row = await self._one(conn, q["holder_locked"], params)
            holder: LockInfo | None = None
            if row is not None:
                token, holder_session, waiter, host, pid, label, expires_in = row
                if expires_in > 0:
                    if mine is not None and holder_session == session.id and waiter == mine.seq:
                        # Handed to us by a release. Our session was renewed by its keeper,
                        # not by this grant: its deadline stands as it is.
                        return Grant(token=int(token), renewed_session=False)
                    queued = await self._one(conn, q["queued"], params)
                    assert queued is not None
                    holder = LockInfo(
                        name, int(token), Owner(host, pid, label), expires_in, int(queued[0])
                    )
            if holder is None:
                head = await self._one(conn, q["head"], params)
                if head is None or (mine is not None and head[0] == mine.seq):
                    seq = None if mine is None else mine.seq
                    granted = await self._one(conn, q["grant"], {**params, "seq": seq})
                    if granted is None:
                        raise SessionGone
                    granting = int(granted[0])
                    return Grant(token=granting, renewed_session=True)
            if await self._one(conn, q["alive"], params) is None:
                raise SessionGone
            if mine is not None:
                kept = await self._one(conn, q["requeue"], {"seq": mine.seq, "listener": listener})
                if kept is None:  # our place was dropped (e.g. swept): queue again at the end
                    mine.seq = await self._enqueue(conn, params, mine.channel, listener)
                mine.listener = listener
            elif enqueue and channel is not None:
                seq = await self._enqueue(conn, params, channel, listener)
                mine = Ticket(name, seq, channel, listener)
            retry = None if holder is None else max(0.0, holder.expires_in) + 0.001
            return Busy(holder=holder, ticket=mine, retry_in=retry)

        while True:
            try:
                outcome = await self._run(tx)
            except SessionGone:
                raise LeaseLost("the session expired") from None
            except StoreUnavailable:
                if granting is not None:  # committed or not, nobody will ever release it
                    self._owed.append(partial(self._release, session.id, name, granting))
                raise
            if isinstance(outcome, Busy) and enqueue and mine is None and channel is None:
                # Busy, and we will wait: listen on our channel before our queue row exists,
                # so a queued row always has a listener; then try again.
                channel = self._spare_channel()
                listener = await self._listen(channel)
                continue
            break
        if isinstance(outcome, Busy) and mine is not None:
            self._tickets[mine.channel] = mine
        elif ticket is not None:
            self._tickets.pop(ticket.channel, None)  # granted: the channel is spare again
        return outcome

    async def _enqueue(
        self, conn: AsyncConnection[Any], params: dict[str, Any], channel: str, listener: int
    ) -> int:
        row = await self._one(
            conn, self._q["enqueue"], {**params, "channel": channel, "listener": listener}
        )
        assert row is not None
        return int(row[0])

    async def _hand_over(self, conn: AsyncConnection[Any], name: str) -> None:
        """Inside a transaction that freed ``name`` (its row locked): grant it to the first live
        waiter and notify that waiter alone (delivered when the transaction commits)."""
        q = self._q
        await conn.execute(q["drop_dead_waiters"], {"name": name})
        while True:
            row = await self._one(conn, q["next_waiter"], {"name": name})
            if row is None:
                return
            seq, session, channel = row
            if await self._one(conn, q["dequeue"], {"seq": seq}) is None:
                continue  # it left meanwhile
            await conn.execute(q["hand_over"], {"name": name, "session": session, "seq": seq})
            await conn.execute(q["notify"], {"channel": channel})
            return

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        """Sleep until our channel is notified, or ``timeout``.

        Notifications come on the store's one listening connection; whichever waiter finds
        nobody reading becomes the reader and passes on the others' wake-ups. If the listener
        is broken this is plain sleep: polling, until ``attempt`` listens again.
        """
        assert isinstance(ticket, Ticket)
        self._waiting.add(ticket)
        try:
            with anyio.move_on_after(timeout):
                while not ticket.woken:
                    conn = self._listen_conn
                    if self._reader is None and conn is not None and not conn.closed:
                        await self._read_until(ticket, conn)
                    else:
                        await ticket.event.wait()
                        ticket.event = anyio.Event()
        finally:
            self._waiting.discard(ticket)
            ticket.woken = False
            if self._reader is None:
                for other in self._waiting:  # let another waiter take over the reading
                    other.event.set()
                    break

    async def _read_until(self, ticket: Ticket, conn: AsyncConnection[Any]) -> None:
        self._reader = ticket
        try:
            async with self._listen_lock:
                if conn is not self._listen_conn:
                    return
                with anyio.CancelScope() as scope:
                    self._reading = scope
                    if self._listen_pending:
                        scope.cancel()  # someone needs the connection for LISTEN first
                    try:
                        async with contextlib.aclosing(conn.notifies()) as notes:
                            async for note in notes:
                                self._dispatch(note)
                                if ticket.woken:
                                    break
                    finally:
                        self._reading = None
        except (psycopg.Error, OSError):
            self._drop_listener(conn)  # waiters poll until attempt listens again
        finally:
            self._reader = None

    def _dispatch(self, note: Notify) -> None:
        self.notifications += 1
        ticket = self._tickets.get(note.channel)
        if ticket is not None:
            ticket.woken = True
            ticket.event.set()

    def _spare_channel(self) -> str:
        """A channel already listened on and free, else a new one."""
        for channel in self._listening:
            if channel not in self._tickets:
                return channel
        return f"tenure_w_{uuid.uuid4().hex}"

    async def _listen(self, channel: str) -> int:
        """LISTEN on ``channel`` (connecting the listener if needed); its backend pid."""
        conn = self._listen_conn
        if conn is not None and not conn.closed and channel in self._listening:
            return self._listen_pid
        self._listen_pending += 1
        try:
            if self._reading is not None:
                self._reading.cancel()  # the reader gives the connection up for a moment
            async with self._listen_lock:
                with anyio.fail_after(CALL_TIMEOUT):
                    conn = self._listen_conn
                    reused = conn is not None and not conn.closed
                    while True:
                        if conn is None or conn.closed:
                            self._listening = set()
                            conn = await self._connect()
                            self._listen_conn = conn
                            self._listen_pid = conn.info.backend_pid
                        listen = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
                        try:
                            await conn.execute(listen)
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            self._drop_listener(conn)  # died while idle: once more, afresh
                            conn, reused = None, False
                            continue
                        self._listening.add(channel)
                        return self._listen_pid
        except (psycopg.Error, TimeoutError, OSError) as exc:
            if conn is not None:
                self._drop_listener(conn)
            raise self._unavailable(exc) from exc
        finally:
            self._listen_pending -= 1

    def _drop_listener(self, conn: AsyncConnection[Any]) -> None:
        if self._listen_conn is conn:
            self._listen_conn = None
            self._listening = set()
        if not conn.closed:
            conn.pgconn.finish()  # what AsyncConnection.close() does, without awaiting

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, Ticket)
        q = self._q

        async def tx(conn: AsyncConnection[Any]) -> None:
            await self._lock_name(conn, ticket.name)
            await conn.execute(q["dequeue"], {"seq": ticket.seq})
            # A release may have handed us the lock as we gave up: pass it on.
            params = {"name": ticket.name, "seq": ticket.seq}
            if await self._one(conn, q["handed_back"], params) is not None:
                await self._hand_over(conn, ticket.name)

        try:
            await self._run(tx)
        except StoreUnavailable:
            self._owed.append(tx)  # we may hold a lock handed to us: pass it on later
            raise
        finally:
            if self._tickets.get(ticket.channel) is ticket:
                del self._tickets[ticket.channel]

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, PostgresSession)
        tx = partial(self._release, session.id, name, token)
        try:
            await self._run(tx)
        except StoreUnavailable:
            self._owed.append(tx)  # free it as soon as the store answers again
            raise

    async def _release(
        self, session_id: int, name: str, token: int, conn: AsyncConnection[Any]
    ) -> None:
        await self._lock_name(conn, name)
        params = {"name": name, "token": token, "id": session_id}
        if await self._one(conn, self._q["release"], params) is not None:
            await self._hand_over(conn, name)
        # else: not ours (any more): nothing to release, nobody to wake

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        async def tx(conn: AsyncConnection[Any]) -> list[LockInfo]:
            cur = await conn.execute(self._q["locks"], {"name": name})
            return [
                LockInfo(row[0], int(row[1]), Owner(row[2], row[3], row[4]), row[5], int(row[6]))
                for row in await cur.fetchall()
            ]

        return await self._run(tx, single=True)

    async def aclose(self) -> None:
        await self._drop_command_connection()
        if self._listen_conn is not None:
            self._drop_listener(self._listen_conn)


def _password(url: str) -> str | None:
    try:
        return psycopg.conninfo.conninfo_to_dict(url).get("password") or None  # type: ignore[return-value]
    except psycopg.Error:
        return urlsplit(url).password


def _one_line(exc: BaseException, password: str | None) -> str:
    """A driver error as one line, without the password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return text[:300]
