"""Partition ownership: a group of members splits a set of items so that each item has one owner,
and moves items when a member joins, leaves or dies. A recipe over locks and elections, written
once for every store that offers elections.

- **Membership**: a member holds the lock ``partitions/<group>/member/<id>`` for as long as its
  session lives, its weight proclaimed as the lock's value. Every member observes every other
  member's lock (woken by the store's watch or notification; on SQL stores also when the holder
  could have expired) and the group's *bell* ``partitions/<group>/bell``, which a member rings
  (takes and releases) when it joins or leaves, so a newcomer is seen at once.
- **Assignment**: weighted rendezvous hashing with bounded loads over the members' ids,
  deterministic, balanced (no member above its share, rounded up) and sticky: a change of
  membership moves the items of the member that came or went, and a few more where a share
  changed.
- **Ownership**: an item is the lock ``partitions/<group>/item/<item>``, with its own lease and
  fencing token. Its assigned owner waits for it in the lock's queue; the old owner is told it
  is leaving, stops, and releases it (or loses it by its deadline, after which lock-delay
  applies): an item never has two valid holders, and no change stops the whole group.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import anyio
from anyio.abc import TaskGroup

from ._arguments import check_arguments
from ._election import AsyncLeadership, campaign, observe
from ._errors import InvalidArgument, LeaseLost, NotAcquired, StoreUnavailable
from ._handles import AsyncHandle, Handle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._lock import acquire
from ._modes import Async, Blocking, io, io_iter
from ._names import check_name, reserve
from ._state import DEFAULT_TTL
from ._values import LockInfo
from .stores._spi import elections_of

if TYPE_CHECKING:
    from ._loop_thread import LoopThread
    from ._pool import SessionPool

log = logging.getLogger("tenure")
PREFIX = "partitions/"
reserve(PREFIX, "partition group", "partition groups")
ChangeKind = Literal["granted", "leaving", "lost"]
L = TypeVar("L")


def group_prefix(group: str) -> str:
    """What the names of every lock of the group start with."""
    return f"{PREFIX}{group}/"


def member_lock(group: str, member: str) -> str:
    return f"{PREFIX}{group}/member/{member}"


def item_lock(group: str, item: str) -> str:
    return f"{PREFIX}{group}/item/{item}"


def bell_lock(group: str) -> str:
    return f"{PREFIX}{group}/bell"


def check_group(group: object) -> str:
    if not isinstance(group, str) or not group or "/" in group:
        raise InvalidArgument(f"a partition group must be a non-empty name without '/': {group!r}")
    check_name(bell_lock(group))
    return group


def check_weight(weight: object) -> float:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise InvalidArgument(f"weight must be a number, got {weight!r}")
    if not math.isfinite(weight) or weight <= 0:
        raise InvalidArgument(f"weight must be a finite number > 0, got {weight!r}")
    return float(weight)


def check_items(group: str, items: Iterable[str]) -> tuple[str, ...]:
    """The items, each a name that makes a valid lock name, without repeats."""
    if isinstance(items, str):
        raise InvalidArgument("items must be a collection of names, not one string")
    found: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise InvalidArgument(f"an item must be a non-empty string, got {item!r}")
        check_name(item_lock(group, item))
        found.append(item)
    return tuple(dict.fromkeys(found))


def score(member: str, item: str, weight: float) -> float:
    """Weighted rendezvous score: the member with the highest owns the item (-w / ln u, with u
    uniform in (0, 1) from a hash of both: each member wins a share of items ∝ its weight)."""
    digest = hashlib.blake2b(f"{member}\x00{item}".encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") + 1) / (2**64 + 1)
    return -weight / math.log(u)


def assign(items: Iterable[str], members: Mapping[str, float]) -> dict[str, str]:
    """Item → owning member id, for members of these weights (empty if there are none).

    Rendezvous hashing with bounded loads: a member owns at most ``ceil(items · weight / total
    weight)`` items, so that no survivor of a failure gets more than its share (plain rendezvous
    hashing gives one of four members a quarter more than the others on 64 items). Pairs are
    taken by descending score, each item by its best-scoring member that has room: a change
    moves the items of the member that came or went, and a few others where a share changed.
    """
    items = list(items)
    if not members:
        return {}
    total = sum(members.values())
    room = {m: math.ceil(len(items) * w / total) for m, w in members.items()}
    ranked = sorted(
        ((score(m, item, w), m, item) for m, w in members.items() for item in items),
        reverse=True,
    )
    owners: dict[str, str] = {}
    for _, member, item in ranked:
        if item not in owners and room[member] > 0:
            owners[item] = member
            room[member] -= 1
    return {item: owners[item] for item in items}


@dataclass(frozen=True)
class PartitionChange(Generic[L]):
    """One change of what this member owns: ``granted`` (it holds ``lease`` now), ``leaving``
    (another member is to own it: stop its work; it is released when you ask for the next
    change) or ``lost`` (the lease was lost: stop at once)."""

    item: str
    kind: ChangeKind
    lease: L


def read_members(group: str, values: Iterable[tuple[str, str | None]]) -> dict[str, float]:
    """The members (id → weight) among ``(lock name, value)`` pairs of the store's locks."""
    prefix = member_lock(group, "")
    members: dict[str, float] = {}
    for name, value in values:
        if not name.startswith(prefix):
            continue
        if value is None:
            continue  # granted, its weight not proclaimed yet: it rings the bell once it has
        try:
            weight = check_weight(json.loads(value).get("weight", 1.0))
        except (ValueError, AttributeError, InvalidArgument):
            weight = 1.0  # not written by a member: counted at the default weight
        members[name[len(prefix) :]] = weight
    return members


