"""The Redis store, one server: ``redis://[user:password@]host:6379/0?prefix=tenure``
(``rediss://`` for TLS). **Efficiency-grade**: use it to avoid duplicate work, not for
correctness. Every call is one run of the Lua script, one atomic round trip judged by the
server's clock; how, and what it cannot promise: docs/stores/redis.md."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from functools import partial
from typing import ClassVar

from ..._errors import LeaseLost, StoreUnavailable
from .._connect import NO_OPTIONS, ConnectOptions
from .._kit import owner_json, patience, revocation_json
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
from .instance import (
    Instance,
    busy_holder,
    check_driver,
    delay_ms,
    held_back_for,
    ms,
    revocation_of,
)
from .session import RedisSession, RedisTicket
from .url import RedisURL, parse_url
from .watch import RedisWatch

NOTES = (
    "efficiency-grade: use for avoiding duplicate work, not for correctness — Redis replicates"
    " asynchronously, so a fail-over (or a restart without persistence) can lose a lock and its"
    " token counter (and a hold-back key: the lock-delay is lost with the lock), and a jump of"
    " the server's clock expires leases and lock-delays early"
)


class RedisStore(Store, Elections, Records, Revocations):
    """One Redis server (``redis://host:6379/0``): efficiency-grade — a fail-over can lose
    a lock and its counter."""

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
        check_driver()
        return cls(
            parse_url(url, ("redis", "rediss"), many=False, usage=cls.USAGE, options=options)
        )

    @property
    def url(self) -> str:
        return self._url.display()

    @property
    def prefix(self) -> str:
        """What every key of this store starts with (the URL's ``?prefix=``)."""
        return self._url.prefix

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        session = RedisSession(secrets.token_hex(12), ttl, owner_json(owner))
        await self.instance.call("open", session.id, ms(ttl), session.owner, delay_ms(lock_delay))
        return session

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, RedisSession)
        within = patience(session.ttl)  # a stuck server must not eat the window
        answer = await self.instance.call("renew", session.id, ms(session.ttl), timeout=within)
        if answer == 0:
            return False

        async def leave(request: tuple[str, str]) -> None:
            name, rid = request
            await self.instance.call("leave", session.id, name, rid, "", timeout=within)

        await session.in_doubt.sweep(leave, within)
        return True

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, RedisSession)
        await self.instance.call("close", session.id)
        session.forget()

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
                session.in_doubt.add((name, rid))
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
        token = await self.instance.wake_ups.pop(ticket.rid)  # ended by the caller at ``timeout``
        if token is not None:
            ticket.handed = int(token)

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, RedisTicket)
        if not ticket.leaving():
            return
        session = ticket.session
        try:
            # Also passes the lock on if it was handed to us as we gave up.
            await self.instance.call("leave", session.id, ticket.name, ticket.rid, "")
        except StoreUnavailable:
            session.in_doubt.add((ticket.name, ticket.rid))

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, RedisSession)
        rid = session.held.get((name, token))
        if rid is None:
            return  # never granted to this session, or released already
        await self.instance.call("release", session.id, name, str(token), "")
        del session.held[(name, token)]

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        names = [name] if name is not None else await self.instance.lock_names()
        found = [await self.instance.info(each) for each in names if each.startswith(prefix)]
        return [info for info in found if info is not None]

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
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
        after = await self.instance.last_event(name)
        return RedisWatch(name, partial(self.instance.read_events, name), after)

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

    async def write_held_record(
        self, session: Session, name: str, token: int, key: str, value: str | None
    ) -> bool:
        assert isinstance(session, RedisSession)
        if (name, token) not in session.held:
            return False
        # The check of proclaim and the write in one script; safe to send again while it holds.
        more = () if value is None else (value,)
        return bool(await self.instance.call("hput", session.id, name, str(token), key, *more))

    # -- revocations -----------------------------------------------------------------------

    async def revoke(self, name: str, token: int | None, record: Revocation) -> Revocation | None:
        kept = json.dumps(revocation_json(record))
        now = "1" if record.now else "0"
        row = await self.instance.call(
            "revoke", name, "" if token is None else str(token), now, kept
        )
        if not row:
            return None
        return replace(record, token=int(row[0]), free_in=int(row[1]) / 1000)

    async def revoked(self, session: Session) -> list[Revocation]:
        assert isinstance(session, RedisSession)
        flat = await self.instance.call("revoked", session.id)
        found = []
        for field, record in zip(flat[::2], flat[1::2], strict=True):
            token = str(field).rpartition("/")[2]
            if token.isdigit() and (revoked := revocation_of(str(record), int(token))):
                found.append(revoked)
        return found

    async def aclose(self) -> None:
        await self.instance.aclose()
