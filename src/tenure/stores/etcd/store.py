"""The etcd store: ``etcd://[user:password@]host:port[,host:port…][/namespace][?tls=…&ca=…]``
(``&transport=http``: etcd's JSON gateway instead of its gRPC API).

A session is one etcd lease; a lock is a queue of keys on those leases, its holder the key
created first, the token that key's create revision. How and why: docs/stores/etcd.md.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import ClassVar
from urllib.parse import unquote, urlencode

import anyio

from ..._errors import LeaseLost, StoreUnavailable
from ..._names import nesting_problem
from .._connect import NO_OPTIONS, ConnectOptions
from .._kit import owner_json, parse_revocation, parse_url, revocation_json
from .._spi import (
    Busy,
    Capabilities,
    Elections,
    Grant,
    Holder,
    LockDelay,
    LockInfo,
    Record,
    Records,
    Revocation,
    Revocations,
    Session,
    Store,
    Watch,
)
from .gateway import Gateway
from .grpc_transport import GrpcTransport, TLSFiles
from .guard import GuardedTxn, guarded_txn
from .keys import (
    REVOKED,
    Keys,
    absent,
    b64,
    created,
    created_at,
    delete_op,
    first_op,
    get_op,
    held_revocation,
    held_token,
    hold_op,
    last_op,
    leased_to,
    lock_info,
    modded_at,
    oldest,
    prefix_end,
    put_op,
    range_op,
    ranges,
    unb64,
)
from .records import RecordKeys
from .session import EtcdSession, EtcdTicket, Sessions
from .transport import JSON, NOT_FOUND, PERMISSION_DENIED, EtcdError, Transport
from .watch import EtcdWatch

DEFAULT_PORT = 2379
DEFAULT_NAMESPACE = "tenure"
USAGE = "etcd://[user:password@]host:port[,host:port…][/namespace][?tls=…&ca=…&transport=…]"
TRANSPORTS = ("grpc", "http")
"""``grpc`` (the default): etcd's gRPC API; ``http``: its JSON gateway (docs/stores/etcd.md)."""
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_TTL_CACHE = 1024  # holders' leases whose time left is remembered (all forgotten when full)


