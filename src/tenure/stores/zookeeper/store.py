"""The ZooKeeper store: the contract's calls, over kazoo (`.transport`); a lock is a queue of
ephemeral sequential nodes whose first holds it, its token the node's czxid. How and why:
docs/stores/zookeeper.md."""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlencode

import anyio

from ..._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ..._names import nesting_problem
from ..._values import Capabilities, Holder, LockDelay, LockInfo, Record, Revocation
from .._connect import NO_OPTIONS, ConnectOptions
from .._kit import parse_url
from .._spi import Busy, Elections, Grant, Records, Revocations, Session, Store, Watch
from . import holdback, records, revoke
from .connections import Connections, NoAccess
from .nodes import Mark, Paths, encode, lock_info, log_data, queue_of, read_log, value_in
from .session import Gone, ZooKeeperSession, ZooKeeperTicket
from .transport import Transport, digest, kazoo, stop
from .watch import ZooKeeperWatch

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]

DEFAULT_PORT = 2181
DEFAULT_CHROOT = "/tenure"
USAGE = "zookeeper://[user:password@]host:port[,host:port…][/chroot][?tls=true&ca=…&cert=…&key=…]"
_CHROOT = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
_LOG_CACHE = 1024


class ZooKeeperStore(Store, Elections, Records, Revocations):
    """ZooKeeper (``zookeeper://h1:2181,h2:2181/chroot``): correctness-grade; tokens are zxids."""

    scheme: ClassVar[str] = "zookeeper"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="many",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes=(
            "token = the holder node's czxid (committed by the quorum); session = one ZooKeeper"
            " session (timeout = TTL, refused if the server grants less); waiters watch their"
            " predecessor; expires_in is an upper bound (the session timeout); lock-delay is"
            " measured by the servers' clock from when a waiter first saw the holder gone"
            " (later than the end, never earlier), enforced by tenure's own grant path"
        ),
    )

    def __init__(
        self, hosts: list[str], chroot: str = DEFAULT_CHROOT, options: ConnectOptions = NO_OPTIONS
    ) -> None:
        self.hosts = hosts
        self.chroot = chroot
        self.paths = Paths(chroot)
        self._options = options
        user = options.username if options.username and options.password else None
        transport = Transport(
            hosts,
            options.ssl_context() if options.use_tls else None,
            user,
            options.password if user is not None else None,
        )
        self._conn = Connections(transport, self.paths, has_cert=bool(options.cert))
        self._logs: dict[str, tuple[int, list[tuple[int, LockInfo]]]] = {}
        """Lock parent → (data version, proclaimed values) as this store last wrote them."""
        self.wakeups = 0
        """Predecessor watches that fired: for tests and metrics."""

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> ZooKeeperStore:
        # No message here quotes the URL, only parts after its user info, which a password
        # cannot reach: an '@' after the hosts (a password with a raw '/', '?' or '#' in it)
        # is refused first.
        checked = parse_url(url, ("zookeeper",), "zookeeper", USAGE, quote=False, fragment=None)
        parts, bad = checked.parts, checked.bad
        if "@" in parts.path + parts.query + parts.fragment:
            raise bad("'@' after the hosts (percent-encode '/', '?', '#' and '@' in a password)")
        if parts.fragment:
            raise bad("no fragment allowed")
        hosts = [f"{h}:{p}" for h, p in checked.hosts(DEFAULT_PORT)]
        chroot = unquote(parts.path).rstrip("/") or DEFAULT_CHROOT
        segments = chroot.split("/")[1:]
        if not _CHROOT.match(chroot) or any(s in (".", "..") for s in segments):
            raise bad(f"bad chroot {chroot!r} (/segments of letters, digits, '_', '.', '-')")
        if segments[0] == "zookeeper":
            raise bad("the chroot /zookeeper is ZooKeeper's own")
        problem = nesting_problem(chroot)
        if problem:
            raise bad(f"bad chroot {chroot!r}: {problem}")
        resolved = checked.resolve(options, pairs=True)
        if checked.query:
            raise bad(f"unknown option {checked.query[0][0]!r} (only tls, ca, cert and key)")
        return cls(hosts, chroot, digest(resolved))

    @property
    def url(self) -> str:
        """The URL to reach this store again: its password shown as ``***``; TLS and its
        files (their paths, never their contents) in the query."""
        user = self._options.shown_user() if self._conn.transport.user is not None else ""
        query = urlencode(self._options.shown(), safe="/")
        return f"zookeeper://{user}{','.join(self.hosts)}{self.chroot}{'?' if query else ''}{query}"

    async def reader(self) -> KazooClient:
        """The store's shared kazoo client (reads and watches), connected: for tests."""
        return await self._conn.reader()

    # -- sessions --------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        client, connection = await self._conn.open(ttl)
        granted = connection.negotiated
        if granted < ttl - 1e-3:
            await anyio.to_thread.run_sync(stop, client)
            raise InvalidArgument(
                f"ttl {ttl:g}s is longer than this ZooKeeper ensemble allows"
                f" (maxSessionTimeout {granted:g}s): use a shorter ttl"
            )
        return ZooKeeperSession(
            ttl,
            client,
            connection,
            client.client_id[0],
            secrets.token_hex(8),
            owner,
            granted,
            lock_delay=lock_delay,
        )

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, ZooKeeperSession)
        try:
            # Any request resets the session's timer on the server: the cheapest is enough.
            await self._conn.call(session, lambda: session.client.exists_async("/"))
        except Gone:
            return False
        with contextlib.suppress(Gone):  # gone meanwhile: the next keep-alive tells
            clean = partial(self._clean, session)
            await session.in_doubt.sweep(clean, within=session.patience)  # never delays for long
        return True

    async def _clean(self, session: ZooKeeperSession, doubt: tuple[str, str]) -> None:
        """Delete the nodes that a create whose answer was lost may have left."""
        k = kazoo()
        parent, prefix = doubt
        try:
            children = await self._conn.call(
                session, partial(session.client.get_children_async, parent)
            )
            for child in children:
                if child.startswith(prefix):
                    await self._conn.delete(session, f"{parent}/{child}")
        except k.exceptions.NoNodeError:
            pass

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, ZooKeeperSession)
        if session.closed:
            return
        # A clean end frees the names at once: the hold-back markers (persistent) go first.
        for name, token in list(session.marks):
            with contextlib.suppress(StoreUnavailable):
                await self.release(session, name, token)
        session.closed = True
        # Closing the ZooKeeper session deletes every node it holds or queues with.
        await anyio.to_thread.run_sync(stop, session.client)
        session.held.clear()
        session.in_doubt.clear()
        session.marks.clear()
        session.free.clear()
        session.alone.clear()
        session.crowded.clear()

    # -- locks -----------------------------------------------------------------------------

    async def _enqueue(
        self, session: ZooKeeperSession, name: str, prefix: str, look_first: bool = False
    ) -> tuple[str, int, list[str], holdback.Seen | None, Any]:
        """Create the own node (or find it, if an earlier create with this prefix applied and
        its answer was lost) → (its path, its czxid, the lock's children after it, the marker
        as read after it, the parent's stat as listed). The requests go together: one round
        trip. A session that saw the marker gone at its own release (`holdback.remember`) puts
        its marker in the multi that creates its node: an uncontended grant needs no more."""
        k = kazoo()
        client = session.client
        parent, marker = self.paths.parent(name), self.paths.marker(name)
        call = partial(self._conn.call, session)
        give_up = time.monotonic() + session.ttl
        ahead = session.lock_delay > 0 and name in session.free
        while True:
            try:
                if look_first:
                    children = await call(lambda: client.get_children_async(parent))
                    mine = [c for c in children if c.startswith(prefix)]
                    if mine:
                        path = f"{parent}/{mine[0]}"
                        stat = await call(partial(client.exists_async, path))
                        if stat is not None:
                            return path, int(stat.czxid), children, None, None
                # Sent before any answer: one round trip (a session's answers come in order).
                node = f"{parent}/{prefix}"
                if ahead:
                    txn = client.transaction()
                    txn.create(node, session.data(), ephemeral=True, sequence=True)
                    txn.create(marker, Mark(0, session.lock_delay, attempt=prefix).data())
                    create = txn.commit_async()
                else:
                    create = client.create_async(
                        node, session.data(), ephemeral=True, sequence=True, include_data=True
                    )
                listing = client.get_children_async(parent, include_data=True)
                # The marker matters to the first in line only: not read where this session
                # last found others queued (if first after all, `holdback.claim` reads it).
                read = client.get_async(marker) if ahead or name not in session.crowded else None
                created = await call(partial(_same, create))
                look_first = True  # from here on, a lost answer may hide an applied create
                children, listed = await call(partial(_same, listing))
                found = None if read is None else await holdback.seen(self._conn, session, read)
            except k.exceptions.NoNodeError:
                await self._conn.settled(session, lambda: client.ensure_path_async(parent))
                continue
            except NoAccess:
                raise
            except StoreUnavailable:
                look_first = True
                if time.monotonic() > give_up:
                    session.in_doubt.add((parent, prefix))
                    raise
                await anyio.sleep(0.02)
                continue
            if ahead:
                failed = [r for r in created if isinstance(r, k.exceptions.KazooException)]
                if failed:
                    if isinstance(created[0], k.exceptions.NoNodeError):
                        await self._conn.settled(session, lambda: client.ensure_path_async(parent))
                    holdback.remember(session, name, free=False)  # a marker stands: as usual
                    ahead = look_first = False
                    continue
                path = str(created[0])
                if found is not None and holdback.made_by(found, prefix):
                    return path, int(found.stat.czxid), children, found, listed  # one zxid
                stat = await call(partial(client.exists_async, path))  # changed meanwhile
                if stat is None:
                    raise Gone  # only the session's end deletes it
                return path, int(stat.czxid), children, None, listed
            path, stat = created
            if stat.ephemeralOwner != session.session_id:  # never expected: not our session's
                await self._conn.delete(session, path)
                raise Gone
            return path, int(stat.czxid), children, found, listed

    async def _recheck(
        self, session: ZooKeeperSession, name: str, ticket: ZooKeeperTicket
    ) -> tuple[list[str], holdback.Seen | None, Any]:
        """A waiter's listing, sent with the marker's read, or with a lock-delay with the own
        marker's create (usually the waiter is first now: its grant then needs nothing more;
        None: the marker stands, `holdback.claim` reads it)."""
        k = kazoo()
        client = session.client
        parent, marker = self.paths.parent(name), self.paths.marker(name)
        give_up = time.monotonic() + session.ttl
        while True:
            delay = session.lock_delay
            if delay:
                pending = holdback.put_ahead(client, ticket.path, marker, ticket.czxid, delay)
            else:
                pending = client.get_async(marker)
            listing = client.get_children_async(parent, include_data=True)
            try:
                if delay:
                    put = await self._conn.call(session, partial(_same, pending))
                    found = holdback.put(ticket.czxid, delay, put)
                else:
                    found = await holdback.seen(self._conn, session, pending)
                try:
                    children, listed = await self._conn.call(session, partial(_same, listing))
                except k.exceptions.NoNodeError:
                    children, listed = [], None
                return children, found, listed
            except NoAccess:
                raise
            except StoreUnavailable:
                if time.monotonic() > give_up:
                    raise
                await anyio.sleep(0.02)

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, ZooKeeperSession)
        assert ticket is None or isinstance(ticket, ZooKeeperTicket)
        try:
            if ticket is not None:
                children, found, listed = await self._recheck(session, name, ticket)
                if ticket.path.rsplit("/", 1)[1] in children:
                    return await self._in_line(session, name, ticket, enqueue, ticket.path,
                                               ticket.czxid, children, found, listed)  # fmt: skip
                ticket.path = ""  # deleted under us (by hand?): queue again at the end
            path, czxid, children, found, listed = await self._enqueue(
                session, name, session.prefix()
            )
            if ticket is not None:  # the caller's: it leaves the queue with it if this fails
                ticket.path, ticket.czxid = path, czxid
            try:
                return await self._in_line(session, name, ticket, enqueue, path, czxid, children,
                                           found, listed)  # fmt: skip
            except Exception:
                if ticket is None:
                    # Neither granted nor a ticket: nobody would delete the node, and a live
                    # session's node holds up everyone queued behind it (so an item of a
                    # partition group stayed ownerless for a minute). The next keep-alive does.
                    parent, child = path.rsplit("/", 1)
                    session.in_doubt.add((parent, child))
                raise
        except Gone:
            raise LeaseLost("the ZooKeeper session is gone") from None

    async def _in_line(
        self,
        session: ZooKeeperSession,
        name: str,
        ticket: ZooKeeperTicket | None,
        enqueue: bool,
        path: str,
        czxid: int,
        children: list[str],
        found: holdback.Seen | None,
        listed: Any,
    ) -> Grant | Busy:
        """`attempt`'s judgement, the own node ``path`` in the queue as ``children`` list it:
        granted if first (and not held back), else a ticket that watches its predecessor."""
        parent, marker = self.paths.parent(name), self.paths.marker(name)
        queue = queue_of(children)
        own = path.rsplit("/", 1)[1]
        if own not in queue:  # never expected: the listing followed the create
            queue = queue_of([*children, own])
        waiting = ticket is not None or enqueue
        left: float | None = None
        if queue[0] == own:
            # The token is the czxid the create answered. The listing (sent after the
            # create, or after the wake-up) shows the node first: granted unless held back.
            left = await holdback.claim(self._conn, session, marker, name, path, czxid, found)
            if left <= 0:
                session.held[(name, czxid)] = path
                if len(queue) == 1:
                    session.alone.add((name, czxid))
                    session.crowded.discard(name)
                return Grant(token=czxid, renewed_session=False)
            holder: LockInfo | None = None  # held back: woken when the marker changes
            predecessor = marker
        else:
            if found is not None and found.mark is not None and found.mark.token == czxid:
                # Put ahead of this node's turn: taken away, or it would hold the name
                # back if this session ended before its turn.
                await holdback.take_back(self._conn, session, marker, found.stat)
                found = None
            predecessor = f"{parent}/{queue[queue.index(own) - 1]}"
            if len(session.crowded) >= _LOG_CACHE:
                session.crowded.clear()
            session.crowded.add(name)
        if not waiting:
            if queue[0] != own:
                holder = await self._holder(name, parent, queue, session.client, found, listed)
            await self._conn.delete(session, path)
            return Busy(holder=holder, ticket=None, retry_in=left)
        if ticket is None:
            ticket = ZooKeeperTicket(session, name, path, czxid)
        ticket.predecessor = predecessor
        # The watch is set now, with the holder's reads (one round trip): `wait` awaits it.
        ticket.arm()
        armed = session.client.exists_async(predecessor, watch=ticket.on_watch)
        if queue[0] != own:
            holder = await self._holder(name, parent, queue, session.client, found, listed)
        try:
            if await self._conn.call(session, partial(_same, armed)) is None:
                ticket.wake()  # gone already: attempt again at once
            ticket.armed = True
        except StoreUnavailable:
            pass  # `wait` sets the watch again
        return Busy(holder=holder, ticket=ticket, retry_in=left)

    async def _holder(
        self,
        name: str,
        parent: str,
        queue: list[str],
        client: KazooClient | None = None,
        found: holdback.Seen | None = None,
        listed: Any = None,
    ) -> LockInfo | None:
        """The holder of ``queue`` (the first node still there), with its proclaimed value;
        None if the name is held back (the marker stands for another grant). Read by
        ``client`` (the shared reader by default), the marker only if not ``found``, the
        parent's values only if its stat as ``listed`` with the queue shows any."""
        k = kazoo()
        if client is None:
            client = await self._conn.reader()
        # Sent with the first holder read: one round trip.
        empty = listed is not None and not listed.dataLength
        proclaimed = None if empty else client.get_async(parent)
        marked = client.get_async(self.paths.marker(name)) if found is None else None
        for child in queue:
            try:
                data, stat = await self._conn.answer(client.get_async(f"{parent}/{child}"), client)
            except k.exceptions.NoNodeError:
                continue  # released meanwhile: the next one holds
            try:
                log = []
                if proclaimed is not None:
                    log = read_log((await self._conn.answer(proclaimed, client))[0])
            except k.exceptions.NoNodeError:
                log = []
            try:
                mark = Mark.parse(*await self._conn.answer(marked, client)) if marked else None
                mark = found.mark if found is not None else mark
                if mark and mark.lock_delay > 0 and mark.token < int(stat.czxid):
                    return None  # held back: the first in line is not granted yet
            except k.exceptions.NoNodeError:
                pass
            return replace(lock_info(name, data, stat, len(queue)), value=value_in(log, stat.czxid))
        return None

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, ZooKeeperTicket)
        predecessor = ticket.predecessor
        # Timed by the caller: its scope ends the wait after ``timeout``.
        event = ticket.event
        if ticket.armed and event is not None:  # set by the attempt
            ticket.armed = False
            await event.wait()
            self.wakeups += 1
            return
        if predecessor is not None:
            event = ticket.arm()
            client = ticket.session.client
            try:
                stat = await self._conn.call(
                    ticket.session,
                    lambda: client.exists_async(predecessor, watch=ticket.on_watch),
                )
            except (StoreUnavailable, Gone):
                stat = None
                await anyio.sleep(0.05)  # attempt again soon: it tells what happened
            if stat is not None:
                await event.wait()
                self.wakeups += 1
            return
        await anyio.sleep(min(timeout, 0.1))

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, ZooKeeperTicket)
        if ticket.left:
            return
        ticket.left = True
        if not ticket.path:
            return
        try:  # the successor watches this node: deleting it wakes the next in line
            await self._conn.delete(ticket.session, ticket.path)
        except StoreUnavailable:
            parent, child = ticket.path.rsplit("/", 1)
            ticket.session.in_doubt.add((parent, child))  # deleted at the next keep-alive
        except Gone:
            pass  # the session's nodes are gone with it

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, ZooKeeperSession)
        path = session.held.get((name, token))
        if path is None:
            return  # never granted to this session (or released already)
        version = session.marks.get((name, token))
        alone = (name, token) in session.alone
        with contextlib.suppress(Gone):  # gone: its nodes went with it, its marker stays
            if version is None:
                await self._conn.delete(session, path)
            else:
                marker = self.paths.marker(name)
                await holdback.release_marked(self._conn, session, marker, path, token, version)
                # Its marker gone with it, and no one was waiting: the next attempt of this
                # session on the name puts its marker with its node (`_enqueue`).
                holdback.remember(session, name, free=alone)
        del session.held[(name, token)]
        session.marks.pop((name, token), None)
        session.alone.discard((name, token))

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        k = kazoo()
        root = self.paths.root
        # After a sync (answered first: no round trip more), so the reader's server has applied
        # every write committed before, another client's grant and proclaimed value included.
        if name is None:
            try:
                encoded = await self._conn.synced_read(lambda c: c.get_children_async(root))
            except k.exceptions.NoNodeError:
                return []
        else:
            encoded = [encode(name)]
        encoded = [e for e in encoded if unquote(e).startswith(prefix)]
        client = await self._conn.reader()
        if name is not None:
            client.sync_async(root)
        # All listings sent at once, then all holders: two round trips whatever the count.
        listings = [client.get_children_async(f"{root}/{e}") for e in encoded]
        queues: dict[str, list[str]] = {}
        for enc, listing in zip(encoded, listings, strict=True):
            try:
                queue = queue_of(await self._conn.answer(listing))
            except k.exceptions.NoNodeError:
                continue
            if queue:
                queues[enc] = queue
        found: list[LockInfo] = []
        for enc, queue in sorted(queues.items(), key=lambda item: unquote(item[0])):
            info = await self._holder(unquote(enc), f"{root}/{enc}", queue)
            if info is not None:
                found.append(info)
        return found

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        return await holdback.lock_delays(self._conn, name)

    # -- revocations -----------------------------------------------------------------------

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        return await revoke.revoke(self._conn, self.paths, name, token, record)

    async def revoked(self, session: Session) -> list[Revocation]:
        assert isinstance(session, ZooKeeperSession)
        try:
            return await revoke.revoked(self._conn, self.paths, session)
        except Gone:
            return []  # the next keep-alive says so

    # -- leader election -------------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, ZooKeeperSession)
        k = kazoo()
        path = session.held.get((name, token))
        if path is None:
            return False  # never granted to this session, or released
        parent = path.rsplit("/", 1)[0]
        client = session.client
        try:
            known = self._logs.pop(parent, None)  # our last write: usually still the latest
            while True:
                # The value is appended to the log in the lock's parent node, so it outlives
                # its term for watchers that read late; written only while the own node (this
                # session, this token) exists, and only over the log version read (or written)
                # last: one round trip when no one else proclaimed since.
                if known is None:
                    data, stat = await self._conn.settled(session, lambda: client.get_async(parent))
                    known = (int(stat.version), read_log(data))
                version, log = known
                body = log_data(log, session.owner, session.granted, token, value)

                def multi(version: int = version, body: bytes = body) -> IAsyncResult:
                    txn = client.transaction()
                    txn.check(path, -1)
                    txn.set_data(parent, body, version)
                    return txn.commit_async()

                results = await self._conn.settled(session, multi)
                if isinstance(results[0], k.exceptions.NoNodeError):
                    return False  # released, or the session is gone
                if not any(isinstance(r, k.exceptions.KazooException) for r in results):
                    if len(self._logs) >= _LOG_CACHE:
                        self._logs.clear()
                    self._logs[parent] = (results[1].version, read_log(body))
                    return True
                known = None
                # BadVersion: another value was proclaimed meanwhile (a retried one): again
        except (Gone, k.exceptions.NoNodeError):
            return False

    async def watch(self, name: str) -> Watch:
        client = await self._conn.reader()
        parent = self.paths.parent(name)
        await self._conn.read(lambda c: c.ensure_path_async(parent))
        watches = self._conn.watches
        watch = ZooKeeperWatch(
            name,
            parent,
            children=client.get_children_async,
            get=client.get_async,
            forget=watches.discard,
        )
        watches.add(watch)
        watch.trigger()
        try:
            with anyio.fail_after(8.0):
                await watch.primed.wait()
        except TimeoutError:
            await watch.aclose()
            raise self._conn.unavailable("could not read the lock to watch") from None
        return watch

    # -- records -------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        return await records.read_record(self._conn, key)

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        return await records.write_record(self._conn, key, value, version)

    async def list_records(self, prefix: str) -> list[Record]:
        return await records.list_records(self._conn, prefix)

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        assert isinstance(session, ZooKeeperSession)
        lock = session.held.get((name, token))
        if lock is None:
            return False  # never granted to this session, or released
        try:
            return await records.write_held(self._conn, session, lock, key, value)
        except Gone:
            return False

    async def aclose(self) -> None:
        await self._conn.aclose()


def _same(pending: IAsyncResult) -> IAsyncResult:
    return pending
