"""Freezing a process (SIGSTOP) that uses the embedded store, without freezing the store.

A process frozen inside one of the SQLite store's write transactions keeps the file's one write
lock, and every lock on it, until it runs again (docs/stores/sqlite.md): a test that means to
freeze a holder past its lease must not freeze it there, or it tests that limit instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path


def pause_outside_a_write(
    pause: Callable[[], None], resume: Callable[[], None], db: Path | str
) -> None:
    """``pause()`` the process at a moment it holds no write transaction of the store file
    ``db``: a pause that lands inside one (the file stays locked for 2 s) is undone with
    ``resume()`` and taken again."""
    for _ in range(20):
        pause()
        probe = sqlite3.connect(db, timeout=2.0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            resume()
        finally:
            probe.close()
    raise AssertionError("every pause landed inside a write transaction")
