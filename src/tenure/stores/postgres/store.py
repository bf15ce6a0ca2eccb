"""`PostgresStore`: each contract call is one statement (most of them a server-side function of
``sql/functions.sql``) on the command connection (`Commands`); waiters and watches are woken on
the listening connection (`Listener`)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from ..._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ..._values import Capabilities, Holder, LockDelay, LockInfo, Record, Revocation
from .._connect import NO_OPTIONS, ConnectOptions
from .._spi import Busy, Elections, Grant, Records, Revocations, Session, Store, Watch
from . import guard
from .connection import (
    CALL_TIMEOUT,
    DEFAULT_SCHEMA,
    Call,
    Commands,
    Row,
    Transport,
    conninfo,
    statement,
)
from .listener import Listener, Ticket
from .schema import Schema
from .watch import Announcements, PostgresWatch, watch_channel

try:
    import psycopg
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: from_url says so
    psycopg = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection


@dataclass
class PostgresSession(Session):
    id: int
    ttl: float


def _revocation(row: Row) -> Revocation:
    assert row is not None
    name, token, host, pid, label, user, at, reason, at_once, free_in = row
    by = Holder(host, pid, label)
    return Revocation(name, int(token), by, user, at, reason, at_once, free_in)


class PostgresStore(Store, Elections, Records, Revocations):
    """PostgreSQL (``postgresql://…?schema=tenure``): correctness-grade; one transaction
    per call, expiry by the server's clock."""

    scheme: ClassVar[str] = "postgresql"
    times_its_wait: ClassVar[bool] = True  # the listener's sleep, as it always was
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="many",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes="expiry and lock-delay by the server's clock; waiters woken by LISTEN/NOTIFY"
        " (at the end of a lock-delay, by their retry time)",
    )

    def __init__(self, dsn: str, schema: str = DEFAULT_SCHEMA, shown: str | None = None) -> None:
        """``dsn``: libpq's connection string (or URL), everything in it; ``shown``: the URL
        to show, redacted here."""
        self.transport = Transport(dsn, shown)
        self.schema = schema
        tables = Schema(schema, self.transport.unavailable)
        self._q = tables.q
        self.commands = Commands(self.transport, tables.ensure)
        self.listener = Listener(self.transport.connect, self.transport.unavailable, CALL_TIMEOUT)

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> PostgresStore:
        """``postgresql://[user[:password]@]host[:port][/db][?schema=NAME&options]``: the
        common connection options (``tls``, ``ca``, ``cert``, ``key``, user info; keywords
        over the URL's) become libpq's; libpq's own parameters pass through
        (docs/stores/postgres.md)."""
        if psycopg is None:
            raise InvalidArgument(
                "the PostgreSQL store needs psycopg: pip install 'tenure[postgres]'"
            )
        dsn, schema = conninfo(url, options)
        return cls(dsn, schema, shown=url)

    @property
    def url(self) -> str:
        return self.transport.shown

    @property
    def notifications(self) -> int:
        """Notifications received (a release wakes one waiter: one notification)."""
        return self.listener.notifications

    # -- the guard: a caller's writes, made only while a lock is held --------------------

    def holds(self, name: str = "name", token: str = "token") -> sql.Composable:
        """The SQL predicate "the lock named by the parameter ``%(name)s`` is held with the
        token ``%(token)s``", over this store's schema, for the caller's own guarded write (an
        ``UPDATE … WHERE <holds>`` or ``INSERT … SELECT … WHERE <holds>``) on a `connect`
        connection. True while the lock's row carries the token and its session is live by
        the server's clock; it locks that row (``FOR SHARE``) until the caller's transaction
        commits, and every grant, hand-over, release and sweep writes that row, so a token
        that holds at the check holds at the commit (``sql/holds.sql``)."""
        return guard.holds(self.schema, name, token)

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection made exactly as the store makes its own (DSN, TLS, connect
        timeout), in autocommit and READ COMMITTED (`holds` relies on it), for the caller's
        guarded writes; the caller closes it. psycopg's errors come out as they are."""
        return await guard.connect(self.transport)

    def _call(self, query: str, params: dict[str, Any]) -> Call[Row]:
        return statement(self._q[query], params)

    async def _fetch(self, query: str, params: dict[str, Any]) -> Row:
        return await self.commands.fetch(self._q[query], params)

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        # Repeated after a dead connection, it would leave an empty session that expires.
        params = {
            "ttl": ttl,
            "host": owner.host,
            "pid": owner.pid,
            "label": owner.label,
            "lock_delay": lock_delay,
        }
        row = await self._fetch("open", params)
        assert row is not None
        return PostgresSession(int(row[0]), ttl)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, PostgresSession)

        async def renew(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(self._q["renew"], {"id": session.id})
            return cur.rowcount == 1

        return await self.commands.run(renew)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, PostgresSession)
        await self._fetch("close", {"id": session.id})

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        """One round trip: the ``attempt`` function, or, for a waiter whose NOTIFY said it was
        handed the lock, one read that the lock is still its own and its session alive."""
        assert isinstance(session, PostgresSession)
        assert ticket is None or isinstance(ticket, Ticket)
        listener = self.listener
        mine = ticket
        if mine is not None and mine.handed is not None:
            token, mine.handed = mine.handed, None
            params = {"id": session.id, "name": name, "token": token, "seq": mine.seq}
            if await self._fetch("handed", params) is not None:
                listener.unroute(mine.channel)  # granted: the channel is spare again
                return Grant(token=token, renewed_session=False)
            # else: lost meanwhile (our session expired?): the full attempt says what now
        channel: str | None = None
        backend = 0
        if mine is not None:
            backend = await listener.listen(mine.channel)  # again, if the listener reconnected
        elif enqueue:
            channel = listener.spare_channel(listened_only=True)
            if channel is not None:
                listener.claim(channel)
        request = secrets.randbits(63)
        try:
            while True:
                if channel is not None:
                    backend = await listener.listen(channel)  # no round trip if listened already
                params = {
                    "id": session.id,
                    "name": name,
                    "seq": None if mine is None else mine.seq,
                    "channel": mine.channel if mine is not None else channel,
                    "listener": backend,
                    "request": request,
                }
                try:
                    row = await self._fetch("attempt", params)
                except StoreUnavailable:
                    # Granted or not, nobody would ever release it: release it by its request.
                    self.commands.in_doubt.add(self._release_call(session.id, name, None, request))
                    raise
                assert row is not None
                state, token, host, pid, label, expires_in, queued, seq = row
                if state == "gone":
                    raise LeaseLost("the session expired")
                if state != "busy":
                    if ticket is not None:
                        listener.unroute(ticket.channel)  # the channel is spare again
                    return Grant(token=int(token), renewed_session=state == "granted")
                holder = None
                if token is not None:
                    holder = LockInfo(
                        name, int(token), Holder(host, pid, label), expires_in, int(queued)
                    )
                if mine is not None:
                    mine.seq, mine.listener = int(seq), backend
                elif channel is not None:
                    mine = Ticket(name, int(seq), channel, backend)
                elif enqueue:
                    # Busy, and we will wait: listen on a channel before our queue row exists,
                    # so a queued row always has a listener; then try again.
                    channel = listener.spare_channel(listened_only=False)
                    assert channel is not None
                    listener.claim(channel)
                    continue
                break
        finally:
            if channel is not None:
                listener.unclaim(channel)
        if mine is not None:
            listener.route(mine.channel, mine)
        if holder is not None:
            retry = max(0.0, holder.expires_in) + 0.001
        elif expires_in is not None:  # held back by lock-delay: nobody is notified at its end
            retry = expires_in + 0.001
        else:
            # Free but others ahead: poll gently, in case those ahead died or sleep (freed by
            # expiry, the lock is handed to nobody, so nobody is notified).
            retry = Busy.AHEAD_POLL
        return Busy(holder=holder, ticket=mine, retry_in=retry)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        """Sleep until our channel is notified, or ``timeout`` (see `Listener.sleep`)."""
        assert isinstance(ticket, Ticket)
        try:
            await self.listener.sleep(ticket, timeout)
        finally:
            ticket.woken = False

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, Ticket)
        # A release may have handed us the lock as we gave up: the function passes it on.
        leave = self._call("leave", {"name": ticket.name, "seq": ticket.seq})
        try:
            await self.commands.run(leave)
        except StoreUnavailable:
            self.commands.in_doubt.add(leave)  # we may hold a lock handed to us: pass it on later
            raise
        finally:
            self.listener.unroute(ticket.channel, ticket)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, PostgresSession)
        release = self._release_call(session.id, name, token, None)
        try:
            await self.commands.run(release)
        except StoreUnavailable:
            self.commands.in_doubt.add(release)  # free it as soon as the store answers again
            raise

    def _release_call(
        self, session_id: int, name: str, token: int | None, request: int | None
    ) -> Call[Row]:
        """One statement; hands the lock on (with its NOTIFY) only when someone waits."""
        params = {"id": session_id, "name": name, "token": token, "request": request}
        return self._call("release", params)

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        async def tx(conn: AsyncConnection[Any]) -> list[LockInfo]:
            cur = await conn.execute(self._q["locks"], {"name": name})
            return [
                LockInfo(
                    row[0], int(row[1]), Holder(row[2], row[3], row[4]), row[5], int(row[6]), row[7]
                )
                for row in await cur.fetchall()
                if row[0].startswith(prefix)  # one statement reads them all: filtered here
            ]

        return await self.commands.run(tx)

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        async def tx(conn: AsyncConnection[Any]) -> list[LockDelay]:
            cur = await conn.execute(self._q["held_back"], {"name": name})
            delays = []
            for row in await cur.fetchall():
                why = await conn.execute(self._q["revocation"], {"name": row[0], "token": row[1]})
                found = await why.fetchone()
                revoked = None if found is None else _revocation(found)
                delays.append(LockDelay(row[0], int(row[1]), row[2], revoked))
            return delays

        return await self.commands.run(tx)

    # -- revocations -----------------------------------------------------------------------

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        by = record.by
        params = {
            "name": name, "token": token, "now": record.now, "host": by.host, "pid": by.pid,
            "label": by.label, "user": record.user, "at": record.at, "reason": record.reason,
        }  # fmt: skip
        row = await self._fetch("revoke", params)
        if row is None or row[0] is None:
            return None
        return replace(record, token=int(row[0]), free_in=float(row[1]))

    async def revoked(self, session: Session) -> list[Revocation]:
        assert isinstance(session, PostgresSession)

        async def tx(conn: AsyncConnection[Any]) -> list[Revocation]:
            cur = await conn.execute(self._q["revoked"], {"id": session.id})
            return [_revocation(row) for row in await cur.fetchall()]

        return await self.commands.run(tx)

    # -- records -------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        row = await self._fetch("read_record", {"key": key})
        return None if row is None else Record(key, row[0], int(row[1]))

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        if not 0 <= version < 2**63 - 1:
            return None  # never a record's version
        params = {"key": key, "value": value, "version": version, "request": secrets.randbits(63)}
        query = "create_record" if version == 0 else "replace_record"
        row = await self._fetch(query, params)
        return None if row is None else Record(key, value, int(row[0]))

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        """Two statements in one transaction: the name's row locked, then the write if the
        grant holds (its own snapshot, taken after the lock: nothing handed over unseen)."""
        assert isinstance(session, PostgresSession)
        if "\0" in key or (value is not None and "\0" in value):
            raise InvalidArgument("a record cannot contain NUL characters in PostgreSQL")
        params = {"id": session.id, "name": name, "token": token, "key": key, "value": value}
        query = "delete_held_record" if value is None else "put_held_record"

        async def tx(conn: AsyncConnection[Any]) -> bool:
            # Safe to send again: while the grant holds, a second write writes the same value.
            async with conn.transaction():
                await conn.execute(self._q["lock_name"], {"name": name})
                cur = await conn.execute(self._q[query], params)
                row = await cur.fetchone()
            return row is not None and bool(row[0])

        return await self.commands.run(tx)

    async def list_records(self, prefix: str) -> list[Record]:
        async def tx(conn: AsyncConnection[Any]) -> list[Record]:
            cur = await conn.execute(self._q["list_records"], {"prefix": prefix})
            return [
                Record(key, value, int(version)) for key, value, version in await cur.fetchall()
            ]

        return await self.commands.run(tx)

    # -- leader election ------------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        """One statement: the ``proclaim`` function (checks and sets under the name's lock)."""
        assert isinstance(session, PostgresSession)
        if "\0" in value:
            raise InvalidArgument("a value cannot contain NUL characters in PostgreSQL")
        params = {"id": session.id, "name": name, "token": token, "value": value}
        row = await self._fetch("proclaim", params)
        return row is not None and bool(row[0])

    async def watch(self, name: str) -> Watch:
        """LISTEN on the name's channel (on the store's listening connection), then register
        as its watcher (see the ``watch`` function): changes after that are announced."""
        channel = watch_channel(self.schema, name)
        announcements = self.listener.routed(channel)
        if not isinstance(announcements, Announcements):
            announcements = Announcements(name, channel)
            self.listener.route(channel, announcements)
        watch = PostgresWatch(announcements, self.listener, self.commands, self._q)
        announcements.watches.append(watch)
        try:
            await watch.subscribe(report=False)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await watch.aclose()
            raise
        return watch

    async def aclose(self) -> None:
        for channel, route in self.listener.routes():
            if isinstance(route, Announcements):
                for watch in route.watches:
                    watch.closed = True  # their registrations go with the listening connection
                self.listener.unroute(channel)
        await self.commands.drop()
        self.listener.close()
