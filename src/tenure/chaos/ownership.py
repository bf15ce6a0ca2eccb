"""What a partition member's worker believes it owns, kept as the history records it: ``own``
on a grant (with the lease's deadline), ``disown`` on leaving or lost — never while a write to
the item is under way. Shared by the chaos ``partition`` worker and the lose-servers drill's
worker, so that `checks.item_windows` reads both the same way."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tenure

from .history import Recorder


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


class Ownership:
    """Item → lease for the items owned now. A write to an item runs in `holding`, which
    takes that item's own lock: the item is let go only between its writes, and a slow write
    to one item holds up no other item's hand-over. ``rate``: how fast the lease clock runs
    against the host's (a drifting client clock, in chaos runs)."""

    def __init__(self, rec: Recorder, rate: float = 1.0) -> None:
        self.rec = rec
        self.rate = rate
        self.items: dict[str, tenure.Lease] = {}
        self.stopping = threading.Event()
        self._guard = threading.Lock()
        self._busy: dict[str, threading.Lock] = {}

    def _lock_of(self, item: str) -> threading.Lock:
        with self._guard:
            return self._busy.setdefault(item, threading.Lock())

    @contextmanager
    def holding(self, item: str) -> Iterator[tenure.Lease | None]:
        """The item's lease, not let go until the block ends (None: not owned now)."""
        with self._lock_of(item):
            yield None if self.stopping.is_set() else self.items.get(item)

    def with_deadline(self, lease: tenure.Lease, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` with the lease's deadline on the host's clock, if it is still ahead: a
        deadline already passed (a paused worker just woke up) says nothing new, and must not
        look like a renewal."""
        left = lease.remaining()
        return {**value, "deadline": time.monotonic() + left / self.rate} if left else value

    def consume(self, member: tenure.Member) -> None:
        """Follow ``member``'s changes until its stream ends (a thread's target)."""
        try:
            self.follow(member)
        except Exception as exc:  # the run's end closes the stream and the client under it
            if not self.stopping.is_set():  # mid-run: this member's view froze, say so
                self.rec.record("changes", "info", error=one_line(exc))

    def follow(self, member: tenure.Member) -> None:
        """Each change: ``own`` on a grant, ``disown`` on leaving or lost (no write under way)."""
        for change in member.changes():
            item, lease = change.item, change.lease
            with self._lock_of(item):
                if self.stopping.is_set():
                    continue  # the end: `let_go` lets go of everything
                if change.kind == "granted":
                    value = self.with_deadline(lease, {"item": item})
                    self.rec.record("own", "info", token=lease.token, value=value)
                    self.items[item] = lease
                elif item in self.items and self.items[item].token == lease.token:
                    del self.items[item]
                    self.disown(item, lease, change.kind)
            # asking for the next change releases a leaving item: its writes are over

    def disown(self, item: str, lease: tenure.Lease, why: str) -> None:
        self.rec.record("disown", "info", token=lease.token, value={"item": item, "why": why})

    def let_go(self) -> None:
        """The end: stop, and disown every item (no write is under way once this returns)."""
        self.stopping.set()
        for item, lease in sorted(self.items.items()):
            with self._lock_of(item):
                self.disown(item, lease, "end")
        self.items.clear()
