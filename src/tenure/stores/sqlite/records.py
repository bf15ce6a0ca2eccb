"""Records: small versioned values (``tenure_records``), written by compare-and-set on the
version (0: only if absent)."""

from __future__ import annotations

import sqlite3

from ..._values import Record


def read(db: sqlite3.Connection, key: str) -> Record | None:
    row = db.execute("SELECT value, version FROM tenure_records WHERE key = ?", (key,)).fetchone()
    return None if row is None else Record(key, row[0], row[1])


def write(db: sqlite3.Connection, key: str, value: str, version: int) -> Record | None:
    """In a write transaction: the record written, or None if its version is not ``version``."""
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


def put(db: sqlite3.Connection, key: str, value: str | None) -> None:
    """In a write transaction: set (or, with None, delete) the record, whatever its version."""
    if value is None:
        db.execute("DELETE FROM tenure_records WHERE key = ?", (key,))
    else:
        db.execute(
            "INSERT INTO tenure_records (key, value, version) VALUES (?, ?, 1)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = version + 1",
            (key, value),
        )


def listed(db: sqlite3.Connection, prefix: str) -> list[Record]:
    rows = db.execute(
        "SELECT key, value, version FROM tenure_records"
        " WHERE substr(key, 1, length(?)) = ? ORDER BY key",
        (prefix, prefix),
    ).fetchall()
    return [Record(*row) for row in rows]
