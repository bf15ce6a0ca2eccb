"""The ZooKeeper store: ``zookeeper://[user:password@]host:port[,host:port…][/chroot]``
(default chroot ``/tenure``), with ``?tls=true``, ``ca``, ``cert``, ``key`` (`._connect`).

Spoken with kazoo, through its ``*_async`` calls only: each result is handed to the waiting event
loop thread-safely (``_result``), and kazoo's watch callbacks only set events or issue further
reads, so no user code ever runs on kazoo's threads and both tenure APIs (the sync one runs this
async core on its own loop thread) work unchanged.

- **Session = one kazoo connection = one ZooKeeper session** whose timeout is the TTL. The
  connection sends no pings of its own (``_SessionConnection``): the server's session timer is
  reset only by tenure's ``keep_alive`` (one confirmed round trip) and by the session's requests,
  so a holder that stops renewing loses its nodes when the *server* says so. If the server
  negotiates a timeout shorter than the TTL (its ``maxSessionTimeout``), ``open_session`` refuses
  (``InvalidArgument``): the client's deadline must never outlive the server's expiry; a longer
  one (``minSessionTimeout``) is kept: a crashed holder's lock then lives that long. After a
  connection loss kazoo reconnects to any server with the same session (the same ephemeral nodes:
  the same leases and tokens); meanwhile ``keep_alive`` raises ``StoreUnavailable``, and the core
  declares loss at the deadline counted from the last confirmed contact. Once the session has
  expired it never comes back as a new one: ``keep_alive`` answers False, ``attempt`` raises
  ``LeaseLost``.
- **Lock = a queue of ephemeral sequential nodes** ``<chroot>/locks/<percent-encoded name>/
  <session tag>-<n>-<sequence>``; the name keeps no ``/`` and no ``.`` segment, so no name escapes
  its parent. The holder is the lowest sequence; the **token is its node's czxid** (the zxid of
  its creation: global, monotonic, committed by the quorum before the answer; unlike sequence
  numbers it keeps growing when the parent is deleted and recreated).
- **One attempt = 1 round trip**: the create and the ``get_children`` are sent together (a
  session's requests are answered in order, so the listing sees the create); uncontended
  acquire + release is create + delete, the floor. The node's name prefix is unique to this
  attempt, so a create whose answer was lost (connection loss) is found again among the children
  rather than made twice; a prefix still in doubt is cleaned at the next keep-alive. An attempt
  that will not wait (``enqueue=False``) deletes its node when it is not first: no trace.
- **Waiting** sets an ``exists`` watch on the predecessor only: one wake-up per release, no herd,
  arrival order (sequence order).
- **Release** deletes the own node by its path, which embeds the attempt's unique prefix and
  sequence: it can only be this session's node with this token.
- **Lock-delay** (rule 8). Ephemeral nodes vanish when the ensemble expires the session, but
  ZooKeeper has no timer precise enough to hold a name back after that (TTL nodes are reaped
  by a 60 s container sweep), so the delay is measured on the servers' clock by tenure's own
  grant path. A grant of a session with a delay puts a persistent *marker*
  ``<chroot>/locks/<encoded name>%held`` (beside the lock's parent, outside its queue), with
  the grant's token and lock-delay, in a multi checking its own node; a release deletes node
  and marker in one multi (``close_session`` releases each first). The first in line that finds
  a marker of another grant (its node gone without a release) stamps it (a versioned
  ``setData``: its mtime is the leader's clock), and is granted only once the server's time
  (the mtime of a write to ``<chroot>/locks``) is ``lock_delay`` past that stamp, in a multi
  checking its own node and the marker's version (which replaces the marker, or deletes it
  for a session with no delay). So the delay counts from when a reader (a waiter, or
  ``held_back``) first saw the end: later than the end, never earlier; and it holds only on
  tenure's grant path (ZooKeeper has no write conditional on time). Meanwhile the first in line
  watches the marker and retries when the delay is up; the others wait for their predecessor.
- **expires_in** of a holder: ZooKeeper does not tell a session's time left, so it is the
  holder's session timeout (in its node's data): an upper bound, exact right after a renewal.
- **Leader election.** ``proclaim`` rewrites the holder node's data (owner and value) by its own
  path, which exists only while this session holds the lock with this token. ``watch`` follows
  the queue with one-shot watches (ZooKeeper 3.8 and kazoo 2.11 have no persistent watches in
  reach), re-armed by the very reads that follow each event, on kazoo's thread, without waiting
  for the caller. A change that lands between an event and the re-read is seen coalesced with
  it: a grant whose node already carries a value (data version > 0) is still reported as the
  grant (value None) then the value, but two values set within one round trip, or a whole term
  granted and released within one, may be missed. Events never come out of order.
- **TLS** (against a server's ``secureClientPort``, Netty's): tenure's own ``ssl`` context,
  through a kazoo handler whose sockets it wraps (`_tls_handler`): ``ca`` alone, else the
  system's roots; the client certificate (``cert``, its key in ``key`` or in the same file);
  the host name as written in the URL checked against the certificate. kazoo's own TLS
  (``use_ssl``) can check host names (``check_hostname``, off by default) but always trusts the
  system's roots beside ``ca`` and shows no certificate without a separate key file: not used.
  kazoo logs a failed handshake and tries again forever; the connection kept here records each
  server's last TLS failure (the ``SSLError`` behind kazoo's ``ConnectionDropped``), and a
  connect gives up as soon as every server has failed one: ``StoreUnavailable("TLS failed:
  certificate verify failed …")`` in milliseconds rather than a time-out.
- **Authentication: digest** ``user:password``, sent by kazoo on every connection (again after
  each reconnection: a connection's identity is not its session's). Every node tenure makes
  (the chroot and its parents, ``locks``, ``records``, lock queues and their nodes, records)
  gets the ACL of that identity alone (``make_digest_acl(user, password, all=True)``), so other
  clients of the ensemble, without credentials or with other ones, can neither read, delete
  nor forge them (deleting the chroot itself is for its parent's ACL to allow, but tenure never
  leaves it empty). ZooKeeper accepts any digest at connect; wrong credentials are refused at
  the first access. So a store with credentials first makes its three namespace nodes if
  missing and reads their ACLs, once (`_guard`): no access is one line, ``StoreUnavailable``
  ("authentication failed for user 'x' (no access to /chroot) …"), as the other stores say of
  wrong credentials and as it is when another user owns the chroot; a node that others may
  change (made before credentials were used) is ``InvalidArgument``: a setting to fix, with
  the fix. Without credentials nodes keep ZooKeeper's open ACL, as before; a ``NoAuth`` at any
  later request is the same one line, never retried. The server reads a digest with its JVM's
  default charset: UTF-8 from Java 18 on, before only with ``-Dfile.encoding=UTF-8`` (else a
  password beyond ASCII never matches). kazoo's debug log shows the digest request: the
  passwords in use are masked in its records (`_Scrub`).
- **Namespaces.** A chroot with a segment ``locks`` or ``records`` is refused: ``/a/locks``
  would be chroot ``/a``'s lock named ``locks``. Names and record keys are percent-encoded into
  one segment of ASCII (`_encode`): ``a/b``, ``..``, ``../x`` are single children of ``locks``,
  never a path.
- **Records** (``tenure once``) are persistent nodes ``<chroot>/records/<percent-encoded key>``
  (one level: the key keeps no ``/``), beside ``<chroot>/locks``; the node's data is the value,
  and the record's version is the node's data version + 1 (ZooKeeper's count from 0). A create
  is a ``create`` (refused if the node exists), a replacement a ``set`` at the data version read
  (refused otherwise): each atomic on the server and committed by the quorum before the answer.
  They go over the shared reader connection and are sent once: a write whose answer was lost
  raises ``StoreUnavailable`` (sent again, it would be refused by its own write). Reads follow
  a ``sync`` (pipelined: no extra round trip), so they see every write committed before them;
  ``list_records`` lists the children, keeps the keys under the prefix and sorts them by their
  UTF-8 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import re
import secrets
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, unquote, urlencode, urlsplit

import anyio
import sniffio

from .._errors import InvalidArgument, LeaseLost, StoreUnavailable
from .._names import nesting_problem
from ._connect import NO_OPTIONS, ConnectOptions, parse_hosts, resolve, tls_failure
from ._spi import (
    Busy,
    Capabilities,
    Change,
    Elections,
    Grant,
    HeldBack,
    LockInfo,
    Owner,
    Record,
    Records,
    Session,
    Store,
    Watch,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.interfaces import IAsyncResult  # type: ignore[import-untyped]

DEFAULT_PORT = 2181
DEFAULT_CHROOT = "/tenure"
_CHROOT = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
_SEQUENCE = re.compile(r"-(\d{10})$")
_MARK = "%held"
_RETRY = 0.05
"""Seconds before attempting again after a marker changed under an attempt."""
"""Suffix of a lock's hold-back marker beside its parent (``%he`` is never a percent-escape)."""


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


