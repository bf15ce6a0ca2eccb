"""A fence in the protected SQL database itself (``tenure.fence.SQLFence``).

A lease's token only protects anything if the resource checks it. Keep one small table next to the
data you protect; admit the holder's token in the same transaction as the write, so that the check
and the write commit (or vanish) together::

    fence = SQLFence()
    fence.ensure_table(conn)
    # The holder got `lease` from a tenure lock and sends lease.token along with its write:
    with fence.fenced(conn, "orders", lease.token) as cur:  # StaleToken if a newer one was seen
        cur.execute("UPDATE orders SET state = ? WHERE id = ?", ("shipped", 42))

A holder that paused past its lease and wakes up with an older token gets ``StaleToken`` and its
write is rolled back, whatever the clocks say. Equal tokens are admitted (one lease writes many
times), higher ones are admitted and remembered, lower ones are refused.

Works with stdlib ``sqlite3`` (SQLite 3.35 or later, for RETURNING) and psycopg 3 (sync and async).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .._dbapi import table_name, transaction
from .._errors import InvalidArgument, StaleToken
from ._tokens import check, refused

if TYPE_CHECKING:
    import psycopg

__all__ = ["DBAPICursor", "SQLFence"]

_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s"}

_Row = TypeVar("_Row")


class DBAPICursor(Protocol):
    """The part of a DB-API cursor the fence uses."""

    def execute(self, query: Any, params: Any = ..., /) -> object:
        """Run one statement."""

    def fetchall(self) -> list[Any]:
        """The rows of the last statement."""


class SQLFence:
    """A fence kept in one SQL table: ``(resource TEXT PRIMARY KEY, token BIGINT NOT NULL)``."""

    def __init__(self, table: str = "tenure_fence") -> None:
        self.table = table_name(table)  # safe to format into SQL: plain identifiers only
        self._ddl = (
            f"CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)"
        )
        # One statement, so check and record cannot be split by a concurrent writer. On conflict
        # the row is updated only if the new token is not lower; no row returned means refused.
        # PostgreSQL locks the conflicting row even when the WHERE is false, so concurrent admits
        # of one resource serialize until commit and the later one re-checks the committed token.
        self._upsert = (
            f"INSERT INTO {table} AS f (resource, token) VALUES ({{p}}, {{p}}) "
            "ON CONFLICT (resource) DO UPDATE SET token = excluded.token "
            "WHERE f.token <= excluded.token RETURNING token"
        )
        self._select = f"SELECT token FROM {table} WHERE resource = {{p}}"
        # A read-write lock's readers raise a second row, the highest token admitted, and never
        # refuse one another. It too locks the row in PostgreSQL, so reads and writes of one
        # resource serialize on it.
        self._raise = (
            f"INSERT INTO {table} AS f (resource, token) VALUES ({{p}}, {{p}}) "
            "ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN excluded.token > f.token "
            "THEN excluded.token ELSE f.token END"
        )

    def __repr__(self) -> str:
        return f"SQLFence(table={self.table!r})"

    # -- setup ----------------------------------------------------------------------------------

    def ensure_table(self, conn: Any) -> None:
        """Create the table if it is missing, and commit the connection's open transaction."""
        cur = conn.cursor()
        try:
            cur.execute(self._ddl)
        finally:
            cur.close()
        conn.commit()

    async def ensure_table_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """`ensure_table` for a ``psycopg.AsyncConnection``."""
        await conn.execute(self._ddl)
        await conn.commit()

    def _refused(self, resource: str, token: int, highest: int) -> StaleToken:
        return refused(type(self).__name__, resource, token, highest)

    # -- admit inside the caller's transaction --------------------------------------------------

    def admit(self, cursor: DBAPICursor, resource: str, token: int) -> None:
        """Admit ``token`` for ``resource`` or raise `StaleToken`; call inside an open transaction.

        Admitting records the token in the caller's transaction; the caller must roll back on
        `StaleToken` (nothing is written then, but the transaction should not go on).
        """
        _check(resource, token)
        self._admit(cursor, resource, token)

    def _admit(self, cursor: DBAPICursor, resource: str, token: int) -> None:
        p = _placeholder(cursor)
        cursor.execute(self._upsert.format(p=p), (resource, token))
        # fetchall, not fetchone: an unfinished RETURNING statement keeps SQLite's write open.
        if cursor.fetchall():
            return
        cursor.execute(self._select.format(p=p), (resource,))
        raise self._refused(resource, token, _highest(cursor.fetchall(), token))

    async def admit_async(
        self, cursor: psycopg.AsyncCursor[Any], resource: str, token: int
    ) -> None:
        """`admit` for a ``psycopg.AsyncCursor``; call inside an open transaction."""
        _check(resource, token)
        await self._admit_async(cursor, resource, token)

    async def _admit_async(
        self, cursor: psycopg.AsyncCursor[Any], resource: str, token: int
    ) -> None:
        await cursor.execute(self._upsert.format(p="%s"), (resource, token))
        if await cursor.fetchall():
            return
        await cursor.execute(self._select.format(p="%s"), (resource,))
        raise self._refused(resource, token, _highest(await cursor.fetchall(), token))

    # -- a read-write lock's reads and writes (``client.read_lock`` / ``write_lock``) -----------

    def admit_read(self, cursor: DBAPICursor, resource: str, token: int) -> None:
        """Admit a reader's ``token`` or raise `StaleToken` if a write lock granted later has
        written; other readers' tokens, higher or lower, never refuse it. Call inside an open
        transaction, before the read; the writers of ``resource`` use `admit_write`."""
        _check(resource, token)
        p = _placeholder(cursor)
        cursor.execute(self._raise.format(p=p), (_highest_row(resource), token))
        cursor.execute(self._select.format(p=p), (resource,))
        written = _highest(cursor.fetchall(), token)
        if written > token:
            raise self._refused(resource, token, written)

    def admit_write(self, cursor: DBAPICursor, resource: str, token: int) -> None:
        """Admit a writer's ``token`` or raise `StaleToken` if a reader or writer granted later
        was admitted (by `admit_read` or this). Call inside an open transaction."""
        _check(resource, token)
        try:
            self._admit(cursor, _highest_row(resource), token)
        except StaleToken as exc:
            raise StaleToken(resource, token, exc.highest) from None
        self._admit(cursor, resource, token)

    async def admit_read_async(
        self, cursor: psycopg.AsyncCursor[Any], resource: str, token: int
    ) -> None:
        """`admit_read` for a ``psycopg.AsyncCursor``."""
        _check(resource, token)
        await cursor.execute(self._raise.format(p="%s"), (_highest_row(resource), token))
        await cursor.execute(self._select.format(p="%s"), (resource,))
        written = _highest(await cursor.fetchall(), token)
        if written > token:
            raise self._refused(resource, token, written)

    async def admit_write_async(
        self, cursor: psycopg.AsyncCursor[Any], resource: str, token: int
    ) -> None:
        """`admit_write` for a ``psycopg.AsyncCursor``."""
        _check(resource, token)
        try:
            await self._admit_async(cursor, _highest_row(resource), token)
        except StaleToken as exc:
            raise StaleToken(resource, token, exc.highest) from None
        await self._admit_async(cursor, resource, token)

    # -- a whole fenced transaction -------------------------------------------------------------

    @overload
    def fenced(
        self, conn: sqlite3.Connection, resource: str, token: int
    ) -> AbstractContextManager[sqlite3.Cursor]: ...

    @overload
    def fenced(
        self, conn: psycopg.Connection[_Row], resource: str, token: int
    ) -> AbstractContextManager[psycopg.Cursor[_Row]]: ...

    def fenced(self, conn: Any, resource: str, token: int) -> AbstractContextManager[Any]:
        """Begin a transaction, admit ``token``, yield a cursor for the protected write.

        Commits when the block ends normally; rolls back on any exception, `StaleToken` included.
        The connection must not be inside a transaction already: this block owns the transaction.
        """
        _check(resource, token)
        if isinstance(conn, sqlite3.Connection) or _is_psycopg(conn, "Connection"):
            return self._fenced(conn, resource, token)
        raise InvalidArgument(f"fenced() supports sqlite3 and psycopg connections, not {conn!r}")

    def fenced_async(
        self, conn: psycopg.AsyncConnection[_Row], resource: str, token: int
    ) -> AbstractAsyncContextManager[psycopg.AsyncCursor[_Row]]:
        """`fenced` for a ``psycopg.AsyncConnection``: ``async with fence.fenced_async(...)``."""
        _check(resource, token)
        if not _is_psycopg(conn, "AsyncConnection"):
            raise InvalidArgument(f"fenced_async() needs a psycopg.AsyncConnection, not {conn!r}")
        return self._fenced_psycopg_async(conn, resource, token)

    @contextmanager
    def _fenced(self, conn: Any, resource: str, token: int) -> Iterator[Any]:
        # A transaction of its own (SQLite's BEGIN IMMEDIATE: the check and the write serialize
        # with other writers, no read-to-write upgrade can fail half way), rolled back on any
        # exception, StaleToken included.
        with transaction(conn) as cur:
            self.admit(cur, resource, token)
            yield cur

    @asynccontextmanager
    async def _fenced_psycopg_async(
        self, conn: psycopg.AsyncConnection[_Row], resource: str, token: int
    ) -> AsyncIterator[psycopg.AsyncCursor[_Row]]:
        _require_idle(conn.info.transaction_status)
        async with conn.transaction(), conn.cursor() as cur:
            await self.admit_async(cur, resource, token)
            yield cur


