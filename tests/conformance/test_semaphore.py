"""Semaphores on every store (``tenure._semaphore``): never more than ``permits`` holders,
arrival order, permits back after a dead holder's TTL, no trace of a waiter that gave up,
tokens growing per slot, and what a changed count does."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import AsyncClient, NotAcquired
from tenure._semaphore import gate_name
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio


async def _queued(client: AsyncClient, name: str, count: int) -> None:
    """Until ``count`` callers wait in line for semaphore ``name`` (at its gate, or its head
    on the slots)."""
    with anyio.fail_after(10):
        while True:
            infos = await client.locks(prefix=f"semaphore/{name}/")
            gate = [i for i in infos if i.name == gate_name(name)]
            waiting = (gate[0].waiters + 1) if gate else 0  # the gate's holder waits on slots
            if waiting >= count:
                return
            await anyio.sleep(0.02)


async def test_never_more_holders_than_permits(store_url: str) -> None:
    holding, most, rounds = 0, 0, 0
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:

        async def worker(client: AsyncClient) -> None:
            nonlocal holding, most, rounds
            for _ in range(4):
                async with client.semaphore("pool", 2, ttl=5, timeout=30) as permit:
                    holding += 1
                    most = max(most, holding)
                    assert permit.index in (0, 1) and permit.semaphore == "pool"
                    await anyio.sleep(0.05)
                    holding -= 1
                    rounds += 1

        async with anyio.create_task_group() as group:
            for client in (a, b, a, b, a):
                group.start_soon(worker, client)
    assert most == 2 and rounds == 20


async def test_waiters_are_served_in_arrival_order(store_url: str) -> None:
    order: list[str] = []
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(store_url) as b,
        tenure.connect_async(store_url) as c,
    ):
        first = await a.semaphore("line", 1, ttl=5).acquire()

        async def take(client: AsyncClient, who: str) -> None:
            async with client.semaphore("line", 1, ttl=5, timeout=20):
                order.append(who)
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as group:
            for i, (client, who) in enumerate([(b, "b"), (c, "c"), (a, "a")]):
                group.start_soon(take, client, who)
                await _queued(a, "line", i + 1)
            await first.release()
    assert order == ["b", "c", "a"]


async def test_a_dead_holders_permit_comes_back_by_expiry(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=0) as a, tenure.connect_async(store_url) as b:
        dead = await a.semaphore("expiring", 1, ttl=1).acquire()
        faulty.hang_keep_alive = True  # a crash, as the store sees it
        with pytest.raises(NotAcquired):
            await b.semaphore("expiring", 1, ttl=5).acquire(wait=False)
        again = await b.semaphore("expiring", 1, ttl=5).acquire(timeout=10)
        assert again.index == dead.index and again.token > dead.token
        await again.release()


async def test_a_waiter_that_gives_up_leaves_no_trace(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        held = [await a.semaphore("full", 2, ttl=5).acquire() for _ in range(2)]
        with pytest.raises(NotAcquired, match="all 2 permits are held"):
            await b.semaphore("full", 2, ttl=5).acquire(timeout=0.3)
        with anyio.move_on_after(0.3):  # cancelled while waiting
            await b.semaphore("full", 2, ttl=5).acquire()
        infos = await a.locks(prefix="semaphore/full/")
        assert sorted(i.name for i in infos) == ["semaphore/full/0", "semaphore/full/1"]
        assert all(i.waiters == 0 for i in infos)
        await held[1].release()
        late = await b.semaphore("full", 2, ttl=5).acquire(wait=False)  # nobody is ahead
        assert late.index == 1
        await late.release()
        await held[0].release()


async def test_tokens_grow_per_slot_and_a_release_is_only_the_holders(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        seen: dict[int, list[int]] = {}
        for _ in range(3):
            permits = [await a.semaphore("tokens", 2, ttl=5).acquire() for _ in range(2)]
            for permit in permits:
                seen.setdefault(permit.index, []).append(permit.token)
            for permit in permits:
                await permit.release()
        assert sorted(seen) == [0, 1]
        assert all(tokens == sorted(set(tokens)) for tokens in seen.values()), seen
        old = await a.semaphore("tokens", 1, ttl=5).acquire()
        await old.release()
        new = await b.semaphore("tokens", 1, ttl=5).acquire()
        await old.release()  # again: a no-op, not a release of b's permit
        [info] = await a.locks("semaphore/tokens/0")
        assert info.token == new.token and not new.lost
        await new.release()


async def test_a_changed_count_applies_to_new_grants(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        two = [await a.semaphore("resized", 2, ttl=5).acquire() for _ in range(2)]
        third = await b.semaphore("resized", 3, ttl=5).acquire(wait=False)  # raised: a new slot
        assert third.index == 2
        await two[1].release()
        with pytest.raises(NotAcquired):  # lowered to 1: only slot 0 counts, and it is held
            await b.semaphore("resized", 1, ttl=5).acquire(wait=False)
        await two[0].release()
        one = await b.semaphore("resized", 1, ttl=5).acquire(wait=False)
        assert one.index == 0
        for permit in (one, third):
            await permit.release()


def test_bad_counts_are_refused(store_url: str) -> None:
    with tenure.connect(store_url) as client:
        for permits in (0, -1, 1.5, True, "3", 10_000):
            with pytest.raises(tenure.InvalidArgument, match="permits"):
                client.semaphore("bad", permits, ttl=5)  # type: ignore[arg-type]
        assert client.locks(prefix="semaphore/") == []


def test_the_sync_semaphore(store_url: str) -> None:
    with tenure.connect(store_url) as a, tenure.connect(store_url) as b:
        with a.semaphore("sync", 1, ttl=5) as permit:
            assert isinstance(permit, tenure.Permit) and permit.index == 0
            with pytest.raises(NotAcquired):
                b.semaphore("sync", 1, ttl=5).acquire(wait=False)
        again = b.semaphore("sync", 1, ttl=5).acquire(wait=False)
        assert again.token > permit.token and again.permits == 1
        again.release()


async def test_a_permit_shows_the_count_it_was_asked_with(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a:
        permit = await a.semaphore("counted", 3, ttl=5).acquire()
        [info] = await a.locks(permit.name)
        assert info.value == "3" and info.token == permit.token
        await permit.release()
