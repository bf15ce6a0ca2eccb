"""Read-write locks on every store (``tenure._rwlock``): many readers or one writer, a writer in
line stops the readers behind it, one token counter in grant order, a dead holder's grant back
by expiry, no trace of a waiter that gave up, and no reentry."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import AsyncClient, InvalidArgument, NotAcquired
from tenure._rwlock import gate_name
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio


async def _in_line(client: AsyncClient, name: str, count: int) -> None:
    """Until ``count`` callers wait at read-write lock ``name``'s gate."""
    with anyio.fail_after(10):
        while True:
            infos = await client.locks(gate_name(name))
            if infos and infos[0].waiters >= count:
                return
            await anyio.sleep(0.02)


async def test_readers_share_and_a_writer_is_alone(store_url: str) -> None:
    """No writer beside anyone, whatever the interleaving. That readers *do* overlap is arranged
    with held grants in the next test, not read off short holds that may or may not meet."""
    readers = writers = 0
    beside: list[str] = []
    held: list[str] = []
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:

        async def reader(client: AsyncClient) -> None:
            nonlocal readers
            for _ in range(3):
                async with client.rwlock("doc", ttl=5, timeout=30).read as lease:
                    assert lease.mode == "read" and lease.name == "doc"
                    readers += 1
                    held.append("read")
                    if writers:
                        beside.append(f"reader {lease.token} beside a writer")
                    await anyio.sleep(0.05)
                    readers -= 1

        async def writer(client: AsyncClient) -> None:
            nonlocal writers
            for _ in range(3):
                async with client.rwlock("doc", ttl=5, timeout=30).write as lease:
                    assert lease.mode == "write" and lease.index == -1
                    writers += 1
                    held.append("write")
                    if readers or writers > 1:
                        beside.append(f"writer {lease.token} beside {readers} readers")
                    await anyio.sleep(0.03)
                    writers -= 1

        async with anyio.create_task_group() as group:
            for client in (a, b, a):
                group.start_soon(reader, client)
            for client in (b, a):
                group.start_soon(writer, client)
    assert beside == []
    assert sorted(held) == ["read"] * 9 + ["write"] * 6  # every caller was granted every time


async def test_a_held_read_lock_lets_other_readers_in(store_url: str) -> None:
    """Readers overlap whenever they are free to: arranged with held grants, not a race."""
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(store_url) as b,
        tenure.connect_async(store_url) as c,
    ):
        first = await a.rwlock("shared", ttl=5).read.acquire()
        second = await b.rwlock("shared", ttl=5).read.acquire(
            timeout=10
        )  # granted beside the first
        third = await a.rwlock("shared", ttl=5).read.acquire(timeout=10)
        assert not (first.lost or second.lost or third.lost)
        assert len({first.index, second.index, third.index}) == 3
        with pytest.raises(NotAcquired):
            await c.rwlock("shared", ttl=5).write.acquire(wait=False)  # ...and a writer stays out
        for lease in (first, second, third):
            await lease.release()


async def test_a_writer_in_line_stops_the_readers_behind_it(store_url: str) -> None:
    order: list[str] = []
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(store_url) as b,
        tenure.connect_async(store_url) as c,
    ):
        first = await a.rwlock("line", ttl=5).read.acquire()
        tokens: dict[str, int] = {"first": first.token}

        async def take(client: AsyncClient, who: str, write: bool) -> None:
            lock = client.rwlock("line", ttl=5, timeout=20)
            async with lock.write if write else lock.read as lease:
                order.append(who)
                tokens[who] = lease.token
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as group:
            group.start_soon(take, b, "writer", True)
            await _in_line(a, "line", 0)  # the writer holds the gate, waiting for the reader
            await anyio.sleep(0.1)
            group.start_soon(take, c, "later reader", False)
            await _in_line(a, "line", 1)
            await anyio.sleep(0.1)
            assert order == []  # the later reader waits behind the writer: no starvation
            await first.release()
    assert order == ["writer", "later reader"]
    assert tokens["first"] < tokens["writer"] < tokens["later reader"]  # one counter