@dataclass(frozen=True)
class PartitionLocks:
    """The lock names of partition group ``group``, as the recipe makes them: for tools that
    show or follow a group (``tenure partitions``), not for taking them."""

    group: str

    def __post_init__(self) -> None:
        check_group(self.group)

    @property
    def prefix(self) -> str:
        """What every lock of the group starts with (``client.locks(prefix=...)``)."""
        return group_prefix(self.group)

    @property
    def bell(self) -> str:
        """The lock a member rings (takes and releases) when it joins or leaves."""
        return bell_lock(self.group)

    def member(self, member: str) -> str:
        """The lock member ``member`` holds while it is a member ("" for their prefix)."""
        return member_lock(self.group, member)

    def item(self, item: str) -> str:
        """The lock of item ``item`` ("" for their prefix)."""
        return item_lock(self.group, item)

    def weights(self, infos: Iterable[LockInfo]) -> dict[str, float]:
        """Member id → weight, read from the member locks among ``infos``."""
        return read_members(self.group, ((info.name, info.value) for info in infos))


LB = TypeVar("LB", bound=LeaseBase)


class MemberBase(Generic[LB]):
    """One member of partition group ``group``: ``owned`` says which items it holds now (each
    with its own lease and token), ``changes()`` what comes and goes; ``release()`` leaves."""

    _lease: type[LB]

    def __init__(
        self,
        pool: SessionPool,
        group: str,
        items: tuple[str, ...],
        ttl: float,
        weight: float,
        member: str | None,
        lock_delay: float | None,
    ) -> None:
        self.group = group
        self.items = items
        self.ttl = ttl
        self.weight = weight
        if member is not None and not isinstance(member, str):
            raise InvalidArgument(f"a member id must be a string, got {member!r}")
        self.id = member or uuid.uuid4().hex[:12]
        check_name(member_lock(group, self.id))
        self._pool = pool
        self._lock_delay = lock_delay
        self._owned: dict[str, LB] = {}
        self._wanted: dict[str, anyio.CancelScope] = {}  # items being waited for
        self._leaving: set[str] = set()
        self._members: dict[str, float] = {}
        self._watched: dict[str, anyio.CancelScope] = {}
        self._poke = anyio.Event()
        self._send, self._receive = anyio.create_memory_object_stream[PartitionChange[LB]](math.inf)
        self._consumed = False
        self._membership: AsyncLeadership | None = None
        self._tg: TaskGroup | None = None
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._left = False

    def __repr__(self) -> str:
        return f"<Member {self.id!r} of {self.group!r}: {len(self._owned)} items>"

    def _portal(self) -> LoopThread:
        assert self._pool.portal is not None
        return self._pool.portal

    @property
    def owned(self) -> dict[str, LB]:
        """Item → its lease, for the items this member holds now."""
        return dict(self._owned)

    @property
    def members(self) -> dict[str, float]:
        """The group as this member saw it last: member id → weight."""
        return dict(self._members)

    def assignment(self) -> dict[str, str]:
        """Item → member id, by this member's current view of the group."""
        return assign(self.items, self._members)

    async def _changes(self) -> AsyncGenerator[PartitionChange[LB], None]:
        """Every change of what this member owns from now on, as it happens, starting with a
        ``granted`` for each item it holds already. A ``leaving`` item is released when you ask
        for the next change, or when you stop asking (then, with no consumer, at once)."""
        self._consumed = True
        for item, lease in self._owned.items():  # no checkpoint since the line above
            self._emit(PartitionChange(item, "granted", lease))
        leaving: str | None = None
        try:
            async for change in self._receive:
                leaving = change.item if change.kind == "leaving" else None
                yield change
                if leaving is not None:
                    await self._drop(leaving)
                    leaving = None
        finally:
            self._consumed = False
            with anyio.CancelScope(shield=True):
                if leaving is not None:
                    await self._drop(leaving)
                for item in list(self._leaving):  # told, and nobody left to hand them over
                    await self._drop(item)

    changes = io_iter(_changes)

    # -- running ----------------------------------------------------------------------------

    async def _enter(self) -> None:
        await self._join()
        self._pool.spawn(self._live)  # on the client's task group: joined and left from anywhere

    async def _live(self) -> None:
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._watch_bell)
                    tg.start_soon(self._reconcile)
        except Exception:  # a bug must not take the client's other work down with it
            log.exception("tenure: partitions %s: member %s failed", self.group, self.id)
            await self._leave()  # not a member that holds items nobody reconciles
        finally:
            self._done.set()

    async def _leave(self) -> None:
        """Give up every item and the membership, tell the others, end `changes`. Shielded;
        a store out of reach ends the leases by their deadlines instead."""
        with anyio.CancelScope(shield=True):
            try:
                for item in list(self._owned):
                    await self._drop(item)
                if self._membership is not None:
                    await self._membership._release()
                await self._ring()
            except StoreUnavailable as exc:
                log.info("tenure: partitions %s: leaving without the store (%s)", self.group, exc)
            finally:
                self._send.close()

    async def _release(self) -> None:
        """Leave the group: give up every item and the membership (a no-op once left)."""
        if self._left:
            return
        self._left = True
        self._scope.cancel()
        with anyio.CancelScope(shield=True):
            await self._done.wait()
        await self._leave()

    release = io(_release)

    async def _give_back(self) -> None:
        await self._release()

    async def _ring(self) -> None:
        """Take and release the bell: every member re-reads the group."""
        try:
            bell: AsyncLease = await acquire(
                self._pool, bell_lock(self.group), self.ttl, wait=True,
                timeout=min(1.0, self.ttl / 3), on_wait=None, lock_delay=self._lock_delay,
            )  # fmt: skip
        except NotAcquired:
            return  # held (by one ringing, or a member that died ringing): each reads anyway
        await bell._release()

    async def _watch_bell(self) -> None:
        await self._watch(bell_lock(self.group), every=True)

    async def _watch_member(self, member: str, scope: anyio.CancelScope) -> None:
        with scope:
            await self._watch(member_lock(self.group, member), every=False)

    async def _watch(self, name: str, every: bool) -> None:
        """Poke the reconcile loop on each change of ``name`` (``every``) or when nobody holds
        it; a store that went away is watched again after a nap (the loop re-reads anyway)."""
        while True:
            try:
                async for holder in observe(self._pool.store, name):
                    if every or holder is None:
                        self._poke.set()
            except StoreUnavailable as exc:
                log.info("tenure: partitions %s: watch of %s failed (%s)", self.group, name, exc)
            await anyio.sleep(self.ttl / 3)

    async def _reconcile(self) -> None:
        """Read the group, then take what is ours and give up what is not; again on every
        change, and at least every TTL/3 (a lost wake-up costs at most that). A member whose
        own session was lost joins again."""
        while True:
            self._poke = anyio.Event()
            try:
                if self._membership is None or self._membership.lost:
                    await self._join()
                await self._apply(await self._read_members())
            except (StoreUnavailable, LeaseLost) as exc:  # lost again while joining: next round
                log.info("tenure: partitions %s: cannot read the group (%s)", self.group, exc)
            with anyio.move_on_after(self.ttl / 3):
                await self._poke.wait()

    async def _join(self) -> None:
        value = json.dumps({"weight": self.weight})
        name = member_lock(self.group, self.id)
        self._membership = await campaign(
            self._pool,
            name,
            value,
            self.ttl,
            wait=True,
            timeout=None,
            lock_delay=self._lock_delay,
            make=AsyncLeadership,
        )  # fmt: skip  (the same session as the items: they end together)
        await self._ring()

    async def _read_members(self) -> dict[str, float]:
        found = await self._pool.store.locks(prefix=member_lock(self.group, ""))
        return read_members(self.group, ((info.name, info.value) for info in found))

    async def _apply(self, members: dict[str, float]) -> None:
        assert self._tg is not None
        members.setdefault(self.id, self.weight)  # ourselves, even before our own read sees us
        self._members = members
        for member, scope in list(self._watched.items()):
            if member not in members:
                scope.cancel()
                del self._watched[member]
        for member in members:
            if member != self.id and member not in self._watched:
                self._watched[member] = scope = anyio.CancelScope()
                self._tg.start_soon(self._watch_member, member, scope)
        owners = assign(self.items, members)
        for item in self.items:
            mine = owners.get(item) == self.id
            if mine and item not in self._owned and item not in self._wanted:
                self._wanted[item] = scope = anyio.CancelScope()
                self._tg.start_soon(self._take, item, scope)
            elif not mine and item in self._wanted:
                self._wanted.pop(item).cancel()
            elif not mine and item in self._owned and item not in self._leaving:
                self._leaving.add(item)
                self._emit(PartitionChange(item, "leaving", self._owned[item]))
                if not self._consumed:
                    await self._drop(item)

    async def _take(self, item: str, scope: anyio.CancelScope) -> None:
        """Wait in the item's queue until granted (or no longer ours: cancelled)."""
        with scope:
            while True:
                try:
                    lease = await acquire(
                        self._pool, item_lock(self.group, item), self.ttl, wait=True,
                        timeout=None, on_wait=None, lock_delay=self._lock_delay,
                        make=self._lease,
                    )  # fmt: skip
                    break
                except StoreUnavailable as exc:  # a slow or lost store: wait again, not fail
                    log.info("tenure: partitions %s: waiting for %s (%s)", self.group, item, exc)
                    await anyio.sleep(self.ttl / 3)
            # No checkpoint from the grant to here: the item is either ours or was never granted.
            if lease.lost:  # this member was paused past the lease's deadline: not a grant
                await lease._release()
            else:
                self._owned[item] = lease
                lease.on_lost(lambda _lease: self._lost(item, lease))
                self._emit(PartitionChange(item, "granted", lease))
        if self._wanted.get(item) is scope:  # not a newer wait for the same item
            del self._wanted[item]
        self._poke.set()

    def _lost(self, item: str, lease: LB) -> None:
        if self._owned.get(item) is lease:
            del self._owned[item]
            self._leaving.discard(item)
            self._emit(PartitionChange(item, "lost", lease))
            self._poke.set()  # ours still? then wait for it again

    async def _drop(self, item: str) -> None:
        lease = self._owned.pop(item, None)
        self._leaving.discard(item)
        if lease is not None:
            await lease._release()
        self._poke.set()

    def _emit(self, change: PartitionChange[LB]) -> None:
        if self._consumed:  # nobody asks: nothing piles up (changes() starts from `owned`)
            self._send.send_nowait(change)  # unbounded while read: never blocks the loop


