"""Revoke on ZooKeeper (docs/stores/zookeeper.md#revoke): the holder's node is deleted and the
name's hold-back marker stamped at once with the holder's session timeout plus its lock-delay,
in one multi with the notice its session reads at its next renewal."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from ..._values import Revocation
from .._kit import parse_revocation, revocation_json
from .connections import Connections
from .nodes import Mark, Paths, lock_info, queue_of
from .session import ZooKeeperSession
from .transport import kazoo

if TYPE_CHECKING:
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]


async def revoke(
    conn: Connections, paths: Paths, name: str, token: int | None, record: Revocation
) -> Revocation | None:
    """Revoke the grant of ``name`` (with ``token``, if given); None if it is not held."""
    k = kazoo()
    parent, marker = paths.parent(name), paths.marker(name)
    try:
        queue = queue_of(await conn.read(lambda c: c.get_children_async(parent)))
        first = f"{parent}/{queue[0]}" if queue else ""
        data, stat = await conn.read(lambda c: c.get_async(first)) if queue else (b"", None)
    except k.exceptions.NoNodeError:
        return None  # no queue, or its first released meanwhile
    if stat is None or not stat.ephemeralOwner:
        return None
    try:
        mark_data, mark_stat = await conn.read(lambda c: c.get_async(marker))
        mark: Mark | None = Mark.parse(mark_data, mark_stat)
    except k.exceptions.NoNodeError:
        mark = mark_stat = None
    granted = int(stat.czxid)
    if mark is not None and mark.lock_delay > 0 and mark.token < granted:
        return None  # held back: the first in line is not granted yet
    # (a marker of a later node is a waiter's, put ahead of its turn: it holds nothing back)
    if token not in (None, granted):
        return None
    # The holder's session timeout (kept in its node) and its own lock-delay (its marker's).
    own = mark.lock_delay if mark is not None and mark.token == granted else 0.0
    delay = 0.0 if record.now else lock_info(name, data, stat, 1).expires_in + own
    revoked = replace(record, token=granted, free_in=delay)
    notice = paths.notice(int(stat.ephemeralOwner), name)
    client = await conn.reader()
    with contextlib.suppress(k.exceptions.NodeExistsError):
        await conn.answer(client.ensure_path_async(paths.notices))

    def multi() -> IAsyncResult:
        # Over the holder's node and the marker as read: the marker's write is the stamp
        # (its mtime, the leader's clock) the delay counts from, as a waiter's would be.
        txn = client.transaction()
        txn.delete(first, stat.version)
        if record.now and mark is not None and mark.token <= granted:
            txn.delete(marker, mark_stat.version)
        elif not record.now:
            held = Mark(granted, delay, noticed=True, revoked=revoked).data()
            if mark_stat is None:
                txn.create(marker, held)
            else:
                txn.set_data(marker, held, mark_stat.version)
        txn.create(notice, json.dumps(revocation_json(revoked)).encode())
        return txn.commit_async()

    results = await conn.answer(multi())  # sent once: a second one would find the node gone
    if any(isinstance(r, k.exceptions.KazooException) for r in results):
        return None
    return revoked


async def revoked(conn: Connections, paths: Paths, session: ZooKeeperSession) -> list[Revocation]:
    """The session's revocation notices, read on its own connection after a ``sync``, so that
    the server it reads from has applied every revocation committed before; the notices the
    previous call returned (acted on since) are deleted."""
    k = kazoo()
    client = session.client
    mine = paths.notice(session.session_id).rsplit("/", 1)[1]
    client.sync_async(paths.notices)  # answered before the listing: a session's are in order
    try:
        children = await conn.call(session, lambda: client.get_children_async(paths.notices))
    except k.exceptions.NoNodeError:
        return []
    names = [child for child in children if child.startswith(mine)]
    pending: list[tuple[str, Any]] = [
        (child, client.get_async(f"{paths.notices}/{child}")) for child in names
    ]
    found: list[Revocation] = []
    for _, answer in pending:
        with contextlib.suppress(k.exceptions.NoNodeError, ValueError):
            data, _ = await conn.answer(answer, client)
            if (revocation := parse_revocation(json.loads(data))) is not None:
                found.append(revocation)
    for child in session.notices & set(names):
        with contextlib.suppress(k.exceptions.NoNodeError):
            await conn.call(session, partial(client.delete_async, f"{paths.notices}/{child}"))
    session.notices = set(names)
    return found