async def test_tokens_grow_in_grant_order_for_readers_and_writers(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        r1 = await a.rwlock("order", ttl=5).read.acquire()
        r2 = await b.rwlock("order", ttl=5).read.acquire()
        assert {r1.index, r2.index} == {0, 1} and r1.token < r2.token
        for lease in (r1, r2):
            await lease.release()
        w = await a.rwlock("order", ttl=5).write.acquire()
        await w.release()
        r3 = await b.rwlock("order", ttl=5).read.acquire()
        assert r2.token < w.token < r3.token
        await r3.release()
        await r1.release()  # again: a no-op, not a release of anyone else's
        assert await a.locks(prefix="rwlock/order/") == []


async def test_a_dead_readers_grant_comes_back_by_expiry(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=0) as a, tenure.connect_async(store_url) as b:
        dead = await a.rwlock("expiring", ttl=1, lock_delay=0).read.acquire()
        # Refused while the reader lives (it renews): asked after the crash, the answer would
        # depend on how soon a loaded machine asks within the TTL of 1 s.
        with pytest.raises(NotAcquired, match="readers"):
            await b.rwlock("expiring", ttl=5).write.acquire(wait=False)
        faulty.hang_keep_alive = True  # a crash, as the store sees it
        writer = await b.rwlock("expiring", ttl=5).write.acquire(timeout=10)
        assert dead.lost and writer.token > dead.token
        await writer.release()


async def test_a_dead_writers_grant_comes_back_by_expiry(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=0) as a, tenure.connect_async(store_url) as b:
        dead = await a.rwlock("gone", ttl=1, lock_delay=0).write.acquire()
        with pytest.raises(NotAcquired):  # while the writer lives, as above
            await b.rwlock("gone", ttl=5).read.acquire(wait=False)
        faulty.hang_keep_alive = True
        reader = await b.rwlock("gone", ttl=5).read.acquire(timeout=10)
        assert dead.lost and reader.token > dead.token
        await reader.release()


async def test_waiters_that_give_up_leave_no_trace(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        reader = await a.rwlock("busy", ttl=5).read.acquire()
        with pytest.raises(NotAcquired, match="readers still hold it"):
            await b.rwlock("busy", ttl=5).write.acquire(timeout=0.3)
        with anyio.move_on_after(0.3):  # cancelled while waiting
            await b.rwlock("busy", ttl=5).write.acquire()
        infos = await a.locks(prefix="rwlock/busy/")
        assert [(i.name, i.waiters) for i in infos] == [("rwlock/busy/0", 0)]
        await reader.release()
        writer = await a.rwlock("busy", ttl=5).write.acquire(wait=False)  # nobody is ahead
        with pytest.raises(NotAcquired):
            await b.rwlock("busy", ttl=5).read.acquire(timeout=0.3)
        await writer.release()
        assert await a.locks(prefix="rwlock/busy/") == []


async def test_readers_beyond_the_count_wait(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        two = [await a.rwlock("few", ttl=5, readers=2).read.acquire() for _ in range(2)]
        with pytest.raises(NotAcquired, match="all 2 readers"):
            await b.rwlock("few", ttl=5, readers=2).read.acquire(timeout=0.3)
        await two[0].release()
        third = await b.rwlock("few", ttl=5, readers=2).read.acquire(timeout=5)
        assert third.index == two[0].index
        for lease in (third, two[1]):
            await lease.release()


async def test_no_reentry_and_no_upgrade(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a:
        reader = await a.rwlock("mine", ttl=5).read.acquire()
        with pytest.raises(InvalidArgument, match=r"holds the read lock of 'mine'.*no upgrade"):
            await a.rwlock("mine", ttl=5).write.acquire()
        again = await a.rwlock("mine", ttl=5).read.acquire()  # another reader: fine
        for lease in (again, reader):
            await lease.release()
        writer = await a.rwlock("mine", ttl=5).write.acquire()
        for side in (a.rwlock("mine", ttl=5).read, a.rwlock("mine", ttl=5).write):
            with pytest.raises(InvalidArgument, match="holds the write lock"):
                await side.acquire()
        await writer.release()
        assert await a.locks(prefix="rwlock/mine/") == []


def test_bad_reader_counts_are_refused(store_url: str) -> None:
    with tenure.connect(store_url) as client:
        for readers in (0, -1, 1.5, True, "3", 10_000):
            with pytest.raises(InvalidArgument, match="readers"):
                client.rwlock("bad", ttl=5, readers=readers)  # type: ignore[arg-type]
        assert client.locks(prefix="rwlock/") == []


def test_the_sync_read_write_lock(store_url: str) -> None:
    with tenure.connect(store_url) as a, tenure.connect(store_url) as b:
        with a.rwlock("sync", ttl=5).read as read, a.rwlock("sync", ttl=5).read as other:
            assert isinstance(read, tenure.RWLease) and read.mode == "read"
            assert read.token < other.token
            with pytest.raises(NotAcquired):
                b.rwlock("sync", ttl=5).write.acquire(wait=False)
        with b.rwlock("sync", ttl=5).write as write:
            assert write.token > other.token and write.mode == "write"
            with pytest.raises(NotAcquired):
                a.rwlock("sync", ttl=5).read.acquire(wait=False)
