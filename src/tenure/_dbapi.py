"""What the helpers that work in the user's own SQL database share (``tenure.idempotency``'s
`SQLIdempotency`, ``tenure.optimistic``): identifiers checked before they are formatted into
SQL, the dialect of a connection (its placeholder and its clock), and a transaction of their own.

Works with stdlib ``sqlite3`` (SQLite 3.35 or later, for RETURNING) and psycopg 3 (sync).
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidArgument

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_TABLE = re.compile(rf"(?:{_IDENT}\.)?{_IDENT}")
_COLUMN = re.compile(_IDENT)


def table_name(name: object) -> str:
    """``[schema.]identifier``, safe to format into SQL (``InvalidArgument`` otherwise)."""
    if not isinstance(name, str) or not _TABLE.fullmatch(name):
        raise InvalidArgument(f"invalid table name {name!r}: use [schema.]identifier")
    return name


def column_name(name: object) -> str:
    """A plain identifier, safe to format into SQL (``InvalidArgument`` otherwise)."""
    if not isinstance(name, str) or not _COLUMN.fullmatch(name):
        raise InvalidArgument(f"invalid column name {name!r}: use a plain identifier")
    return name


@dataclass(frozen=True)
class Dialect:
    """How to write SQL for one kind of connection."""

    p: str
    """The placeholder of a parameter."""
    now: str
    """The database's own time, in seconds since the epoch, as an SQL expression."""


SQLITE = Dialect("?", "((julianday('now') - 2440587.5) * 86400.0)")
POSTGRES = Dialect("%s", "extract(epoch from clock_timestamp())::double precision")


def dialect(conn: object) -> Dialect:
    """The dialect of a sqlite3 or psycopg connection (``InvalidArgument`` for another)."""
    if isinstance(conn, sqlite3.Connection):
        return SQLITE
    if _is_psycopg(conn):
        return POSTGRES
    raise InvalidArgument(f"a sqlite3 or psycopg connection is needed, not {conn!r}")


@contextmanager
def transaction(conn: Any) -> Iterator[Any]:
    """A transaction of its own on an idle connection, and a cursor in it: committed when the
    block ends, rolled back on any exception. SQLite's begins IMMEDIATE (the write lock up
    front: no read-to-write upgrade can fail half way)."""
    if isinstance(conn, sqlite3.Connection):
        if getattr(conn, "autocommit", None) is False:
            raise InvalidArgument(
                "a sqlite3 connection with autocommit=True or the legacy isolation_level mode"
                " is needed: this helper begins its own transactions"
            )
        if conn.in_transaction:
            raise InvalidArgument("this helper begins its own transaction: commit or roll back")
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite may have rolled back on its own (disk full)
                conn.execute("ROLLBACK")
            raise
        finally:
            cur.close()
        return
    dialect(conn)
    psycopg = sys.modules["psycopg"]
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise InvalidArgument("this helper begins its own transaction: commit or roll back")
    with conn.transaction(), conn.cursor() as cur:
        yield cur


def _is_psycopg(conn: object) -> bool:
    psycopg = sys.modules.get("psycopg")  # not imported here: only if the caller did
    return psycopg is not None and isinstance(conn, psycopg.Connection)


def rows(cur: Any) -> list[tuple[Any, ...]]:
    """The rows of the last statement as tuples, whatever the connection's row factory."""
    return [tuple(r.values()) if isinstance(r, Mapping) else tuple(r) for r in cur.fetchall()]


def named_rows(cur: Any) -> list[dict[str, Any]]:
    """The rows of the last statement as dicts of column name to value."""
    names = [column[0] for column in cur.description]
    return [dict(zip(names, row, strict=True)) for row in rows(cur)]
