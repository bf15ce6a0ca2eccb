"""Records on ZooKeeper (``tenure once``): persistent nodes ``<chroot>/records/<encoded key>``,
the value their data, the version their data version + 1."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

import anyio

from ..._values import Record
from .connections import Connections
from .session import ZooKeeperSession
from .transport import kazoo, result

if TYPE_CHECKING:
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]


async def read_record(conn: Connections, key: str) -> Record | None:
    k = kazoo()
    path = conn.paths.record(key)
    try:
        data, stat = await conn.synced_read(lambda c: c.get_async(path))
    except k.exceptions.NoNodeError:
        return None
    except k.exceptions.NoAuthError:
        raise conn.denied(conn.paths.records) from None
    except k.exceptions.KazooException as exc:
        raise conn.unavailable(f"reading record {key!r}: {type(exc).__name__}") from None
    return Record(key, bytes(data or b"").decode(errors="replace"), int(stat.version) + 1)


async def write_record(conn: Connections, key: str, value: str, version: int) -> Record | None:
    k = kazoo()
    if not 0 <= version <= 2**31:
        return None  # never a record's version (ZooKeeper's are 32-bit)
    path = conn.paths.record(key)
    data = value.encode()
    client = await conn.reader()
    try:
        with anyio.fail_after(2.0):
            if version == 0:
                await result(client.create_async(path, data, makepath=True))
                return Record(key, value, 1)
            stat = await result(client.set_async(path, data, version - 1))
            return Record(key, value, int(stat.version) + 1)
    except (k.exceptions.NodeExistsError, k.exceptions.BadVersionError):
        return None  # someone wrote since (or created it first)
    except k.exceptions.NoNodeError:
        return None  # a version of a record that does not exist
    except TimeoutError:
        raise conn.unavailable("no answer to a record's write (it may apply)") from None
    except k.exceptions.NoAuthError:
        raise conn.denied(conn.paths.records) from None
    except k.exceptions.KazooException as exc:
        raise conn.unavailable(
            f"writing record {key!r}: {type(exc).__name__} (it may have applied)"
        ) from None


async def list_records(conn: Connections, prefix: str) -> list[Record]:
    k = kazoo()
    try:
        children = await conn.synced_read(lambda c: c.get_children_async(conn.paths.records))
    except k.exceptions.NoNodeError:
        return []
    except k.exceptions.NoAuthError:
        raise conn.denied(conn.paths.records) from None
    except k.exceptions.KazooException as exc:
        raise conn.unavailable(f"listing records: {type(exc).__name__}") from None
    named = sorted(
        (key.encode(), key, child)
        for key, child in ((unquote(child), child) for child in children)
        if key.startswith(prefix)
    )
    client = await conn.reader()
    # All reads sent at once (after the listing's sync): one round trip whatever the count.
    reads = [client.get_async(f"{conn.paths.records}/{child}") for _, _, child in named]
    found = []
    for (_, key, _), pending in zip(named, reads, strict=True):
        try:
            data, stat = await conn.answer(pending)
        except k.exceptions.NoNodeError:
            continue
        except k.exceptions.NoAuthError:
            raise conn.denied(conn.paths.records) from None
        except k.exceptions.KazooException as exc:
            raise conn.unavailable(f"reading record {key!r}: {type(exc).__name__}") from None
        value = bytes(data or b"").decode(errors="replace")
        found.append(Record(key, value, int(stat.version) + 1))
    return found


async def write_held(
    conn: Connections, session: ZooKeeperSession, lock: str, key: str, value: str | None
) -> bool:
    """Write (None: delete) record ``key`` in one multi with a check that the session's own
    lock node ``lock`` still exists; False if it does not (released, revoked, or the session is
    gone). A multi cannot create-or-set: set first (one round trip for a key written before),
    create if there was no node (and set again if another writer created it meanwhile). Each
    multi is safe to send again (``settled``)."""
    k = kazoo()
    path = conn.paths.record(key)
    client = session.client
    creating = False
    while True:

        def multi(creating: bool = creating) -> IAsyncResult:
            txn = client.transaction()
            txn.check(lock, -1)
            if value is None:
                txn.delete(path, -1)
            elif creating:
                txn.create(path, value.encode())
            else:
                txn.set_data(path, value.encode(), -1)
            return txn.commit_async()

        try:
            results = await conn.settled(session, multi)
        except k.exceptions.NoAuthError:
            raise conn.denied(conn.paths.records) from None
        if isinstance(results[0], k.exceptions.NoNodeError):
            return False  # the lock node is gone: the grant is over
        failed = results[1] if isinstance(results[1], k.exceptions.KazooException) else None
        if failed is None:
            return True
        if isinstance(failed, k.exceptions.NoNodeError):
            if value is None:
                return True  # nothing to delete
            if creating:  # no records node yet: made once, off the common path
                await conn.settled(session, lambda: client.ensure_path_async(conn.paths.records))
            creating = True
        elif isinstance(failed, k.exceptions.NodeExistsError):
            creating = False  # created meanwhile (or by our own earlier try): set it
        else:
            raise conn.unavailable(f"writing record {key!r}: {type(failed).__name__}")