_KAZOO_LOG = logging.getLogger("tenure.zookeeper.kazoo")
_KAZOO_LOG.addHandler(logging.NullHandler())  # kazoo's reconnect chatter: not on stderr
_SCRUB = _Scrub()
_KAZOO_LOG.addFilter(_SCRUB)
READ_SESSION = 10.0
"""Session timeout of the shared connection for reads and watches (kazoo pings it)."""


# -- kazoo → event loop --------------------------------------------------------------------


def _waker() -> Callable[[Callable[[], object]], None]:
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


async def _result(async_result: IAsyncResult) -> Any:
    """Await a kazoo result; kazoo's thread only schedules ``done.set`` on the loop."""
    done = anyio.Event()
    call = _waker()
    async_result.rawlink(lambda _: call(done.set))
    await done.wait()
    try:
        return async_result.get_nowait()
    except RuntimeError as exc:
        # kazoo fails the pending requests with what broke their connection, e.g. "xids do not
        # match" after bytes were lost on the way: a connection loss like any other.
        raise _kazoo().exceptions.ConnectionLoss(str(exc)) from exc


def _kazoo() -> Any:
    try:
        import kazoo.client  # type: ignore[import-untyped]
        import kazoo.exceptions  # type: ignore[import-untyped]
        import kazoo.protocol.connection  # type: ignore[import-untyped]
        import kazoo.security  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - depends on the installation
        raise InvalidArgument(
            "the zookeeper store needs kazoo: pip install 'tenure[zookeeper]'"
        ) from None
    return kazoo


_CLASSES: dict[str, type] = {}


def _connection_classes() -> tuple[type, type]:
    """kazoo's connection that remembers TLS failures (for the shared reader), and the one of
    a tenure session: besides, no pings of its own and no new session after expiry."""
    if _CLASSES:
        return _CLASSES["watched"], _CLASSES["session"]
    from kazoo.exceptions import ConnectionDropped
    from kazoo.protocol.connection import (
        STOP_CONNECTING,
        ConnectionHandler,
    )
    from kazoo.protocol.serialization import Connect  # type: ignore[import-untyped]

    class WatchedConnection(ConnectionHandler):  # type: ignore[misc]
        """kazoo logs a failed handshake and tries again forever: the last failure of each
        server is kept here, for ``_start`` to give up with it."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.tls_failures: dict[tuple[str, int], str] = {}

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

        def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
            answer = super()._invoke(timeout, request, xid)
            if isinstance(request, Connect):
                if answer[0].time_out <= 0:
                    self.ended = True  # "session expired": never again a new one
                else:
                    self.negotiated = answer[0].time_out / 1000.0
            return answer

        def _send_ping(self, connect_timeout: float) -> None:
            # The session is kept alive by tenure's keep-alive alone. While closing, no answer
            # to the close may come (a paused server): stop waiting for it.
            if self.client._stopped.is_set():
                raise ConnectionDropped("closing")

        def _connect_attempt(self, host: str, hostip: str, port: int, retry: Any) -> Any:
            if self.ended:
                return STOP_CONNECTING
            return super()._connect_attempt(host, hostip, port, retry)

    _CLASSES.update(watched=WatchedConnection, session=SessionConnection)
    return WatchedConnection, SessionConnection


def _tls_handler(context: ssl.SSLContext) -> Any:
    """kazoo's threading handler, its sockets wrapped by ``context``.

    kazoo's own TLS (``use_ssl``) trusts the system's roots in addition to ``ca``, presents no
    client certificate unless a separate key file is given, and checks no host name by default;
    this context is tenure's everywhere: ``ca`` alone (else the system's roots), ``cert`` with
    or without ``key``, the host name as written in the URL always checked.
    """
    from kazoo.handlers.threading import SequentialThreadingHandler  # type: ignore[import-untyped]
    from kazoo.handlers.utils import create_tcp_connection  # type: ignore[import-untyped]

    class TLSHandler(SequentialThreadingHandler):  # type: ignore[misc]
        def create_connection(
            self, address: tuple[str, int], hostname: str | None = None, **options: Any
        ) -> socket.socket:
            sock = create_tcp_connection(socket, address, timeout=options.get("timeout"))
            try:  # the handshake, within the socket's connect timeout
                return context.wrap_socket(sock, server_hostname=hostname or address[0])
            except BaseException:
                sock.close()
                raise

    return TLSHandler()


# -- names and paths -----------------------------------------------------------------------


def _encode(name: str) -> str:
    encoded = quote(name, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def _queue(children: list[str]) -> list[str]:
    """The lock's nodes in arrival order (foreign children ignored)."""
    numbered = []
    for child in children:
        match = _SEQUENCE.search(child)
        if match:
            numbered.append((int(match.group(1)), child))
    return [child for _, child in sorted(numbered)]


def _info(name: str, data: bytes, stat: Any, count: int) -> LockInfo:
    try:
        fields = json.loads(data)
        who = Owner(str(fields["host"]), int(fields["pid"]), str(fields.get("label", "")))
        value = fields.get("value")
        ttl = float(fields.get("ttl", 0.0))
    except (ValueError, KeyError, TypeError, AttributeError):
        who, value, ttl = Owner("?", 0, "not written by tenure"), None, 0.0
    value = value if isinstance(value, str) else None
    return LockInfo(name, int(stat.czxid), who, ttl, max(0, count - 1), value)


_LOG_CACHE = 1024
SETTLE = 0.05
"""Longest wait for a watch's read chain in flight, or for a bare grant's value, before changes
are handed out."""
LOG_LENGTH = 32
"""Proclaimed values kept in a lock's parent node, for watchers that read late."""


