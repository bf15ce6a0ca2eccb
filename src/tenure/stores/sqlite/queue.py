"""The waiters of each name, in arrival order (``tenure_waiters``), each listening on its own FIFO.
A waiter whose FIFO nobody reads any more is gone (its process died, though its session has not
expired yet): it is dropped on the way, so a dead waiter never holds up the queue."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ..._errors import StoreUnavailable
from .schema import LIVE
from .wake import Fifos


@dataclass(slots=True)  # slots: a thousand may wait on one client
class Ticket:
    """A place in the queue: its row, and the FIFO its waiter listens on."""

    name: str
    seq: int
    wake: Path
    fd: int = field(repr=False)


class Queue:
    def __init__(self, fifos: Fifos, boot: str) -> None:
        self._fifos = fifos
        self._boot = boot

    def enqueue(
        self, db: sqlite3.Connection, session: int, name: str, wake: Path, fd: int
    ) -> Ticket:
        cur = db.execute(
            "INSERT INTO tenure_waiters (name, session, wake) VALUES (?, ?, ?)",
            (name, session, wake.name),
        )
        assert cur.lastrowid is not None
        return Ticket(name, cur.lastrowid, wake, fd)

    def live(self, db: sqlite3.Connection, name: str, now: float) -> list[tuple[int, int, str]]:
        """The waiters of ``name`` whose sessions are alive, in order: (seq, session, wake)."""
        return db.execute(
            "SELECT w.seq, w.session, w.wake FROM tenure_waiters w"
            " JOIN tenure_sessions s ON s.id = w.session"
            " WHERE w.name = :name AND " + LIVE + " ORDER BY w.seq",
            {"boot": self._boot, "now": now, "name": name},
        ).fetchall()

    def listener(self, db: sqlite3.Connection, seq: int, wake: str) -> int | None:
        """The write end of a waiter's FIFO; None (and its queue row dropped) if nobody reads
        it any more."""
        try:
            fd = self._fifos.open(wake)
        except OSError as exc:
            where = self._fifos.directory
            raise StoreUnavailable(f"cannot wake a waiter in {where}: {exc}") from None
        if fd is None:
            db.execute("DELETE FROM tenure_waiters WHERE seq = ?", (seq,))
        return fd

    def live_head(
        self, db: sqlite3.Connection, name: str, now: float, mine: int | None
    ) -> int | None:
        """The first waiter for a free ``name`` that is still there to take it (``mine``: the
        caller's own place, which needs no check)."""
        for seq, _session, wake in self.live(db, name, now):
            if seq == mine:
                return seq
            fd = self.listener(db, seq, wake)
            if fd is not None:
                os.close(fd)
                return int(seq)
        return None