class AsyncMember(MemberBase[AsyncLease], Async):
    """A member of the async API: ``async for change in member.changes()``."""

    _lease = AsyncLease


class Member(MemberBase[Lease], Blocking):
    """A member of the sync API: ``for change in member.changes()``."""

    _lease = Lease


M = TypeVar("M", bound=MemberBase[Any])


class PartitionGroupHandle(Handle[M]):
    """A partition group: its members split ``items``, each item owned by one at a time."""

    given_as = "member"
    kind = "partitions"
    _member: type[M]

    def __init__(
        self,
        pool: SessionPool,
        group: str,
        items: Iterable[str],
        ttl: float = DEFAULT_TTL,
        *,
        weight: float = 1.0,
        member: str | None = None,
        lock_delay: float | None = None,
    ) -> None:
        """Group ``group`` splitting ``items``: ``acquire()`` joins it and returns the
        `Member` (``async with`` / ``with``: joined for the block). ``weight``: this member's
        share relative to the others'; ``member``: its id (default: a random one); leases of
        ``ttl`` seconds; ``lock_delay``: as for a lock. See docs/partitions.md."""
        check_group(group)
        self.items = check_items(group, items)
        check_arguments(bell_lock(group), ttl, None, pool.drift, pool.margin)
        pool.timing(ttl, lock_delay)
        elections_of(pool.store)  # membership is an election per member
        self.weight = check_weight(weight)
        if member is not None and not isinstance(member, str):
            raise InvalidArgument(f"a member id must be a string, got {member!r}")
        if member is not None:
            check_name(member_lock(group, member))
        super().__init__(pool, group, wait=True, timeout=None)
        self.ttl = float(ttl)
        self.member = member
        self.lock_delay = lock_delay

    async def _take(self, wait: bool, timeout: float | None) -> M:
        # Made here, on the loop: its events and cancel scopes belong to the loop's thread.
        member = self._member(
            self._pool, self.name, self.items, self.ttl, self.weight, self.member,
            self.lock_delay,
        )  # fmt: skip
        await member._enter()
        return member

    def lease_of(self, grant: M) -> LeaseBase | None:
        return None  # the items come and go; the block is not cancelled by one's loss

    def _over(self, grant: M) -> bool:
        return grant._left

    async def _hand_back(self, grant: M) -> None:
        await grant._release()


class AsyncPartitionGroup(PartitionGroupHandle[AsyncMember], AsyncHandle[AsyncMember]):
    """``async with client.partitions(group, items) as member``."""

    _member = AsyncMember


class PartitionGroup(PartitionGroupHandle[Member], SyncHandle[Member]):
    """``with client.partitions(group, items) as member``."""

    _member = Member