def _log(data: bytes) -> list[tuple[int, LockInfo]]:
    """The values last proclaimed on a lock (its parent node's data): (number, term + value)."""
    entries = []
    try:
        for fields in json.loads(data)["log"] if data else []:
            who = Owner(str(fields["host"]), int(fields["pid"]), str(fields.get("label", "")))
            value = fields["value"]
            value = value if isinstance(value, str) else None
            entries.append((int(fields["n"]), LockInfo("", int(fields["token"]), who, 0, 0, value)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
    return entries


def _fields(info: LockInfo) -> dict[str, object]:
    who = info.owner
    return {
        "host": who.host,
        "pid": who.pid,
        "label": who.label,
        "token": info.token,
        "value": info.value,
    }


def _value(log: list[tuple[int, LockInfo]], token: int) -> str | None:
    """The value last proclaimed in the term ``token`` (None: none yet)."""
    return next((info.value for _, info in reversed(log) if info.token == token), None)


@dataclass(frozen=True)
class _Mark:
    """A lock's hold-back marker: which grant it stands for, that grant's lock-delay, and
    whether a reader has seen the grant's node gone (the marker's mtime then says when)."""

    token: int
    lock_delay: float
    noticed: bool = False

    @classmethod
    def parse(cls, data: bytes | None) -> _Mark:
        try:
            fields = json.loads(data or b"")
            return cls(
                int(fields["token"]), float(fields["lock_delay"]), bool(fields.get("noticed"))
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls(0, 0.0)  # not tenure's: holds nothing back

    def data(self) -> bytes:
        fields: dict[str, object] = {"token": self.token, "lock_delay": self.lock_delay}
        if self.noticed:
            fields["noticed"] = True
        return json.dumps(fields).encode()


def _digest(options: ConnectOptions) -> ConnectOptions:
    """A digest identity is ``user:password``: a user name with ':' could never match."""
    if options.username is not None and ":" in options.username:
        raise InvalidArgument("zookeeper store: a digest user name cannot contain ':'")
    return options


# -- sessions and tickets --------------------------------------------------------------------


@dataclass(eq=False)
class ZooKeeperSession(Session):
    ttl: float
    client: KazooClient
    connection: Any
    session_id: int
    tag: str
    fields: dict[str, object]
    counter: int = 0
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    """(name, token) → own node path of the grants this session holds."""
    doubt: set[tuple[str, str]] = field(default_factory=set)
    """(parent, prefix) of creates whose answer was lost: deleted at the next keep-alive."""
    closed: bool = False
    lock_delay: float = 0.0
    marks: dict[tuple[str, int], int] = field(default_factory=dict)
    """(name, token) → data version of the hold-back marker this session's grant put."""

    @property
    def gone(self) -> bool:
        return bool(self.connection.ended)

    @property
    def patience(self) -> float:
        """How long to wait for one answer before trying another server."""
        return max(0.3, min(2.0, self.ttl / 3))

    def prefix(self) -> str:
        self.counter += 1
        return f"{self.tag}-{self.counter:x}-"

    def data(self, value: str | None = None) -> bytes:
        fields = dict(self.fields) if value is None else {**self.fields, "value": value}
        return json.dumps(fields).encode()


@dataclass(eq=False)
class ZooKeeperTicket:
    session: ZooKeeperSession
    name: str
    path: str
    czxid: int
    """The own node's creation zxid: the token, if this node comes first."""
    left: bool = False
    event: anyio.Event | None = None
    call: Callable[[Callable[[], object]], None] | None = None

    def on_watch(self, _event: object) -> None:  # kazoo's thread: hand over, nothing more
        if self.call is not None:
            self.call(self._wake)

    def _wake(self) -> None:
        if self.event is not None:
            self.event.set()


class _Gone(Exception):
    """The session expired (or was closed)."""


class _NoAccess(StoreUnavailable):
    """A node's ACL refused us: sending the request again cannot help."""


# -- the store -------------------------------------------------------------------------------


class ZooKeeperStore(Store, Elections, Records):
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
        self._options = options
        self._tls = options.ssl_context() if options.use_tls else None
        self._user = options.username if options.username and options.password else None
        if self._user is not None and options.password:
            _SCRUB.secrets.add(options.password)
        self._guarded = False
        """The namespace's ACLs were checked (with credentials only): once per store."""
        self._root = f"{chroot}/locks"
        self._records = f"{chroot}/records"
        self._reader: KazooClient | None = None
        self._reader_lock = threading.Lock()
        self._reader_starting = anyio.Lock()
        self._reader_started = False
        self._watches: weakref.WeakSet[ZooKeeperWatch] = weakref.WeakSet()
        self._logs: dict[str, tuple[int, list[tuple[int, LockInfo]]]] = {}
        """Lock parent → (data version, proclaimed values) as this store last wrote them."""
        self.wakeups = 0
        """Predecessor watches that fired: for tests and metrics."""

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> ZooKeeperStore:
        # No message here quotes the URL, only parts after its user info, which a password
        # cannot reach: an '@' after the hosts (a password with a raw '/', '?' or '#' in it)
        # is refused first.
        def bad(why: str) -> InvalidArgument:
            return InvalidArgument(
                f"bad zookeeper store URL: {why} (use zookeeper://[user:password@]host:port"
                "[,host:port…][/chroot][?tls=true&ca=…&cert=…&key=…])"
            )

        try:
            parts = urlsplit(url)
        except ValueError:
            raise bad("not a URL") from None
        if parts.scheme.lower() != "zookeeper":
            raise bad("the scheme is not zookeeper")
        if "@" in parts.path + parts.query + parts.fragment:
            raise bad("'@' after the hosts (percent-encode '/', '?', '#' and '@' in a password)")
        if parts.fragment:
            raise bad("no fragment allowed")
        hosts = [f"{h}:{p}" for h, p in parse_hosts(parts.netloc, DEFAULT_PORT, bad)]
        chroot = unquote(parts.path).rstrip("/") or DEFAULT_CHROOT
        segments = chroot.split("/")[1:]
        if not _CHROOT.match(chroot) or any(s in (".", "..") for s in segments):
            raise bad(f"bad chroot {chroot!r} (/segments of letters, digits, '_', '.', '-')")
        if segments[0] == "zookeeper":
            raise bad("the chroot /zookeeper is ZooKeeper's own")
        problem = nesting_problem(chroot)
        if problem:
            raise bad(f"bad chroot {chroot!r}: {problem}")
        resolved, rest = resolve(url, "zookeeper", options, pairs=True)
        if rest:
            raise bad(f"unknown option {rest[0][0]!r} (only tls, ca, cert and key)")
        return cls(hosts, chroot, _digest(resolved))

    @property
    def url(self) -> str:
        """The URL to reach this store again: its password shown as ``***``; TLS and its
        files (their paths, never their contents) in the query."""
        user = self._options.shown_user() if self._user is not None else ""
        query = urlencode(self._options.shown(), safe="/")
        return f"zookeeper://{user}{','.join(self.hosts)}{self.chroot}{'?' if query else ''}{query}"

    def _parent(self, name: str) -> str:
        return f"{self._root}/{_encode(name)}"

    def _marker(self, name: str) -> str:
        """The hold-back marker of ``name``: beside its parent, not in it (the queue and its
        watches never see it)."""
        return f"{self._root}/{_encode(name)}{_MARK}"

    def _unavailable(self, what: object) -> StoreUnavailable:
        return StoreUnavailable(f"zookeeper at {', '.join(self.hosts)}: {what}")

    def _cannot_connect(self, exc: StoreUnavailable) -> StoreUnavailable:
        why = str(exc)
        if why.startswith("TLS failed") and "alert" in why and not self._options.cert:
            why += " (the server refused this client: does it demand a client certificate?)"
        return self._unavailable(why)

    def _denied(self, path: str) -> _NoAccess:
        """A node's ACL refused a request: with credentials, they are wrong (ZooKeeper's digest
        accepts any at connect and refuses at the first access), or the chroot is another
        user's; without, the chroot is some user's."""
        if self._user is not None:
            why = (
                f"authentication failed for user {self._user!r} (no access to {path}): a wrong"
                " password, or the chroot belongs to another user"
            )
        else:
            why = f"no access to {path}: its ACL admits a ZooKeeper user only (give user:password)"
        return _NoAccess(f"zookeeper at {', '.join(self.hosts)}: {why}")

    # -- clients ---------------------------------------------------------------------------

    def _client(self, timeout: float, retry: dict[str, float], connection: type) -> KazooClient:
        """A kazoo client with this store's TLS and credentials: every node it creates gets
        the ACL of this digest identity alone (without credentials, ZooKeeper's open ACL).
        kazoo sends the credentials again on every reconnection (a ZooKeeper connection's
        identity is not its session's)."""
        k = _kazoo()
        extra: dict[str, object] = {}
        if self._tls is not None:
            extra["handler"] = _tls_handler(self._tls)
        if self._user is not None:
            password = self._options.password
            assert password is not None
            acl = k.security.make_digest_acl(self._user, password, all=True)
            extra.update(auth_data=[("digest", f"{self._user}:{password}")], default_acl=[acl])
        client = k.client.KazooClient(
            hosts=",".join(self.hosts),
            timeout=timeout,
            logger=_KAZOO_LOG,
            connection_retry={"max_tries": -1, **retry},
            **extra,
        )
        client._connection = connection(client, client._conn_retry.copy(), logger=client.logger)
        return client

    async def _guard(self, client: KazooClient) -> None:
        """With credentials, once per store: make the chroot and its ``locks`` and ``records``
        if missing (with this user's ACL), then check that each is this user's alone. Nodes
        that others may change (made before credentials were used, or by someone else) would
        let them delete or forge its locks. Made before they are read: from then on the chroot
        is never empty, so nobody can delete and replace it (deleting a node is its parent's
        ACL's to allow: for ``/``, by ZooKeeper's default, anyone's). Wrong credentials show
        here, as no access."""
        if self._user is None or self._guarded:
            return
        k = _kazoo()
        password = self._options.password
        assert password is not None
        mine = k.security.make_digest_acl(self._user, password, all=True).id
        await self._guarded_answer(self.chroot, client.ensure_path_async(self.chroot))
        paths = [self.chroot, self._root, self._records]
        made = [client.create_async(path) for path in paths[1:]]
        reads = [client.get_acls_async(path) for path in paths]  # all sent: one round trip
        for answer in made:
            with contextlib.suppress(k.exceptions.NodeExistsError):
                await self._guarded_answer(self.chroot, answer)  # no access to the chroot
        for path, answer in zip(paths, reads, strict=True):
            acls, _ = await self._guarded_answer(path, answer)
            self._judge(path, acls, mine, ~k.security.Permissions.READ)
        self._guarded = True

    async def _guarded_answer(self, path: str, pending: IAsyncResult) -> Any:
        k = _kazoo()
        try:
            with anyio.fail_after(5.0):
                return await _result(pending)
        except k.exceptions.NoAuthError:
            raise self._denied(path) from None
        except k.exceptions.NodeExistsError:
            raise
        except (TimeoutError, k.exceptions.KazooException) as exc:
            raise self._unavailable(f"checking the ACL of {path}: {type(exc).__name__}") from None

    def _judge(self, path: str, acls: list[Any], mine: Any, writes: int) -> None:
        """Refuse a node whose ACL lets anyone but this user change it, or not this user."""
        others = sorted({a.id.scheme for a in acls if a.id != mine and a.perms & writes})
        if others:
            raise InvalidArgument(
                f"zookeeper store: others than user {self._user!r} may change {path}"
                f" ({', '.join(others)}: made without these credentials?), so they could delete"
                " or forge its locks: set its ACL to this user's digest only, or use a new chroot"
            )
        if not any(a.id == mine for a in acls):
            raise self._denied(path)

    # -- talking to kazoo ------------------------------------------------------------------

    async def _session_call(
        self, session: ZooKeeperSession, request: Callable[[], IAsyncResult]
    ) -> Any:
        """One request on the session, answered within its patience. Raises ``_Gone`` if the
        session expired, ``StoreUnavailable`` on connection loss or no answer (then the
        connection is dropped, so kazoo tries the next server with the same session)."""
        k = _kazoo()
        if session.gone or session.closed:
            raise _Gone
        pending = request()
        with anyio.move_on_after(session.patience):
            try:
                return await _result(pending)
            except k.exceptions.SessionExpiredError:
                raise _Gone from None
            except (k.exceptions.ConnectionLoss, k.exceptions.ConnectionClosedError) as exc:
                if session.gone or session.closed:
                    raise _Gone from None
                raise self._unavailable(f"connection lost ({type(exc).__name__})") from None
            except k.exceptions.OperationTimeoutError:
                raise self._unavailable("operation timed out") from None
            except k.exceptions.NoAuthError:
                raise self._denied(self.chroot) from None
        if session.client.connected:  # stuck on a server that does not answer (paused)
            session.client._call(k.protocol.connection._CONNECTION_DROP, None)
        raise self._unavailable(f"no answer within {session.patience:.2g}s")

    async def _settled(self, session: ZooKeeperSession, request: Callable[[], IAsyncResult]) -> Any:
        """An idempotent request, sent again through connection losses for up to the session's
        TTL (after which the session is gone anyway)."""
        give_up = time.monotonic() + session.ttl
        while True:
            try:
                return await self._session_call(session, request)
            except _NoAccess:
                raise
            except StoreUnavailable:
                if time.monotonic() > give_up:
                    raise
                await anyio.sleep(0.02)

    def _reader_client(self) -> KazooClient:
        with self._reader_lock:
            if self._reader is None:
                watched, _ = _connection_classes()
                retry = {"delay": 0.05, "max_delay": 1.0}
                client = self._client(READ_SESSION, retry, watched)
                client.add_listener(self._on_reader_state)
                self._reader = client
            return self._reader

    def _on_reader_state(self, state: str) -> None:  # kazoo's thread
        if state == "CONNECTED":
            for watch in list(self._watches):
                watch.trigger()  # watches were dropped with the old connection: re-read

    async def _connected_reader(self) -> KazooClient:
        client = self._reader_client()
        if client.connected:
            return client
        async with self._reader_starting:
            if not self._reader_started:
                try:
                    await anyio.to_thread.run_sync(_start, client, 5.0, abandon_on_cancel=True)
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
        why = client._connection.tls_refused(everywhere=False) or "no server answers"
        raise self._unavailable(why)

    async def _read(self, request: Callable[[KazooClient], IAsyncResult]) -> Any:
        """A read on the shared connection; sent again through connection losses for a while."""
        k = _kazoo()
        give_up = time.monotonic() + 8.0
        while True:
            client = await self._connected_reader()
            try:
                with anyio.fail_after(2.0):
                    return await _result(request(client))
            except (TimeoutError, k.exceptions.ConnectionLoss, k.exceptions.SessionExpiredError):
                if time.monotonic() > give_up:
                    raise self._unavailable("no answer") from None
                await anyio.sleep(0.05)
            except k.exceptions.ConnectionClosedError:
                raise self._unavailable("connection closed") from None
            except k.exceptions.NoAuthError:
                raise self._denied(self.chroot) from None

    # -- sessions --------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
        retry = {"delay": 0.02, "backoff": 1.5, "max_delay": max(0.05, min(1.0, ttl / 4))}
        client = self._client(ttl, retry, _connection_classes()[1])
        connection = client._connection

        def on_state(state: str) -> None:  # kazoo's thread: the session is over for good
            if state == "LOST" and connection.negotiated:
                connection.ended = True

        client.add_listener(on_state)
        try:
            await anyio.to_thread.run_sync(_start, client, max(2.0, min(10.0, ttl)))
        except StoreUnavailable as exc:
            raise self._cannot_connect(exc) from None
        try:
            await self._guard(client)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_stop, client)
            raise
        granted = connection.negotiated
        if granted < ttl - 1e-3:
            await anyio.to_thread.run_sync(_stop, client)
            raise InvalidArgument(
                f"ttl {ttl:g}s is longer than this ZooKeeper ensemble allows"
                f" (maxSessionTimeout {granted:g}s): use a shorter ttl"
            )
        fields: dict[str, object] = {
            "host": owner.host,
            "pid": owner.pid,
            "label": owner.label,
            "ttl": granted,
        }
        return ZooKeeperSession(
            ttl,
            client,
            connection,
            client.client_id[0],
            secrets.token_hex(8),
            fields,
            lock_delay=lock_delay,
        )

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, ZooKeeperSession)
        try:
            # Any request resets the session's timer on the server: the cheapest is enough.
            await self._session_call(session, lambda: session.client.exists_async("/"))
        except _Gone:
            return False
        if session.doubt:
            with anyio.move_on_after(session.patience):  # never delays the answer for long
                await self._sweep(session)
        return True

    async def _sweep(self, session: ZooKeeperSession) -> None:
        """Delete nodes that a create whose answer was lost may have left."""
        k = _kazoo()
        for parent, prefix in list(session.doubt):
            try:
                children = await self._session_call(
                    session, partial(session.client.get_children_async, parent)
                )
                for child in children:
                    if child.startswith(prefix):
                        await self._delete(session, f"{parent}/{child}")
            except k.exceptions.NoNodeError:
                pass
            except (StoreUnavailable, _Gone):
                return
            session.doubt.discard((parent, prefix))

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
        await anyio.to_thread.run_sync(_stop, session.client)
        session.held.clear()
        session.doubt.clear()
        session.marks.clear()

    # -- locks -----------------------------------------------------------------------------

    async def _enqueue(
        self, session: ZooKeeperSession, parent: str, prefix: str, look_first: bool = False
    ) -> tuple[str, int, list[str]]:
        """Create the own node (or find it, if an earlier create with this prefix applied and
        its answer was lost) → (its path, its czxid, the lock's children after it)."""
        k = _kazoo()
        client = session.client
        give_up = time.monotonic() + session.ttl
        while True:
            try:
                if look_first:
                    children = await self._session_call(
                        session, lambda: client.get_children_async(parent)
                    )
                    mine = [c for c in children if c.startswith(prefix)]
                    if mine:
                        path = f"{parent}/{mine[0]}"
                        stat = await self._session_call(session, partial(client.exists_async, path))
                        if stat is not None:
                            return path, int(stat.czxid), children
                # Both sent before either answer: one round trip (answers come in order).
                create = client.create_async(
                    f"{parent}/{prefix}",
                    session.data(),
                    ephemeral=True,
                    sequence=True,
                    include_data=True,
                )
                listing = client.get_children_async(parent)
                path, stat = await self._session_call(session, partial(_same, create))
                look_first = True  # from here on, a lost answer may hide an applied create
                children = await self._session_call(session, partial(_same, listing))
            except k.exceptions.NoNodeError:
                await self._settled(session, lambda: client.ensure_path_async(parent))
                continue
            except _NoAccess:
                raise
            except StoreUnavailable:
                look_first = True
                if time.monotonic() > give_up:
                    session.doubt.add((parent, prefix))
                    raise
                await anyio.sleep(0.02)
                continue
            if stat.ephemeralOwner != session.session_id:  # never expected: not our session's
                await self._delete(session, path)
                raise _Gone
            return path, int(stat.czxid), children

    async def _delete(self, session: ZooKeeperSession, path: str) -> None:
        k = _kazoo()
        with contextlib.suppress(k.exceptions.NoNodeError):
            await self._settled(session, lambda: session.client.delete_async(path))

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, ZooKeeperSession)
        assert ticket is None or isinstance(ticket, ZooKeeperTicket)
        k = _kazoo()
        parent = self._parent(name)
        try:
            path: str | None = None
            czxid = 0
            if ticket is not None:
                try:
                    children = await self._settled(
                        session, lambda: session.client.get_children_async(parent)
                    )
                except k.exceptions.NoNodeError:
                    children = []
                if ticket.path.rsplit("/", 1)[1] in children:
                    path, czxid = ticket.path, ticket.czxid
                else:
                    ticket.path = ""  # deleted under us (by hand?): queue again at the end
            if path is None:
                path, czxid, children = await self._enqueue(session, parent, session.prefix())
                if ticket is not None:
                    ticket.path, ticket.czxid = path, czxid
            queue = _queue(children)
            own = path.rsplit("/", 1)[1]
            if own not in queue:  # never expected: the listing followed the create
                queue = _queue([*children, own])
            waiting = ticket is not None or enqueue
            left: float | None = None
            if queue[0] == own:
                # The token is the czxid the create answered. The listing (sent after the
                # create, or after the wake-up) shows the node first: granted unless held back.
                left = await self._claim(session, name, path, czxid)
                if left <= 0:
                    session.held[(name, czxid)] = path
                    return Grant(token=czxid, renewed_session=False)
                holder = None  # held back: woken if the marker changes, else at ``retry_in``
                predecessor = self._marker(name)
            else:
                holder = await self._holder(name, parent, queue)
                predecessor = f"{parent}/{queue[queue.index(own) - 1]}"
            if not waiting:
                await self._delete(session, path)
                return Busy(holder=holder, ticket=None, retry_in=left)
            if ticket is None:
                ticket = ZooKeeperTicket(session, name, path, czxid)
            return Busy(
                holder=holder, ticket=ticket, retry_in=left, extra={"predecessor": predecessor}
            )
        except _Gone:
            raise LeaseLost("the ZooKeeper session is gone") from None

    async def _claim(self, session: ZooKeeperSession, name: str, path: str, czxid: int) -> float:
        """0 if the session, first in line with its node ``path`` (created at ``czxid``), is
        granted ``name`` now: its own marker put if it has a lock-delay, a spent one taken
        away. Else the seconds another grant's marker still holds the name back."""
        k = _kazoo()
        client = session.client
        marker = self._marker(name)

        async def call(request: Callable[[KazooClient], IAsyncResult]) -> Any:
            return await self._settled(session, lambda: request(client))

        ours = _Mark(czxid, session.lock_delay).data()
        for _ in range(3):
            try:
                data, stat = await call(lambda c: c.get_async(marker))
                mark: _Mark | None = _Mark.parse(data)
            except k.exceptions.NoNodeError:
                stat = mark = None
            if mark is not None and mark.token == czxid:
                session.marks[(name, czxid)] = int(stat.version)  # put by our own multi
                return 0.0
            if mark is not None:
                left = await self._left(call, marker, mark, stat)
                if left > 0:
                    return left
            elif not session.lock_delay:
                return 0.0  # nothing to put; only the first in line (this one) puts markers

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

            results = await self._settled(session, multi)
            if not any(isinstance(r, k.exceptions.KazooException) for r in results):
                if session.lock_delay:
                    session.marks[(name, czxid)] = 0 if stat is None else int(stat.version) + 1
                return 0.0
            if isinstance(results[0], k.exceptions.NoNodeError):
                break  # the own node is gone: the next attempt queues again (or finds it gone)
            # The marker changed meanwhile (or this multi applied, its answer lost): read again.
        return _RETRY

    async def _left(
        self,
        call: Callable[[Callable[[KazooClient], IAsyncResult]], Awaitable[Any]],
        marker: str,
        mark: _Mark,
        stat: Any,
    ) -> float:
        """Seconds ``mark`` (read at ``stat``; its grant's node seen gone) still holds its name
        back, by the servers' clock: counted from the first reader that saw the node gone,
        which stamps the marker (a write: its mtime is the leader's clock then). The time now
        is the mtime of a write too (``<chroot>/locks``, whose data nobody reads)."""
        k = _kazoo()
        if mark.lock_delay <= 0:
            return 0.0  # not a marker of tenure's
        try:
            if not mark.noticed:
                noticed = replace(mark, noticed=True).data()
                await call(lambda c: c.set_async(marker, noticed, stat.version))
                return mark.lock_delay
            now = await call(lambda c: c.set_async(self._root, b""))
        except (k.exceptions.BadVersionError, k.exceptions.NoNodeError):
            return _RETRY  # changed meanwhile: read it again
        return (int(stat.mtime) + mark.lock_delay * 1000 - int(now.mtime)) / 1000

    async def _holder(self, name: str, parent: str, queue: list[str]) -> LockInfo | None:
        """The holder of ``queue`` (the first node still there), with its proclaimed value;
        None if the name is held back (the marker stands for another grant)."""
        k = _kazoo()
        client = await self._connected_reader()
        proclaimed = client.get_async(parent)  # sent with the first holder read: one round trip
        marked = client.get_async(f"{parent}{_MARK}")
        for child in queue:
            try:
                data, stat = await self._answer(client.get_async(f"{parent}/{child}"))
            except k.exceptions.NoNodeError:
                continue  # released meanwhile: the next one holds
            try:
                log = _log((await self._answer(proclaimed))[0])
            except k.exceptions.NoNodeError:
                log = []
            try:
                mark = _Mark.parse((await self._answer(marked))[0])
                if mark.lock_delay > 0 and mark.token != int(stat.czxid):
                    return None  # held back: the first in line is not granted yet
            except k.exceptions.NoNodeError:
                pass
            return replace(_info(name, data, stat, len(queue)), value=_value(log, stat.czxid))
        return None

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, ZooKeeperTicket)
        predecessor = busy.extra.get("predecessor")
        with anyio.move_on_after(timeout):
            if isinstance(predecessor, str):
                ticket.event = anyio.Event()
                ticket.call = _waker()
                client = ticket.session.client
                try:
                    stat = await self._session_call(
                        ticket.session,
                        lambda: client.exists_async(predecessor, watch=ticket.on_watch),
                    )
                except (StoreUnavailable, _Gone):
                    stat = None
                    await anyio.sleep(0.05)  # attempt again soon: it tells what happened
                if stat is not None:
                    await ticket.event.wait()
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
            await self._delete(ticket.session, ticket.path)
        except StoreUnavailable:
            parent, child = ticket.path.rsplit("/", 1)
            ticket.session.doubt.add((parent, child))  # deleted at the next keep-alive
        except _Gone:
            pass  # the session's nodes are gone with it

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, ZooKeeperSession)
        path = session.held.get((name, token))
        if path is None:
            return  # never granted to this session (or released already)
        version = session.marks.get((name, token))
        with contextlib.suppress(_Gone):  # gone: its nodes went with it, its marker stays
            if version is None:
                await self._delete(session, path)
            else:
                await self._release_marked(session, name, path, token, version)
        del session.held[(name, token)]
        session.marks.pop((name, token), None)

    async def _release_marked(
        self, session: ZooKeeperSession, name: str, path: str, token: int, version: int
    ) -> None:
        """Delete the own node and its marker in one multi: a clean release frees the name."""
        k = _kazoo()
        client = session.client
        marker = self._marker(name)

        def multi() -> IAsyncResult:
            txn = client.transaction()
            txn.delete(path, -1)
            txn.delete(marker, version)
            return txn.commit_async()

        results = await self._settled(session, multi)
        if not any(isinstance(r, k.exceptions.KazooException) for r in results):
            return
        # The node was gone (deleted by hand, or this multi applied, its answer lost): a marker
        # of this grant left now stands for nothing.
        await self._delete(session, path)
        try:
            data, stat = await self._settled(session, lambda: client.get_async(marker))
        except k.exceptions.NoNodeError:
            return
        if _Mark.parse(data).token == token:
            with contextlib.suppress(k.exceptions.NoNodeError, k.exceptions.BadVersionError):
                await self._settled(session, lambda: client.delete_async(marker, stat.version))

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        k = _kazoo()
        if name is None:
            try:
                encoded = await self._read(lambda c: c.get_children_async(self._root))
            except k.exceptions.NoNodeError:
                return []
        else:
            encoded = [_encode(name)]
        client = await self._connected_reader()
        # All listings sent at once, then all holders: two round trips whatever the count.
        listings = [client.get_children_async(f"{self._root}/{e}") for e in encoded]
        queues: dict[str, list[str]] = {}
        for enc, listing in zip(encoded, listings, strict=True):
            try:
                queue = _queue(await self._answer(listing))
            except k.exceptions.NoNodeError:
                continue
            if queue:
                queues[enc] = queue
        found: list[LockInfo] = []
        for enc, queue in sorted(queues.items(), key=lambda item: unquote(item[0])):
            info = await self._holder(unquote(enc), f"{self._root}/{enc}", queue)
            if info is not None:
                found.append(info)
        return found

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        k = _kazoo()
        if name is None:
            try:
                children = await self._read(lambda c: c.get_children_async(self._root))
            except k.exceptions.NoNodeError:
                return []
            encoded = sorted(c[: -len(_MARK)] for c in children if c.endswith(_MARK))
        else:
            encoded = [_encode(name)]
        client = await self._connected_reader()
        # Each marker is read before its queue: a queue without the marker's grant means that
        # grant's node was gone after the marker was read.
        pending = [
            (
                client.get_async(f"{self._root}/{e}{_MARK}"),
                client.get_children_async(f"{self._root}/{e}"),
            )
            for e in encoded
        ]
        found: list[HeldBack] = []
        for enc, (marked, listing) in zip(encoded, pending, strict=True):
            try:
                data, stat = await self._answer(marked)
            except k.exceptions.NoNodeError:
                continue
            mark = _Mark.parse(data)
            try:
                queue = _queue(await self._answer(listing))
            except k.exceptions.NoNodeError:
                queue = []
            if queue:
                first = await self._answer(client.exists_async(f"{self._root}/{enc}/{queue[0]}"))
                if first is not None and int(first.czxid) == mark.token:
                    continue  # its grant still holds
            left = await self._left(self._read, f"{self._root}/{enc}{_MARK}", mark, stat)
            if left > 0:
                found.append(HeldBack(unquote(enc), mark.token, left))
        return found

    async def _answer(self, pending: IAsyncResult) -> Any:
        k = _kazoo()
        try:
            with anyio.fail_after(2.0):
                return await _result(pending)
        except (TimeoutError, k.exceptions.ConnectionLoss, k.exceptions.SessionExpiredError):
            raise self._unavailable("no answer") from None
        except k.exceptions.ConnectionClosedError:
            raise self._unavailable("connection closed") from None
        except k.exceptions.NoAuthError:
            raise self._denied(self.chroot) from None

    # -- leader election -------------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, ZooKeeperSession)
        k = _kazoo()
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
                    data, stat = await self._settled(session, lambda: client.get_async(parent))
                    known = (int(stat.version), _log(data))
                version, log = known
                number = log[-1][0] + 1 if log else 1
                kept = [{"n": n, **_fields(info)} for n, info in log[-(LOG_LENGTH - 1) :]]
                entry = {"n": number, **session.fields, "token": token, "value": value}
                body = json.dumps({"log": [*kept, entry]}).encode()

                def multi(version: int = version, body: bytes = body) -> IAsyncResult:
                    txn = client.transaction()
                    txn.check(path, -1)
                    txn.set_data(parent, body, version)
                    return txn.commit_async()

                results = await self._settled(session, multi)
                if isinstance(results[0], k.exceptions.NoNodeError):
                    return False  # released, or the session is gone
                if not any(isinstance(r, k.exceptions.KazooException) for r in results):
                    if len(self._logs) >= _LOG_CACHE:
                        self._logs.clear()
                    self._logs[parent] = (results[1].version, _log(body))
                    return True
                known = None
                # BadVersion: another value was proclaimed meanwhile (a retried one): again
        except (_Gone, k.exceptions.NoNodeError):
            return False

    async def watch(self, name: str) -> Watch:
        client = await self._connected_reader()
        parent = self._parent(name)
        await self._read(lambda c: c.ensure_path_async(parent))
        watch = ZooKeeperWatch(self, client, name, parent)
        self._watches.add(watch)
        watch.trigger()
        try:
            with anyio.fail_after(8.0):
                await watch.primed.wait()
        except TimeoutError:
            await watch.aclose()
            raise self._unavailable("could not read the lock to watch") from None
        return watch

    # -- records -------------------------------------------------------------------------

    async def _synced_read(self, read: Callable[[KazooClient], IAsyncResult]) -> Any:
        """``read`` on the shared connection right after a ``sync``: one session's requests are
        served in order, so the server catches up with the leader before answering it."""

        def request(client: KazooClient) -> IAsyncResult:
            client.sync_async(self._records)  # its answer is not awaited: the read's comes after
            return read(client)

        return await self._read(request)

    async def read_record(self, key: str) -> Record | None:
        k = _kazoo()
        path = f"{self._records}/{_encode(key)}"
        try:
            data, stat = await self._synced_read(lambda c: c.get_async(path))
        except k.exceptions.NoNodeError:
            return None
        except k.exceptions.NoAuthError:
            raise self._denied(self._records) from None
        except k.exceptions.KazooException as exc:
            raise self._unavailable(f"reading record {key!r}: {type(exc).__name__}") from None
        return Record(key, bytes(data or b"").decode(errors="replace"), int(stat.version) + 1)

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        k = _kazoo()
        if not 0 <= version <= 2**31:
            return None  # never a record's version (ZooKeeper's are 32-bit)
        path = f"{self._records}/{_encode(key)}"
        data = value.encode()
        client = await self._connected_reader()
        try:
            with anyio.fail_after(2.0):
                if version == 0:
                    await _result(client.create_async(path, data, makepath=True))
                    return Record(key, value, 1)
                stat = await _result(client.set_async(path, data, version - 1))
                return Record(key, value, int(stat.version) + 1)
        except (k.exceptions.NodeExistsError, k.exceptions.BadVersionError):
            return None  # someone wrote since (or created it first)
        except k.exceptions.NoNodeError:
            return None  # a version of a record that does not exist
        except TimeoutError:
            raise self._unavailable("no answer to a record's write (it may apply)") from None
        except k.exceptions.NoAuthError:
            raise self._denied(self._records) from None
        except k.exceptions.KazooException as exc:
            raise self._unavailable(
                f"writing record {key!r}: {type(exc).__name__} (it may have applied)"
            ) from None

    async def list_records(self, prefix: str) -> list[Record]:
        k = _kazoo()
        try:
            children = await self._synced_read(lambda c: c.get_children_async(self._records))
        except k.exceptions.NoNodeError:
            return []
        except k.exceptions.NoAuthError:
            raise self._denied(self._records) from None
        except k.exceptions.KazooException as exc:
            raise self._unavailable(f"listing records: {type(exc).__name__}") from None
        named = sorted(
            (key.encode(), key, child)
            for key, child in ((unquote(child), child) for child in children)
            if key.startswith(prefix)
        )
        client = await self._connected_reader()
        # All reads sent at once (after the listing's sync): one round trip whatever the count.
        reads = [client.get_async(f"{self._records}/{child}") for _, _, child in named]
        found = []
        for (_, key, _), pending in zip(named, reads, strict=True):
            try:
                data, stat = await self._answer(pending)
            except k.exceptions.NoNodeError:
                continue
            except k.exceptions.NoAuthError:
                raise self._denied(self._records) from None
            except k.exceptions.KazooException as exc:
                raise self._unavailable(f"reading record {key!r}: {type(exc).__name__}") from None
            value = bytes(data or b"").decode(errors="replace")
            found.append(Record(key, value, int(stat.version) + 1))
        return found

    async def aclose(self) -> None:
        for watch in list(self._watches):
            await watch.aclose()
        with self._reader_lock:
            reader, self._reader = self._reader, None
            self._reader_started = False
        if reader is not None:
            await anyio.to_thread.run_sync(_stop, reader)


