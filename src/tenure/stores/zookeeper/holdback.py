"""Lock-delay on ZooKeeper: the hold-back marker beside a lock's queue, put with a grant, taken
away with a release, stamped by the first reader that sees its grant's node gone, and counted
from that stamp by the servers' clock (docs/stores/zookeeper.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..._values import LockDelay
from .connections import Connections
from .nodes import MARK, Mark, Paths, encode, queue_of
from .session import ZooKeeperSession
from .transport import kazoo

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]

Call = Callable[[Callable[["KazooClient"], "IAsyncResult"]], Awaitable[Any]]
"""Sends a request made for a client and awaits its answer (a session's, or the reader's)."""

RETRY = 0.05
"""Seconds before attempting again after a marker changed under an attempt."""
FREE_CACHE = 1024
"""Names a session remembers as having no marker (`remember`)."""


@dataclass
class Seen:
    """The marker as a read sent with the attempt's other requests found it (None: absent)."""

    mark: Mark | None
    stat: Any


async def seen(conn: Connections, session: ZooKeeperSession, pending: IAsyncResult) -> Seen:
    """The answer to a ``get`` of the marker sent on the session's connection."""
    k = kazoo()
    try:
        data, stat = await conn.call(session, lambda: pending)
    except k.exceptions.NoNodeError:
        return Seen(None, None)
    return Seen(Mark.parse(data, stat), stat)


def put_ahead(
    client: KazooClient, path: str, marker: str, czxid: int, lock_delay: float
) -> IAsyncResult:
    """Send the own marker's create, while the own node ``path`` exists: a woken waiter is
    usually first, and then its grant needs no round trip more. If a marker stands (another
    grant's), nothing is written. Its answer goes to `put`."""
    txn = client.transaction()
    txn.check(path, -1)
    txn.create(marker, Mark(czxid, lock_delay).data())
    return txn.commit_async()


def made_by(found: Seen, attempt: str) -> bool:
    """Whether the marker as ``found`` is still as the create of ``attempt`` made it (its
    czxid then is the attempt's node's: one multi, one zxid)."""
    mark = found.mark
    return mark is not None and mark.attempt == attempt and not found.stat.version


class _Created:
    version = 0
    """A node's data version when it was just created."""


def put(czxid: int, lock_delay: float, results: list[Any]) -> Seen | None:
    """The own marker, if `put_ahead`'s multi (answered ``results``) made it; else None: a
    marker stands (or the own node is gone), to be read."""
    if any(isinstance(r, Exception) for r in results):
        return None
    return Seen(Mark(czxid, lock_delay), _Created())


async def claim(
    conn: Connections,
    session: ZooKeeperSession,
    marker: str,
    name: str,
    path: str,
    czxid: int,
    found: Seen | None = None,
) -> float:
    """0 if the session, first in line with its node ``path`` (created at ``czxid``), is
    granted ``name`` now: its own marker put if it has a lock-delay, a spent one taken
    away. Else the seconds another grant's marker still holds the name back. ``found``: the
    marker as read with the attempt's other requests (None: read it here)."""
    k = kazoo()
    client = session.client

    async def call(request: Callable[[KazooClient], IAsyncResult]) -> Any:
        return await conn.settled(session, lambda: request(client))

    ours = Mark(czxid, session.lock_delay).data()
    for _ in range(3):
        if found is None:
            try:
                data, stat = await call(lambda c: c.get_async(marker))
                found = Seen(Mark.parse(data, stat), stat)
            except k.exceptions.NoNodeError:
                found = Seen(None, None)
        mark, stat = found.mark, found.stat
        found = None
        if mark is not None and mark.token == czxid:
            session.marks[(name, czxid)] = int(stat.version)  # put with the node, or ahead
            return 0.0
        if mark is not None:
            remember(session, name, free=False)
        if mark is not None and mark.token < czxid:  # its grant's node is gone: we are first
            left = await time_left(call, conn.paths, marker, mark, stat)
            if left > 0:
                return left
        elif not session.lock_delay:
            # Absent, or a later node's (a waiter's put ahead of its turn): nothing to put,
            # and only a first in line (this one) takes markers away.
            return 0.0

        def multi(stat: Any = stat) -> IAsyncResult:
            # Only while the own node exists, over the marker as read (or its absence).
            txn = client.transaction()
            txn.check(path, -1)
            if stat is None:
                txn.create(marker, ours)
            elif session.lock_delay:
                txn.set_data(marker, ours, stat.version)
            else:
                txn.delete(marker, stat.version)
            return txn.commit_async()

        results = await conn.settled(session, multi)
        if not any(isinstance(r, k.exceptions.KazooException) for r in results):
            if session.lock_delay:
                session.marks[(name, czxid)] = 0 if stat is None else int(stat.version) + 1
            return 0.0
        if isinstance(results[0], k.exceptions.NoNodeError):
            break  # the own node is gone: the next attempt queues again (or finds it gone)
        # The marker changed meanwhile (or this multi applied, its answer lost): read again.
    return RETRY


