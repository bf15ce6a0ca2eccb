"""Partition ownership on every store that offers elections: each item one owner with its own
token, assignment as `assign` says (rendezvous hashing with bounded loads), sticky on a join, a
hand-over told first and released after, a dead member's items taken over within TTL + a small
bound, never two valid holders of an item."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

import tenure
from tenure._partitions import assign, item_lock
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = [pytest.mark.anyio, pytest.mark.offers("elections")]

ITEMS = [f"shard-{n}" for n in range(12)]
TTL = 2.0
SETTLE = 10.0
"""Longest wait for a group to settle (generous: a slow CI machine; no speed is asserted)."""


async def settled(members: list[tenure.AsyncMember], ids: list[str] | None = None) -> None:
    """Until every item is owned by exactly the member rendezvous hashing names."""
    ids = ids or [m.id for m in members]
    want = assign(ITEMS, {member: 1.0 for member in ids})
    with anyio.move_on_after(SETTLE):
        while True:
            have = {item: m.id for m in members for item in m.owned}
            counts = sum(len(m.owned) for m in members)
            if have == want and counts == len(ITEMS):
                return
            await anyio.sleep(0.02)
    views = {m.id: sorted(m.members) for m in members}
    raise AssertionError(f"not settled: want {want}, have {have}; members seen {views}")


async def test_every_item_has_one_owner_with_its_own_token(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(store_url) as b,
        tenure.connect_async(store_url) as c,
        a.partitions("g", ITEMS, TTL, member="a") as ma,
        b.partitions("g", ITEMS, TTL, member="b") as mb,
        c.partitions("g", ITEMS, TTL, member="c") as mc,
    ):
        await settled([ma, mb, mc])
        held = {info.name: info.token for info in await a.locks()}
        for member in (ma, mb, mc):
            assert member.members.keys() == {"a", "b", "c"}
            for item, lease in member.owned.items():
                assert lease.token >= 1 and not lease.lost
                assert held[item_lock("g", item)] == lease.token  # the store agrees


async def test_a_join_moves_only_the_items_whose_owner_changes(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(store_url) as b,
        tenure.connect_async(store_url) as c,
        a.partitions("g", ITEMS, TTL, member="a") as ma,
        b.partitions("g", ITEMS, TTL, member="b") as mb,
    ):
        await settled([ma, mb])
        two, three = (
            assign(ITEMS, dict.fromkeys("ab", 1.0)),
            assign(ITEMS, dict.fromkeys("abc", 1.0)),
        )
        before = {item: lease.token for m in (ma, mb) for item, lease in m.owned.items()}
        async with c.partitions("g", ITEMS, TTL, member="c") as mc:
            await settled([ma, mb, mc])
            assert set(mc.owned) == {i for i, m in three.items() if m == "c"}
            stayed = [i for i in ITEMS if two[i] == three[i]]
            assert len(stayed) >= len(ITEMS) // 2  # not a reshuffle of everything
            for m in (ma, mb):
                for item, lease in m.owned.items():
                    if item in stayed:
                        assert lease.token == before[item], f"{item} moved, its owner unchanged"
        await settled([ma, mb])  # the leaver's items come back, the others stay
        for m in (ma, mb):
            for item, lease in m.owned.items():
                if three[item] == two[item] == m.id:
                    assert lease.token == before[item]


async def test_leaving_is_told_first_and_released_when_the_consumer_moves_on(
    store_url: str,
) -> None:
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(store_url) as b,
        a.partitions("g", ITEMS, TTL, member="a") as ma,
    ):
        changes = ma.changes()
        granted = set()
        with anyio.fail_after(SETTLE):
            while len(granted) < len(ITEMS):
                change = await changes.__anext__()
                assert change.kind == "granted"
                granted.add(change.item)
        async with b.partitions("g", ITEMS, TTL, member="b") as mb:
            with anyio.fail_after(SETTLE):
                leaving = await changes.__anext__()
            assert (
                leaving.kind == "leaving" and assign(ITEMS, {"a": 1, "b": 1})[leaving.item] == "b"
            )
            await anyio.sleep(0.3)  # told, not yet released: b must still wait for it
            holder = await a.locks(item_lock("g", leaving.item))
            assert [info.token for info in holder] == [leaving.lease.token]
            assert leaving.item not in mb.owned
            with anyio.move_on_after(0.5):
                await changes.__anext__()  # asking for the next change releases the item
            with anyio.fail_after(SETTLE):
                while leaving.item not in mb.owned:
                    await anyio.sleep(0.02)
            assert mb.owned[leaving.item].token > leaving.lease.token
            await changes.aclose()


async def test_a_dead_members_items_are_taken_over_after_its_leases_end(store_url: str) -> None:
    """Its renewals hang and it cannot open a session again: it loses its leases by their
    deadline, before the store expires them; only then are they granted to the others."""
    faulty = FaultyStore(open_store(store_url))
    lost_at: dict[str, float] = {}
    async with (
        tenure.connect_async(store_url, lock_delay=0) as a,
        tenure.connect_async(store_url, lock_delay=0) as b,
        tenure.AsyncClient(faulty, lock_delay=0) as dead,
        a.partitions("g", ITEMS, TTL, member="a") as ma,
        b.partitions("g", ITEMS, TTL, member="b") as mb,
        dead.partitions("g", ITEMS, TTL, member="dead") as md,
    ):
        await settled([ma, mb, md])
        doomed = md.owned
        assert doomed, "rendezvous gave the member none of 12 items (rerun with other ids)"
        clock = a.clock
        for item, lease in doomed.items():
            lease.on_lost(_stamp(lost_at, item, clock.now))
        faulty.hang_keep_alive = faulty.refuse_sessions = True  # it cannot join again either
        start = clock.now()
        await settled([ma, mb], ["a", "b"])
        took = clock.now() - start
        for item, lease in doomed.items():
            taker = ma.owned.get(item) or mb.owned.get(item)
            assert taker is not None and taker.token > lease.token
            assert item in lost_at, f"{item}: granted again before its old lease was lost"
        assert took <= TTL + SETTLE
        faulty.hang_keep_alive = faulty.refuse_sessions = False


async def test_a_wait_the_store_fails_is_tried_again_not_fatal(store_url: str) -> None:
    """An item's wait that fails (the store too slow or out of reach) is waited again: the
    member stays, and takes the item once the store answers."""
    faulty = FaultyStore(open_store(store_url))
    async with (
        tenure.connect_async(store_url, lock_delay=0) as a,
        tenure.AsyncClient(faulty, lock_delay=0) as b,
        b.partitions("g", ITEMS, TTL, member="b") as mb,
    ):
        async with a.partitions("g", ITEMS, TTL, member="a") as ma:
            await settled([ma, mb])
            faulty.fail_attempts = True  # a's items come to b while its attempts fail
        await anyio.sleep(TTL)
        assert len(mb.owned) < len(ITEMS)
        faulty.fail_attempts = False
        await settled([mb])
        assert mb.members.keys() == {"b"}


async def test_a_member_whose_join_again_is_lost_tries_again(store_url: str) -> None:
    """Its session lost, the member joins again; that join's term lost too (the store said
    so as it proclaimed its weight): the member tries once more, it does not fail."""
    faulty = FaultyStore(open_store(store_url))
    async with (
        tenure.AsyncClient(faulty, lock_delay=0) as b,
        b.partitions("g", ITEMS, TTL, member="b") as mb,
    ):
        await settled([mb])
        faulty.drop_sessions = faulty.refuse_proclaims = True
        with anyio.fail_after(SETTLE):
            while mb.owned:
                await anyio.sleep(0.02)
        faulty.drop_sessions = False
        await anyio.sleep(TTL)  # a join or two refused meanwhile
        faulty.refuse_proclaims = False
        await settled([mb])


def _stamp(into: dict[str, float], item: str, now: Callable[[], float]) -> Callable[[object], None]:
    return lambda _lease: into.__setitem__(item, now())


def test_the_sync_api(store_url: str) -> None:
    with (
        tenure.connect(store_url) as a,
        tenure.connect(store_url) as b,
        a.partitions("g", ITEMS, TTL, member="a") as ma,
        b.partitions("g", ITEMS, TTL, member="b", weight=3) as mb,
    ):
        want = assign(ITEMS, {"a": 1.0, "b": 3.0})
        give_up = time.monotonic() + SETTLE
        while True:
            have = {item: "a" for item in ma.owned} | {item: "b" for item in mb.owned}
            if have == want or time.monotonic() > give_up:
                break
            time.sleep(0.02)
        assert have == want
        assert mb.members == {"a": 1.0, "b": 3.0}
        assert all(isinstance(lease, tenure.Lease) for lease in ma.owned.values())


def test_bad_input_is_one_line(store_url: str) -> None:
    with tenure.connect(store_url) as client:
        for call, match in (
            (lambda: client.partitions("a/b", ITEMS), "without '/'"),
            (lambda: client.partitions("g", "abc"), "not one string"),
            (lambda: client.partitions("g", ITEMS, weight=0), "weight must be"),
            (lambda: client.partitions("g", ["", "x"]), "non-empty string"),
            (lambda: client.partitions("g", ITEMS, member=7), "member id must be a string"),
        ):
            with pytest.raises(tenure.InvalidArgument, match=match) as caught, call():
                pass
            assert "\n" not in str(caught.value)
        assert client.locks() == []  # nothing joined, nothing held
