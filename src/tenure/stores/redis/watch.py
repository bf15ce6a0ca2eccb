"""Watches of a lock's event stream (``P:e:<name>``): one server's, or a quorum's of Redlock's
servers. Each takes only the reads it needs, not a store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

import anyio

from ..._errors import StoreUnavailable
from ..._values import Change, LockInfo
from .._kit import parse_owner
from .._spi import Watch

Events = list[tuple[str, dict[str, str]]]
"""A stream's events: (id, fields), oldest first."""
Read = Callable[[str, float], Awaitable[Events]]
"""Events after an id, waiting up to a timeout for one (``Instance.read_events`` of a name)."""
SEEN_KEPT = 1000


class Stream(NamedTuple):
    """One server's event stream of one lock."""

    last: Callable[[], Awaitable[str]]
    """The id of its last event (``0-0``: none yet)."""
    read: Read


def change_of(name: str, fields: dict[str, str]) -> Change:
    """A ``Change`` from one event of a lock's stream."""
    if "t" not in fields:
        return Change(name, None)
    owner = parse_owner(fields.get("o"))[0]
    return Change(name, LockInfo(name, int(fields["t"]), owner, 0.0, 0, fields.get("v")))


class RedisWatch(Watch):
    """The events of one lock, read from its stream after the last id seen."""

    def __init__(self, name: str, read: Read, after: str) -> None:
        self._name = name
        self._read = read
        self._after = after
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    async def next(self, timeout: float) -> list[Change]:
        if self._closed:
            return []
        events: Events = []
        with anyio.CancelScope() as self._scope:
            events = await self._read(self._after, timeout)
        self._scope = None
        if events:
            self._after = events[-1][0]
        return [change_of(self._name, fields) for _, fields in events]

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()


class RedlockWatch(Watch):
    """Every server's events of one lock; a state is reported once a quorum reported it."""

    def __init__(
        self, name: str, streams: Sequence[Stream], after: list[str | None], quorum: int
    ) -> None:
        self._name = name
        self._streams = streams
        self._after = after
        """Per server, the last id seen (None: unreachable at subscription)."""
        self._quorum = quorum
        self._seen: dict[tuple[object, ...], set[int]] = {}
        self._reported: set[tuple[object, ...]] = set()
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    async def next(self, timeout: float) -> list[Change]:
        changes: list[Change] = []
        with anyio.move_on_after(timeout) as self._scope:
            while not changes and not self._closed:
                batches = await self._read(self._scope.deadline - anyio.current_time())
                for index, events in batches:
                    for _, fields in events:
                        changes.extend(self._count(index, fields))
        self._scope = None
        return changes

    async def _read(self, timeout: float) -> list[tuple[int, Events]]:
        """Events from every server: what is there now; else wait for the first server to have
        some, then take what the others have by then too (so a quorum is usually reached in
        one call, rather than one server per call)."""
        got = await self._read_all(0.0)
        if not got and timeout > 0:
            got = await self._read_all(timeout)
            if got:
                got += await self._read_all(0.0)
        return got

    async def _read_all(self, timeout: float) -> list[tuple[int, Events]]:
        """Each server's events after the last id seen there, waiting up to ``timeout`` for the
        first server to have some (the others' reads are then cancelled)."""
        got: list[tuple[int, Events]] = []
        failed: list[StoreUnavailable] = []

        async def one(index: int, scope: anyio.CancelScope) -> None:
            stream = self._streams[index]
            try:
                if self._after[index] is None:  # unreachable at subscription: from now on
                    self._after[index] = await stream.last()
                after = self._after[index]
                assert after is not None
                events = await stream.read(after, max(0.0, timeout))
            except StoreUnavailable as exc:
                failed.append(exc)
                await anyio.sleep(max(0.0, timeout))  # a server down: the others may answer
                return
            if events:
                self._after[index] = events[-1][0]
                got.append((index, events))
                if timeout > 0:
                    scope.cancel()

        async with anyio.create_task_group() as tg:
            for index in range(len(self._streams)):
                tg.start_soon(one, index, tg.cancel_scope)
        if len(failed) == len(self._streams):
            raise failed[0]
        return got

    def _count(self, index: int, fields: dict[str, str]) -> list[Change]:
        if "t" in fields:
            state: tuple[object, ...] = ("held", fields.get("s"), fields["t"], fields.get("v"))
        else:
            state = ("free", fields.get("was"))
        servers = self._seen.setdefault(state, set())
        servers.add(index)
        if len(servers) < self._quorum or state in self._reported:
            return []
        self._reported.add(state)
        if len(self._seen) > SEEN_KEPT:  # forget the oldest states
            for old in list(self._seen)[: SEEN_KEPT // 2]:
                self._seen.pop(old, None)
                self._reported.discard(old)
        return [change_of(self._name, fields)]

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
