"""The public guard: a write of the caller's own that commits only while a lock is still held
with a given token, checked in the same transaction (`holds`: the predicate over the store's
tables, ``sql/holds.sql``), on a connection made as the store makes its own (`connect`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .connection import Transport
from .schema import one_line, read_sql

try:
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: PostgresStore.from_url says so
    sql = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection

HOLDS = one_line(read_sql("holds.sql"))


def holds(schema: str, name: str = "name", token: str = "token") -> sql.Composable:
    """True while the lock ``%(name)s`` is held with the token ``%(token)s`` (named
    parameters of those names), judged as the store judges a holder, and kept so until the
    caller's transaction commits (see ``sql/holds.sql``)."""
    return sql.SQL(HOLDS).format(
        s=sql.Identifier(schema), name=sql.Placeholder(name), token=sql.Placeholder(token)
    )


async def connect(transport: Transport) -> AsyncConnection[Any]:
    """A new connection in autocommit, made as the store makes its own, in READ COMMITTED
    (`holds` relies on it, whatever the server's default). psycopg's errors come out as they
    are; the caller closes it."""
    conn = await transport.connect()
    try:
        await conn.execute("SET default_transaction_isolation = 'read committed'")
    except BaseException:
        await conn.close()
        raise
    return conn