class ZooKeeperWatch(Watch):
    """The changes of one lock's holder, followed with one-shot watches on kazoo's threads.

    Each event (the queue changed, a value was proclaimed, the holder's node changed, the
    connection came back) re-reads the queue and the lock's last proclaimed value (the parent's
    data, which names its term), then the holder, with new watches: one read chain at a time (an
    event during a chain runs it once more). What the reads show is turned into changes in
    order: a proclaimed value not yet reported (its term's grant first, if that was missed too),
    then the holder now; a new holder that was not queued at the previous read took a free lock,
    so the release before it is reported too.
    """

    def __init__(self, store: ZooKeeperStore, client: KazooClient, name: str, parent: str):
        self._store = store
        self._client = client
        self._name = name
        self._parent = parent
        self._lock = threading.Lock()
        self._pending: list[Change] = []
        self._shown: tuple[int, str | None] | None = None
        self._top = 0  # the highest token reported (or seen at subscription)
        self._cversion = -1  # the parent's child version at the previous read
        self._number = 0  # the last proclaimed value's number reported (or seen at subscription)
        self._queued: set[str] = set()  # the queue at the previous read
        self._running = False
        self._again = False
        self._closed = False
        self._call = _waker()
        self._event = anyio.Event()
        self.primed = anyio.Event()
        self._is_primed = False

    # kazoo's threads ------------------------------------------------------------------------

    def trigger(self, _event: object = None) -> None:
        with self._lock:
            if self._closed:
                return
            if self._running:
                self._again = True
                return
            self._running = True
        self._read_queue()

    def _read_queue(self) -> None:
        try:
            listing = self._client.get_children_async(self._parent, watch=self.trigger)
            proclaimed = self._client.get_async(self._parent, watch=self.trigger)
        except Exception:  # closed client
            self._finish(failed=True)
            return
        # Answers come in order: when the second is in, so is the first.
        proclaimed.rawlink(lambda _: self._got_queue(listing, proclaimed))

    def _got_queue(self, listing: IAsyncResult, proclaimed: IAsyncResult) -> None:
        try:
            queue = _queue(listing.get_nowait())
            data, parent = proclaimed.get_nowait()
        except Exception:  # NoNode (deleted by hand) or connection lost: the reader's
            self._finish(failed=True)
            return
        log = _log(data)
        with self._lock:
            before, self._cversion = self._cversion, int(parent.cversion)
        if not queue:
            self._note(queue, log, None)
            self._finish()
            return
        holder = self._client.get_async(f"{self._parent}/{queue[0]}", watch=self.trigger)
        holder.rawlink(lambda answer: self._got_holder(answer, queue, log, parent, before))

    def _got_holder(
        self,
        answer: IAsyncResult,
        queue: list[str],
        log: list[tuple[int, LockInfo]],
        parent: Any,
        before: int,
    ) -> None:
        k = _kazoo()
        try:
            data, stat = answer.get_nowait()
        except k.exceptions.NoNodeError:
            self._vanished(queue, parent, before)
            with self._lock:
                self._again = True  # released meanwhile: read again
            self._finish()
            return
        except Exception:
            self._finish(failed=True)
            return
        self._note(queue, log, _info(self._name, data, stat, len(queue)))
        self._finish()

    def _vanished(self, queue: list[str], parent: Any, before: int) -> None:
        """The holder was released before it could be read. If its creation was the only
        change to the queue since the previous read (of an empty queue), the parent's pzxid
        is its czxid: its term is reported (its owner unknown)."""
        with self._lock:
            only = queue == [queue[0]] and not self._queued and self._shown is None
            if only and self._is_primed and int(parent.cversion) == before + 1:
                who = Owner("?", 0, "released before it could be read")
                self._emit(LockInfo(self._name, int(parent.pzxid), who, 0.0))
                self._queued = set(queue)

    def _finish(self, failed: bool = False) -> None:
        with self._lock:
            again = self._again and not self._closed and not failed
            self._again = False
            self._running = again
        if again:
            self._read_queue()

    def _emit(self, info: LockInfo | None) -> None:
        state = None if info is None else (info.token, info.value)
        if state != self._shown:
            self._shown = state
            self._pending.append(Change(self._name, info))
            if info is not None:
                self._top = max(self._top, info.token)

    def _note(
        self, queue: list[str], log: list[tuple[int, LockInfo]], holder: LockInfo | None
    ) -> None:
        with self._lock:
            if not self._is_primed:  # the state at subscription is not a change
                self._is_primed = True
                if holder is not None:
                    self._shown = (holder.token, _value(log, holder.token))
                    self._top = holder.token
                self._number = log[-1][0] if log else 0
                self._queued = set(queue)
                self._call(self.primed.set)
                return
            before = len(self._pending)
            for number, entry in log:  # values proclaimed since the last read, in order
                if number <= self._number or entry.token < self._top:
                    continue
                if self._shown is None or self._shown[0] != entry.token:
                    if self._shown is not None:
                        self._emit(None)  # that term ended before this one began
                    self._emit(replace(entry, name=self._name, value=None))  # its grant
                self._emit(replace(entry, name=self._name))
            if log:
                self._number = max(self._number, log[-1][0])
            if holder is None:
                self._emit(None)
            else:
                value = _value(log, holder.token)
                new = self._shown is None or self._shown[0] != holder.token
                if new and self._shown is not None and queue[0] not in self._queued:
                    self._emit(None)  # it took a free lock: the release came first
                if new and value is not None:
                    self._emit(replace(holder, value=None))  # its grant, before its value
                self._emit(replace(holder, value=value))
            self._queued = set(queue)
            changed = len(self._pending) > before
        if changed:
            self._call(self._wake)

    def _unsettled(self) -> bool:
        with self._lock:
            last = self._pending[-1].holder if self._pending else None
            return self._running or (last is not None and last.value is None)

    def _wake(self) -> None:  # on the loop
        self._event.set()

    # the event loop -------------------------------------------------------------------------

    async def next(self, timeout: float) -> list[Change]:
        with anyio.move_on_after(timeout):
            while True:
                with self._lock:
                    ready = bool(self._pending)
                if ready:
                    # Let a read chain in flight finish first, and give a bare grant a moment
                    # for its value (a campaign proclaims right after its grant), so changes
                    # made together come out together.
                    settle = anyio.current_time() + SETTLE
                    while anyio.current_time() < settle and self._unsettled():
                        await anyio.sleep(0.001)
                    with self._lock:
                        changes, self._pending = self._pending, []
                    return changes
                self._event = anyio.Event()
                await self._event.wait()
        return []

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
        self._store._watches.discard(self)


