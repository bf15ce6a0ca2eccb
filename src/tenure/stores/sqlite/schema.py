"""The store's tables: made by ``schema.sql``, files of schema 1 and 2 upgraded to 3, and the SQL
that judges a row by this host's boot clock (a session lives in this boot until ``expires``)."""

from __future__ import annotations

import sqlite3
from importlib.resources import files
from pathlib import Path

SCHEMA = (files(__package__ or __name__) / "schema.sql").read_text()
"""Run at every open: creates what is missing (and marks a new file schema 3)."""


def live(prefix: str = "") -> str:
    """The SQL test that session row ``s`` is alive: written in this boot, not expired by the
    boot clock. Its parameters are ``:<prefix>boot`` (`boot_id`) and ``:<prefix>now``."""
    return f"s.boot = :{prefix}boot AND s.expires > :{prefix}now"


LIVE = live()
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


def _has_column(db: sqlite3.Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in db.execute(f"PRAGMA table_info({table})"))


def is_current(db: sqlite3.Connection) -> bool:
    return _has_column(db, "tenure_locks", "value") and _has_column(
        db, "tenure_sessions", "lock_delay"
    )


def upgrade(db: sqlite3.Connection) -> None:
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
