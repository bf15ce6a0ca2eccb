"""The store's one listening connection (LISTEN/NOTIFY), shared by its waiters and watches:
`Listener` routes each channel's notifications to its `Route` (a waiter's `Ticket`, or a name's
watches) and lets one sleeper at a time read for all."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._kit import Unavailable

try:
    import psycopg
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: PostgresStore.from_url says so
    psycopg = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection, Notify

WAITER_CHANNEL = "tenure_w_"


class Waiter(Protocol):
    """Who sleeps in `Listener.sleep`: a waiter's ticket, or a watch."""

    event: anyio.Event

    @property
    def woken(self) -> bool: ...


class Route(Protocol):
    """Where the notifications of one channel go."""

    def notified(self, payload: str) -> None: ...

    def reconnected(self) -> None:
        """A new listening connection replaced one that broke: what was in flight is gone."""

    def dropped(self) -> None:
        """The listening connection is gone: nothing is heard until one listens again."""


@dataclass(eq=False)
class Ticket:
    """A place in the queue, and the channel its wake-up comes on."""

    name: str
    seq: int
    channel: str
    listener: int
    """Backend pid of the listening connection named in the queue row."""
    woken: bool = False
    handed: int | None = None
    """The token a release handed us, as its NOTIFY said (committed: NOTIFY comes on commit)."""
    event: anyio.Event = field(default_factory=anyio.Event, repr=False)

    def notified(self, payload: str) -> None:
        """``payload`` is 'seq token' of the hand-over: ours if the seq is our place."""
        seq, _, token = payload.partition(" ")
        if seq == str(self.seq) and token.isdigit():
            self.handed = int(token)
        self.woken = True
        self.event.set()

    def reconnected(self) -> None:
        pass

    def dropped(self) -> None:
        pass  # a waiter polls meanwhile (its retry time), until attempt listens again


