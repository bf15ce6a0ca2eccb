"""The watch of one lock's holder (`EtcdWatch`): one key range followed from a known revision."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from itertools import groupby

import anyio

from .._spi import Change, Watch
from .keys import b64, created, lock_info, prefix_end, range_op, unb64
from .transport import JSON

Stream = Callable[[JSON], AbstractAsyncContextManager[AsyncIterator[JSON]]]
"""Opens a watch stream (``Transport.watch``): its ``result`` messages, until it breaks."""


class EtcdWatch(Watch):
    """The changes of one lock's holder, from one key range watched from a known revision.

    The keys of the range (the holder and its queue) are kept here as the watch reports them;
    after each revision's events (etcd never splits a revision over two messages) the lowest
    create revision is the holder, and a change of it or of its value is a `Change`. Waiters
    joining or leaving the queue change neither, so they are not reported. A stream is open only
    while ``next`` waits; each starts right after the last revision applied, so nothing is missed
    in between. If etcd compacted that revision away (or cancelled the watch), the range is read
    again and its state, if it differs from the last one reported, is one change: the changes in
    the compacted gap are lost, never reported out of order or twice.
    """

    def __init__(
        self,
        name: str,
        prefix: bytes,
        kvs: list[JSON],
        revision: int,
        *,
        watch: Stream,
        read: Callable[[JSON], Awaitable[JSON]],
    ) -> None:
        """``kvs`` at ``revision``: the range of ``prefix`` read at subscription; ``watch``
        opens a watch stream (a transport's), ``read`` makes one range read."""
        self._name = name
        self._prefix = prefix
        self._open = watch
        self._read = read
        self._keys: dict[bytes, JSON] = {}
        self._revision = revision
        """Every event up to this revision is applied to ``_keys``."""
        self._shown: tuple[int, str | None] | None = None
        """(create revision, raw value) of the holder last reported (or read at subscription)."""
        self._pending: list[Change] = []
        self._scope: anyio.CancelScope | None = None
        self._closed = False
        self._reset(kvs, revision)
        self._pending.clear()  # the state at subscription is not a change

    def _reset(self, kvs: list[JSON], revision: int) -> None:
        self._keys = {unb64(kv["key"]): kv for kv in kvs}
        self._revision = revision
        self._note()

    def _note(self) -> None:
        holder = min(self._keys.values(), key=created, default=None)
        state = None if holder is None else (created(holder), holder.get("value"))
        if state != self._shown:
            self._shown = state
            info = None if holder is None else lock_info(self._name, holder, len(self._keys), 0.0)
            self._pending.append(Change(self._name, info))

    def _apply(self, events: list[JSON]) -> None:
        for revision, group in groupby(events, key=lambda e: int(e["kv"].get("mod_revision", 0))):
            if revision <= self._revision:
                continue  # applied already (never expected: each stream starts after it)
            for event in group:
                kv = event["kv"]
                if event.get("type") == "DELETE":  # PUT is 0, which etcd's JSON omits
                    self._keys.pop(unb64(kv["key"]), None)
                else:
                    self._keys[unb64(kv["key"])] = kv
            self._revision = revision
            self._note()  # one state per revision: a lease's revocation is one change

    async def next(self, timeout: float) -> list[Change]:
        if not self._pending and not self._closed:
            try:
                with anyio.move_on_after(timeout) as self._scope:
                    while not self._pending and not self._closed:
                        await self._listen()
            finally:
                self._scope = None
        # Changes are queued as they are applied, so a timeout or a caller's cancellation at any
        # await never loses one: they come with the next call.
        changes, self._pending = self._pending, []
        return changes

    async def _listen(self) -> None:
        """One stream from the revision after the last applied, until it yields a change."""
        end = prefix_end(self._prefix)
        create = {
            "key": b64(self._prefix),
            "range_end": b64(end),
            "start_revision": str(self._revision + 1),
        }
        cancelled = False
        async with self._open({"create_request": create}) as results:
            async for result in results:
                if result.get("canceled"):  # compacted past our revision, or cut by the member
                    cancelled = True
                    break
                self._apply(result.get("events") or [])
                if self._pending:
                    return
        if cancelled:
            answer = await self._read(range_op(self._prefix, end))
            self._reset(answer.get("kvs", []), int(answer["header"]["revision"]))
        if not self._pending:
            await anyio.sleep(0.1)  # the stream broke (the member is skipped): again, soon

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
