"""Redlock over N independent Redis servers: ``redlock://h1:6379,h2:6379,h3:6379[/db][?prefix=]``.
**Efficiency-grade**: use it to avoid duplicate work, not for correctness.

Every server runs the single-server script of ``RedisStore`` (``_redis_scripts``) unchanged; this
module only sends each call to all servers at once and counts the answers. Quorum = N // 2 + 1.

- **Session**: a session key on every server; ``open_session`` needs a quorum. ``keep_alive``
  renews on all; it answers True only if the session *and every lock it holds* were renewed on a
  quorum, False once a quorum can no longer say so (the key or a lock is gone on more than
  N − quorum servers), and raises ``StoreUnavailable`` (retried; lost at the deadline) otherwise.
- **Grant**: the ``attempt`` script on all servers with one request id; granted on a quorum
  within the validity — TTL − time spent acquiring − drift allowance (1 % of the TTL + 2 ms) —
  it is a grant; otherwise every server's part is given back. Each server's lock lives as that
  server's session key, so the holder's own deadline (counted by the client from the last
  confirmed renewal, with its own drift and margin) never outlives a quorum's expiry.
- **Tokens only grow**: each server returns its own counter's next value (raised above the
  highest token this client has seen for the name: the script's floor); the token is the maximum
  over the quorum, and every server of the quorum whose counter is lower is raised to it (and its
  lock's token with it: the ``raise`` operation) before the grant is returned — one more round
  trip only when the counters differ. Any two quorums share a server, whose counter is then at
  least every earlier token, so the next maximum is higher. Where it still fails: a server that
  restarts without persistence (or fails over to a replica that missed the writes) forgets its
  counter and locks, and once a quorum is made of forgetful servers a token can be reissued or
  go back, and two holders can be granted at once; a server clock jump expires that server's
  keys early, with the same effect.
- **Waiting**: every server queues the waiter with one score, the client's arrival time (µs of
  its wall clock: FIFO across clients as far as their clocks agree), so every server hands the
  lock on to the same first waiter and wakes it by its own list; ``wait`` blocks on all servers'
  lists and returns at the first push. If servers disagree (waiters arriving at once, or a
  server that missed an enqueue) and nobody has a quorum, the waiter with the lowest (score,
  request id) keeps its part and every other gives its part back and queues again with its
  score, so the split resolves towards that one waiter (a short poll, ``SPLIT_RETRY``).
- **Lock-delay**: every server keeps its own hold-back key, as ``RedisStore`` does, and refuses
  to grant while it lives; a grant needs a quorum, so the name is held back until a quorum of
  servers let it go (``retry_in`` and ``held_back``'s ``free_in``: the quorum-th shortest
  hold-back). A server that restarted empty has forgotten its hold-back, as it has its locks.
- **Release, leave, proclaim** go to all servers (proclaim needs a quorum). A server that could
  not be reached is swept at the next keep-alive.
- **Watch** follows every server's event stream and reports a state (a grant with its token and
  value, or a release) when a quorum of servers has reported it, in the order quorums are
  reached.
- **TLS and ACL users**: one set of options (``tls``, ``ca``, ``cert``, ``key``, user and
  password, in the query or as keywords: see ``redis``) for every server of the list; each
  server's certificate must name its own host. A server that refuses the login or the
  handshake counts as unreachable, and its reason is in the quorum error.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import anyio

from .._errors import LeaseLost, StoreUnavailable
from ._connect import NO_OPTIONS, ConnectOptions
from ._redis_scripts import (
    CALL_TIMEOUT,
    Instance,
    RedisURL,
    change_of,
    delay_ms,
    ms,
    owner_json,
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
    Session,
    Store,
    Watch,
)
from .redis import NOTES, busy_holder, held_back_for

T = TypeVar("T")
SPLIT_RETRY = 0.05
"""Seconds before trying again while no request holds a quorum of servers (a split)."""
SEEN_KEPT = 1000


def _op(op: str, *args: str, timeout: float = CALL_TIMEOUT) -> Callable[[Instance], Awaitable[Any]]:
    """One script operation, to send to each server."""

    def call(instance: Instance) -> Awaitable[Any]:
        return instance.call(op, *args, timeout=timeout)

    return call


def drift_allowance(ttl: float) -> float:
    return ttl * 0.01 + 0.002


@dataclass(eq=False)
class RedlockSession(Session):
    id: str
    ttl: float
    owner: str
    seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    dirty: set[tuple[str, str]] = field(default_factory=set)

    def request(self) -> str:
        return f"{self.id}/{next(self.seq)}"


@dataclass(eq=False)
class RedlockTicket:
    session: RedlockSession
    name: str
    rid: str
    score: str
    left: bool = False


class RedlockWatch(Watch):
    """Every server's events of one lock; a state is reported once a quorum reported it."""

    def __init__(self, store: RedlockStore, name: str, after: list[str | None]) -> None:
        self._store = store
        self._name = name
        self._after = after
        self._seen: dict[tuple[object, ...], set[int]] = {}
        self._reported: set[tuple[object, ...]] = set()
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    async def next(self, timeout: float) -> list[Change]:
        changes: list[Change] = []
        with anyio.move_on_after(timeout) as self._scope:
            while not changes and not self._closed:
                batches = await self._read(self._scope.deadline - anyio.current_time())
                for index, events in batches:
                    for _, fields in events:
                        changes.extend(self._count(index, fields))
        self._scope = None
        return changes

    async def _read(self, timeout: float) -> list[tuple[int, list[tuple[str, dict[str, str]]]]]:
        """Events from every server: what is there now; else wait for the first server to have
        some, then take what the others have by then too (so a quorum is usually reached in
        one call, rather than one server per call)."""
        got = await self._read_all(0.0)
        if not got and timeout > 0:
            got = await self._read_all(timeout)
            if got:
                got += await self._read_all(0.0)
        return got

    async def _read_all(self, timeout: float) -> list[tuple[int, list[tuple[str, dict[str, str]]]]]:
        """Each server's events after the last id seen there, waiting up to ``timeout`` for the
        first server to have some (the others' reads are then cancelled)."""
        got: list[tuple[int, list[tuple[str, dict[str, str]]]]] = []
        failed: list[StoreUnavailable] = []
        instances = self._store.instances

        async def one(index: int, scope: anyio.CancelScope) -> None:
            instance = instances[index]
            try:
                if self._after[index] is None:  # unreachable at subscription: from now on
                    self._after[index] = await instance.last_event(self._name)
                after = self._after[index]
                assert after is not None
                events = await instance.read_events(self._name, after, max(0.0, timeout))
            except StoreUnavailable as exc:
                failed.append(exc)
                await anyio.sleep(max(0.0, timeout))  # a server down: the others may answer
                return
            if events:
                self._after[index] = events[-1][0]
                got.append((index, events))
                if timeout > 0:
                    scope.cancel()

        async with anyio.create_task_group() as tg:
            for index in range(len(instances)):
                tg.start_soon(one, index, tg.cancel_scope)
        if len(failed) == len(instances):
            raise failed[0]
        return got

    def _count(self, index: int, fields: dict[str, str]) -> list[Change]:
        if "t" in fields:
            state: tuple[object, ...] = ("held", fields.get("s"), fields["t"], fields.get("v"))
        else:
            state = ("free", fields.get("was"))
        servers = self._seen.setdefault(state, set())
        servers.add(index)
        if len(servers) < self._store.quorum or state in self._reported:
            return []
        self._reported.add(state)
        if len(self._seen) > SEEN_KEPT:  # forget the oldest states
            for old in list(self._seen)[: SEEN_KEPT // 2]:
                self._seen.pop(old, None)
                self._reported.discard(old)
        return [change_of(self._name, fields)]

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()


class RedlockStore(Store, Elections):
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
        errors = [str(r) for r in results.values() if isinstance(r, StoreUnavailable)]
        reached = len(results) - len(errors)
        return StoreUnavailable(
            f"Redlock: {what} reached {reached} of {len(self.instances)} servers, quorum"
            f" {self.quorum} ({'; '.join(errors[:2])})"
        )

    def _patience(self, ttl: float) -> float:
        """Per-server wait: a stuck server must not eat the validity of the others' answers."""
        return min(CALL_TIMEOUT, max(0.1, ttl / 5))

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
        session = RedlockSession(secrets.token_hex(12), ttl, owner_json(owner))
        opening = ("open", session.id, ms(ttl), session.owner, delay_ms(lock_delay))
        results = await self._each(_op(*opening, timeout=self._patience(ttl)))
        if sum(1 for r in results.values() if r == 1) < self.quorum:
            await self._each(lambda i: i.call("close", session.id))  # best effort; they expire
            raise self._unavailable(results, "opening a session")
        return session

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, RedlockSession)
        patience = min(5.0, max(0.25, session.ttl / 4))
        results = await self._each(
            lambda i: i.call("renew", session.id, ms(session.ttl), timeout=patience)
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
        for name, rid in list(session.dirty):
            done = await self._each(_op("leave", session.id, name, rid, "", timeout=patience))
            if not any(isinstance(r, StoreUnavailable) for r in done.values()):
                session.dirty.discard((name, rid))
        return True

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, RedlockSession)
        results = await self._each(lambda i: i.call("close", session.id))
        if sum(1 for r in results.values() if r == 1) < self.quorum:
            raise self._unavailable(results, "closing a session")
        session.held.clear()
        session.dirty.clear()

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        assert isinstance(session, RedlockSession)
        assert ticket is None or isinstance(ticket, RedlockTicket)
        rid = session.request() if ticket is None else ticket.rid
        score = str(time.time_ns() // 1000) if ticket is None else ticket.score
        queue = ticket is not None or enqueue
        floor = str(self._seen.get(name, 0))
        started = time.monotonic()
        patience = self._patience(session.ttl)
        results = await self._each(
            lambda i: i.call(
                "attempt",
                session.id,
                name,
                rid,
                "1" if queue else "0",
                score,
                floor,
                timeout=patience,
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
        mine = ticket or RedlockTicket(session, name, rid, score)
        return Busy(holder=info, ticket=mine, retry_in=retry)

    def _see(self, name: str, token: int) -> None:
        if token > self._seen.get(name, 0):
            if len(self._seen) >= SEEN_KEPT and name not in self._seen:
                self._seen.clear()
            self._seen[name] = token

    async def _grant(
        self,
        session: RedlockSession,
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
        self, session: RedlockSession, name: str, rid: str, score: str, only: set[int] | None = None
    ) -> None:
        """Release the parts granted to ``rid`` (and, with ``score``, queue it again)."""
        results = await self._each(
            lambda i: i.call("leave", session.id, name, rid, score), only=only
        )
        if any(isinstance(r, StoreUnavailable) for r in results.values()) and not score:
            session.dirty.add((name, rid))

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        assert isinstance(ticket, RedlockTicket)
        async with anyio.create_task_group() as tg:

            async def one(instance: Instance) -> None:
                if await instance.pop_wake(ticket.rid, timeout) is not None:
                    tg.cancel_scope.cancel()  # a hand-over on any server: attempt again

            for instance in self.instances:
                tg.start_soon(one, instance)

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, RedlockTicket)
        if ticket.left:
            return
        ticket.left = True
        await self._give_back(ticket.session, ticket.name, ticket.rid, "")

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, RedlockSession)
        rid = session.held.get((name, token))
        if rid is None:
            return
        results = await self._each(lambda i: i.call("release", session.id, name, str(token), rid))
        del session.held[(name, token)]
        failed = sum(1 for r in results.values() if isinstance(r, StoreUnavailable))
        if failed:
            session.dirty.add((name, rid))  # swept (released by its request id) at a keep-alive
        if failed > len(self.instances) - self.quorum:
            raise self._unavailable(results, "releasing")

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        if name is None:
            listed = await self._each(lambda i: i.lock_names())
            lists = [r for r in listed.values() if not isinstance(r, StoreUnavailable)]
            if len(lists) < self.quorum:
                raise self._unavailable(listed, "listing locks")
            names = sorted({n for each in lists for n in each})
        else:
            names = [name]
        found = []
        for each in names:
            info = await self._info(each)
            if info is not None:
                found.append(info)
        return found

    async def _info(self, name: str) -> LockInfo | None:
        """The holder of ``name`` on a quorum of servers (None if nobody holds a quorum)."""
        results = await self._each(lambda i: i.call("info", name))
        rows = [r for r in results.values() if not isinstance(r, StoreUnavailable)]
        if len(rows) < self.quorum:
            raise self._unavailable(results, "reading a lock")
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
        return LockInfo(name, holder.token, holder.owner, expires, waiters, holder.value)

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        if name is None:
            listed = await self._each(lambda i: i.lock_names("h"))
            lists = [r for r in listed.values() if not isinstance(r, StoreUnavailable)]
            if len(lists) < self.quorum:
                raise self._unavailable(listed, "listing held-back names")
            names = sorted({n for each in lists for n in each})
        else:
            names = [name]
        found = [await self._held(each) for each in names]
        return [held for held in found if held is not None]

    async def _held(self, name: str) -> HeldBack | None:
        """``name``'s hold-back, if too many servers hold it back for a quorum to grant it."""
        results = await self._each(lambda i: i.held(name))
        answers = [r for r in results.values() if not isinstance(r, StoreUnavailable)]
        if len(answers) < self.quorum:
            raise self._unavailable(results, "reading a hold-back")
        free_in = sorted(0.0 if r is None else r.free_in for r in answers)[self.quorum - 1]
        if free_in <= 0:
            return None
        return HeldBack(name, max(r.token for r in answers if r is not None), free_in)

    # -- leader election -----------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        assert isinstance(session, RedlockSession)
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
        return RedlockWatch(self, name, after)

    async def aclose(self) -> None:
        for instance in self.instances:
            await instance.aclose()
