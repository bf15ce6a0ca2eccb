"""Optimistic concurrency: avoid lost updates with a version number, not a lock.

A row carries a ``version`` column. `update_row` reads the row and its version, computes the
change, and writes it with::

    UPDATE t SET …, version = version + 1 WHERE id = ? AND version = ?

Zero rows changed means another writer came first: it reads again and computes again, after a
short random back-off, at most ``attempts`` times, then gives up with `tenure.WriteConflict`
(nothing written by this caller). Works with ``sqlite3`` and psycopg 3 (sync); table and column
names are checked against a plain-identifier pattern before they are formatted into SQL.

The same over tenure's store: ``client.versioned(key).update(change)`` (`tenure.Versioned`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from . import _dbapi
from ._errors import InvalidArgument, WriteConflict
from ._versioned import DEFAULT_ATTEMPTS, check_attempts, delays

__all__ = ["update_row"]

Row = dict[str, Any]


def update_row(
    conn: Any,
    table: str,
    id: object,
    change: Callable[[Row], Mapping[str, Any]],
    *,
    id_column: str = "id",
    version_column: str = "version",
    attempts: int = DEFAULT_ATTEMPTS,
) -> Row:
    """Apply ``change`` to row ``id`` of ``table`` without losing a concurrent update.

    ``change(row)`` gets the row as a dict (column → value, the version included) and returns
    the columns to set (an empty mapping: nothing to write). It may run more than once — once
    per attempt — so keep it free of side effects. Each read and each write is a transaction of
    its own (the connection must be idle). Returns the row as written, its version one higher.
    ``WriteConflict`` after ``attempts`` attempts lost to other writers; ``InvalidArgument`` for
    a bad name, a missing row, or a change of the id or the version column."""
    t = _dbapi.table_name(table)
    key, version = _dbapi.column_name(id_column), _dbapi.column_name(version_column)
    tries = check_attempts(attempts)
    p = _dbapi.dialect(conn).p
    pauses = delays(tries)
    for _ in range(tries):
        with _dbapi.transaction(conn) as cur:
            cur.execute(f"SELECT * FROM {t} WHERE {key} = {p}", (id,))
            found = _dbapi.named_rows(cur)
        if not found:
            raise InvalidArgument(f"no row with {key} = {id!r} in {t}")
        row = found[0]
        changes = _checked(change(dict(row)), key, version)
        if not changes:
            return row
        sets = ", ".join(f"{column} = {p}" for column in changes)
        with _dbapi.transaction(conn) as cur:
            cur.execute(
                f"UPDATE {t} SET {sets}, {version} = {version} + 1"
                f" WHERE {key} = {p} AND {version} = {p} RETURNING {version}",
                (*changes.values(), id, row[version]),
            )
            written = _dbapi.rows(cur)
        if written:
            return {**row, **changes, version: written[0][0]}
        pause = next(pauses, None)
        if pause is not None:
            time.sleep(pause)
    raise WriteConflict(f"row {key} = {id!r} of {t}", tries)


def _checked(changes: object, key: str, version: str) -> dict[str, Any]:
    if not isinstance(changes, Mapping):
        raise InvalidArgument(f"change() must return a mapping of column to value, not {changes!r}")
    columns = {_dbapi.column_name(column): value for column, value in changes.items()}
    for own in (key, version):
        if own in columns:
            raise InvalidArgument(f"change() may not set {own!r}: update_row keeps it")
    return columns
