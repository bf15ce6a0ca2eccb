"""The Redis store, one server: ``redis://[user:password@]host:6379/0?prefix=tenure``
(``rediss://`` for TLS). **Efficiency-grade**: use it to avoid duplicate work, not for correctness.

**Connecting** (the options shared by the networked stores: ``_connect``):

- ``redis://[user[:password]@]host[:port][/db][?prefix=name]``; ``rediss://…`` is the same over
  TLS, as is ``redis://…?tls=true``; ``rediss://…?tls=false`` is refused. The query takes
  ``prefix`` and ``tls``, ``ca``, ``cert``, ``key``; keywords of ``connect`` override the URL,
  and ``$TENURE_PASSWORD`` gives the password when neither does. ``store.url`` shows the user,
  ``***`` for a password and ``tls=true`` (unless the scheme says so).
- **TLS**: redis-py's TLS connection with tenure's own context (``ConnectOptions.ssl_context``):
  the server's certificate is checked against ``ca`` only (the system's roots without one; not
  both, as redis-py's own ``ssl_ca_certs`` would) and must name the host; ``cert``/``key`` answer
  a server with ``tls-auth-clients yes``. A failed handshake is ``StoreUnavailable`` "TLS failed:
  …". Under TLS 1.3 a server refuses a missing client certificate after the handshake, so the
  client may see only a reset: the message then asks whether a certificate is demanded.
- **ACL users**: ``username``/``password`` log each new connection in (``AUTH``); a
  refused login is ``StoreUnavailable`` "Redis authentication failed for user 'x' at host:port:
  …" (never the password). redis-py tries a new connection once more, then the call fails: no
  retry for ever (a renewal retries only until its lease's deadline, as for any outage).
- **The prefix is the namespace**: every key is ``<prefix>:<kind>:<id>``, and a prefix is
  letters, digits, ``_``, ``.``, ``-`` (no ``:`` nor glob characters), so the ACL key pattern
  ``~<prefix>:*`` covers one application's keys exactly: give each application its own user,
  e.g. ``user app1 on >secret ~app1:* +@all``. The script declares no keys (it builds them from
  the prefix); Redis 7 allows that on one server and checks every ``redis.call`` against the
  user's key patterns, so another prefix is refused: ``StoreUnavailable`` "NOPERM: user 'app1'
  may not use the keys of prefix 'app2' …". ``SCAN`` ignores key patterns, so listing touches
  a key of the prefix first: a foreign user is refused rather than shown the lock names. (The
  undeclared keys also mean: no Redis Cluster.)
- **Names**: a lock's keys are ``<prefix>:l:<name>`` and its siblings, the name taken as is and
  read back as the rest of the key (``SCAN`` matches on the prefix only), so ``a``, ``a:b``,
  ``a*`` and ``a/b`` are four locks and are listed as such.

Spoken with redis-py's asyncio client; the protocol is one Lua script (``_redis_scripts``), so
every call is one atomic round trip, judged by the Redis server's clock (``PX``).

- **Session = a key with ``PX`` = TTL** (Redis has no sessions). ``keep_alive`` renews it and, in
  the same script, every lock and queue the session holds or waits in; it answers False once the
  key is gone. ``close_session`` deletes it and releases (hands on) what it held.
- **Grant**: the lock key is created only if absent, with the token from the name's counter key
  (``INCR``) in the same script; the counter is never deleted (not by release, not by expiry), so
  tokens keep growing while the server keeps its data. The lock's ``PX`` is its session's time
  left, so it never outlives the session. Release, renewal and ``proclaim`` compare the
  session and the token: a stale release never deletes the next holder's lock.
- **Waiting is FIFO**: waiters queue in a sorted set by server arrival time. A release (or a
  waiter giving up, or a grant finding the lock expired) hands the lock straight to the first
  waiter whose session lives, in the same script, and pushes the token to that waiter's own list;
  the waiter, blocked in ``BLPOP`` on it, takes the grant without another call: release → next
  grant is the release's round trip plus one push. A waiter whose session died is skipped.
  ``attempt(enqueue=False)`` writes nothing when the lock is busy.
- **Lock-delay** (rule 8): a session's lock-delay is kept beside its key (``P:d:<sid>``); each
  grant to it and each renewal also sets a hold-back key per held name whose ``PX`` is the
  session's TTL + lock-delay, so on the server's clock it outlives the session by exactly the
  lock-delay. The grant script (``attempt`` and every hand-over) refuses while that key lives
  and nobody holds the lock, answering its ``PTTL`` as ``retry_in``; waiters stay queued, and
  the first to ask after the delay hands the lock to the head of the queue. ``release`` and
  ``close_session`` delete the key with the lock. ``held_back`` lists the keys with no holder.
- **A request id** (``<session>/<n>``) names each attempt: a retried call finds its own grant or
  queue place, and a first attempt whose answer was lost is swept (released or dequeued) at the
  next keep-alive.
- **Leader election**: ``proclaim`` sets the lock's value if this session still holds it with
  this token. Every grant, value and release is appended to the lock's event stream (``XADD``);
  a watch reads it with ``XREAD BLOCK`` from the last id it saw, so nothing between two reads is
  lost (unless more than ~100 events passed: the stream is trimmed). Expiry by ``PX`` is not an
  event: observers re-read when the holder could have expired.
- **Records** (``tenure once``): a hash per record (value, version, the id of the write that made
  it) and one sorted set of record keys for listing by prefix (``ZRANGEBYLEX``). A write compares
  the version in the script; its write id makes redis-py's one retry after a lost answer find its
  own write rather than a "changed" record.

Not guaranteed (why it is efficiency-grade): Redis replicates asynchronously and does not
``fsync`` each write, so a fail-over to a replica (or a restart without persistence) can lose a
granted lock *and* the token counter: a second holder can be granted while the first still
believes it holds, with a token that does not grow; it can lose a hold-back key too, so the
lock-delay is lost with the lock. Expiry follows the server's wall clock: a clock jump on the
server expires leases (and lock-delays) early. Fencing still refuses a stale writer wherever the
token order survived.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from typing import ClassVar

import anyio

from .._errors import LeaseLost, StoreUnavailable
from ._connect import NO_OPTIONS, ConnectOptions
from ._redis_scripts import (
    Instance,
    RedisURL,
    change_of,
    delay_ms,
    ms,
    owner_json,
    parse_owner,
    parse_url,
)
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

NOTES = (
    "efficiency-grade: use for avoiding duplicate work, not for correctness — Redis replicates"
    " asynchronously, so a fail-over (or a restart without persistence) can lose a lock and its"
    " token counter (and a hold-back key: the lock-delay is lost with the lock), and a jump of"
    " the server's clock expires leases and lock-delays early"
)


@dataclass(eq=False)
class RedisSession(Session):
    id: str
    ttl: float
    owner: str
    seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    """(name, token) → request id of the grants this session holds."""
    dirty: set[tuple[str, str]] = field(default_factory=set)
    """(name, request id) of first attempts whose answer was lost: swept at the next keep-alive."""

    def request(self) -> str:
        return f"{self.id}/{next(self.seq)}"


@dataclass(eq=False)
class RedisTicket:
    session: RedisSession
    name: str
    rid: str
    score: str
    handed: int | None = None
    """The token a hand-over pushed to us (read by ``wait``): ``attempt`` returns it at once."""
    left: bool = False


def held_back_for(row: list[object]) -> float:
    """Seconds an ``attempt`` script's busy answer says the free name is still held back."""
    return int(str(row[9])) / 1000 if len(row) > 9 else 0.0


