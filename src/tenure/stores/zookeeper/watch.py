"""The ZooKeeper store's `Watch`: the changes of one lock, followed with one-shot watches."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from ..._values import Change, Holder, LockInfo
from .._spi import Watch
from .nodes import lock_info, queue_of, read_log, value_in
from .transport import kazoo, waker

if TYPE_CHECKING:
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]

SETTLE = 0.05
"""Longest wait for a watch's read chain in flight, or for a bare grant's value, before changes
are handed out."""

Read = Callable[..., "IAsyncResult"]
"""A kazoo read of one path with a watch (``get_async``, ``get_children_async``)."""


class ZooKeeperWatch(Watch):
    """The changes of one lock's holder, followed with one-shot watches on kazoo's threads.

    Each event (the queue changed, a value was proclaimed, the holder's node changed, the
    connection came back) re-reads the queue and the lock's last proclaimed value (the parent's
    data, which names its term), then the holder, with new watches: one read chain at a time (an
    event during a chain runs it once more). What the reads show is turned into changes in
    order: a proclaimed value not yet reported (its term's grant first, if that was missed too),
    then the holder now; a new holder that was not queued at the previous read took a free lock,
    so the release before it is reported too.
    """

    def __init__(
        self,
        name: str,
        parent: str,
        *,
        children: Read,
        get: Read,
        forget: Callable[[ZooKeeperWatch], None],
    ) -> None:
        """Of the lock ``name`` whose queue is ``parent``: read with ``children`` and ``get``
        (the shared reader's); ``forget`` is called on `aclose`."""
        self._name = name
        self._parent = parent
        self._children = children
        self._get = get
        self._forget = forget
        self._lock = threading.Lock()
        self._pending: list[Change] = []
        self._shown: tuple[int, str | None] | None = None
        self._top = 0  # the highest token reported (or seen at subscription)
        self._cversion = -1  # the parent's child version at the previous read
        self._number = 0  # the last proclaimed value's number reported (or seen at subscription)
        self._queued: set[str] = set()  # the queue at the previous read
        self._running = False
        self._again = False
        self._closed = False
        self._call = waker()
        self._event = anyio.Event()
        self.primed = anyio.Event()
        self._is_primed = False

    # kazoo's threads ------------------------------------------------------------------------

    def trigger(self, _event: object = None) -> None:
        with self._lock:
            if self._closed:
                return
            if self._running:
                self._again = True
                return
            self._running = True
        self._read_queue()

    def _read_queue(self) -> None:
        try:
            listing = self._children(self._parent, watch=self.trigger)
            proclaimed = self._get(self._parent, watch=self.trigger)
        except Exception:  # closed client
            self._finish(failed=True)
            return
        # Answers come in order: when the second is in, so is the first.
        proclaimed.rawlink(lambda _: self._got_queue(listing, proclaimed))

    def _got_queue(self, listing: IAsyncResult, proclaimed: IAsyncResult) -> None:
        try:
            queue = queue_of(listing.get_nowait())
            data, parent = proclaimed.get_nowait()
        except Exception:  # NoNode (deleted by hand) or connection lost: the reader's
            self._finish(failed=True)
            return
        log = read_log(data)
        with self._lock:
            before, self._cversion = self._cversion, int(parent.cversion)
        if not queue:
            self._note(queue, log, None)
            self._finish()
            return
        holder = self._get(f"{self._parent}/{queue[0]}", watch=self.trigger)
        holder.rawlink(lambda answer: self._got_holder(answer, queue, log, parent, before))

    def _got_holder(
        self,
        answer: IAsyncResult,
        queue: list[str],
        log: list[tuple[int, LockInfo]],
        parent: Any,
        before: int,
    ) -> None:
        k = kazoo()
        try:
            data, stat = answer.get_nowait()
        except k.exceptions.NoNodeError:
            self._vanished(queue, parent, before)
            with self._lock:
                self._again = True  # released meanwhile: read again
            self._finish()
            return
        except Exception:
            self._finish(failed=True)
            return
        self._note(queue, log, lock_info(self._name, data, stat, len(queue)))
        self._finish()

    def _vanished(self, queue: list[str], parent: Any, before: int) -> None:
        """The holder was released before it could be read. If its creation was the only
        change to the queue since the previous read (of an empty queue), the parent's pzxid
        is its czxid: its term is reported (its owner unknown)."""
        with self._lock:
            only = queue == [queue[0]] and not self._queued and self._shown is None
            if only and self._is_primed and int(parent.cversion) == before + 1:
                who = Holder("?", 0, "released before it could be read")
                self._emit(LockInfo(self._name, int(parent.pzxid), who, 0.0))
                self._queued = set(queue)

    def _finish(self, failed: bool = False) -> None:
        with self._lock:
            again = self._again and not self._closed and not failed
            self._again = False
            self._running = again
        if again:
            self._read_queue()

    def _emit(self, info: LockInfo | None) -> None:
        state = None if info is None else (info.token, info.value)
        if state != self._shown:
            self._shown = state
            self._pending.append(Change(self._name, info))
            if info is not None:
                self._top = max(self._top, info.token)

    def _note(
        self, queue: list[str], log: list[tuple[int, LockInfo]], holder: LockInfo | None
    ) -> None:
        with self._lock:
            if not self._is_primed:  # the state at subscription is not a change
                self._is_primed = True
                if holder is not None:
                    self._shown = (holder.token, value_in(log, holder.token))
                    self._top = holder.token
                self._number = log[-1][0] if log else 0
                self._queued = set(queue)
                self._call(self.primed.set)
                return
            before = len(self._pending)
            for number, entry in log:  # values proclaimed since the last read, in order
                if number <= self._number or entry.token < self._top:
                    continue
                if self._shown is None or self._shown[0] != entry.token:
                    if self._shown is not None:
                        self._emit(None)  # that term ended before this one began
                    self._emit(replace(entry, name=self._name, value=None))  # its grant
                self._emit(replace(entry, name=self._name))
            if log:
                self._number = max(self._number, log[-1][0])
            if holder is None:
                self._emit(None)
            else:
                value = value_in(log, holder.token)
                new = self._shown is None or self._shown[0] != holder.token
                if new and self._shown is not None and queue[0] not in self._queued:
                    self._emit(None)  # it took a free lock: the release came first
                if new and value is not None:
                    self._emit(replace(holder, value=None))  # its grant, before its value
                self._emit(replace(holder, value=value))
            self._queued = set(queue)
            changed = len(self._pending) > before
        if changed:
            self._call(self._wake)

    def _unsettled(self) -> bool:
        with self._lock:
            last = self._pending[-1].holder if self._pending else None
            return self._running or (last is not None and last.value is None)

    def _wake(self) -> None:  # on the loop
        self._event.set()

    # the event loop -------------------------------------------------------------------------

    async def next(self, timeout: float) -> list[Change]:
        with anyio.move_on_after(timeout):
            while True:
                with self._lock:
                    ready = bool(self._pending)
                if ready:
                    # Let a read chain in flight finish first, and give a bare grant a moment
                    # for its value (a campaign proclaims right after its grant), so changes
                    # made together come out together.
                    settle = anyio.current_time() + SETTLE
                    while anyio.current_time() < settle and self._unsettled():
                        await anyio.sleep(0.001)
                    with self._lock:
                        changes, self._pending = self._pending, []
                    return changes
                self._event = anyio.Event()
                await self._event.wait()
        return []

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
        self._forget(self)
