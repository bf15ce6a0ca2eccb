"""kazoo, as the ZooKeeper store uses it: the client with its TLS handler and digest identity,
the hand-over of kazoo's answers to the event loop, and every reach into kazoo's private
internals, each behind a small named function (checked against kazoo 2.11.0).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import sniffio

from ..._errors import InvalidArgument, StoreUnavailable
from .._connect import ConnectOptions, tls_failure

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]


_KAZOO: list[Any] = []


def kazoo() -> Any:
    """The kazoo package, imported on first use (only users of this store need it)."""
    if _KAZOO:
        return _KAZOO[0]  # called for every answer: no import statements each time
    try:
        import kazoo.client  # type: ignore[import-untyped]
        import kazoo.exceptions  # type: ignore[import-untyped]
        import kazoo.protocol.connection  # type: ignore[import-untyped]
        import kazoo.security  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - depends on the installation
        raise InvalidArgument(
            "the zookeeper store needs kazoo: pip install 'tenure[zookeeper]'"
        ) from None
    _KAZOO.append(kazoo)
    return kazoo


# -- kazoo's private internals: every use, here ------------------------------------------------


def install_connection(client: KazooClient, connection: type) -> None:
    """Give ``client`` a connection handler of class ``connection``."""
    # kazoo takes no connection class; KazooClient.__init__ builds _connection so (2.11.0).
    client._connection = connection(client, client._conn_retry.copy(), logger=client.logger)


def connection_of(client: KazooClient) -> Any:
    """The connection handler of ``client`` (one of `connection_classes`)."""
    # kazoo does not expose its connection handler: tenure's state lives on it (2.11.0).
    return client._connection


def drop_connection(client: KazooClient) -> None:
    """Drop the current server's connection: kazoo tries the next one with the same session."""
    # No public call does it; kazoo's own ping timeout sends _CONNECTION_DROP so (2.11.0).
    client._call(kazoo().protocol.connection._CONNECTION_DROP, None)


def server_port(client: KazooClient) -> int:
    """The port of the server ``client`` is connected to now (for tests)."""
    # Which server a client talks to is not exposed but through its socket (2.11.0).
    return int(client._connection._socket.getpeername()[1])


def _stopping(client: KazooClient) -> bool:
    # kazoo tells no "stop() was called" but by this event (2.11.0).
    return bool(client._stopped.is_set())


def direct_results(handler_class: Any) -> Any:
    """``handler_class`` whose async results and watches run a callback marked ``direct`` on
    the thread that sets the result or reads the event (kazoo's connection thread), not
    through a queue's worker thread: one thread crossing less per answer and per wake-up.
    Only tenure's hand-overs to a loop are marked (`result`'s, a waiter's watch): they
    schedule a call on a loop, never block, never call back into kazoo."""
    from kazoo.handlers.threading import AsyncResult  # type: ignore[import-untyped,unused-ignore]

    class DirectResult(AsyncResult):  # type: ignore[misc]
        # Overridden: kazoo queues every rawlink callback for its completion thread and
        # offers no other way (2.11.0); called with the result's condition held.
        def _do_callbacks(self) -> None:
            callbacks: list[Any] = getattr(self, "_callbacks")  # noqa: B009 (untyped)
            queued = []
            for callback in callbacks:
                if getattr(callback, "direct", False):
                    callback(self)
                else:
                    queued.append(callback)
            if queued:
                self._callbacks = queued
                try:
                    super()._do_callbacks()
                finally:
                    self._callbacks = callbacks

    class Handler(handler_class):  # type: ignore[misc]
        def async_result(self) -> Any:
            return DirectResult(self)

        # Overridden: every watch goes through the callback queue's thread otherwise (2.11.0).
        def dispatch_callback(self, callback: Any) -> None:
            if getattr(callback.func, "direct", False):
                callback.func(*callback.args)
            else:
                super().dispatch_callback(callback)

    return Handler