async def take_back(conn: Connections, session: ZooKeeperSession, marker: str, stat: Any) -> None:
    """Delete the own marker put ahead of the own node's turn (at ``stat``, as read): the
    node is not first. A marker changed since is another's, and stays."""
    k = kazoo()
    with contextlib.suppress(k.exceptions.NoNodeError, k.exceptions.BadVersionError):
        await conn.settled(session, lambda: session.client.delete_async(marker, stat.version))


def remember(session: ZooKeeperSession, name: str, free: bool) -> None:
    """Note whether ``name``'s marker was last seen absent: the session's next attempt on it
    then creates its node and its marker in one multi."""
    if free:
        if len(session.free) >= FREE_CACHE:
            session.free.clear()
        session.free.add(name)
    else:
        session.free.discard(name)


async def time_left(call: Call, paths: Paths, marker: str, mark: Mark, stat: Any) -> float:
    """Seconds ``mark`` (read at ``stat``; its grant's node seen gone) still holds its name
    back, by the servers' clock: counted from the first reader that saw the node gone,
    which stamps the marker (a write: its mtime is the leader's clock then). The time now
    is the mtime of a write too (``<chroot>/locks``, whose data nobody reads)."""
    k = kazoo()
    if mark.lock_delay <= 0:
        return 0.0  # not a marker of tenure's
    try:
        if not mark.noticed:
            noticed = replace(mark, noticed=True).data()
            await call(lambda c: c.set_async(marker, noticed, stat.version))
            return mark.lock_delay
        now = await call(lambda c: c.set_async(paths.root, b""))
    except (k.exceptions.BadVersionError, k.exceptions.NoNodeError):
        return RETRY  # changed meanwhile: read it again
    return (int(stat.mtime) + mark.lock_delay * 1000 - int(now.mtime)) / 1000


async def release_marked(
    conn: Connections,
    session: ZooKeeperSession,
    marker: str,
    path: str,
    token: int,
    version: int,
) -> None:
    """Delete the own node and its marker in one multi: a clean release frees the name."""
    k = kazoo()
    client = session.client

    def multi() -> IAsyncResult:
        txn = client.transaction()
        txn.delete(path, -1)
        txn.delete(marker, version)
        return txn.commit_async()

    results = await conn.settled(session, multi)
    if not any(isinstance(r, k.exceptions.KazooException) for r in results):
        return
    # The node was gone (deleted by hand, or this multi applied, its answer lost): a marker
    # of this grant left now stands for nothing.
    await conn.delete(session, path)
    try:
        data, stat = await conn.settled(session, lambda: client.get_async(marker))
    except k.exceptions.NoNodeError:
        return
    mark = Mark.parse(data, stat)
    if mark.token == token and mark.revoked is None:  # a revoked grant's stays: its delay holds
        with contextlib.suppress(k.exceptions.NoNodeError, k.exceptions.BadVersionError):
            await conn.settled(session, lambda: client.delete_async(marker, stat.version))


async def lock_delays(conn: Connections, name: str | None = None) -> list[LockDelay]:
    """The names whose marker holds them back now (``name`` only, if given)."""
    k = kazoo()
    root = conn.paths.root
    if name is None:
        try:
            children = await conn.read(lambda c: c.get_children_async(root))
        except k.exceptions.NoNodeError:
            return []
        encoded = sorted(c[: -len(MARK)] for c in children if c.endswith(MARK))
    else:
        encoded = [encode(name)]
    client = await conn.reader()
    # Each marker is read before its queue: a queue without the marker's grant means that
    # grant's node was gone after the marker was read.
    pending = [
        (client.get_async(f"{root}/{e}{MARK}"), client.get_children_async(f"{root}/{e}"))
        for e in encoded
    ]
    found: list[LockDelay] = []
    for enc, (marked, listing) in zip(encoded, pending, strict=True):
        try:
            data, stat = await conn.answer(marked)
        except k.exceptions.NoNodeError:
            continue
        mark = Mark.parse(data, stat)
        try:
            queue = queue_of(await conn.answer(listing))
        except k.exceptions.NoNodeError:
            queue = []
        if queue:
            first = await conn.answer(client.exists_async(f"{root}/{enc}/{queue[0]}"))
            if first is not None and int(first.czxid) <= mark.token:
                continue  # its grant still holds (or a waiter's, put ahead of its turn)
        left = await time_left(conn.read, conn.paths, f"{root}/{enc}{MARK}", mark, stat)
        if left > 0:
            found.append(LockDelay(unquote(enc), mark.token, left, mark.revoked))
    return found