def busy_holder(name: str, row: list[object]) -> LockInfo | None:
    """The holder from an ``attempt`` script's busy answer."""
    _, _, token, owner, value, left, waiters = row[:7]
    if not token:
        return None
    expires = max(0.0, int(str(left)) / 1000)
    shown = None if not value else str(value)
    return LockInfo(name, int(str(token)), parse_owner(owner), expires, int(str(waiters)), shown)


class RedisWatch(Watch):
    """The events of one lock, read from its stream after the last id seen."""

    def __init__(self, instance: Instance, name: str, after: str) -> None:
        self._instance = instance
        self._name = name
        self._after = after
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    async def next(self, timeout: float) -> list[Change]:
        if self._closed:
            return []
        events: list[tuple[str, dict[str, str]]] = []
        with anyio.CancelScope() as self._scope:
            events = await self._instance.read_events(self._name, self._after, timeout)
        self._scope = None
        if events:
            self._after = events[-1][0]
        return [change_of(self._name, fields) for _, fields in events]

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()


class RedisStore(Store, Elections, Records):
    scheme: ClassVar[str] = "redis"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="efficiency",
        machines="many",
        durable_tokens=False,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes=NOTES,
    )
    USAGE: ClassVar[str] = (
        "redis[s]://[user:password@]host:port/db[?prefix=name][&tls=true&ca=…&cert=…&key=…]"
    )

    def __init__(self, url: RedisURL) -> None:
        self._url = url
        [(host, port)] = url.hosts
        self.instance = Instance(url, host, port)

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> RedisStore:
        return cls(
            parse_url(url, ("redis", "rediss"), many=False, usage=cls.USAGE, options=options)
        )

    @property
    def url(self) -> str:
        return self._url.display()

    @property
    def prefix(self) -> str:
        return self._url.prefix

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
        session = RedisSession(secrets.token_hex(12), ttl, owner_json(owner))
        await self.instance.call("open", session.id, ms(ttl), session.owner, delay_ms(lock_delay))
        return session

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, RedisSession)
        patience = min(5.0, max(0.25, session.ttl / 4))  # a stuck server must not eat the window
        answer = await self.instance.call("renew", session.id, ms(session.ttl), timeout=patience)
        if answer == 0:
            return False
        for name, rid in list(session.dirty):
            with anyio.move_on_after(patience):
                await self.instance.call("leave", session.id, name, rid, "", timeout=patience)
                session.dirty.discard((name, rid))
        return True

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, RedisSession)
        await self.instance.call("close", session.id)
        session.held.clear()
        session.dirty.clear()

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, RedisSession)
        assert ticket is None or isinstance(ticket, RedisTicket)
        if ticket is not None and ticket.handed is not None:
            # Pushed by the script that granted it: the lock lives as long as our session.
            token, ticket.handed = ticket.handed, None
            session.held[(name, token)] = ticket.rid
            return Grant(token=token, renewed_session=False)
        rid = session.request() if ticket is None else ticket.rid
        score = "0" if ticket is None else ticket.score
        queue = "1" if ticket is not None or enqueue else "0"
        try:
            row = await self.instance.call("attempt", session.id, name, rid, queue, score, "0")
        except StoreUnavailable:
            if ticket is None:  # it may have applied: swept at the next keep-alive
                session.dirty.add((name, rid))
            raise
        if row[0] == "gone":
            raise LeaseLost("the session's Redis key is gone (expired)")
        if row[0] == "granted":
            token = int(row[1])
            session.held[(name, token)] = rid
            return Grant(token=token, renewed_session=False)
        holder = busy_holder(name, row)
        mine = None
        if row[1]:
            mine = ticket or RedisTicket(session, name, rid, str(row[1]))
        retry = Busy.AHEAD_POLL if holder is None else holder.expires_in + 0.001
        if holder is None and (back := held_back_for(row)) > 0:
            retry = back + 0.001  # lock-delay: nothing hands it over when it passes
        return Busy(holder=holder, ticket=mine, retry_in=retry)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, RedisTicket)
        token = await self.instance.pop_wake(ticket.rid, timeout)
        if token is not None:
            ticket.handed = int(token)

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, RedisTicket)
        if ticket.left:
            return
        ticket.left = True
        session = ticket.session
        try:
            # Also passes the lock on if it was handed to us as we gave up.
            await self.instance.call("leave", session.id, ticket.name, ticket.rid, "")
        except StoreUnavailable:
            session.dirty.add((ticket.name, ticket.rid))

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, RedisSession)
        rid = session.held.get((name, token))
        if rid is None:
            return  # never granted to this session, or released already
        await self.instance.call("release", session.id, name, str(token), "")
        del session.held[(name, token)]

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        names = [name] if name is not None else await self.instance.lock_names()
        found = [await self.instance.info(each) for each in names]
        return [info for info in found if info is not None]

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        names = [name] if name is not None else await self.instance.lock_names("h")
        found = [await self.instance.held(each) for each in names]
        return [held for held in found if held is not None]

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, RedisSession)
        if (name, token) not in session.held:
            return False
        return bool(await self.instance.call("proclaim", session.id, name, str(token), value))

    async def watch(self, name: str) -> Watch:
        return RedisWatch(self.instance, name, await self.instance.last_event(name))

    # -- records -------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        row = await self.instance.call("rget", key)
        return Record(key, str(row[0]), int(row[1])) if row else None

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        # A write id makes the call idempotent: the client's one retry after a lost answer
        # finds its own write instead of a "changed" record.
        written = await self.instance.call("rput", key, value, str(version), secrets.token_hex(16))
        return Record(key, value, int(written)) if int(written) else None

    async def list_records(self, prefix: str) -> list[Record]:
        flat = await self.instance.call("rlist", prefix)
        return [
            Record(str(flat[i]), str(flat[i + 1]), int(flat[i + 2])) for i in range(0, len(flat), 3)
        ]

    async def aclose(self) -> None:
        await self.instance.aclose()
