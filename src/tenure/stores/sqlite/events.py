"""Watches: every transaction that changes a watched name appends the name's new state to
``tenure_events`` (so nothing is missed between two reads of a watch, even from other processes)
and, after commit, writes one byte to each of its watches' FIFOs. Unwatched names cost one
indexed read and write no events."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable

import anyio

from ..._errors import StoreUnavailable
from ..._values import Change, Holder, LockInfo
from .._spi import Watch
from .wake import Fifo, Fifos, drain, drop, woken

EVENTS_KEPT = 100
"""Events kept per name: a watch further behind than this reports the current state instead."""

ReadHolder = Callable[[sqlite3.Connection, str, float], LockInfo | None]
"""Who holds a name now (in a transaction, at ``now``), as the store reads it."""


def last_event(db: sqlite3.Connection, name: str) -> int:
    query = "SELECT coalesce(max(seq), 0) FROM tenure_events WHERE name = ?"
    return int(db.execute(query, (name,)).fetchone()[0])


class Touched:
    """Within one write transaction: per name changed, whether it is watched and the write ends
    of its watches' FIFOs, written once the transaction has committed."""

    def __init__(self, fifos: Fifos, holder: ReadHolder) -> None:
        self._fifos = fifos
        self._holder = holder
        self._names: dict[str, tuple[bool, list[int]]] = {}

    def record(self, db: sqlite3.Connection, name: str, now: float) -> None:
        """``name`` changed: append its new state for its watches (if it has any), keep only
        the newest events, and have the watches woken after commit."""
        if name not in self._names:
            self._names[name] = self._observers(db, name)
        watched, _fds = self._names[name]
        if not watched:
            return  # a watch only reports changes after it subscribed: no event needed
        info = self._holder(db, name, now)
        db.execute(
            "INSERT INTO tenure_events"
            " (prev, name, token, value, host, pid, label, expires, waiters)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (last_event(db, name), name)
            + (
                (None,) * 7
                if info is None
                else (
                    info.token,
                    info.value,
                    info.holder.host,
                    info.holder.pid,
                    info.holder.label,
                    now + info.expires_in,
                    info.waiters,
                )
            ),
        )
        db.execute(
            "DELETE FROM tenure_events WHERE name = :name AND seq <= (SELECT seq FROM"
            " tenure_events WHERE name = :name ORDER BY seq DESC LIMIT 1 OFFSET :keep)",
            {"name": name, "keep": EVENTS_KEPT},
        )

    def _observers(self, db: sqlite3.Connection, name: str) -> tuple[bool, list[int]]:
        """Whether ``name`` has live watches, and the write ends of their FIFOs. A watch whose
        FIFO nobody reads (its process is gone) is dropped."""
        query = "SELECT id, wake FROM tenure_observers WHERE name = ?"
        watched, fds = False, []
        for row, wake in db.execute(query, (name,)).fetchall():
            try:
                fd = self._fifos.open(wake)
            except OSError:
                # Cannot wake it now (e.g. out of descriptors): it still gets its events, at
                # its next read. A watch never fails the lock operation itself.
                watched = True
                continue
            if fd is None:
                db.execute("DELETE FROM tenure_observers WHERE id = ?", (row,))
                continue
            watched = True
            fds.append(fd)
        return watched, fds

    def fds(self) -> list[int]:
        """The write ends to wake once committed."""
        return [fd for _watched, fds in self._names.values() for fd in fds]

    def abandon(self) -> None:
        """The transaction rolled back: nobody to wake."""
        for fd in self.fds():
            os.close(fd)


def read_changes(
    db: sqlite3.Connection, name: str, seen: int, now: float, holder: ReadHolder
) -> tuple[list[Change], int]:
    """The changes of ``name`` after event ``seen``, and the last event now seen."""
    rows = db.execute(
        "SELECT seq, prev, token, value, host, pid, label, expires, waiters"
        " FROM tenure_events WHERE name = ? AND seq > ? ORDER BY seq",
        (name, seen),
    ).fetchall()
    if rows and rows[0][1] != seen:
        # Events this watch had not read were pruned: rather than skip some silently, report
        # where the lock stands now as one change.
        db.execute("BEGIN")
        try:
            now_held = holder(db, name, now)
            last = last_event(db, name)
        finally:
            db.execute("COMMIT")
        return [Change(name, now_held)], last
    changes = []
    for _seq, _prev, token, value, host, pid, label, expires, waiters in rows:
        info = None
        if token is not None:
            owner = Holder(host, pid, label)
            info = LockInfo(name, token, owner, max(0.0, expires - now), waiters, value)
        changes.append(Change(name, info))
    return changes, rows[-1][0] if rows else seen


class SQLiteWatch(Watch):
    """Reads the name's events after the last one it saw; waits on its own FIFO for more."""

    def __init__(
        self,
        name: str,
        seen: int,
        fifo: Fifo,
        changes: Callable[[int], tuple[list[Change], int]],
        unwatch: Callable[[], Awaitable[None]],
    ) -> None:
        self._name = name
        self._seen = seen
        self._wake, self._fd = fifo
        self._changes = changes  # the changes after an event: (changes, the last event)
        self._unwatch = unwatch  # forget this watch in the store
        self._closed = False

    async def next(self, timeout: float) -> list[Change]:
        if self._closed:
            raise RuntimeError("this watch is closed")
        deadline = anyio.current_time() + timeout
        while True:
            # Drain before reading: a byte written after this read (after its commit) wakes us.
            drain(self._fd)
            changes, self._seen = self._changes(self._seen)
            left = deadline - anyio.current_time()
            if changes or left <= 0:
                return changes
            await woken(self._fd, left)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._unwatch()
        except StoreUnavailable:
            pass  # its FIFO goes below: the next writer of the name drops the row as dead
        finally:
            drop(self._wake, self._fd)
