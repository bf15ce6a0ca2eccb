"""Watches (leader election): a name's changes, announced by the server-side functions with a
NOTIFY on the name's channel, heard on the store's listening connection (`Listener`); one
registration per name and store in ``watchers`` (the ``watch`` function)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from ..._errors import StoreUnavailable
from ..._values import Change, Holder, LockInfo
from .._kit import owner_of
from .._spi import Watch
from .connection import Commands, Row, one, statement
from .listener import Listener

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.sql import Composed

WATCH_CHANNEL = "tenure_o_"


def watch_channel(schema: str, name: str) -> str:
    """The channel of ``name``'s announcements (a channel is an identifier: <= 63 bytes)."""
    digest = hashlib.sha256(f"{schema}\0{name}".encode()).hexdigest()
    return WATCH_CHANNEL + digest[:32]


class Announcements:
    """The `Route` of one name's channel: its open watches on this store, and the parts of a
    long announcement (see the ``announce`` function)."""

    def __init__(self, name: str, channel: str) -> None:
        self.name = name
        self.channel = channel
        self.watches: list[PostgresWatch] = []
        self._parts: list[str] = []

    def notified(self, payload: str) -> None:
        """Queue the change that ``payload`` announces."""
        if payload.startswith(("+", "$")):  # one part of a long one
            piece = payload.partition(" ")[2]
            if payload[0] == "+":
                self._parts.append(piece)
                return
            payload, self._parts = "".join(self._parts) + piece, []
        try:
            data = json.loads(payload)
            if "mark" in data:
                for watch in self.watches:
                    if watch.mark == data["mark"]:
                        watch.mark, watch.mark_at = None, len(watch.changes)
                return
            holder = None
            if "token" in data:
                value = data["value"]
                holder = LockInfo(
                    self.name, int(data["token"]), owner_of(data), float(data["expires"]), 0, value
                )
        except (ValueError, TypeError, KeyError):
            return  # not ours: anyone may NOTIFY any channel
        for watch in self.watches:
            if watch.mark is None:
                watch.changes.append(Change(watch.name, holder))
                watch.event.set()

    def reconnected(self) -> None:
        self._parts.clear()  # the rest of those will never come

    def dropped(self) -> None:
        self._parts.clear()
        for watch in self.watches:
            watch.event.set()  # to listen again and report the state (see next)


class PostgresWatch(Watch):
    """The changes of one name, announced on its channel to the store's listening connection.

    If that connection is lost or replaced, ``next`` listens and registers again and reports the
    state then as one change (the changes missed meanwhile are summed up in it, not each
    reported); while it cannot, ``next`` raises ``StoreUnavailable``.
    """

    def __init__(
        self,
        announcements: Announcements,
        listener: Listener,
        commands: Commands,
        q: Mapping[str, Composed],
    ) -> None:
        self._announcements = announcements
        self._listener = listener
        self._commands = commands
        self._q = q
        self.name = announcements.name
        self.channel = announcements.channel
        self.changes: list[Change] = []
        self.mark: str | None = ""
        """Our registration's own NOTIFY, until it comes: what comes before it is older."""
        self.mark_at = 0
        """Where in ``changes`` our mark came: the state read by the registration goes there."""
        self.pid = 0
        """Backend pid of the listening connection we registered."""
        self.generation = -1
        """Of the listening connection we listen on (see `Listener.listen`)."""
        self.closed = False
        self.event = anyio.Event()

    @property
    def woken(self) -> bool:
        return bool(self.changes) or self._listener.lost(self.generation)

    async def subscribe(self, *, report: bool) -> None:
        """Listen and register (see the ``watch`` function): changes after that are announced.
        If ``report``, queue the state then as one change, where it belongs: before what is
        announced after our mark."""
        self.mark = ""  # nothing counts until our new mark comes
        pid = await self._listener.listen(self.channel)
        generation = self._listener.generation

        async def register(conn: AsyncConnection[Any]) -> Row:
            self.mark = uuid.uuid4().hex  # a new one if sent again
            params = {
                "name": self.name,
                "channel": self.channel,
                "listener": pid,
                "mark": self.mark,
            }
            return await one(conn, self._q["watch"], params)

        row = await self._commands.run(register)
        assert row is not None
        self.pid, self.generation = pid, generation
        if report:
            token, value, host, pid, label, expires_in = row
            holder = None
            if token is not None:
                holder = LockInfo(
                    self.name, int(token), Holder(host, pid, label), expires_in, 0, value
                )
            at = len(self.changes) if self.mark is not None else self.mark_at
            self.changes.insert(at, Change(self.name, holder))

    async def next(self, timeout: float) -> list[Change]:
        deadline = anyio.current_time() + timeout
        while not self.closed:
            if not self.changes and self._listener.lost(self.generation):
                await self.subscribe(report=True)  # queues a change, or raises
            remaining = deadline - anyio.current_time()
            if self.changes or remaining <= 0:
                break
            await self._listener.sleep(self, remaining)
        changes, self.changes = self.changes, []
        return changes

    async def aclose(self) -> None:
        """Stop listening and unregister once the name's last watch here closes (best effort:
        what is left is dropped when the listening connection ends)."""
        if self.closed:
            return
        self.closed = True
        self.event.set()
        watches = self._announcements.watches
        if self in watches:
            watches.remove(self)
        if watches:
            return  # others here still watch the name
        self._listener.unroute(self.channel, self._announcements)
        await self._listener.unlisten(self.channel)
        listeners = [self.pid, self._listener.pid]
        unwatch = statement(self._q["unwatch"], {"name": self.name, "listeners": listeners})
        with contextlib.suppress(StoreUnavailable):
            await self._commands.run(unwatch)
