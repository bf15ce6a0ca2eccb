"""Rule 8 of docs/design.md on every store: a lease that ends without a release holds its name back
for ``lock_delay`` seconds, by the store's own state and clock; a clean release frees it at once.
"""

from __future__ import annotations

import math
import os

import anyio
import pytest

import tenure
from tenure import AsyncClient, NotAcquired
from tenure._url import open_store
from tenure.stores._spi import Busy, Grant
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio

DELAY = 2.0


async def _wait_until_freed(client: AsyncClient, name: str) -> None:
    """Until the store no longer lists a holder of ``name`` (it expired the dead session)."""
    with anyio.fail_after(10):
        while await client.locks(name):
            await anyio.sleep(0.05)


async def test_a_crashed_holder_holds_the_name_back(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=DELAY) as a, tenure.connect_async(store_url) as b:
        first = await a.lock("crash", ttl=1).acquire()
        faulty.hang_keep_alive = True  # a crash, as the store sees it: no more renewals
        stopped = anyio.current_time()
        await _wait_until_freed(b, "crash")
        freed = anyio.current_time()
        [held] = await b.lock_delays("crash")
        assert held.name == "crash" and held.token in (0, first.token)
        assert 0 < held.free_in <= DELAY + 0.5
        assert [h.name for h in await b.lock_delays()] == ["crash"]
        with pytest.raises(NotAcquired) as busy:
            await b.lock("crash", ttl=5).acquire(wait=False)
        assert busy.value.lock is None
        second = await b.lock("crash", ttl=5).acquire(timeout=DELAY + 5)
        granted = anyio.current_time()
        assert second.token > first.token
        assert granted - stopped >= DELAY, "granted before the lock-delay had passed"
        assert granted - freed < DELAY + 3, "the waiter was not served once the delay passed"
        assert await b.lock_delays("crash") == []
        await second.release()


async def test_a_release_frees_the_name_at_once(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url, lock_delay=60) as a,
        tenure.connect_async(store_url) as b,
    ):
        lease = await a.lock("clean", ttl=5).acquire()
        await lease.release()
        again = await b.lock("clean", ttl=5).acquire(wait=False)
        assert again.token > lease.token
        assert await b.lock_delays() == []
        await again.release()
    async with tenure.connect_async(store_url) as c:  # closing a client is a release too
        async with tenure.connect_async(store_url, lock_delay=60) as d:
            await d.lock("closed", ttl=5).acquire()
        (await c.lock("closed", ttl=5).acquire(wait=False)).check()


async def test_queued_waiters_keep_their_order_through_the_delay(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    order: list[str] = []
    async with (
        AsyncClient(faulty, lock_delay=1) as a,
        tenure.connect_async(store_url) as b,
        tenure.connect_async(store_url) as c,
    ):
        await a.lock("fifo", ttl=1).acquire()

        async def take(client: AsyncClient, who: str) -> None:
            lease = await client.lock("fifo", ttl=5).acquire(timeout=15)
            order.append(who)
            await anyio.sleep(0.1)
            await lease.release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(take, b, "b")
            with anyio.fail_after(5):
                while not (await b.locks("fifo"))[0].waiters:
                    await anyio.sleep(0.02)
            tg.start_soon(take, c, "c")
            with anyio.fail_after(5):
                while (await b.locks("fifo"))[0].waiters < 2:
                    await anyio.sleep(0.02)
            faulty.hang_keep_alive = True
    assert order == ["b", "c"]


async def test_the_store_enforces_the_delay_whatever_the_asker_says(store_url: str) -> None:
    """Store level: a session that asks with no lock-delay of its own is still held back by the
    delay of the session that ended."""
    store = open_store(store_url)
    owner = tenure.Holder("test", os.getpid())
    try:
        dead = await store.open_session(1, owner, DELAY)
        live = await store.open_session(10, owner, 0.0)
        granted = await store.attempt(dead, "raw", None, enqueue=False)
        assert isinstance(granted, Grant)
        start = anyio.current_time()  # the dead session is never kept alive again
        with anyio.fail_after(10):
            while await store.locks("raw"):
                await anyio.sleep(0.05)
        busy = await store.attempt(live, "raw", None, enqueue=False)
        assert isinstance(busy, Busy) and busy.holder is None and busy.ticket is None
        assert busy.retry_in is not None and 0 < busy.retry_in <= DELAY + 0.5
        with anyio.fail_after(DELAY + 5):
            while True:
                outcome = await store.attempt(live, "raw", None, enqueue=False)
                if isinstance(outcome, Grant):
                    break
                await anyio.sleep(0.05)
        assert anyio.current_time() - start >= DELAY
        assert outcome.token > granted.token
        await store.release(live, "raw", outcome.token)
        await store.close_session(live)
    finally:
        await store.aclose()


@pytest.mark.parametrize("delay", [-1, math.nan, math.inf, 4000, "5"])
def test_bad_lock_delays_are_refused(store_url: str, delay: object) -> None:
    with pytest.raises(tenure.InvalidArgument, match="lock_delay"):
        tenure.connect(store_url, lock_delay=delay)  # type: ignore[arg-type]
    with tenure.connect(store_url) as client, pytest.raises(tenure.InvalidArgument):
        client.lock("x", ttl=5, lock_delay=delay)  # type: ignore[arg-type]


@pytest.mark.offers("elections")
async def test_an_election_may_hold_nothing_back(store_url: str) -> None:
    """``client.election(name, lock_delay=0)`` (Celery beat's: each of its sends is a claim of
    its own): a leader that dies frees the election once the store ends its session, whatever
    the client's lock-delay."""
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=DELAY) as a, tenure.connect_async(store_url) as b:
        first = await a.election("no-delay", ttl=1, value="a", lock_delay=0).acquire()
        faulty.hang_keep_alive = True
        await _wait_until_freed(b, "no-delay")
        assert await b.lock_delays("no-delay") == []
        second = await b.election("no-delay", ttl=5, value="b").acquire(timeout=DELAY / 2)
        assert second.term > first.term
        await second.release()
    with tenure.connect(store_url) as client, pytest.raises(tenure.InvalidArgument):
        client.election("x", ttl=5, value="v", lock_delay=-1)
