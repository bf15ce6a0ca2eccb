"""A session is one etcd lease, plus a hold-back lease for lock-delay (`EtcdSession`, made and
kept alive by `Sessions`); a place in a lock's queue is an `EtcdTicket`."""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from ..._errors import StoreUnavailable
from .._kit import InDoubt, owner_json, patience
from .._spi import Holder, Session
from .keys import Keys, delete_op, leased_to
from .transport import NOT_FOUND, Call, EtcdError, Transport


@dataclass(eq=False)
class EtcdSession(Session):
    id: int
    ttl: float
    owner: Holder
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
    in_doubt: InDoubt[bytes] = field(default_factory=InDoubt)
    """Own keys that may be in etcd after a failed request; deleted at the next keep-alive."""
    value: bytes = field(init=False)
    """What the session's keys hold: its owner, as JSON."""

    def __post_init__(self) -> None:
        self.value = owner_json(self.owner).encode()

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


@dataclass(eq=False, slots=True)  # slots: a thousand may wait on one client
class EtcdTicket:
    session: EtcdSession
    name: str
    key: bytes
    slot: int
    revision: int
    """The own key's create revision: the place in the queue."""
    left: bool = False
    predecessor: bytes | None = None
    """The key `wait` watches, as the last attempt found it (None: none, poll)."""
    read_at: int = 0
    """The revision the last attempt read it at: `wait` watches from the next one."""


class Sessions:
    """Opens, keeps alive and closes sessions: each one etcd lease, granted with an ID chosen
    here (a grant sent again finds its own lease instead of leaking a second one), and for
    lock-delay a hold-back lease that always ends at least the delay after it."""

    def __init__(
        self,
        transport: Transport,
        keys: Keys,
        error: Callable[[EtcdError], StoreUnavailable],
        call: Call,
    ) -> None:
        """``error`` translates etcd's definite refusals; ``call`` is the store's own request
        (refusals translated)."""
        self._gw = transport
        self._keys = keys
        self._error = error
        self._call = call

    async def open(self, ttl: float, owner: Holder, lock_delay: float) -> EtcdSession:
        seconds = max(1, math.ceil(ttl))
        lease = await self._grant(seconds)
        session = EtcdSession(lease, ttl, owner, lock_delay=lock_delay)
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

    async def keep_alive(self, session: EtcdSession) -> bool:
        # Short per-member waits: a paused member must not eat the renewal window.
        within = patience(session.ttl, self._gw.request_timeout)
        # The hold-back lease first, the session lease only once it is renewed: the session
        # lease never ends less than the delay before the hold-back lease, even when the second
        # renewal fails. The session lease's renewal may reach etcd up to the pair's time after
        # the hold-back lease's: if that is more than the hold-back TTL's spare (0 for a
        # delay of whole seconds), the hold-back lease is renewed once more, after it.
        started = time.monotonic()
        if session.hold and not await self._renew(session.hold, within):
            return False
        if not await self._renew(session.id, within):
            return False
        late = session.hold and time.monotonic() - started > session.spare
        if late and not await self._renew(session.hold, within):
            return False
        await self._sweep(session, within)  # never delays the renewal's answer for long
        return True

    async def close(self, session: EtcdSession) -> None:
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
        session.in_doubt.clear()

    async def _sweep(self, session: EtcdSession, within: float) -> None:
        """Delete own keys that a failed request may have left (not ones in use again), and the
        hold-back key a lost grant's txn may have put with one."""
        if not session.in_doubt:
            return
        prefix = self._keys.prefix

        async def delete(key: bytes) -> None:
            # Read as each key is sent, not once: an earlier delete's await may have seen a new
            # grant of the same name on this session, whose hold-back key must stay.
            in_use = {self._keys.queued(prefix(n), session.id, s) for n, s in session.claimed()}
            if key in in_use:
                return
            name = self._keys.name_of(key)
            held_key = self._keys.held(name)
            # Our hold-back key of a name we hold no more stands for no grant: it goes too.
            ours = session.hold and all(held != name for held, _ in session.held)
            body = {
                "compare": [leased_to(held_key, session.hold)] if ours else [],
                "success": [delete_op(key)] + ([delete_op(held_key)] if ours else []),
                "failure": [delete_op(key)],
            }
            await self._call("kv/txn", body)

        await session.in_doubt.sweep(delete, within)

    # -- leases ----------------------------------------------------------------------------

    async def grant(self, seconds: int) -> int:
        """A new lease of ``seconds`` (a revocation's hold-back lease)."""
        return await self._grant(seconds)

    async def renew(self, lease: int) -> bool:
        """Keep ``lease`` alive once (its TTL counts from now); False if it is gone."""
        return await self._renew(lease, self._gw.request_timeout)

    async def revoke(self, lease: int) -> bool:
        """Revoke ``lease``; False if etcd no longer knows it."""
        return await self._revoke(lease)

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

    async def _renew(self, lease: int, patience: float) -> bool:
        """Keep ``lease`` alive, waiting ``patience`` seconds for each member; False if it is
        gone."""
        try:
            answer = await self._gw.call("lease/keepalive", {"ID": str(lease)}, timeout=patience)
        except EtcdError as exc:
            if exc.code == NOT_FOUND:
                return False
            raise self._error(exc) from None
        result = answer.get("result") or {}
        return int(result.get("TTL", 0)) > 0  # 0: unknown or expired lease
