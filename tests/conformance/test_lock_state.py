"""State that travels with a lock (``lease.state``) on every store that keeps records: the next
holder reads what the last one wrote, and a write commits only while the writer's grant is
current, by the store's own compare, even when the writer was paused between its own check and
its write."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import AsyncClient, InvalidArgument, LeaseLost
from tenure._url import open_store
from tenure.testing import FaultyStore, ManualClock

pytestmark = [pytest.mark.anyio, pytest.mark.offers("records")]


async def test_the_next_holder_reads_what_the_last_one_wrote(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        async with a.lock("feed", ttl=5) as lease:
            assert await lease.state.get("cursor") is None and await lease.state.items() == {}
            await lease.state.put("cursor", "41")
            await lease.state.put("cursor", "42")  # replaced, not added
            await lease.state.put("scratch", "x")
            await lease.state.delete("scratch")
            await lease.state.delete("never-written")  # no error
        async with b.lock("feed", ttl=5) as lease:
            assert await lease.state.items() == {"cursor": "42"}
            assert await lease.state.get("cursor") == "42"
            await lease.state.put("cursor", "43")
        async with a.lock("feed-2", ttl=5) as other:  # one space per lock
            assert await other.state.items() == {}


async def test_a_paused_holders_write_is_refused_after_a_hand_over(store_url: str) -> None:
    # The old holder's clock stands still and its renewals hang: it still believes it holds the
    # lock (its own check passes), as a process paused between that check and its write would.
    faulty, clock = FaultyStore(open_store(store_url)), ManualClock()
    async with (
        AsyncClient(faulty, clock=clock, lock_delay=0) as old_client,
        tenure.connect_async(store_url) as new_client,
    ):
        old = await old_client.lock("cursor", ttl=1, lock_delay=0).acquire()
        await old.state.put("offset", "10")
        faulty.hang_keep_alive = True
        new = await new_client.lock("cursor", ttl=5).acquire(timeout=15)
        assert new.token > old.token and not old.lost  # the old holder has not noticed
        assert await new.state.get("offset") == "10"
        await new.state.put("offset", "11")
        with pytest.raises(LeaseLost, match="no longer current"):
            await old.state.put("offset", "10000")  # refused by the store, nothing written
        assert old.lost
        with pytest.raises(LeaseLost):
            await old.state.delete("offset")
        assert await new.state.items() == {"offset": "11"}
        await new.release()


async def test_a_released_lease_writes_nothing(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client:
        lease = await client.lock("done", ttl=5).acquire()
        await lease.state.put("k", "v")
        await lease.release()
        with pytest.raises(LeaseLost, match="released"):
            await lease.state.put("k", "after")
        assert await lease.state.get("k") == "v"  # reads need no grant


async def test_bad_keys_and_values_are_refused_in_one_line(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client, client.lock("bad", ttl=5) as lease:
        for key in ("", " padded", "a\nb", "k" * 201):
            with pytest.raises(InvalidArgument, match="state key"):
                await lease.state.put(key, "v")
        with pytest.raises(InvalidArgument, match="must be a string"):
            await lease.state.put("k", 7)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="larger than"):
            await lease.state.put("k", "x" * (64 * 1024 + 1))
        assert await lease.state.items() == {}
        await lease.state.put("ключ/with slash:and colon", "значение")  # any printable key
        assert await lease.state.items() == {"ключ/with slash:and colon": "значение"}


@pytest.mark.offers("elections")
async def test_a_leader_hands_its_state_to_the_next_term(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        async with a.election("primary", ttl=5, value="a") as first:
            await first.state.put("checkpoint", "7")
        async with b.election("primary", ttl=5, value="b") as second:
            assert second.term > first.term
            assert await second.state.get("checkpoint") == "7"


def test_the_sync_api_is_the_same(store_url: str) -> None:
    with tenure.connect(store_url) as a, tenure.connect(store_url) as b:
        with a.lock("sync", ttl=5) as lease:
            lease.state.put("cursor", "1")
        with b.lock("sync", ttl=5) as lease:
            assert lease.state.get("cursor") == "1"
            assert lease.state.items() == {"cursor": "1"}
            lease.state.delete("cursor")
            assert lease.state.items() == {}


@pytest.mark.offers("revoke")
async def test_a_revoked_grant_writes_nothing(store_url: str) -> None:
    # Renewals hang, so the holder has not heard of the revocation: the store's compare refuses.
    faulty = FaultyStore(open_store(store_url))
    async with (
        AsyncClient(faulty, clock=ManualClock()) as a,
        tenure.connect_async(store_url) as operator,
    ):
        lease = await a.lock("stuck", ttl=30).acquire()
        await lease.state.put("k", "before")
        faulty.hang_keep_alive = True
        assert await operator.revoke("stuck", reason="test") is not None
        with pytest.raises(LeaseLost, match="no longer current"):
            await lease.state.put("k", "after")
        assert await lease.state.get("k") == "before"


@pytest.mark.offers("elections")
async def test_a_partition_items_state_moves_with_the_item(store_url: str) -> None:
    items = ["shard-0", "shard-1"]

    async def owning(member: tenure.AsyncMember) -> None:
        with anyio.fail_after(15):
            while set(member.owned) != set(items):
                await anyio.sleep(0.02)

    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        async with a.partitions("g", items, ttl=2, member="a") as first:
            await owning(first)
            await first.owned["shard-0"].state.put("offset", "17")
            await first.owned["shard-1"].state.put("offset", "4")
        async with b.partitions("g", items, ttl=2, member="b") as second:
            await owning(second)
            assert await second.owned["shard-0"].state.get("offset") == "17"
            assert await second.owned["shard-1"].state.items() == {"offset": "4"}
