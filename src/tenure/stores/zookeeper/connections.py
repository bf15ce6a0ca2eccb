"""The ZooKeeper store's connections: the shared reader (reads and watches) and each session's,
how long their requests are waited for and sent again, what their errors mean, and the check
of the namespace's ACLs made once with credentials."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ..._errors import InvalidArgument, StoreUnavailable
from .._kit import Unavailable, patience
from .nodes import Paths
from .session import Gone, ZooKeeperSession
from .transport import (
    Transport,
    connection_classes,
    connection_of,
    drop_connection,
    kazoo,
    result,
    start,
    stop,
)
from .watch import ZooKeeperWatch

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]

READ_SESSION = 10.0
"""Session timeout of the shared connection for reads and watches (kazoo pings it)."""
READ_CONNECT_ROUND = 3.0
"""The shared connection's TCP connects to every server, one round, take at most this long:
a server cut off (its packets dropped) costs a reconnect this over the number of servers, not
the 10 s session's share (1.4 s each of seven: three cut ones held a drill's reads 4.3 s)."""
ANSWER_MOST = 10.0
"""Longest wait for one answer of `Connections.answer` while its connection answers others."""
SILENT_TRIES = 2
"""A read unanswered this many times in a row (2 s each) leaves the reader's server."""


class NoAccess(StoreUnavailable):
    """A node's ACL refused us: sending the request again cannot help."""