class Listener:
    """The store's one listening connection (LISTEN/NOTIFY), shared by its waiters and
    watches: each channel's notifications go to its `Route`.

    Whichever sleeper finds nobody reading becomes the reader and passes on the others'
    notifications; LISTEN and UNLISTEN take the connection from the reader for a moment.
    ``connect`` opens a connection; ``unavailable`` makes the error of a failure; ``timeout``
    bounds a LISTEN (with connecting) and an UNLISTEN.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[AsyncConnection[Any]]],
        unavailable: Unavailable,
        timeout: float,
    ) -> None:
        self._connect = connect
        self._timeout = timeout
        self._unavailable = unavailable
        self._lock = anyio.Lock()  # LISTEN and reading notifications take turns
        self.conn: AsyncConnection[Any] | None = None
        self.pid = 0
        """Backend pid of the listening connection (a queue row names it)."""
        self.generation = 0
        """Counts listening connections: a watch knows the one it listens on."""
        self._listening: set[str] = set()  # channels LISTENed on the current connection
        self._routes: dict[str, Route] = {}  # channel -> who hears it
        self._claimed: set[str] = set()  # channels picked by an attempt not yet returned
        self._early: dict[str, str] = {}  # channel -> a payload that came before its route
        self._waiting: set[Waiter] = set()  # inside sleep()
        self._reader: Waiter | None = None  # reading notifications for all
        self._reading: anyio.CancelScope | None = None
        self._pending = 0
        self.notifications = 0
        """Notifications received (a release wakes one waiter: one notification)."""

    # -- who hears what ----------------------------------------------------------------------

    def route(self, channel: str, to: Route) -> None:
        """From now on, ``channel``'s notifications go to ``to`` (one that came early too)."""
        self._routes[channel] = to
        early = self._early.pop(channel, None)
        if early is not None:  # its NOTIFY came before we got here
            to.notified(early)

    def unroute(self, channel: str, route: Route | None = None) -> None:
        """``channel``'s notifications go nowhere any more (if ``route``: only if to it)."""
        if route is None or self._routes.get(channel) is route:
            self._routes.pop(channel, None)
        self._early.pop(channel, None)

    def routed(self, channel: str) -> Route | None:
        return self._routes.get(channel)

    def routes(self) -> list[tuple[str, Route]]:
        return list(self._routes.items())

    def claim(self, channel: str) -> None:
        """Keep what comes on ``channel`` until it is routed (its attempt has not returned)."""
        self._claimed.add(channel)

    def unclaim(self, channel: str) -> None:
        self._claimed.discard(channel)

    def spare_channel(self, *, listened_only: bool) -> str | None:
        """A waiter's channel already listened on and free; else a new one (None if
        ``listened_only``)."""
        conn = self.conn
        if conn is not None and not conn.closed:
            for channel in self._listening:
                if (
                    channel.startswith(WAITER_CHANNEL)
                    and channel not in self._routes
                    and channel not in self._claimed
                ):
                    return channel
        return None if listened_only else f"{WAITER_CHANNEL}{uuid.uuid4().hex}"

    def lost(self, generation: int) -> bool:
        """Whether the connection of ``generation`` is gone (or replaced: not listening)."""
        conn = self.conn
        return conn is None or conn.closed or generation != self.generation

    # -- listening ---------------------------------------------------------------------------

    async def listen(self, channel: str) -> int:
        """LISTEN on ``channel`` (connecting the listener if needed); its backend pid."""
        conn = self.conn
        if conn is not None and not conn.closed and channel in self._listening:
            return self.pid
        try:
            async with self._taken():
                with anyio.fail_after(self._timeout):
                    conn = self.conn
                    reused = conn is not None and not conn.closed
                    while True:
                        if conn is None or conn.closed:
                            self._listening = set()
                            for route in list(self._routes.values()):
                                route.reconnected()
                            conn = await self._connect()
                            self.conn = conn
                            self.pid = conn.info.backend_pid
                            self.generation += 1
                        listen = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
                        try:
                            await conn.execute(listen)
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            self.drop(conn)  # died while idle: once more, afresh
                            conn, reused = None, False
                            continue
                        self._listening.add(channel)
                        return self.pid
        except (psycopg.Error, TimeoutError, OSError) as exc:
            if conn is not None:
                self.drop(conn)
            raise self._unavailable.of(exc) from exc

    async def unlisten(self, channel: str) -> None:
        conn = self.conn
        if conn is None or conn.closed or channel not in self._listening:
            return
        try:
            async with self._taken():
                if conn is self.conn and not conn.closed:
                    with anyio.fail_after(self._timeout):
                        await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
                    self._listening.discard(channel)
        except (psycopg.Error, TimeoutError, OSError):
            self.drop(conn)

    @contextlib.asynccontextmanager
    async def _taken(self) -> AsyncIterator[None]:
        """The connection, for LISTEN or UNLISTEN: the reader gives it up for a moment."""
        self._pending += 1
        try:
            if self._reading is not None:
                self._reading.cancel()
            async with self._lock:
                yield
        finally:
            self._pending -= 1

    def drop(self, conn: AsyncConnection[Any]) -> None:
        """Give ``conn`` up (if it is the listening connection: nothing listens now)."""
        if self.conn is conn:
            self.conn = None
            self._listening = set()
            for route in list(self._routes.values()):
                route.dropped()
        if not conn.closed:
            conn.pgconn.finish()  # what AsyncConnection.close() does, without awaiting

    def close(self) -> None:
        if self.conn is not None:
            self.drop(self.conn)

    # -- sleeping --------------------------------------------------------------------------

    async def sleep(self, waiter: Waiter, timeout: float) -> None:
        """Until ``waiter`` is woken (a waiter's or a watch's notification), or ``timeout``.
        If the listener is broken this is plain sleep: polling, until one listens again."""
        self._waiting.add(waiter)
        try:
            with anyio.move_on_after(timeout):
                while not waiter.woken:
                    conn = self.conn
                    if self._reader is None and conn is not None and not conn.closed:
                        await self._read_until(waiter, conn)
                    else:
                        await waiter.event.wait()
                        waiter.event = anyio.Event()
        finally:
            self._waiting.discard(waiter)
            if self._reader is None:
                for other in self._waiting:  # let another one take over the reading
                    other.event.set()
                    break

    async def _read_until(self, waiter: Waiter, conn: AsyncConnection[Any]) -> None:
        self._reader = waiter
        try:
            async with self._lock:
                if conn is not self.conn:
                    return
                with anyio.CancelScope() as scope:
                    self._reading = scope
                    if self._pending:
                        scope.cancel()  # someone needs the connection for LISTEN first
                    try:
                        while not waiter.woken:
                            # Whole batches (psycopg >= 3.2): leaving notifies() within one
                            # drops the rest of it, and a watch must see every announcement.
                            notes = conn.notifies(stop_after=1)
                            async with contextlib.aclosing(notes):
                                async for note in notes:
                                    self._dispatch(note)
                    finally:
                        self._reading = None
        except (psycopg.Error, OSError):
            self.drop(conn)  # waiters poll until attempt listens again
        finally:
            self._reader = None

    def _dispatch(self, note: Notify) -> None:
        self.notifications += 1
        route = self._routes.get(note.channel)
        if route is not None:
            route.notified(note.payload)
        elif note.channel in self._claimed:
            self._early[note.channel] = note.payload  # its attempt has not returned yet
