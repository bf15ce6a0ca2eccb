"""The etcd store: ``etcd://[user:password@]host:port[,host:port…][/namespace][?tls=…&ca=…]``.

Spoken over etcd's JSON gateway with httpx (``_etcd_gateway``): no protobuf, no gRPC stubs.

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

import json
import math
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, ClassVar
from urllib.parse import quote, unquote, urlencode, urlsplit

import anyio

from .._errors import InvalidArgument, LeaseLost, StoreUnavailable
from .._names import nesting_problem
from ._connect import (
    NO_OPTIONS,
    TLS_OPTIONS,
    ConnectOptions,
    parse_hosts,
    redact,
    resolve,
)
from ._etcd_gateway import (
    JSON,
    NOT_FOUND,
    PERMISSION_DENIED,
    EtcdError,
    Gateway,
    b64,
    prefix_end,
    unb64,
)
from ._spi import (
    Busy,
    Capabilities,
    Change,
    Grant,
    LockInfo,
    Owner,
    Record,
    Session,
    Store,
    Watch,
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

    def __init__(self, store: EtcdStore, name: str, kvs: list[JSON], revision: int) -> None:
        self._store = store
        self._name = name
        self._prefix = store._prefix(name)
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
        async with self._store._gw.watch({"create_request": create}) as results:
            async for result in results:
                if result.get("canceled"):  # compacted past our revision, or cut by the member
                    cancelled = True
                    break
                self._apply(result.get("events") or [])
                if self._pending:
                    return
        if cancelled:
            answer = await self._store._call_range(_range(self._prefix, end))
            self._reset(answer.get("kvs", []), int(answer["header"]["revision"]))
        if not self._pending:
            await anyio.sleep(0.1)  # the stream broke (the member is skipped): again, soon

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()


class EtcdStore(Store):
    scheme: ClassVar[str] = "etcd"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="many",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes="token = the lock key's create revision; session = one etcd lease (whole seconds)",
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

    async def open_session(self, ttl: float, owner: Owner) -> Session:
        lease = secrets.randbits(63) or 1
        value = json.dumps({"host": owner.host, "pid": owner.pid, "label": owner.label}).encode()
        body = {"ID": str(lease), "TTL": str(max(1, math.ceil(ttl)))}
        try:
            await self._gw.call("lease/grant", body)
        except EtcdError as exc:
            # "lease already exists": our own grant applied and its answer was lost (the ID is
            # ours: 63 random bits), so the retry found it rather than making a second lease.
            if "exists" not in str(exc):
                raise self._error(exc) from None
        return EtcdSession(lease, ttl, value)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, EtcdSession)
        try:
            # Short per-member waits: a paused member must not eat the renewal window.
            patience = min(self._gw.request_timeout, max(0.25, session.ttl / 4))
            answer = await self._gw.call(
                "lease/keepalive", {"ID": str(session.id)}, timeout=patience
            )
        except EtcdError as exc:
            if exc.code == NOT_FOUND:
                return False
            raise self._error(exc) from None
        result = answer.get("result") or {}
        if int(result.get("TTL", 0)) <= 0:  # unknown or expired lease
            return False
        if session.dirty:
            with anyio.move_on_after(patience):  # never delays the renewal's answer for long
                await self._sweep(session)
        return True

    async def _sweep(self, session: EtcdSession) -> None:
        """Delete own keys that a failed request may have left (not ones in use again)."""
        in_use = {self._key(self._prefix(name), session, slot) for name, slot in session.claimed()}
        for key in list(session.dirty):
            if key not in in_use:
                try:
                    await self._gw.call("kv/deleterange", {"key": b64(key)})
                except (StoreUnavailable, EtcdError):
                    return  # kept for the next keep-alive
            session.dirty.discard(key)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, EtcdSession)
        try:
            await self._gw.call("lease/revoke", {"ID": str(session.id)})
        except EtcdError as exc:
            if exc.code != NOT_FOUND:  # not found: revoked or expired already
                raise self._error(exc) from None
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
        if ticket is not None:
            # A waiter's own key is normally there: re-check with reads only. etcd serves a txn
            # with no put in either branch by a linearizable ReadIndex read instead of a Raft
            # round (a put even in a branch not taken makes the whole txn a write).
            reads = [get_op(key), _first(prefix, end), count]
            reads.append(_last(prefix, end, 1, below=ticket.revision - 1))
            answer = await self._txn([], reads, [])  # failing: the ticket stays, nothing to undo
            if not _ranges(answer)[0].get("kvs"):
                answer = None  # the own key is gone (its lease ended, or deleted): put it again
        if answer is None:
            # Put the own key if it is absent (queueing) or if the whole lock is free (no waiting).
            absent = {"key": b64(key)} if queue else {"key": b64(prefix), "range_end": b64(end)}
            compare = [{**absent, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}]
            put = {
                "request_put": {
                    "key": b64(key),
                    "value": b64(session.value),
                    "lease": str(session.id),
                }
            }
            # After the put, the own key is the last one: the last two are it and its predecessor.
            success = [put, _first(prefix, end), count, _last(prefix, end, 2)]
            failure = [get_op(key), _first(prefix, end), count]
            if ticket is not None:
                failure.append(_last(prefix, end, 1, below=ticket.revision - 1))
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
        if mine is not None and owner is not None and _created(owner) == mine:
            session.held[(name, mine)] = (key, slot)
            return Grant(token=mine, renewed_session=False)
        try:
            holder = (
                await self._info(name, owner, int(ranges[2].get("count", 0))) if owner else None
            )
            if not queue:
                if mine is not None:  # our own earlier attempt (its answer lost) queued the key
                    await self._delete(key, mine)
                session.free(name, slot)
                return Busy(holder=holder, ticket=None)
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
        return Busy(
            holder=holder, ticket=ticket, extra={"predecessor": predecessor, "revision": revision}
        )

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
        await self._delete(key, token)  # a no-op if the key is gone (lease expired) or newer
        del session.held[(name, token)]
        session.free(name, slot)

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        prefix = self._root if name is None else self._prefix(name)
        try:
            answer = await self._gw.call(
                "kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}
            )
        except EtcdError as exc:
            raise self._error(exc) from None
        queues: dict[str, list[JSON]] = {}
        for kv in answer.get("kvs", []):
            queues.setdefault(self._name_of(unb64(kv["key"])), []).append(kv)
        found: dict[str, LockInfo] = {}
        failed: list[StoreUnavailable] = []

        async def one(lock: str, kvs: list[JSON]) -> None:
            try:
                found[lock] = await self._info(lock, min(kvs, key=_created), len(kvs), True)
            except StoreUnavailable as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:  # the holders' leases, read at once
            for lock, kvs in queues.items():
                tg.start_soon(one, lock, kvs)
        if failed:
            raise failed[0]
        return [found[lock] for lock in sorted(found)]

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
        return EtcdWatch(self, name, answer.get("kvs", []), int(answer["header"]["revision"]))

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