class EtcdStore(Store, Elections, Records, Revocations):
    """etcd (``etcd://h1:2379,h2:2379/namespace``): correctness-grade, over its gRPC API (or
    its JSON gateway: ``?transport=http``); tokens are key revisions."""

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
        transport: str = "grpc",
    ) -> None:
        self.endpoints = endpoints
        self.namespace = namespace
        self.transport = transport
        """``grpc`` or ``http`` (`TRANSPORTS`)."""
        self._keys = Keys(namespace)
        self._options = options
        tls = options.ssl_context() if options.use_tls else None
        self._gw: Transport
        if transport == "http":
            self._gw = Gateway(
                endpoints, tls=tls, username=options.username, password=options.password
            )
        else:
            files = TLSFiles(options.ca, options.cert, options.key) if tls else None
            self._gw = GrpcTransport(
                endpoints,
                tls=tls,
                tls_files=files,
                username=options.username,
                password=options.password,
            )
        self._sessions = Sessions(self._gw, self._keys, self._error, self._call)
        self._records = RecordKeys(self._keys.records, self._call)
        self.wakeups = 0
        """Watches that fired (a predecessor went away): for tests and metrics."""
        self._ttls: dict[str, tuple[float, float, float]] = {}
        """Holders' leases seen: lease ID → (TTL left, monotonic time read, granted TTL)."""

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> EtcdStore:
        checked = parse_url(url, ("etcd",), "etcd", USAGE)
        resolved = checked.resolve(options, pairs=True)
        transport = checked.only("transport").get("transport", TRANSPORTS[0])
        if transport not in TRANSPORTS:
            raise checked.bad(f"bad transport {transport!r} (grpc or http)")
        endpoints = [f"{h}:{p}" for h, p in checked.hosts(DEFAULT_PORT)]
        namespace = unquote(checked.parts.path).strip("/") or DEFAULT_NAMESPACE
        if not _NAMESPACE.match(namespace):
            raise checked.bad(f"bad namespace {namespace!r} (letters, digits, '_', '.', '-', '/')")
        problem = nesting_problem(namespace)
        if problem:
            raise checked.bad(f"bad namespace {namespace!r}: {problem}")
        return cls(endpoints, namespace, resolved, transport)

    @property
    def url(self) -> str:
        """The URL without its password, with the TLS options (file paths, not contents) and
        the transport if not the default."""
        base = f"etcd://{self._options.shown_user()}{','.join(self.endpoints)}/{self.namespace}"
        shown = self._options.shown()
        if self.transport != TRANSPORTS[0]:
            shown.append(("transport", self.transport))
        query = urlencode(shown, safe="/")
        return f"{base}?{query}" if query else base

    def __repr__(self) -> str:
        return f"EtcdStore({self.url!r})"

    # -- requests ------------------------------------------------------------------------

    def _error(self, exc: EtcdError) -> StoreUnavailable:
        if exc.code == PERMISSION_DENIED:
            who = self._options.username or "(no user)"
            return self._gw.unavailable(
                f"permission denied for user {who!r} in namespace {self.namespace!r} (its role"
                f" needs readwrite on the prefix '{self.namespace}/')"
            )
        return self._gw.unavailable(exc)

    async def _call(
        self, path: str, body: JSON, *, retry: bool = True, timeout: float | None = None
    ) -> JSON:
        try:
            return await self._gw.call(path, body, retry=retry, timeout=timeout)
        except EtcdError as exc:
            raise self._error(exc) from None

    async def _call_range(self, op: JSON) -> JSON:
        return await self._call("kv/range", op["request_range"])

    async def _txn(
        self, compare: list[JSON], success: list[JSON], failure: list[JSON], retry: bool = True
    ) -> JSON:
        body = {"compare": compare, "success": success, "failure": failure}
        try:
            return await self._gw.call("kv/txn", body, retry=retry)
        except EtcdError as exc:
            if exc.code == NOT_FOUND:  # "requested lease not found": the put's lease is gone
                raise LeaseLost("the session's etcd lease is gone") from None
            raise self._error(exc) from None

    async def request(self, path: str, body: JSON) -> JSON:
        """One call of etcd's v3 API through this store's own transport (its members, TLS,
        authentication and fail-over): ``path`` is the gateway's (``body`` POSTed to
        ``/v3/<path>``, or the gRPC method it stands for), e.g. ``"kv/range"`` or
        ``"kv/txn"``, ``body`` in etcd's JSON (bytes base64, as `b64` makes them; int64s as
        strings); the answer as etcd gives it.

        Like the store's own reads, it is sent again to the next member when no answer came,
        within the fail-over budget: a write in it may apply twice, so give it only reads and
        writes that are safe to repeat (a write that must apply once, and only while a lock is
        held, is `guarded_txn`). A refusal by etcd, or no member answering, is one-line
        ``StoreUnavailable``.
        """
        return await self._call(path, body)

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        return await self._sessions.open(ttl, owner, lock_delay)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, EtcdSession)
        return await self._sessions.keep_alive(session)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, EtcdSession)
        await self._sessions.close(session)

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, EtcdSession)
        assert ticket is None or isinstance(ticket, EtcdTicket)
        prefix = self._keys.prefix(name)
        end = prefix_end(prefix)
        held_key = self._keys.held(name)
        if ticket is None:
            slot = session.claim(name)
            key = self._keys.queued(prefix, session.id, slot)
            session.in_doubt.discard(key)
        else:
            slot, key = ticket.slot, ticket.key
        queue = ticket is not None or enqueue
        count = range_op(prefix, end, count_only=True)
        answer: JSON | None = None
        wrote = False  # whether the put applied (the answer's ranges then follow the put)
        # Every txn reads the hold-back key last: its range is the answer's last.
        if ticket is not None:
            # A waiter's own key is normally there: re-check with reads only. etcd serves a txn
            # with no put in either branch by a linearizable ReadIndex read instead of a Raft
            # round (a put even in a branch not taken makes the whole txn a write), unless the
            # grant's hold-back key goes with it (below).
            queued_at = ticket.revision
            reads = [get_op(key), first_op(prefix, end), count]
            reads += [last_op(prefix, end, 1, below=queued_at - 1), get_op(held_key)]
            if session.hold:
                # With a lock-delay, a woken waiter is usually first now, and its grant puts its
                # hold-back key: put in the re-check's own txn if it is first (no older key in
                # the queue) and the name not held back, one round trip instead of two.
                first_now = [created_at(key, queued_at), oldest(prefix, end, queued_at)]
                first_now.append(absent({"key": b64(held_key)}))
                claim = hold_op(held_key, session.hold, session.lock_delay, queued_at)
                try:
                    answer = await self._txn(first_now, [claim], reads)
                except StoreUnavailable:
                    session.in_doubt.add(key)  # a hold-back key put for no grant: swept once left
                    raise
                if answer.get("succeeded"):
                    session.held[(name, queued_at)] = (key, slot)
                    return Grant(token=queued_at, renewed_session=False)
            else:
                answer = await self._txn([], reads, [])  # failing: the ticket stays
            if not ranges(answer)[0].get("kvs"):
                answer = None  # the own key is gone (its lease ended, or deleted): put it again
        if answer is None:
            # Put the own key if it is absent (queueing) or if the whole lock is free and not
            # held back (no waiting).
            empty = {"key": b64(prefix), "range_end": b64(end)}
            free = [absent(empty), absent({"key": b64(held_key)})]
            compare = [absent({"key": b64(key)})] if queue else free
            put = put_op(key, session.value, session.id)
            # After the put, the own key is the last one: the last two are it and its predecessor.
            success = [put, first_op(prefix, end), count, last_op(prefix, end, 2)]
            if session.hold:
                # Granted by this txn (the lock was free and not held back before the put): its
                # hold-back key is put with it, judged on the state before the put (a nested
                # txn's compares are).
                claim = hold_op(held_key, session.hold, session.lock_delay, 0)
                success.append(
                    {"request_txn": {"compare": free, "success": [claim]}} if queue else claim
                )
            success.append(get_op(held_key))
            failure = [get_op(key), first_op(prefix, end), count]
            if ticket is not None:
                failure.append(last_op(prefix, end, 1, below=ticket.revision - 1))
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
                    session.in_doubt.add(key)
                raise
            wrote = bool(answer.get("succeeded"))
        revision = int(answer["header"]["revision"])
        found = ranges(answer)
        held = (found[-1].get("kvs") or [None])[0]
        before: JSON | None = None
        known = True  # whether ``before`` (the predecessor) was read in the txn
        if wrote:
            mine: int | None = revision  # the put's revision is the new key's create revision
            last = found[3].get("kvs", [])
            before = last[1] if len(last) > 1 else None
        else:
            own = found[0].get("kvs", [])
            mine = created(own[0]) if own else None
            known = ticket is not None and mine == ticket.revision
            if known:
                before = (found[3].get("kvs") or [None])[0]
        owners = found[1].get("kvs", [])
        owner = owners[0] if owners else None
        first = mine is not None and owner is not None and created(owner) == mine
        try:
            if first and mine is not None and await self._hold(session, key, held_key, mine, held):
                session.held[(name, mine)] = (key, slot)
                return Grant(token=mine, renewed_session=False)
            # Held back: the hold-back key of a grant whose lock key is gone (it ended without
            # a release). Nobody holds the name meanwhile, the first in line included.
            back = held is not None and (owner is None or held_token(held) != created(owner))
            retry_in = await self._free_in(held) if back and (first or not queue) else None
            holder = None
            if owner is not None and not back and not first:
                holder = await self._info(name, owner, int(found[2].get("count", 0)))
            if not queue:
                if mine is not None:  # our own earlier attempt (its answer lost) queued the key
                    await self._delete(key, mine)
                session.free(name, slot)
                return Busy(holder=holder, ticket=None, retry_in=retry_in)
            assert mine is not None
            if not known:
                answer = await self._call_range(last_op(prefix, end, 1, below=mine - 1))
                revision = int(answer["header"]["revision"])
                before = (answer.get("kvs") or [None])[0]
        except StoreUnavailable:
            if ticket is None:  # queued, but nobody will wait: deleted at the next keep-alive
                session.free(name, slot)
                session.in_doubt.add(key)
            raise
        if ticket is None:
            ticket = EtcdTicket(session, name, key, slot, mine)
        ticket.revision = mine
        predecessor = unb64(before["key"]) if before else None
        if first and back:
            predecessor = held_key  # first in line: woken when the hold-back key expires
        ticket.predecessor, ticket.read_at = predecessor, revision
        return Busy(holder=holder, ticket=ticket, retry_in=retry_in)

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
        if held is not None and held_token(held) == mine:
            return True  # put by this grant's own txn (or its claim, answered before)
        # Not put yet (the lock was busy at the put), or ours from an earlier grant whose
        # release found no lock key: now it stands for this one.
        written = 0 if held is None else held.get("mod_revision", 0)
        compare = [created_at(key, mine), modded_at(held_key, written)]
        put = hold_op(held_key, session.hold, session.lock_delay, mine)
        answer = await self._txn(compare, [put], [])
        return bool(answer.get("succeeded"))

    async def _free_in(self, held: JSON | None) -> float:
        """Seconds until a hold-back key expires: its lease's whole seconds left (rounded down
        by etcd), at least half a second (the leader expires leases every 0.5 s)."""
        lease = None if held is None else held.get("lease")
        left = await self._expires_in(str(lease), True) if lease else 0.0
        return max(left, 0.5)

    async def _delete(self, key: bytes, created: int) -> bool:
        """Delete ``key`` only if its create revision is still ``created``."""
        answer = await self._txn([created_at(key, created)], [delete_op(key)], [])
        return bool(answer.get("succeeded"))

    async def _info(self, name: str, owner: JSON, count: int, fresh: bool = False) -> LockInfo:
        lease = owner.get("lease")
        expires_in = await self._expires_in(str(lease), fresh) if lease else 0.0
        return lock_info(name, owner, count, expires_in)

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
        answer = await self._call("lease/timetolive", {"ID": lease})
        left = float(answer.get("TTL", 0))  # -1: expired or unknown
        if left <= 0:
            self._ttls.pop(lease, None)
            return 0.0
        if len(self._ttls) >= _TTL_CACHE:
            self._ttls.clear()
        self._ttls[lease] = (left, now, max(left, float(answer.get("grantedTTL", 0))))
        return left

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, EtcdTicket)
        predecessor, revision = ticket.predecessor, ticket.read_at
        # Timed by the caller: its scope ends the wait after ``timeout``.
        if predecessor is not None:
            create = {
                "key": b64(predecessor),
                "start_revision": str(revision + 1),
                "filters": ["NOPUT"],
            }
            if await self._gw.wait_event(create):
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
            await self._call("kv/deleterange", {"key": b64(ticket.key)})
        except StoreUnavailable:
            session.in_doubt.add(ticket.key)  # the next keep-alive deletes it (or the lease ends)
        session.free(ticket.name, ticket.slot)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, EtcdSession)
        entry = session.held.get((name, token))
        if entry is None:
            return  # never granted to this session (or released already)
        key, slot = entry
        held_key = self._keys.held(name)
        # The lock key and its hold-back key in one txn: a clean release frees the name at
        # once. A no-op if the key is gone (lease expired) or newer.
        success = [delete_op(key)] + ([delete_op(held_key)] if session.hold else [])
        answer = await self._txn([created_at(key, token)], success, [get_op(held_key)])
        if not answer.get("succeeded") and session.hold:
            # The lock key was gone (deleted by hand): our hold-back key stands for nothing.
            held = (ranges(answer)[0].get("kvs") or [None])[0]
            ours = held is not None and str(held.get("lease")) == str(session.hold)
            if ours and held is not None and held_token(held) == token:
                compare = [modded_at(held_key, held["mod_revision"])]
                await self._txn(compare, [delete_op(held_key)], [])
        del session.held[(name, token)]
        session.free(name, slot)

    async def _read_locks(self, name: str | None) -> tuple[dict[str, list[JSON]], dict[str, JSON]]:
        """The queues of the locks (of ``name``, or all) and their hold-back keys, by name."""
        root = self._keys.root
        if name is None:
            ops = [range_op(root, prefix_end(root))]
        else:
            prefix = self._keys.prefix(name)
            ops = [range_op(prefix, prefix_end(prefix)), get_op(self._keys.held(name))]
        queues: dict[str, list[JSON]] = {}
        helds: dict[str, JSON] = {}
        for found in ranges(await self._txn([], ops, [])):
            for kv in found.get("kvs", []):
                rest = unb64(kv["key"])[len(root) :]
                if rest.startswith(REVOKED.encode() + b"/"):
                    continue  # a revocation's key, not a lock's
                lock = self._keys.name_of(unb64(kv["key"]))
                if b"/" in rest:
                    queues.setdefault(lock, []).append(kv)
                else:
                    helds[lock] = kv
        return queues, helds

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        queues, helds = await self._read_locks(name)
        queues = {lock: kvs for lock, kvs in queues.items() if lock.startswith(prefix)}
        found: dict[str, LockInfo] = {}
        failed: list[StoreUnavailable] = []

        async def one(lock: str, kvs: list[JSON]) -> None:
            owner = min(kvs, key=created)
            held = helds.get(lock)
            if held is not None and held_token(held) != created(owner):
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

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        queues, helds = await self._read_locks(name)
        found: list[LockDelay] = []
        for lock, held in sorted(helds.items()):
            token = held_token(held)
            kvs = queues.get(lock)
            if kvs and created(min(kvs, key=created)) == token:
                continue  # its grant still holds
            revoked = held_revocation(held)
            found.append(LockDelay(lock, token, await self._free_in(held), revoked))
        return found

    # -- revocations -----------------------------------------------------------------------

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        queues, helds = await self._read_locks(name)
        kvs, held = queues.get(name), helds.get(name)
        if not kvs:
            return None
        owner = min(kvs, key=created)
        granted = created(owner)
        if (held is not None and held_token(held) != granted) or token not in (None, granted):
            return None  # held back (the first in line is not granted yet), or not that grant
        key, lease = unb64(owner["key"]), int(owner.get("lease", 0))
        held_key = self._keys.held(name)
        delay = self._lock_delay_of(held)
        hold, seconds = 0, 0
        if not record.now:
            # Its own lease holds the name back: the holder session's whole TTL (more than it
            # can have left) plus its lock-delay, in whole seconds, and one for the leader's
            # half-second expiry ticks. Renewed once after the txn below, so that it counts
            # from after any renewal the holder made before it could read the revocation.
            left = await self._call("lease/timetolive", {"ID": str(lease)})
            seconds = math.ceil(float(left.get("grantedTTL", 0)) + delay) + 1
            hold = await self._sessions.grant(seconds)
        revoked = replace(record, token=granted, free_in=float(seconds))
        compare = [created_at(key, granted)]
        compare.append(
            modded_at(held_key, held["mod_revision"]) if held else created_at(held_key, 0)
        )
        success = [
            delete_op(key),
            put_op(self._keys.revoked(lease, name), json.dumps(revocation_json(revoked)), lease),
        ]
        if hold:
            success.append(hold_op(held_key, hold, delay, granted, revoked))
        elif held is not None:
            success.append(delete_op(held_key))
        try:  # sent once: sent again after it applied, its compare would fail
            answer = await self._txn(compare, success, [], retry=False)
        except LeaseLost:  # the holder's session lease ended meanwhile: nothing to revoke
            answer = {}
        if not answer.get("succeeded"):
            if hold:
                await self._sessions.revoke(hold)
            return None
        if hold:
            await self._sessions.renew(hold)
        return revoked

    @staticmethod
    def _lock_delay_of(held: JSON | None) -> float:
        """The holder's lock-delay, as its hold-back key says (none: it has none)."""
        try:
            return float(json.loads(unb64(held.get("value"))).get("lock_delay", 0)) if held else 0.0
        except (ValueError, TypeError, AttributeError):
            return 0.0

    async def revoked(self, session: Session) -> list[Revocation]:
        assert isinstance(session, EtcdSession)
        prefix = self._keys.revoked(session.id)
        found = await self._call(
            "kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}
        )
        parsed = [
            parse_revocation(json.loads(unb64(kv.get("value")))) for kv in found.get("kvs", [])
        ]
        return [each for each in parsed if each is not None]

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, EtcdSession)
        # The value lives in the holder key, beside the owner: ``locks()`` reads it for free, a
        # new grant (a new key) starts without one, and the key's own watch events carry it.
        owner = owner_json(session.owner, value=value)
        return await self._while_held(
            session, name, token, lambda key: put_op(key, owner, session.id)
        )

    async def _while_held(
        self, session: EtcdSession, name: str, token: int, op: Callable[[bytes], JSON]
    ) -> bool:
        """``op(holder key)`` in one txn with the compare that the holder key is this grant's
        (created at its token, on this session's lease): a released, revoked, expired or
        handed-over grant fails it, and then nothing is written."""
        entry = session.held.get((name, token))
        if entry is None:
            return False  # never granted to this session, or released
        key = entry[0]
        compare = [created_at(key, token), leased_to(key, session.id)]
        try:
            # Safe to send again: while the compare holds, a second write writes the same bytes.
            answer = await self._txn(compare, [op(key)], [])
        except LeaseLost:
            return False
        return bool(answer.get("succeeded"))

    async def watch(self, name: str) -> Watch:
        prefix = self._keys.prefix(name)
        answer = await self._call_range(range_op(prefix, prefix_end(prefix)))
        kvs, revision = answer.get("kvs", []), int(answer["header"]["revision"])
        return EtcdWatch(name, prefix, kvs, revision, watch=self._gw.watch, read=self._call_range)

    # -- records -------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        return await self._records.read(key)

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        return await self._records.write(key, value, version)

    async def list_records(self, prefix: str) -> list[Record]:
        return await self._records.list(prefix)

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        assert isinstance(session, EtcdSession)
        return await self._while_held(session, name, token, lambda _: self._records.op(key, value))

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
        prefix = self._keys.prefix(name)
        return await guarded_txn(self._call, prefix, token, success, failure, compare)
