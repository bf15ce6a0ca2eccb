"""The etcd store: ``etcd://[user:password@]host:port[,host:port…][/namespace][?tls=…&ca=…]``.

Spoken over etcd's JSON gateway with httpx (``gateway``): no protobuf, no gRPC stubs.

- **URL.** Port 2379 if none; namespace ``tenure`` if none (segments of letters, digits, ``_``,
  ``.``, ``-`` joined by ``/``). The query takes the shared connection options only (``tls``,
  ``ca``, ``cert``, ``key``; see ``_connect``), anything else is refused; keyword arguments of
  ``tenure.connect`` override them. ``store.url`` shows ``user:***@`` and the TLS options (file
  paths, never contents, ``?tls=true`` if no file): never the password.
- **TLS**: ``https`` to every member, verified against ``ca`` (else the system's roots) and the
  host name in the URL; ``cert``/``key`` is the client certificate etcd asks for with
  ``--client-cert-auth``. A failed handshake is tried once per member, with no back-off, then
  raised as one line (``TLS failed: certificate verify failed …``, or ``… alert bad
  certificate`` when etcd refuses the client's certificate or its absence): a wrong CA is not
  retried for the fail-over budget as if the members were down. A plain client talking to a
  TLS-only member is told so.
- **Authentication** (etcd users and roles): ``auth/authenticate`` with the user and password
  gives a simple token, sent as ``Authorization`` on every request and watch. A token etcd
  forgot (unused for ``--auth-token-ttl``, 300 s by default; or the member restarted: the gateway
  answers HTTP 401, gRPC code 16 "invalid auth token") or one older than a change of users and
  roles is renewed and the request sent once more (the refusal means it did not apply). Lease
  keep-alives need no token in etcd 3.4, so a held lock never depends on one. A wrong password
  is one line ``etcd authentication failed for user 'x'``; a password without a user name is
  ``InvalidArgument``; a password from ``$TENURE_PASSWORD`` with no user anywhere is ignored
  (it may be meant for another store). A user whose roles do not grant readwrite on
  ``<namespace>/`` gets one line "permission denied for user 'x' in namespace 'y'": give each
  application its own user and namespace, and one cannot touch another's locks.
- **Namespaces never overlap.** Every key is under ``<namespace>/locks/`` or
  ``<namespace>/records/``, so a namespace with a segment ``locks`` or ``records`` is refused:
  ``a/locks`` would put its keys inside namespace ``a``'s lock named ``locks``. Any other two
  namespaces are disjoint (``a/b/…`` never starts with ``a/locks/`` or ``a/records/``).

- **Session = one etcd lease.** ``open_session`` grants it (TTL rounded up to whole seconds; the
  lease ID is chosen here, so a retried grant finds its own lease instead of leaking a second
  one); ``keep_alive`` is one POST to ``/v3/lease/keepalive`` for every lock of the session;
  ``close_session`` revokes it, which deletes every key the session holds or queues with.
- **Lock = a queue of keys** ``<namespace>/locks/<percent-encoded name>/<lease id hex>`` attached
  to the session's lease. The name is encoded with no ``/`` left and the prefix ends with ``/``,
  so lock ``a/b`` never falls in the range of lock ``a``. The holder is the key with the lowest
  create revision; the **token is that key's create revision** (global, monotonic, Raft-committed
  before it is returned, kept across leader changes and restarts).
- **One txn per attempt.** A first attempt puts the own key if it is absent and reads the owner,
  the queue length and the own key's predecessor (if present: reads the own key, the owner, the
  queue length). A waiter's attempt (its key queued) only reads the own key, the owner, the queue
  length and the predecessor: a txn with no put, which etcd answers by a linearizable ReadIndex
  read rather than a Raft round (a put, even in a branch not taken, makes a txn a write); only if
  the own key is gone (its lease ended, or it was deleted) does it put it again. The key is
  deterministic per session and lock (a second concurrent acquire of the same name in one session
  gets a ``.1`` suffix), so a txn whose answer was lost is safely sent again, or attempted again
  by the caller: it finds its own key instead of queueing twice (a key left by a failed request
  that nobody reuses is deleted at the next keep-alive). An attempt that will not wait
  (``enqueue=False``) puts its key only if the lock's range is empty, so it never leaves a trace.
  A grant is reported only when the txn read the own key (which exists only under a live lease)
  as the owner.
- **The holder's ``expires_in``** (for people watching a wait) comes from ``lease/timetolive``,
  asked once per holder's lease and then again only when that read is more than a quarter of the
  lease's TTL old; in between it is the time left then minus the time passed since, a lower
  bound. ``locks()`` always asks.
- **Waiting** watches the predecessor's key only (the next-lower create revision) for its
  deletion, from the revision the attempt read: no missed event, no herd, one wake-up per release.
- **Release** is a txn: delete the own key only if its create revision is still the token, so a
  stale or retried release never deletes a newer lock.
- **Lock-delay** (rule 8), by etcd's own leases and the leader's clock. A session with a delay
  has a second, *hold-back* lease, TTL = session TTL + delay in whole seconds (rounded up),
  renewed before the session lease (and again after it if the pair took longer than the TTL's
  spare), so it always ends at least the delay after the session lease. A grant puts the
  hold-back key ``<namespace>/locks/<encoded name>`` (the queue's prefix without its ``/``: in
  no lock's range) on that lease, in the grant's own txn (a nested txn judged on the state
  before the put) or, for a waiter, in a txn comparing its key and the hold-back key's absence;
  no grant is made while another grant's hold-back key exists. A release deletes both keys in
  one txn; ``close_session`` revokes the session lease and then, only if it was still alive, the
  hold-back lease. A session that ends unreleased loses its lock keys at its TTL and its
  hold-back keys ``delay`` later, both by etcd's clock; the first waiter watches the hold-back
  key's deletion. A hold-back key with no lock key of its token is ``held_back`` (``free_in``:
  its lease's whole seconds left, at least 0.5).
- **Leader election.** ``proclaim`` rewrites the holder's key with the value added to the owner
  JSON it holds, in a txn comparing the key's create revision (the token) and its lease (the
  session's), keeping that lease; a new grant is a new key, so it starts with no value, and
  ``locks()`` reads the value with the owner. ``watch`` reads the lock's key range once, then
  follows it with etcd watches from the next revision (see ``EtcdWatch``): only the holder (the
  lowest create revision) and its value are reported, never the queue behind it.
- **Records** (``tenure once``) are plain keys ``<namespace>/records/<key>`` (the key's UTF-8
  bytes, not encoded, so etcd's byte order is the key order and ``list_records`` is one range
  read over ``<namespace>/records/<prefix>``), attached to no lease, apart from the
  ``<namespace>/locks/`` range. The version is the key's mod revision; a write is one txn that
  compares the create revision with 0 (create) or the mod revision with the version read
  (replace), committed by Raft before the answer. Unlike the other requests, a write is not
  sent again once it may have reached etcd: its outcome unknown, it raises ``StoreUnavailable``.
- **Fail-over**: every member in the URL; a refusing or paused member is skipped; every request
  of this store but a record's write is idempotent, so it is sent again to the next member
  through an election.

The write guard: ``EtcdStore.guarded_txn(name, token, success, failure)`` runs a caller's own
etcd txn only while ``token`` still holds ``name`` (a compare on the lock key's create revision,
as etcd's ``Mutex.IsOwner()``)::

    store = client.store  # an EtcdStore
    done = await store.guarded_txn(lease.name, lease.token, [put_op("config/leader", b"me")])
    if not done.held: ...  # the lock is gone: nothing was written

The guarded txn is never retried once it may have reached etcd (it is not idempotent in general).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, ClassVar
from urllib.parse import quote, unquote, urlencode, urlsplit

import anyio

from ..._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ..._names import nesting_problem
from .._connect import (
    NO_OPTIONS,
    TLS_OPTIONS,
    ConnectOptions,
    parse_hosts,
    redact,
    resolve,
)
from .._spi import (
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
from .gateway import (
    JSON,
    NOT_FOUND,
    PERMISSION_DENIED,
    EtcdError,
    Gateway,
    b64,
    prefix_end,
    unb64,
)

DEFAULT_PORT = 2379
DEFAULT_NAMESPACE = "tenure"
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_TTL_CACHE = 1024  # holders' leases whose time left is remembered (all forgotten when full)


def put_op(key: bytes | str, value: bytes | str, lease: int = 0) -> JSON:
    """A put for ``guarded_txn`` (``lease`` 0: not attached to a lease)."""
    op: JSON = {"key": b64(key), "value": b64(value)}
    if lease:
        op["lease"] = str(lease)
    return {"request_put": op}


def delete_op(key: bytes | str) -> JSON:
    return {"request_delete_range": {"key": b64(key)}}


def get_op(key: bytes | str) -> JSON:
    return {"request_range": {"key": b64(key)}}


def _range(key: bytes, end: bytes, **options: Any) -> JSON:
    return {"request_range": {"key": b64(key), "range_end": b64(end), **options}}


def _first(prefix: bytes, end: bytes) -> JSON:
    return _range(prefix, end, limit="1", sort_order="ASCEND", sort_target="CREATE")


def _last(prefix: bytes, end: bytes, limit: int, below: int = 0) -> JSON:
    more = {"max_create_revision": str(below)} if below else {}
    return _range(prefix, end, limit=str(limit), sort_order="DESCEND", sort_target="CREATE", **more)


def _created(kv: JSON) -> int:
    return int(kv.get("create_revision", 0))


def _lock_info(name: str, holder: JSON, count: int, expires_in: float) -> LockInfo:
    """The lock held by the key ``holder`` (its value: the owner, and any proclaimed value)."""
    try:
        fields = json.loads(unb64(holder.get("value")))
        who = Owner(str(fields["host"]), int(fields["pid"]), str(fields.get("label", "")))
        value = fields.get("value")
    except (ValueError, KeyError, TypeError, AttributeError):
        who, value = Owner("?", 0, "not written by tenure"), None
    value = value if isinstance(value, str) else None
    return LockInfo(name, _created(holder), who, expires_in, max(0, count - 1), value)


def _held_token(held: JSON) -> int:
    """The token of the grant a hold-back key stands for: the one in its value, else (put in
    the grant's own txn) its create revision, which is the lock key's."""
    try:
        return int(json.loads(unb64(held.get("value"))).get("token") or _created(held))
    except (ValueError, TypeError, AttributeError):
        return _created(held)


def _absent(key: JSON) -> JSON:
    """A compare: no key (in the range, if ``key`` has a ``range_end``)."""
    return {**key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def _ranges(answer: JSON) -> list[JSON]:
    """The range responses of a txn answer (an empty dict for any other response)."""
    return [r.get("response_range") or {} for r in answer.get("responses") or [{}]]


@dataclass(frozen=True)
class GuardedTxn:
    """What ``guarded_txn`` did: ``held`` is True if the lock (and any own compare) held and
    the ``success`` operations applied; otherwise ``failure`` applied."""

    held: bool
    revision: int
    responses: list[JSON]


@dataclass(eq=False)
class EtcdSession(Session):
    id: int
    ttl: float
    value: bytes
    hold: int = 0
    """The hold-back lease (0: no lock-delay): its TTL outlives the session lease's by the delay."""
    spare: float = 0.0
    """Seconds the hold-back lease's TTL has beyond the session lease's plus the delay."""
    lock_delay: float = 0.0
    revoked: bool = False
    """The session lease was revoked by ``close_session`` (a clean end): the hold-back lease
    may go too."""
    slots: dict[str, set[int]] = field(default_factory=dict)
    """Per lock name, the key slots in use by this session's acquires (two acquires of one name
    in one session get different keys)."""
    held: dict[tuple[str, int], tuple[bytes, int]] = field(default_factory=dict)
    """(name, token) → (own key, slot) of the grants this session holds."""
    dirty: set[bytes] = field(default_factory=set)
    """Own keys that may be in etcd after a failed request; deleted at the next keep-alive."""

    def claim(self, name: str) -> int:
        used = self.slots.setdefault(name, set())
        slot = next(i for i in range(len(used) + 1) if i not in used)
        used.add(slot)
        return slot

    def free(self, name: str, slot: int) -> None:
        used = self.slots.get(name)
        if used is not None:
            used.discard(slot)
            if not used:
                del self.slots[name]

    def claimed(self) -> set[tuple[str, int]]:
        return {(name, slot) for name, used in self.slots.items() for slot in used}


@dataclass(eq=False)
class EtcdTicket:
    session: EtcdSession
    name: str
    key: bytes
    slot: int
    revision: int
    """The own key's create revision: the place in the queue."""
    left: bool = False


class EtcdWatch(Watch):
    """The changes of one lock's holder, from one key range watched from a known revision.

    The keys of the range (the holder and its queue) are kept here as the watch reports them;
    after each revision's events (etcd never splits a revision over two messages) the lowest
    create revision is the holder, and a change of it or of its value is a `Change`. Waiters
    joining or leaving the queue change neither, so they are not reported. A stream is open only
    while ``next`` waits; each starts right after the last revision applied, so nothing is missed
    in between. If etcd compacted that revision away (or cancelled the watch), the range is read
    again and its state, if it differs from the last one reported, is one change: the changes in
    the compacted gap are lost, never reported out of order or twice.
    """

    def __init__(
        self,
        name: str,
        prefix: bytes,
        kvs: list[JSON],
        revision: int,
        *,
        watch: Callable[[JSON], AbstractAsyncContextManager[AsyncIterator[JSON]]],
        read: Callable[[JSON], Awaitable[JSON]],
    ) -> None:
        """``kvs`` at ``revision``: the range of ``prefix`` read at subscription; ``watch``
        opens a watch stream (a gateway's), ``read`` makes one range read."""
        self._name = name
        self._prefix = prefix
        self._open = watch
        self._read = read
        self._keys: dict[bytes, JSON] = {}
        self._revision = revision
        """Every event up to this revision is applied to ``_keys``."""
        self._shown: tuple[int, str | None] | None = None
        """(create revision, raw value) of the holder last reported (or read at subscription)."""
        self._pending: list[Change] = []
        self._scope: anyio.CancelScope | None = None
        self._closed = False
        self._reset(kvs, revision)
        self._pending.clear()  # the state at subscription is not a change

    def _reset(self, kvs: list[JSON], revision: int) -> None:
        self._keys = {unb64(kv["key"]): kv for kv in kvs}
        self._revision = revision
        self._note()

    def _note(self) -> None:
        holder = min(self._keys.values(), key=_created, default=None)
        state = None if holder is None else (_created(holder), holder.get("value"))
        if state != self._shown:
            self._shown = state
            info = None if holder is None else _lock_info(self._name, holder, len(self._keys), 0.0)
            self._pending.append(Change(self._name, info))

    def _apply(self, events: list[JSON]) -> None:
        for revision, group in groupby(events, key=lambda e: int(e["kv"].get("mod_revision", 0))):
            if revision <= self._revision:
                continue  # applied already (never expected: each stream starts after it)
            for event in group:
                kv = event["kv"]
                if event.get("type") == "DELETE":  # PUT is 0, which the gateway omits
                    self._keys.pop(unb64(kv["key"]), None)
                else:
                    self._keys[unb64(kv["key"])] = kv
            self._revision = revision
            self._note()  # one state per revision: a lease's revocation is one change

    async def next(self, timeout: float) -> list[Change]:
        if not self._pending and not self._closed:
            try:
                with anyio.move_on_after(timeout) as self._scope:
                    while not self._pending and not self._closed:
                        await self._listen()
            finally:
                self._scope = None
        # Changes are queued as they are applied, so a timeout or a caller's cancellation at any
        # await never loses one: they come with the next call.
        changes, self._pending = self._pending, []
        return changes

    async def _listen(self) -> None:
        """One stream from the revision after the last applied, until it yields a change."""
        end = prefix_end(self._prefix)
        create = {
            "key": b64(self._prefix),
            "range_end": b64(end),
            "start_revision": str(self._revision + 1),
        }
        cancelled = False
        async with self._open({"create_request": create}) as results:
            async for result in results:
                if result.get("canceled"):  # compacted past our revision, or cut by the member
                    cancelled = True
                    break
                self._apply(result.get("events") or [])
                if self._pending:
                    return
        if cancelled:
            answer = await self._read(_range(self._prefix, end))
            self._reset(answer.get("kvs", []), int(answer["header"]["revision"]))
        if not self._pending:
            await anyio.sleep(0.1)  # the stream broke (the member is skipped): again, soon

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()


class EtcdStore(Store, Elections, Records):
    scheme: ClassVar[str] = "etcd"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="many",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes=(
            "token = the lock key's create revision; session = one etcd lease (whole seconds);"
            " lock-delay = a second lease, so a hold-back lasts up to 1 s longer than asked"
        ),
    )

    def __init__(
        self,
        endpoints: list[str],
        namespace: str = DEFAULT_NAMESPACE,
        options: ConnectOptions = NO_OPTIONS,
    ) -> None:
        self.endpoints = endpoints
        self.namespace = namespace
        self._root = namespace.encode() + b"/locks/"
        self._records = namespace.encode() + b"/records/"
        self._options = options
        self._gw = Gateway(
            endpoints,
            tls=options.ssl_context() if options.use_tls else None,
            username=options.username,
            password=options.password,
        )
        self.wakeups = 0
        """Watches that fired (a predecessor went away): for tests and metrics."""
        self._ttls: dict[str, tuple[float, float, float]] = {}
        """Holders' leases seen: lease ID → (TTL left, monotonic time read, granted TTL)."""

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> EtcdStore:
        def bad(why: str) -> InvalidArgument:
            return InvalidArgument(
                f"bad etcd store URL {redact(url)!r}: {why}"
                " (use etcd://[user:password@]host:port[,host:port…][/namespace][?tls=…&ca=…])"
            )

        parts = urlsplit(url)
        if parts.scheme.lower() != "etcd":
            raise bad("the scheme is not etcd")
        if parts.fragment:
            raise bad("no fragment allowed")
        resolved, rest = resolve(url, "etcd", options, pairs=True)
        if rest:
            raise bad(f"unknown option {rest[0][0]!r} (etcd takes {', '.join(TLS_OPTIONS)})")
        endpoints = [f"{h}:{p}" for h, p in parse_hosts(parts.netloc, DEFAULT_PORT, bad)]
        namespace = unquote(parts.path).strip("/") or DEFAULT_NAMESPACE
        if not _NAMESPACE.match(namespace):
            raise bad(f"bad namespace {namespace!r} (letters, digits, '_', '.', '-', '/')")
        problem = nesting_problem(namespace)
        if problem:
            raise bad(f"bad namespace {namespace!r}: {problem}")
        return cls(endpoints, namespace, resolved)

    @property
    def url(self) -> str:
        """The URL without its password, with the TLS options (file paths, not contents)."""
        base = f"etcd://{self._options.shown_user()}{','.join(self.endpoints)}/{self.namespace}"
        query = urlencode(self._options.shown(), safe="/")
        return f"{base}?{query}" if query else base

    def __repr__(self) -> str:
        return f"EtcdStore({self.url!r})"

    # -- keys ----------------------------------------------------------------------------

    def _prefix(self, name: str) -> bytes:
        return self._root + quote(name, safe="").encode() + b"/"

    def _held_key(self, name: str) -> bytes:
        """The hold-back key of ``name``: the lock's prefix without its ``/``, so in no lock's
        range (an encoded name has no ``/``)."""
        return self._root + quote(name, safe="").encode()

    @staticmethod
    def _key(prefix: bytes, session: EtcdSession, slot: int) -> bytes:
        return prefix + f"{session.id:016x}{f'.{slot}' if slot else ''}".encode()

    def _name_of(self, key: bytes) -> str:
        return unquote(key[len(self._root) :].split(b"/", 1)[0].decode())

    def _error(self, exc: EtcdError) -> StoreUnavailable:
        where = ", ".join(self.endpoints)
        if exc.code == PERMISSION_DENIED:
            who = self._options.username or "(no user)"
            return StoreUnavailable(
                f"etcd at {where}: permission denied for user {who!r} in namespace"
                f" {self.namespace!r} (its role needs readwrite on the prefix '{self.namespace}/')"
            )
        return StoreUnavailable(f"etcd at {where}: {exc}")

    async def _txn(self, compare: list[JSON], success: list[JSON], failure: list[JSON]) -> JSON:
        body = {"compare": compare, "success": success, "failure": failure}
        try:
            return await self._gw.call("kv/txn", body)
        except EtcdError as exc:
            if exc.code == NOT_FOUND:  # "requested lease not found": the put's lease is gone
                raise LeaseLost("the session's etcd lease is gone") from None
            raise self._error(exc) from None

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
        value = json.dumps({"host": owner.host, "pid": owner.pid, "label": owner.label}).encode()
        seconds = max(1, math.ceil(ttl))
        lease = await self._grant(seconds)
        session = EtcdSession(lease, ttl, value, lock_delay=lock_delay)
        if lock_delay > 0:
            # Whole seconds, rounded up: the hold-back lease ends at least the delay after the
            # session lease, by the leader's clock (``keep_alive`` keeps it so).
            held = math.ceil(seconds + lock_delay)
            try:
                session.hold = await self._grant(held)
            except BaseException:
                with anyio.CancelScope(shield=True), contextlib.suppress(StoreUnavailable):
                    await self._revoke(lease)
                raise
            session.spare = held - seconds - lock_delay
        return session

    async def _grant(self, seconds: int) -> int:
        lease = secrets.randbits(63) or 1
        try:
            await self._gw.call("lease/grant", {"ID": str(lease), "TTL": str(seconds)})
        except EtcdError as exc:
            # "lease already exists": our own grant applied and its answer was lost (the ID is
            # ours: 63 random bits), so the retry found it rather than making a second lease.
            if "exists" not in str(exc):
                raise self._error(exc) from None
        return lease

    async def _revoke(self, lease: int) -> bool:
        """Revoke ``lease``; False if etcd no longer knows it (expired, or revoked already)."""
        try:
            await self._gw.call("lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if exc.code != NOT_FOUND:
                raise self._error(exc) from None
            return False
        return True

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, EtcdSession)
        # Short per-member waits: a paused member must not eat the renewal window.
        patience = min(self._gw.request_timeout, max(0.25, session.ttl / 4))
        # The hold-back lease first, the session lease only once it is renewed: the session
        # lease never ends less than the delay before the hold-back lease, even when the second
        # renewal fails. The session lease's renewal may reach etcd up to the pair's time after
        # the hold-back lease's: if that is more than the hold-back TTL's spare (0 for a
        # delay of whole seconds), the hold-back lease is renewed once more, after it.
        started = time.monotonic()
        if session.hold and not await self._renew(session.hold, patience):
            return False
        if not await self._renew(session.id, patience):
            return False
        late = session.hold and time.monotonic() - started > session.spare
        if late and not await self._renew(session.hold, patience):
            return False
        if session.dirty:
            with anyio.move_on_after(patience):  # never delays the renewal's answer for long
                await self._sweep(session)
        return True

    async def _renew(self, lease: int, patience: float) -> bool:
        try:
            answer = await self._gw.call("lease/keepalive", {"ID": str(lease)}, timeout=patience)
        except EtcdError as exc:
            if exc.code == NOT_FOUND:
                return False
            raise self._error(exc) from None
        result = answer.get("result") or {}
        return int(result.get("TTL", 0)) > 0  # 0: unknown or expired lease

    async def _sweep(self, session: EtcdSession) -> None:
        """Delete own keys that a failed request may have left (not ones in use again), and the
        hold-back key a lost grant's txn may have put with one."""
        in_use = {self._key(self._prefix(name), session, slot) for name, slot in session.claimed()}
        held = {name for name, _ in session.held}
        for key in list(session.dirty):
            if key not in in_use:
                name = self._name_of(key)
                # Our hold-back key of a name we hold no more stands for no grant: it goes too.
                mine = {"key": b64(self._held_key(name)), "target": "LEASE", "result": "EQUAL"}
                ours = session.hold and name not in held
                body = {
                    "compare": [{**mine, "lease": str(session.hold)}] if ours else [],
                    "success": [delete_op(key)]
                    + ([delete_op(self._held_key(name))] if ours else []),
                    "failure": [delete_op(key)],
                }
                try:
                    await self._gw.call("kv/txn", body)
                except (StoreUnavailable, EtcdError):
                    return  # kept for the next keep-alive
            session.dirty.discard(key)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, EtcdSession)
        # The session lease first: only if it was still alive is this a clean end, which frees
        # its names at once (the hold-back lease goes too). If it had expired, its names stay
        # held back until the hold-back lease expires on its own.
        if not session.revoked:
            session.revoked = await self._revoke(session.id)
        if session.revoked and session.hold:
            await self._revoke(session.hold)
            session.hold = 0
        session.held.clear()
        session.slots.clear()
        session.dirty.clear()

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, EtcdSession)
        assert ticket is None or isinstance(ticket, EtcdTicket)
        prefix = self._prefix(name)
        end = prefix_end(prefix)
        held_key = self._held_key(name)
        if ticket is None:
            slot = session.claim(name)
            key = self._key(prefix, session, slot)
            session.dirty.discard(key)
        else:
            slot, key = ticket.slot, ticket.key
        queue = ticket is not None or enqueue
        count = _range(prefix, end, count_only=True)
        answer: JSON | None = None
        wrote = False  # whether the put applied (the answer's ranges then follow the put)
        # Every txn reads the hold-back key last: its range is the answer's last.
        if ticket is not None:
            # A waiter's own key is normally there: re-check with reads only. etcd serves a txn
            # with no put in either branch by a linearizable ReadIndex read instead of a Raft
            # round (a put even in a branch not taken makes the whole txn a write).
            reads = [get_op(key), _first(prefix, end), count]
            reads += [_last(prefix, end, 1, below=ticket.revision - 1), get_op(held_key)]
            answer = await self._txn([], reads, [])  # failing: the ticket stays, nothing to undo
            if not _ranges(answer)[0].get("kvs"):
                answer = None  # the own key is gone (its lease ended, or deleted): put it again
        if answer is None:
            # Put the own key if it is absent (queueing) or if the whole lock is free and not
            # held back (no waiting).
            empty = {"key": b64(prefix), "range_end": b64(end)}
            free = [_absent(empty), _absent({"key": b64(held_key)})]
            compare = [_absent({"key": b64(key)})] if queue else free
            put = {
                "request_put": {
                    "key": b64(key),
                    "value": b64(session.value),
                    "lease": str(session.id),
                }
            }
            # After the put, the own key is the last one: the last two are it and its predecessor.
            success = [put, _first(prefix, end), count, _last(prefix, end, 2)]
            if session.hold:
                # Granted by this txn (the lock was free and not held back before the put): its
                # hold-back key is put with it, judged on the state before the put (a nested
                # txn's compares are).
                claim = self._hold_op(session, held_key, 0)
                success.append(
                    {"request_txn": {"compare": free, "success": [claim]}} if queue else claim
                )
            success.append(get_op(held_key))
            failure = [get_op(key), _first(prefix, end), count]
            if ticket is not None:
                failure.append(_last(prefix, end, 1, below=ticket.revision - 1))
            failure.append(get_op(held_key))
            try:
                answer = await self._txn(compare, success, failure)
            except LeaseLost:
                if ticket is None:
                    session.free(name, slot)
                raise
            except StoreUnavailable:
                if ticket is None:  # it may have applied: the key is deleted later unless reused
                    session.free(name, slot)
                    session.dirty.add(key)
                raise
            wrote = bool(answer.get("succeeded"))
        revision = int(answer["header"]["revision"])
        ranges = _ranges(answer)
        held = (ranges[-1].get("kvs") or [None])[0]
        before: JSON | None = None
        known = True  # whether ``before`` (the predecessor) was read in the txn
        if wrote:
            mine: int | None = revision  # the put's revision is the new key's create revision
            last = ranges[3].get("kvs", [])
            before = last[1] if len(last) > 1 else None
        else:
            own = ranges[0].get("kvs", [])
            mine = _created(own[0]) if own else None
            known = ticket is not None and mine == ticket.revision
            if known:
                before = (ranges[3].get("kvs") or [None])[0]
        owners = ranges[1].get("kvs", [])
        owner = owners[0] if owners else None
        first = mine is not None and owner is not None and _created(owner) == mine
        try:
            if first and mine is not None and await self._hold(session, key, held_key, mine, held):
                session.held[(name, mine)] = (key, slot)
                return Grant(token=mine, renewed_session=False)
            # Held back: the hold-back key of a grant whose lock key is gone (it ended without
            # a release). Nobody holds the name meanwhile, the first in line included.
            back = held is not None and (owner is None or _held_token(held) != _created(owner))
            retry_in = await self._free_in(held) if back and (first or not queue) else None
            holder = None
            if owner is not None and not back and not first:
                holder = await self._info(name, owner, int(ranges[2].get("count", 0)))
            if not queue:
                if mine is not None:  # our own earlier attempt (its answer lost) queued the key
                    await self._delete(key, mine)
                session.free(name, slot)
                return Busy(holder=holder, ticket=None, retry_in=retry_in)
            assert mine is not None
            if not known:
                answer = await self._call_range(_last(prefix, end, 1, below=mine - 1))
                revision = int(answer["header"]["revision"])
                before = (answer.get("kvs") or [None])[0]
        except StoreUnavailable:
            if ticket is None:  # queued, but nobody will wait: deleted at the next keep-alive
                session.free(name, slot)
                session.dirty.add(key)
            raise
        if ticket is None:
            ticket = EtcdTicket(session, name, key, slot, mine)
        ticket.revision = mine
        predecessor = unb64(before["key"]) if before else None
        if first and back:
            predecessor = held_key  # first in line: woken when the hold-back key expires
        return Busy(
            holder=holder,
            ticket=ticket,
            retry_in=retry_in,
            extra={"predecessor": predecessor, "revision": revision},
        )

    def _hold_op(self, session: EtcdSession, held_key: bytes, token: int) -> JSON:
        """The put of a hold-back key on the session's hold-back lease (``token`` 0: the put's
        own revision, the lock key's in the same txn)."""
        fields: dict[str, object] = {"lock_delay": session.lock_delay}
        if token:
            fields["token"] = token
        op = {"key": b64(held_key), "value": b64(json.dumps(fields)), "lease": str(session.hold)}
        return {"request_put": op}

    async def _hold(
        self, session: EtcdSession, key: bytes, held_key: bytes, mine: int, held: JSON | None
    ) -> bool:
        """Whether the session, first in line with the key created at ``mine``, is granted:
        the name is not held back, and its own hold-back key stands for this grant (put now if
        needed, while the own key still exists and nobody else's hold-back key does)."""
        ours = held is not None and session.hold and str(held.get("lease")) == str(session.hold)
        if held is not None and not ours:
            return False  # someone else's: held back
        if not session.hold:
            return True  # no lock-delay of its own: nothing to put
        if held is not None and _held_token(held) == mine:
            return True  # put by this grant's own txn (or its claim, answered before)
        # Not put yet (the lock was busy at the put), or ours from an earlier grant whose
        # release found no lock key: now it stands for this one.
        compare = [
            {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(mine)},
            {
                "key": b64(held_key),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": str(0 if held is None else held.get("mod_revision", 0)),
            },
        ]
        answer = await self._txn(compare, [self._hold_op(session, held_key, mine)], [])
        return bool(answer.get("succeeded"))

    async def _free_in(self, held: JSON | None) -> float:
        """Seconds until a hold-back key expires: its lease's whole seconds left (rounded down
        by etcd), at least half a second (the leader expires leases every 0.5 s)."""
        lease = None if held is None else held.get("lease")
        left = await self._expires_in(str(lease), True) if lease else 0.0
        return max(left, 0.5)

    async def _call_range(self, op: JSON) -> JSON:
        try:
            return await self._gw.call("kv/range", op["request_range"])
        except EtcdError as exc:
            raise self._error(exc) from None

    async def _delete(self, key: bytes, created: int) -> bool:
        """Delete ``key`` only if its create revision is still ``created``."""
        compare = [
            {
                "key": b64(key),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": str(created),
            }
        ]
        answer = await self._txn(compare, [delete_op(key)], [])
        return bool(answer.get("succeeded"))

    async def _info(self, name: str, owner: JSON, count: int, fresh: bool = False) -> LockInfo:
        lease = owner.get("lease")
        expires_in = await self._expires_in(str(lease), fresh) if lease else 0.0
        return _lock_info(name, owner, count, expires_in)

    async def _expires_in(self, lease: str, fresh: bool) -> float:
        """Seconds left on ``lease``: read with ``lease/timetolive``, or estimated from a read at
        most a quarter of its granted TTL ago (``fresh`` False). The estimate is the time left
        then minus the time passed since: a lower bound, low by at most that quarter TTL if the
        holder renewed meanwhile (what ``expires_in`` is for: shown to people while they wait)."""
        now = time.monotonic()
        cached = self._ttls.get(lease)
        if cached is not None and not fresh:
            left, read_at, granted = cached
            estimate = left - (now - read_at)
            if now - read_at <= granted / 4 and estimate > 0:
                return estimate
        try:
            answer = await self._gw.call("lease/timetolive", {"ID": lease})
        except EtcdError as exc:
            raise self._error(exc) from None
        left = float(answer.get("TTL", 0))  # -1: expired or unknown
        if left <= 0:
            self._ttls.pop(lease, None)
            return 0.0
        if len(self._ttls) >= _TTL_CACHE:
            self._ttls.clear()
        self._ttls[lease] = (left, now, max(left, float(answer.get("grantedTTL", 0))))
        return left

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        predecessor = busy.extra.get("predecessor")
        revision = busy.extra.get("revision")
        with anyio.move_on_after(timeout):
            if isinstance(predecessor, bytes) and isinstance(revision, int):
                create = {
                    "key": b64(predecessor),
                    "start_revision": str(revision + 1),
                    "filters": ["NOPUT"],
                }
                async with self._gw.watch({"create_request": create}) as results:
                    async for result in results:
                        if result.get("events") or result.get("canceled"):
                            self.wakeups += 1
                            return
            await anyio.sleep(min(timeout, 0.1))  # no watch (member gone): try again soon

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, EtcdTicket)
        if ticket.left:
            return
        ticket.left = True
        session = ticket.session
        # The key is this ticket's alone (its slot is claimed until here): delete it as it is.
        try:
            await self._gw.call("kv/deleterange", {"key": b64(ticket.key)})
        except (StoreUnavailable, EtcdError):
            session.dirty.add(ticket.key)  # the next keep-alive deletes it (or the lease ends)
        session.free(ticket.name, ticket.slot)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, EtcdSession)
        entry = session.held.get((name, token))
        if entry is None:
            return  # never granted to this session (or released already)
        key, slot = entry
        held_key = self._held_key(name)
        # The lock key and its hold-back key in one txn: a clean release frees the name at
        # once. A no-op if the key is gone (lease expired) or newer.
        compare = [
            {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(token)}
        ]
        success = [delete_op(key)] + ([delete_op(held_key)] if session.hold else [])
        answer = await self._txn(compare, success, [get_op(held_key)])
        if not answer.get("succeeded") and session.hold:
            # The lock key was gone (deleted by hand): our hold-back key stands for nothing.
            held = (_ranges(answer)[0].get("kvs") or [None])[0]
            ours = held is not None and str(held.get("lease")) == str(session.hold)
            if ours and held is not None and _held_token(held) == token:
                mod = {"target": "MOD", "result": "EQUAL", "mod_revision": held["mod_revision"]}
                await self._txn([{"key": b64(held_key), **mod}], [delete_op(held_key)], [])
        del session.held[(name, token)]
        session.free(name, slot)

    async def _read_locks(self, name: str | None) -> tuple[dict[str, list[JSON]], dict[str, JSON]]:
        """The queues of the locks (of ``name``, or all) and their hold-back keys, by name."""
        if name is None:
            ops = [_range(self._root, prefix_end(self._root))]
        else:
            prefix = self._prefix(name)
            ops = [_range(prefix, prefix_end(prefix)), get_op(self._held_key(name))]
        queues: dict[str, list[JSON]] = {}
        helds: dict[str, JSON] = {}
        for found in _ranges(await self._txn([], ops, [])):
            for kv in found.get("kvs", []):
                rest = unb64(kv["key"])[len(self._root) :]
                lock = self._name_of(unb64(kv["key"]))
                if b"/" in rest:
                    queues.setdefault(lock, []).append(kv)
                else:
                    helds[lock] = kv
        return queues, helds

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        queues, helds = await self._read_locks(name)
        found: dict[str, LockInfo] = {}
        failed: list[StoreUnavailable] = []

        async def one(lock: str, kvs: list[JSON]) -> None:
            owner = min(kvs, key=_created)
            held = helds.get(lock)
            if held is not None and _held_token(held) != _created(owner):
                return  # held back: the first in line is not granted yet
            try:
                found[lock] = await self._info(lock, owner, len(kvs), True)
            except StoreUnavailable as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:  # the holders' leases, read at once
            for lock, kvs in queues.items():
                tg.start_soon(one, lock, kvs)
        if failed:
            raise failed[0]
        return [found[lock] for lock in sorted(found)]

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        queues, helds = await self._read_locks(name)
        found: list[HeldBack] = []
        for lock, held in sorted(helds.items()):
            token = _held_token(held)
            kvs = queues.get(lock)
            if kvs and _created(min(kvs, key=_created)) == token:
                continue  # its grant still holds
            found.append(HeldBack(lock, token, await self._free_in(held)))
        return found

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, EtcdSession)
        entry = session.held.get((name, token))
        if entry is None:
            return False  # never granted to this session, or released
        key = b64(entry[0])
        fields = json.loads(session.value)
        fields["value"] = value
        # The value lives in the holder key, beside the owner: ``locks()`` reads it for free, a
        # new grant (a new key) starts without one, and the key's own watch events carry it.
        compare = [
            {"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": str(token)},
            {"key": key, "target": "LEASE", "result": "EQUAL", "lease": str(session.id)},
        ]
        put = {
            "request_put": {"key": key, "value": b64(json.dumps(fields)), "lease": str(session.id)}
        }
        try:
            # Safe to send again: while the compare holds, a second put writes the same bytes.
            answer = await self._txn(compare, [put], [])
        except LeaseLost:
            return False
        return bool(answer.get("succeeded"))

    async def watch(self, name: str) -> Watch:
        prefix = self._prefix(name)
        answer = await self._call_range(_range(prefix, prefix_end(prefix)))
        kvs, revision = answer.get("kvs", []), int(answer["header"]["revision"])
        return EtcdWatch(name, prefix, kvs, revision, watch=self._gw.watch, read=self._call_range)

    # -- records -------------------------------------------------------------------------

    def _record_of(self, kv: JSON) -> Record:
        key = unb64(kv["key"])[len(self._records) :].decode()
        return Record(key, unb64(kv.get("value")).decode(), int(kv["mod_revision"]))

    async def read_record(self, key: str) -> Record | None:
        answer = await self._call_range(get_op(self._records + key.encode()))
        kvs = answer.get("kvs") or []
        return self._record_of(kvs[0]) if kvs else None

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        if version < 0:
            return None  # never a record's version
        full = b64(self._records + key.encode())
        if version == 0:
            compare = {"key": full, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        else:
            compare = {
                "key": full,
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": str(version),
            }
        body = {
            "compare": [compare],
            "success": [{"request_put": {"key": full, "value": b64(value)}}],
            "failure": [],
        }
        try:
            # Not sent again once it may have applied: a second try would find its own write and
            # be refused, telling the caller that someone else wrote.
            answer = await self._gw.call("kv/txn", body, retry=False)
        except EtcdError as exc:
            raise self._error(exc) from None
        if not answer.get("succeeded"):
            return None
        # The txn's revision is its put's: the record's new mod revision.
        return Record(key, value, int(answer["header"]["revision"]))

    async def list_records(self, prefix: str) -> list[Record]:
        start = self._records + prefix.encode()
        # Everything from ``start`` up to its prefix end starts with it: no key beyond.
        op = _range(start, prefix_end(start), sort_order="ASCEND", sort_target="KEY")
        answer = await self._call_range(op)
        return [self._record_of(kv) for kv in answer.get("kvs") or []]

    async def aclose(self) -> None:
        await self._gw.aclose()

    # -- the write guard -----------------------------------------------------------------

    async def guarded_txn(
        self,
        name: str,
        token: int,
        success: Sequence[JSON],
        failure: Sequence[JSON] = (),
        compare: Sequence[JSON] = (),
    ) -> GuardedTxn:
        """Run ``success`` in one etcd txn only while ``token`` still holds ``name``.

        Ops come from ``put_op``/``delete_op``/``get_op`` (or etcd's JSON ``RequestOp``);
        ``compare`` adds the caller's own conditions. Never retried once it may have applied.
        """
        prefix = self._prefix(name)
        lookup = _range(
            prefix,
            prefix_end(prefix),
            keys_only=True,
            min_create_revision=str(token),
            max_create_revision=str(token),
        )
        kvs = (await self._call_range(lookup)).get("kvs", [])
        # No live key created at ``token``: compare on the bare prefix (never a key), which fails,
        # so ``failure`` applies just as when the lock was lost between the two requests.
        key = kvs[0]["key"] if kvs else b64(prefix)
        guard = {"key": key, "target": "CREATE", "result": "EQUAL"}
        body = {
            "compare": [{**guard, "create_revision": str(token)}, *compare],
            "success": list(success),
            "failure": list(failure),
        }
        try:
            answer = await self._gw.call("kv/txn", body, retry=False)
        except EtcdError as exc:
            raise self._error(exc) from None
        return GuardedTxn(
            held=bool(answer.get("succeeded")),
            revision=int(answer["header"]["revision"]),
            responses=list(answer.get("responses", [])),
        )