def _same(pending: IAsyncResult) -> IAsyncResult:
    return pending


def _start(client: KazooClient, timeout: float) -> None:
    """Connect (in a worker thread: it blocks), within ``timeout``. kazoo would try forever;
    once every server has failed the TLS handshake, this gives up at once and says why: a
    certificate that does not verify does not get better by trying again."""
    client._connection.tls_failures.clear()  # a failure before a restart is not news
    try:
        live = client.start_async()
        give_up = time.monotonic() + timeout
        refused = None
        while not live.wait(0.02) and time.monotonic() < give_up:
            refused = client._connection.tls_refused()
            if refused is not None:
                break
    except Exception as exc:  # a socket error
        _stop(client)
        raise StoreUnavailable(f"cannot connect ({type(exc).__name__}: {exc})") from None
    if client.connected:
        return
    refused = refused or client._connection.tls_refused(everywhere=False)
    _stop(client)
    if refused is not None:
        raise StoreUnavailable(refused)
    raise StoreUnavailable(f"cannot connect (no server answered within {timeout:g}s)")


def _stop(client: KazooClient) -> None:
    """Close the session and the connection (in a worker thread: kazoo's ``stop`` blocks)."""
    try:
        client.stop()
        client.close()
    except Exception:
        pass  # closing: nothing left to do about it