def _check(resource: object, token: object) -> None:
    check(resource, token)
    if isinstance(resource, str) and _READS in resource:
        raise InvalidArgument(
            f"fence resource must be a non-empty string without NUL or \\x1f, not {resource!r}"
        )


_READS = "\x1f"
"""Between a resource's name and ``highest``: the row of the highest token admitted (a name
no caller's resource can take)."""


def _highest_row(resource: str) -> str:
    return f"{resource}{_READS}highest"


def _placeholder(cursor: object) -> str:
    # The driver's module declares its DB-API paramstyle; walk the MRO so subclasses work too.
    for cls in type(cursor).__mro__:
        module = sys.modules.get(cls.__module__.partition(".")[0])
        style = getattr(module, "paramstyle", None)
        if style in _PLACEHOLDER:
            return _PLACEHOLDER[style]
    raise InvalidArgument(f"cannot tell the parameter style of {type(cursor).__name__} cursors")


def _highest(rows: list[Any], token: int) -> int:
    if not rows:  # cannot happen: the conflicting row is locked (or the database is)
        return token
    row = rows[0]
    value = next(iter(row.values())) if isinstance(row, Mapping) else row[0]
    return int(value)


def _is_psycopg(conn: object, name: str) -> bool:
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(conn, getattr(psycopg, name))


def _require_idle(status: object) -> None:
    name = getattr(status, "name", status)
    if name != "IDLE":
        raise InvalidArgument(
            f"fenced() begins its own transaction but the connection is {name}: "
            "commit or roll back first"
        )
