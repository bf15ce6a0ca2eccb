"""Redlock over N independent Redis servers: ``redlock://h1:6379,h2:6379,h3:6379[/db][?prefix=]``.
**Efficiency-grade**: use it to avoid duplicate work, not for correctness. Every server runs
the script of ``RedisStore`` unchanged; this store sends each call to all servers at once and
counts the answers (quorum = N // 2 + 1). How tokens keep growing, how waiters and lock-delay
work across servers, and where it fails: docs/stores/redis.md."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, ClassVar, TypeVar

import anyio

from ..._errors import LeaseLost, StoreUnavailable
from .._connect import NO_OPTIONS, ConnectOptions
from .._kit import Unavailable, owner_json, patience
from .._spi import (
    Busy,
    Capabilities,
    Elections,
    Grant,
    Holder,
    LockDelay,
    LockInfo,
    Session,
    Store,
    Watch,
)
from .instance import (
    CALL_TIMEOUT,
    Instance,
    busy_holder,
    check_driver,
    delay_ms,
    held_back_for,
    ms,
)
from .session import RedisSession, RedisTicket
from .single import NOTES
from .url import RedisURL, parse_url
from .watch import SEEN_KEPT, RedlockWatch, Stream

T = TypeVar("T")
_REDLOCK = Unavailable("Redlock")
SPLIT_RETRY = 0.05
"""Seconds before trying again while no request holds a quorum of servers (a split)."""


def _op(op: str, *args: str, timeout: float = CALL_TIMEOUT) -> Callable[[Instance], Awaitable[Any]]:
    """One script operation, to send to each server."""

    def call(instance: Instance) -> Awaitable[Any]:
        return instance.call(op, *args, timeout=timeout)

    return call


def drift_allowance(ttl: float) -> float:
    return ttl * 0.01 + 0.002


class RedlockStore(Store, Elections):
    """Redlock over independent Redis servers (``redlock://h1,h2,h3``): efficiency-grade,
    as one Redis."""

    scheme: ClassVar[str] = "redlock"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="efficiency",
        machines="many",
        durable_tokens=False,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes=NOTES + "; Redlock: a quorum of independent servers, token = the quorum's maximum",
    )
    USAGE: ClassVar[str] = (
        "redlock://[user:password@]h1:port,h2:port,h3:port[/db][?prefix=name][&tls=true&ca=…]"
    )

    def __init__(self, url: RedisURL) -> None:
        self._url = url
        self.instances = [Instance(url, host, port) for host, port in url.hosts]
        self.quorum = len(self.instances) // 2 + 1
        self._seen: dict[str, int] = {}
        """Per name, the highest token this store has seen: the floor of its next grant."""

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> RedlockStore:
        check_driver()
        return cls(parse_url(url, ("redlock",), many=True, usage=cls.USAGE, options=options))

    @property
    def url(self) -> str:
        return self._url.display()

    # -- fan-out -------------------------------------------------------------------------

    async def _each(
        self, call: Callable[[Instance], Awaitable[T]], only: set[int] | None = None
    ) -> dict[int, T | StoreUnavailable]:
        """``call`` on every server (or those in ``only``) at once: index → answer or error."""
        results: dict[int, T | StoreUnavailable] = {}

        async def one(index: int, instance: Instance) -> None:
            try:
                results[index] = await call(instance)
            except StoreUnavailable as exc:
                results[index] = exc

        async with anyio.create_task_group() as tg:
            for index, instance in enumerate(self.instances):
                if only is None or index in only:
                    tg.start_soon(one, index, instance)
        return results

    def _unavailable(self, results: Mapping[int, object], what: str) -> StoreUnavailable:
        """How many servers ``what`` reached, and why the first two others could not be."""
        errors = [str(r) for r in results.values() if isinstance(r, StoreUnavailable)]
        reached = len(results) - len(errors)
        summary = (
            f"{what} reached {reached} of {len(self.instances)} servers, quorum {self.quorum}"
            f" ({'; '.join(errors[:2])})"
        )
        return _REDLOCK(summary, whole=True)  # each server's error is secret-free already

    def _answers(self, results: Mapping[int, T | StoreUnavailable], what: str) -> list[T]:
        """The servers' answers in ``results``; ``StoreUnavailable`` if fewer than a quorum."""
        answers = [r for r in results.values() if not isinstance(r, StoreUnavailable)]
        if len(answers) < self.quorum:
            raise self._unavailable(results, what)
        return answers

    def _patience(self, ttl: float) -> float:
        """Per-server wait: a stuck server must not eat the validity of the others' answers."""
        return patience(ttl, CALL_TIMEOUT, floor=0.1, share=5)

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Holder, lock_delay: float = 0.0) -> Session:
        session = RedisSession(secrets.token_hex(12), ttl, owner_json(owner))
        opening = ("open", session.id, ms(ttl), session.owner, delay_ms(lock_delay))
        results = await self._each(_op(*opening, timeout=self._patience(ttl)))
        if sum(1 for r in results.values() if r == 1) < self.quorum:
            await self._each(lambda i: i.call("close", session.id))  # best effort; they expire
            raise self._unavailable(results, "opening a session")
        return session

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, RedisSession)
        within = patience(session.ttl)
        results = await self._each(
            lambda i: i.call("renew", session.id, ms(session.ttl), timeout=within)
        )
        answers = {i: r for i, r in results.items() if not isinstance(r, StoreUnavailable)}
        slack = len(self.instances) - self.quorum  # servers that may say "gone" and still fine
        renewed = [set(r[1:]) for r in answers.values() if r != 0]
        if len(answers) - len(renewed) > slack:
            return False  # the session key is gone on too many servers
        for name, _ in session.held:
            if len(answers) - sum(1 for names in renewed if name in names) > slack:
                return False  # that lock is gone on too many servers: lost
        if len(renewed) < self.quorum or any(
            sum(1 for names in renewed if name in names) < self.quorum for name, _ in session.held
        ):
            raise self._unavailable(results, "renewing")

        async def leave(request: tuple[str, str]) -> None:
            name, rid = request
            done = await self._each(_op("leave", session.id, name, rid, "", timeout=within))
            if any(isinstance(r, StoreUnavailable) for r in done.values()):
                raise self._unavailable(done, "leaving")  # kept for the next keep-alive

        await session.in_doubt.sweep(leave, within)
        return True

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, RedisSession)
        results = await self._each(lambda i: i.call("close", session.id))
        if sum(1 for r in results.values() if r == 1) < self.quorum:
            raise self._unavailable(results, "closing a session")
        session.forget()

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, RedisSession)
        assert ticket is None or isinstance(ticket, RedisTicket)
        rid = session.request() if ticket is None else ticket.rid
        score = str(time.time_ns() // 1000) if ticket is None else ticket.score
        queue = ticket is not None or enqueue
        floor = str(self._seen.get(name, 0))
        started = time.monotonic()
        within = self._patience(session.ttl)
        results = await self._each(
            lambda i: i.call(
                "attempt",
                session.id,
                name,
                rid,
                "1" if queue else "0",
                score,
                floor,
                timeout=within,
            )
        )
        elapsed = time.monotonic() - started
        rows = {i: r for i, r in results.items() if not isinstance(r, StoreUnavailable)}
        granted = {i: int(r[1]) for i, r in rows.items() if r[0] == "granted"}
        gone = sum(1 for r in rows.values() if r[0] == "gone")
        slack = len(self.instances) - self.quorum
        valid = session.ttl - elapsed - drift_allowance(session.ttl) > 0
        if len(granted) >= self.quorum and valid:
            others = {i for i in rows if i not in granted}
            return await self._grant(session, name, rid, granted, others)
        if gone > slack or len(rows) < self.quorum:
            # Nothing here will be waited for: give back every part (swept later if we can't).
            await self._give_back(session, name, rid, "")
            if gone > slack:
                raise LeaseLost("the session's Redis keys are gone on a quorum of servers")
            raise self._unavailable(results, "acquiring")
        holders: dict[str, list[tuple[LockInfo, str]]] = {}
        for row in rows.values():
            holder = busy_holder(name, row) if row[0] == "busy" else None
            if holder is not None:
                self._see(name, holder.token)
                holders.setdefault(str(row[7]), []).append((holder, str(row[8])))
        top = max(holders.values(), key=len, default=[])
        info = top[0][0] if top else None
        retry = SPLIT_RETRY
        # Lock-delay: a quorum can grant once the quorum-th shortest hold-back has passed.
        back = sorted(held_back_for(r) if r[0] == "busy" else 0.0 for r in rows.values())
        if len(top) >= self.quorum:
            retry = min(h.expires_in for h, _ in top) + 0.001
        elif back[self.quorum - 1] > 0:
            retry = back[self.quorum - 1] + 0.001
        if not queue:
            if granted:
                await self._give_back(session, name, rid, "", only=set(granted))
            return Busy(holder=info, ticket=None, retry_in=retry)
        if granted:
            # A split (or too slow): keep our part only if we are first of those holding parts.
            # While another request holds a quorum our part is harmless (it is passed on when
            # we are granted elsewhere or leave); in a split the first waiter keeps its parts.
            claims = [(float(q), r) for r, entries in holders.items() for _, q in entries[:1]]
            first = min([(float(score), rid), *claims]) == (float(score), rid)
            if not valid or (len(top) < self.quorum and not first):
                await self._give_back(session, name, rid, score, only=set(granted))
        mine = ticket or RedisTicket(session, name, rid, score)
        return Busy(holder=info, ticket=mine, retry_in=retry)

    def _see(self, name: str, token: int) -> None:
        if token > self._seen.get(name, 0):
            if len(self._seen) >= SEEN_KEPT and name not in self._seen:
                self._seen.clear()
            self._seen[name] = token

    async def _grant(
        self,
        session: RedisSession,
        name: str,
        rid: str,
        granted: dict[int, int],
        others: set[int],
    ) -> Grant:
        token = max(granted.values())
        low = {i for i, t in granted.items() if t < token}
        if low:
            # Every server of the quorum keeps a counter >= the token, so any later quorum
            # (which shares a server with this one) issues a higher one.
            raised = await self._each(lambda i: i.call("raise", name, rid, str(token)), only=low)
            if any(isinstance(r, StoreUnavailable) for r in raised.values()):
                await self._give_back(session, name, rid, "")
                raise self._unavailable(raised, "raising the token counters")
        if others:  # our queue places there would be handed the lock later: leave them now
            await self._each(lambda i: i.call("leave", session.id, name, rid, ""), only=others)
        self._see(name, token)
        session.held[(name, token)] = rid
        return Grant(token=token, renewed_session=False)

    async def _give_back(
        self, session: RedisSession, name: str, rid: str, score: str, only: set[int] | None = None
    ) -> None:
        """Release the parts granted to ``rid`` (and, with ``score``, queue it again)."""
        results = await self._each(
            lambda i: i.call("leave", session.id, name, rid, score), only=only
        )
        if any(isinstance(r, StoreUnavailable) for r in results.values()) and not score:
            session.in_doubt.add((name, rid))

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, RedisTicket)
        async with anyio.create_task_group() as tg:

            async def one(instance: Instance) -> None:
                if await instance.wake_ups.pop(ticket.rid) is not None:
                    tg.cancel_scope.cancel()  # a hand-over on any server: attempt again

            for instance in self.instances:
                tg.start_soon(one, instance)

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, RedisTicket)
        if not ticket.leaving():
            return
        await self._give_back(ticket.session, ticket.name, ticket.rid, "")

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, RedisSession)
        rid = session.held.get((name, token))
        if rid is None:
            return
        results = await self._each(lambda i: i.call("release", session.id, name, str(token), rid))
        del session.held[(name, token)]
        failed = sum(1 for r in results.values() if isinstance(r, StoreUnavailable))
        if failed:
            session.in_doubt.add((name, rid))  # swept (released by its request id) at a keep-alive
        if failed > len(self.instances) - self.quorum:
            raise self._unavailable(results, "releasing")

    async def _names(self, name: str | None, kind: str, what: str) -> list[str]:
        """``[name]``, or the names with a key of ``kind`` on any server (a quorum answering)."""
        if name is not None:
            return [name]
        lists = self._answers(await self._each(lambda i: i.lock_names(kind)), what)
        return sorted({n for each in lists for n in each})

    async def locks(self, name: str | None = None, prefix: str = "") -> list[LockInfo]:
        found = []
        for each in await self._names(name, "l", "listing locks"):
            if not each.startswith(prefix):
                continue
            info = await self._info(each)
            if info is not None:
                found.append(info)
        return found

    async def _info(self, name: str) -> LockInfo | None:
        """The holder of ``name`` on a quorum of servers (None if nobody holds a quorum)."""
        rows = self._answers(await self._each(lambda i: i.call("info", name)), "reading a lock")
        by_request: dict[str, list[list[str]]] = {}
        for row in rows:
            if row:
                by_request.setdefault(str(row[6]), []).append(row)
        top = max(by_request.values(), key=len, default=[])
        if len(top) < self.quorum:
            return None
        best = max(top, key=lambda r: int(r[0]))
        holder = busy_holder(name, ["", "", best[0], best[1], best[2], best[3], best[4]])
        if holder is None:
            return None
        expires = min(max(0.0, int(r[3]) / 1000) for r in top)
        waiters = max(int(r[4]) for r in top)
        self._see(name, holder.token)
        return LockInfo(name, holder.token, holder.holder, expires, waiters, holder.value)

    async def lock_delays(self, name: str | None = None) -> list[LockDelay]:
        names = await self._names(name, "h", "listing held-back names")
        found = [await self._held(each) for each in names]
        return [held for held in found if held is not None]

    async def _held(self, name: str) -> LockDelay | None:
        """``name``'s hold-back, if too many servers hold it back for a quorum to grant it."""
        answers = self._answers(await self._each(lambda i: i.held(name)), "reading a hold-back")
        free_in = sorted(0.0 if r is None else r.free_in for r in answers)[self.quorum - 1]
        if free_in <= 0:
            return None
        return LockDelay(name, max(r.token for r in answers if r is not None), free_in)

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, RedisSession)
        if (name, token) not in session.held:
            return False
        results = await self._each(
            lambda i: i.call("proclaim", session.id, name, str(token), value)
        )
        done = sum(1 for r in results.values() if r == 1)
        refused = sum(1 for r in results.values() if r == 0)
        if done >= self.quorum:
            return True
        if refused > len(self.instances) - self.quorum:
            return False
        raise self._unavailable(results, "proclaiming")

    async def watch(self, name: str) -> Watch:
        results = await self._each(lambda i: i.last_event(name))
        after: list[str | None] = [
            None if isinstance(results[i], StoreUnavailable) else str(results[i])
            for i in range(len(self.instances))
        ]
        if sum(1 for a in after if a is not None) < self.quorum:
            raise self._unavailable(dict(results), "subscribing")
        streams = [
            Stream(partial(i.last_event, name), partial(i.read_events, name))
            for i in self.instances
        ]
        return RedlockWatch(name, streams, after, self.quorum)

    async def aclose(self) -> None:
        for instance in self.instances:
            await instance.aclose()
