"""The embedded store: one SQLite file shared by the processes of one machine.

`SQLiteStore` (``store.py``) answers the contract's calls, each one ``BEGIN IMMEDIATE``
transaction; ``schema.sql``/``schema.py`` make the tables; ``queue.py`` and ``wake.py`` the
waiters and their FIFO wake-ups; ``events.py`` the watches; ``files.py`` the owner-only checks;
``guard.py`` the SQL predicate for a write guarded by a lock. The design: docs/stores/sqlite.md.
"""

from __future__ import annotations

from .store import SQLiteStore

__all__ = ["SQLiteStore"]