_CLASSES: dict[str, type] = {}


def connection_classes() -> tuple[type, type]:
    """kazoo's connection that remembers TLS failures (for the shared reader), and the one of
    a tenure session: besides, no pings of its own and no new session after expiry."""
    if _CLASSES:
        return _CLASSES["watched"], _CLASSES["session"]
    from kazoo.exceptions import ConnectionDropped
    from kazoo.protocol.connection import STOP_CONNECTING, ConnectionHandler
    from kazoo.protocol.serialization import Connect  # type: ignore[import-untyped]

    class WatchedConnection(ConnectionHandler):  # type: ignore[misc]
        """kazoo logs a failed handshake and tries again forever: the last failure of each
        server is kept here, for `start` to give up with it."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.tls_failures: dict[tuple[str, int], str] = {}
            self.answers = 0
            """Messages read from the servers: a request unanswered while this grows is
            queued behind others, not lost (a connection's answers come in order)."""

        # Overridden: the one place every message from the server passes (2.11.0).
        def _read_socket(self, read_timeout: float) -> Any:
            answer = super()._read_socket(read_timeout)
            self.answers += 1
            return answer

        # Overridden: the one place a server's handshake failure can be seen (2.11.0).
        def _connect(self, host: str, hostip: str, port: int) -> Any:
            try:
                answer = super()._connect(host, hostip, port)
            except Exception as exc:  # the SSLError is the context of kazoo's ConnectionDropped
                reason = tls_failure(exc)
                if reason is not None:
                    self.tls_failures[(host, port)] = reason
                raise
            self.tls_failures.pop((host, port), None)
            return answer

        def tls_refused(self, everywhere: bool = True) -> str | None:
            """A TLS failure, once every server's handshake failed (or once any did)."""
            hosts = {(host, int(port)) for host, port in self.client.hosts}
            if self.tls_failures and (not everywhere or hosts <= set(self.tls_failures)):
                return next(iter(self.tls_failures.values()))
            return None

    class SessionConnection(WatchedConnection):
        negotiated = 0.0
        """The session timeout the server granted (seconds)."""
        ended = False
        """The session expired or was closed: never connect again (kazoo would make a new one)."""

        # Overridden: the Connect answer (the negotiated timeout) is seen nowhere else (2.11.0).
        def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
            answer = super()._invoke(timeout, request, xid)
            if isinstance(request, Connect):
                if answer[0].time_out <= 0:
                    self.ended = True  # "session expired": never again a new one
                else:
                    self.negotiated = answer[0].time_out / 1000.0
            return answer

        # Overridden: kazoo pings on its own, with no setting to stop it (2.11.0).
        def _send_ping(self, connect_timeout: float) -> None:
            # The session is kept alive by tenure's keep-alive alone. While closing, no answer
            # to the close may come (a paused server): stop waiting for it.
            if _stopping(self.client):
                raise ConnectionDropped("closing")

        # Overridden: after expiry kazoo would open a new session, silently (2.11.0).
        def _connect_attempt(self, host: str, hostip: str, port: int, retry: Any) -> Any:
            if self.ended:
                return STOP_CONNECTING
            return super()._connect_attempt(host, hostip, port, retry)

    _CLASSES.update(watched=WatchedConnection, session=SessionConnection)
    return WatchedConnection, SessionConnection


# -- kazoo → event loop ------------------------------------------------------------------------


def waker() -> Callable[[Callable[[], object]], None]:
    """A thread-safe, non-blocking way to run a function on the current event loop."""
    if sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()

        def call(fn: Callable[[], object]) -> None:
            with contextlib.suppress(RuntimeError):  # closed loop: nobody waits any more
                loop.call_soon_threadsafe(fn)

        return call
    trio = importlib.import_module("trio")
    token = trio.lowlevel.current_trio_token()

    def call_trio(fn: Callable[[], object]) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(fn)

    return call_trio


class Wakeup:
    """A one-shot wake-up for one waiting task: `set` on the loop, `set_soon` (or
    `on_result`, a kazoo result's callback) from kazoo's connection thread. On asyncio, a bare
    future made only while a task waits: an ``anyio.Event`` keeps an asyncio event and its
    deque (0.8 kB) for as long as it lives, and a thousand waiters of one client keep one each
    (and every request made one)."""

    __slots__ = ("_call", "_event", "_future", "_set")

    def __init__(self, call: Callable[[Callable[[], object]], None]) -> None:
        self._call = call  # `waker()`: runs a function on the loop, from any thread
        self._set = False
        self._future: asyncio.Future[None] | None = None
        self._event: anyio.Event | None = None  # on other backends than asyncio

    def set(self) -> None:
        self._set = True
        if self._future is not None and not self._future.done():
            self._future.set_result(None)
        if self._event is not None:
            self._event.set()

    def set_soon(self) -> None:
        self._call(self.set)

    def on_result(self, _result: object) -> None:
        self._call(self.set)

    on_result.direct = True  # type: ignore[attr-defined]  # see `direct_results`

    async def wait(self) -> None:
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if sniffio.current_async_library() != "asyncio":
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
            return
        self._future = future = asyncio.get_running_loop().create_future()
        try:
            await future
        finally:
            self._future = None


async def result(async_result: IAsyncResult) -> Any:
    """Await a kazoo result; kazoo's thread only schedules the wake-up on the loop. An answer
    already in (the later ones of requests sent together) is taken at once, without a hop."""
    if not async_result.ready():
        done = Wakeup(waker())
        async_result.rawlink(done.on_result)
        await done.wait()
    try:
        return async_result.get_nowait()
    except RuntimeError as exc:
        # kazoo fails the pending requests with what broke their connection, e.g. "xids do not
        # match" after bytes were lost on the way: a connection loss like any other.
        raise kazoo().exceptions.ConnectionLoss(str(exc)) from exc


# -- the log -----------------------------------------------------------------------------------


class _Scrub(logging.Filter):
    """Masks the passwords in use in kazoo's log records (its DEBUG log shows each request,
    the digest ``auth`` one with ``user:password`` in it)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            text = record.getMessage()
            masked = text
            for secret in sorted(self.secrets, key=len, reverse=True):  # "pw" after "my-pw"
                masked = masked.replace(secret, "***")
            if masked != text:
                record.msg, record.args = masked, ()
        return True


KAZOO_LOG = logging.getLogger("tenure.zookeeper.kazoo")
KAZOO_LOG.addHandler(logging.NullHandler())  # kazoo's reconnect chatter: not on stderr
_SCRUB = _Scrub()
KAZOO_LOG.addFilter(_SCRUB)


# -- the client --------------------------------------------------------------------------------


def digest(options: ConnectOptions) -> ConnectOptions:
    """A digest identity is ``user:password``: a user name with ':' could never match."""
    if options.username is not None and ":" in options.username:
        raise InvalidArgument("zookeeper store: a digest user name cannot contain ':'")
    return options


def _handler(context: ssl.SSLContext | None, connect_within: float) -> Any:
    """kazoo's threading handler, each TCP connect given ``connect_within`` seconds (the TLS
    handshake that follows, kazoo's time), its sockets wrapped by ``context`` if there is one.

    kazoo gives a TCP connect the whole session timeout: one server that drops packets (cut
    off, or its machine gone) then costs the session before the next server is tried. The Java
    client's share instead: the session timeout over the number of servers.

    kazoo's own TLS (``use_ssl``) trusts the system's roots in addition to ``ca``, presents no
    client certificate unless a separate key file is given, and checks no host name by default;
    this context is tenure's everywhere: ``ca`` alone (else the system's roots), ``cert`` with
    or without ``key``, the host name as written in the URL always checked.
    """
    from kazoo.handlers.threading import SequentialThreadingHandler  # type: ignore[import-untyped,unused-ignore]
    from kazoo.handlers.utils import create_tcp_connection  # type: ignore[import-untyped]

    class Handler(direct_results(SequentialThreadingHandler)):  # type: ignore[misc]
        def create_connection(
            self, address: tuple[str, int], hostname: str | None = None, **options: Any
        ) -> socket.socket:
            timeout = options.get("timeout")
            within = connect_within if timeout is None else min(timeout, connect_within)
            sock: socket.socket = create_tcp_connection(socket, address, timeout=within)
            if context is None:
                return sock
            sock.settimeout(timeout)  # a server that answered: its handshake as long as kazoo's
            try:
                return context.wrap_socket(sock, server_hostname=hostname or address[0])
            except BaseException:
                sock.close()
                raise

    return Handler()


@dataclass
class Transport:
    """How this store's clients reach the ensemble: its hosts, TLS, the digest identity."""

    hosts: list[str]
    tls: ssl.SSLContext | None = None
    user: str | None = None
    """The digest user (None: no credentials, ZooKeeper's open ACL)."""
    password: str | None = None

    def __post_init__(self) -> None:
        if self.user is not None and self.password:
            _SCRUB.secrets.add(self.password)

    def mine(self) -> Any:
        """The ACL of this digest identity alone (with credentials only)."""
        assert self.user is not None and self.password is not None
        return kazoo().security.make_digest_acl(self.user, self.password, all=True)

    def client(
        self,
        timeout: float,
        retry: dict[str, float],
        connection: type,
        connect_round: float | None = None,
    ) -> KazooClient:
        """A kazoo client with this store's TLS and credentials: every node it creates gets
        the ACL of this digest identity alone (without credentials, ZooKeeper's open ACL).
        kazoo sends the credentials again on every reconnection (a ZooKeeper connection's
        identity is not its session's). A round of TCP connects to every server takes at most
        ``connect_round`` seconds (default: the session ``timeout``), each its share."""
        k = kazoo()
        within = (timeout if connect_round is None else connect_round) / len(self.hosts)
        extra: dict[str, object] = {"handler": _handler(self.tls, within)}
        if self.user is not None:
            extra.update(
                auth_data=[("digest", f"{self.user}:{self.password}")], default_acl=[self.mine()]
            )
        client = k.client.KazooClient(
            hosts=",".join(self.hosts),
            timeout=timeout,
            logger=KAZOO_LOG,
            connection_retry={"max_tries": -1, **retry},
            **extra,
        )
        install_connection(client, connection)
        return client


def start(client: KazooClient, timeout: float) -> None:
    """Connect (in a worker thread: it blocks), within ``timeout``. kazoo would try forever;
    once every server has failed the TLS handshake, this gives up at once and says why: a
    certificate that does not verify does not get better by trying again."""
    connection = connection_of(client)
    connection.tls_failures.clear()  # a failure before a restart is not news
    try:
        live = client.start_async()
        give_up = time.monotonic() + timeout
        refused = None
        while not live.wait(0.02) and time.monotonic() < give_up:
            refused = connection.tls_refused()
            if refused is not None:
                break
    except Exception as exc:  # a socket error
        stop(client)
        raise StoreUnavailable(f"cannot connect ({type(exc).__name__}: {exc})") from None
    if client.connected:
        return
    refused = refused or connection.tls_refused(everywhere=False)
    stop(client)
    if refused is not None:
        raise StoreUnavailable(refused)
    raise StoreUnavailable(f"cannot connect (no server answered within {timeout:g}s)")


def stop(client: KazooClient) -> None:
    """Close the session and the connection (in a worker thread: kazoo's ``stop`` blocks)."""
    try:
        client.stop()
        client.close()
    except Exception:
        pass  # closing: nothing left to do about it