class Connections:
    """The clients of one store: the shared reader, made on first use, and one per session."""

    def __init__(self, transport: Transport, paths: Paths, has_cert: bool = False) -> None:
        self.transport = transport
        self.paths = paths
        self.unavailable = Unavailable(f"zookeeper at {', '.join(transport.hosts)}")
        self._has_cert = has_cert
        self._guarded = False
        """The namespace's ACLs were checked (with credentials only): once per store."""
        self._reader: KazooClient | None = None
        self._reader_lock = threading.Lock()
        self._reader_starting = anyio.Lock()
        self._reader_started = False
        self.watches: weakref.WeakSet[ZooKeeperWatch] = weakref.WeakSet()
        """The open watches: read again when the reader reconnects."""

    # -- errors ----------------------------------------------------------------------------

    def denied(self, path: str) -> NoAccess:
        """A node's ACL refused a request: with credentials, they are wrong (ZooKeeper's digest
        accepts any at connect and refuses at the first access), or the chroot is another
        user's; without, the chroot is some user's."""
        user = self.transport.user
        if user is not None:
            why = (
                f"authentication failed for user {user!r} (no access to {path}): a wrong"
                " password, or the chroot belongs to another user"
            )
        else:
            why = f"no access to {path}: its ACL admits a ZooKeeper user only (give user:password)"
        return NoAccess(f"{self.unavailable.where}: {why}")

    def _cannot_connect(self, exc: StoreUnavailable) -> StoreUnavailable:
        why = str(exc)
        if why.startswith("TLS failed") and "alert" in why and not self._has_cert:
            why += " (the server refused this client: does it demand a client certificate?)"
        return self.unavailable(why)

    # -- the namespace's ACLs --------------------------------------------------------------

    async def _guard(self, client: KazooClient) -> None:
        """With credentials, once per store: make the chroot and its ``locks`` and ``records``
        if missing (with this user's ACL), then check that each is this user's alone. Nodes
        that others may change (made before credentials were used, or by someone else) would
        let them delete or forge its locks. Made before they are read: from then on the chroot
        is never empty, so nobody can delete and replace it (deleting a node is its parent's
        ACL's to allow: for ``/``, by ZooKeeper's default, anyone's). Wrong credentials show
        here, as no access."""
        if self.transport.user is None or self._guarded:
            return
        k = kazoo()
        mine = self.transport.mine().id
        chroot = self.paths.chroot
        await self._guarded_answer(chroot, client.ensure_path_async(chroot))
        paths = [chroot, self.paths.root, self.paths.records]
        made = [client.create_async(path) for path in paths[1:]]
        reads = [client.get_acls_async(path) for path in paths]  # all sent: one round trip
        for answer in made:
            with contextlib.suppress(k.exceptions.NodeExistsError):
                await self._guarded_answer(chroot, answer)  # no access to the chroot
        for path, answer in zip(paths, reads, strict=True):
            acls, _ = await self._guarded_answer(path, answer)
            self._judge(path, acls, mine, ~k.security.Permissions.READ)
        self._guarded = True

    async def _guarded_answer(self, path: str, pending: IAsyncResult) -> Any:
        k = kazoo()
        try:
            with anyio.fail_after(5.0):
                return await result(pending)
        except k.exceptions.NoAuthError:
            raise self.denied(path) from None
        except k.exceptions.NodeExistsError:
            raise
        except (TimeoutError, k.exceptions.KazooException) as exc:
            raise self.unavailable(f"checking the ACL of {path}: {type(exc).__name__}") from None

    def _judge(self, path: str, acls: list[Any], mine: Any, writes: int) -> None:
        """Refuse a node whose ACL lets anyone but this user change it, or not this user."""
        others = sorted({a.id.scheme for a in acls if a.id != mine and a.perms & writes})
        if others:
            raise InvalidArgument(
                f"zookeeper store: others than user {self.transport.user!r} may change {path}"
                f" ({', '.join(others)}: made without these credentials?), so they could delete"
                " or forge its locks: set its ACL to this user's digest only, or use a new chroot"
            )
        if not any(a.id == mine for a in acls):
            raise self.denied(path)

    # -- a session's connection --------------------------------------------------------------

    async def open(self, ttl: float) -> tuple[KazooClient, Any]:
        """A session's client, connected (and the namespace checked): with its connection,
        which tells the timeout the server granted."""
        retry = {"delay": 0.02, "backoff": 1.5, "max_delay": max(0.05, min(1.0, ttl / 4))}
        client = self.transport.client(ttl, retry, connection_classes()[1])
        connection = connection_of(client)

        def on_state(state: str) -> None:  # kazoo's thread: the session is over for good
            if state == "LOST" and connection.negotiated:
                connection.ended = True

        client.add_listener(on_state)
        try:
            within = patience(ttl, 10.0, floor=2.0, share=1)
            await anyio.to_thread.run_sync(start, client, within)
        except StoreUnavailable as exc:
            raise self._cannot_connect(exc) from None
        try:
            await self._guard(client)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(stop, client)
            raise
        return client, connection

    async def call(self, session: ZooKeeperSession, request: Callable[[], IAsyncResult]) -> Any:
        """One request on the session, answered within its patience. Raises `Gone` if the
        session expired, ``StoreUnavailable`` on connection loss or no answer (then the
        connection is dropped, so kazoo tries the next server with the same session)."""
        if session.gone or session.closed:
            raise Gone
        pending = request()
        if pending.ready():  # sent with an earlier request whose answer was awaited
            return await self._answered(session, pending)
        connection = connection_of(session.client)
        give_up = time.monotonic() + max(session.ttl, session.patience)
        while True:
            answers = connection.answers
            with anyio.move_on_after(session.patience):
                return await self._answered(session, pending)
            if connection.answers == answers or time.monotonic() > give_up:
                break  # silent, not busy: a server that does not answer (paused, cut)
            # The server answered earlier requests meanwhile: ours is queued behind them (a
            # thousand waiters of one session), not lost. Dropping the connection would fail
            # every one of them; wait on.
        self._unstick(session.client)
        raise self.unavailable(f"no answer within {session.patience:.2g}s")

    async def _answered(self, session: ZooKeeperSession, pending: IAsyncResult) -> Any:
        """The answer to a session's request, its errors said as `call` says them."""
        k = kazoo()
        try:
            return await result(pending)
        except k.exceptions.SessionExpiredError:
            raise Gone from None
        except (k.exceptions.ConnectionLoss, k.exceptions.ConnectionClosedError) as exc:
            if session.gone or session.closed:
                raise Gone from None
            raise self.unavailable(f"connection lost ({type(exc).__name__})") from None
        except k.exceptions.OperationTimeoutError:
            raise self.unavailable("operation timed out") from None
        except k.exceptions.NoAuthError:
            raise self.denied(self.paths.chroot) from None

    async def settled(self, session: ZooKeeperSession, request: Callable[[], IAsyncResult]) -> Any:
        """An idempotent request, sent again through connection losses for up to the session's
        TTL (after which the session is gone anyway)."""
        give_up = time.monotonic() + session.ttl
        while True:
            try:
                return await self.call(session, request)
            except NoAccess:
                raise
            except StoreUnavailable:
                if time.monotonic() > give_up:
                    raise
                await anyio.sleep(0.02)

    async def delete(self, session: ZooKeeperSession, path: str) -> None:
        """Delete the node ``path`` of the session (`settled`); already gone is as well."""
        k = kazoo()
        with contextlib.suppress(k.exceptions.NoNodeError):
            await self.settled(session, lambda: session.client.delete_async(path))

    # -- the shared reader -------------------------------------------------------------------

    def _reader_client(self) -> KazooClient:
        with self._reader_lock:
            if self._reader is None:
                watched, _ = connection_classes()
                retry = {"delay": 0.05, "max_delay": 1.0}
                client = self.transport.client(
                    READ_SESSION, retry, watched, connect_round=READ_CONNECT_ROUND
                )
                client.add_listener(self._on_reader_state)
                self._reader = client
            return self._reader

    def _on_reader_state(self, state: str) -> None:  # kazoo's thread
        if state == "CONNECTED":
            for watch in list(self.watches):
                watch.trigger()  # watches were dropped with the old connection: re-read

    async def reader(self) -> KazooClient:
        """The shared connection for reads and watches, connected."""
        client = self._reader_client()
        if client.connected:
            return client
        async with self._reader_starting:
            if not self._reader_started:
                try:
                    await anyio.to_thread.run_sync(start, client, 5.0, abandon_on_cancel=True)
                except StoreUnavailable as exc:
                    raise self._cannot_connect(exc) from None
                self._reader_started = True
                await self._guard(client)
                return client
        # Started once, it reconnects by itself (unlimited retries). Starting it again would
        # wait for the running connection loop to stop, which it never does.
        with anyio.move_on_after(5.0):
            while not client.connected:
                await anyio.sleep(0.02)
            await self._guard(client)
            return client
        why = connection_of(client).tls_refused(everywhere=False) or "no server answers"
        raise self.unavailable(why)

    @staticmethod
    def _unstick(client: KazooClient) -> None:
        """A request went unanswered on a connection kazoo thinks is up: leave that server
        (kazoo goes to the next with the same session). kazoo finds a dead server only by a
        ping unanswered while nothing else is sent: the reader is seldom idle that long."""
        if client.connected:
            drop_connection(client)

    async def read(self, request: Callable[[KazooClient], IAsyncResult]) -> Any:
        """A read on the shared connection; sent again through connection losses for a while."""
        k = kazoo()
        give_up = time.monotonic() + 8.0
        silent = 0  # time-outs in a row: a slow server answers the next try, a dead one never
        while True:
            client = await self.reader()
            answers = connection_of(client).answers
            try:
                with anyio.fail_after(2.0):
                    return await result(request(client))
            except (TimeoutError, k.exceptions.ConnectionLoss, k.exceptions.SessionExpiredError):
                busy = connection_of(client).answers != answers  # answering others first
                silent = silent + 1 if client.connected and not busy else 0
                if silent >= SILENT_TRIES:  # not on the first: it would lose every request
                    self._unstick(client)  # in flight on the connection, not only this one
                    silent = 0
                if time.monotonic() > give_up:
                    raise self.unavailable("no answer") from None
                await anyio.sleep(0.05)
            except k.exceptions.ConnectionClosedError:
                raise self.unavailable("connection closed") from None
            except k.exceptions.NoAuthError:
                raise self.denied(self.paths.chroot) from None

    async def synced_read(self, read: Callable[[KazooClient], IAsyncResult]) -> Any:
        """``read`` on the shared connection right after a ``sync``: one session's requests are
        served in order, so the server catches up with the leader before answering it."""

        def request(client: KazooClient) -> IAsyncResult:
            client.sync_async(
                self.paths.records
            )  # its answer is not awaited: the read's comes after
            return read(client)

        return await self.read(request)

    async def answer(self, pending: IAsyncResult, client: KazooClient | None = None) -> Any:
        """The answer to a request sent (no second try) on the shared connection, or on
        ``client``'s: waited for 2 s, and on while that connection answers others first."""
        k = kazoo()
        connection = connection_of(client if client is not None else self._reader_client())
        give_up = time.monotonic() + ANSWER_MOST
        try:
            while True:
                answers = connection.answers
                with anyio.move_on_after(2.0):
                    return await result(pending)
                if connection.answers == answers or time.monotonic() > give_up:
                    raise TimeoutError
        except (TimeoutError, k.exceptions.ConnectionLoss, k.exceptions.SessionExpiredError):
            raise self.unavailable("no answer") from None
        except k.exceptions.ConnectionClosedError:
            raise self.unavailable("connection closed") from None
        except k.exceptions.NoAuthError:
            raise self.denied(self.paths.chroot) from None

    async def aclose(self) -> None:
        """Close the watches, then the shared reader."""
        for watch in list(self.watches):
            await watch.aclose()
        with self._reader_lock:
            reader, self._reader = self._reader, None
            self._reader_started = False
        if reader is not None:
            await anyio.to_thread.run_sync(stop, reader)
