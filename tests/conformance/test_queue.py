"""Rule 9 of docs/design.md on every store, at the queue: a waiter whose session died is skipped, a
release wakes the next waiter only, and an attempt that will not wait leaves nothing behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
import pytest

import tenure
from tenure import AsyncClient, LeaseLost
from tenure._url import open_store
from tenure.stores._spi import Busy, Grant, Holder, Session, Store
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio

DEAD_TTL = 1.5
"""A session never kept alive: it ends this long after it was opened (etcd: 2 s, whole ones)."""


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = open_store(store_url)
    try:
        yield store
    finally:
        await store.aclose()


async def grant(store: Store, session: Session, name: str) -> int:
    outcome = await store.attempt(session, name, None, False)
    assert isinstance(outcome, Grant), outcome
    return outcome.token


async def until_waiters(store: Store, name: str, count: int) -> None:
    with anyio.fail_after(10):
        while not (infos := await store.locks(name)) or infos[0].waiters < count:
            await anyio.sleep(0.01)


async def until_free(store: Store, name: str) -> None:
    """Until the store lists no holder of ``name``: it has ended the session that held it."""
    with anyio.fail_after(10):
        while await store.locks(name):
            await anyio.sleep(0.02)


@pytest.mark.parametrize("holder_ends", ["released", "expired"])
async def test_a_waiter_whose_session_died_is_skipped(
    store: Store, store_url: str, holder_ends: str
) -> None:
    """A queued waiter whose session ended (never kept alive) is never granted: the live waiter
    behind it is served as soon as the holder lets go, by a release or by its own expiry."""
    holder_ttl = 10.0 if holder_ends == "released" else DEAD_TTL + 1.5
    async with tenure.connect_async(store_url, label="alive") as alive:
        (
            await alive.lock("warm-up", ttl=10).acquire()
        ).check()  # its session is open before the clock
        holder = await store.open_session(holder_ttl, Holder("h", 1, "holder"))
        holder_opened = anyio.current_time()
        dead = await store.open_session(DEAD_TTL, Holder("h", 2, "dead"))
        try:
            await grant(store, dead, "marker")  # gone from locks() once the store ends `dead`
            token = await grant(store, holder, "skip")
            queued = await store.attempt(dead, "skip", None, True)
            assert isinstance(queued, Busy) and queued.ticket is not None
            got: list[tuple[float, int]] = []

            async def live_waiter() -> None:
                async with alive.lock("skip", ttl=10) as lease:
                    got.append((anyio.current_time(), lease.token))

            async with anyio.create_task_group() as tg:
                tg.start_soon(live_waiter)
                await until_waiters(store, "skip", 2)  # the dead one first, then the live one
                await until_free(store, "marker")
                assert not got
                if holder_ends == "released":
                    let_go = anyio.current_time()
                    await store.release(holder, "skip", token)
                    bound = 1.0
                else:  # nobody releases: the holder expires, ttl after it was opened
                    let_go = holder_opened + holder_ttl
                    bound = 2.5
            [(granted_at, granted)] = got
            assert granted > token
            assert granted_at - let_go < bound, "the live waiter was held up by the dead one"
            with pytest.raises(LeaseLost):
                await store.attempt(dead, "skip", queued.ticket, True)
            assert not await store.keep_alive(dead)
            assert await store.locks("skip") == []  # the live waiter released; the dead one never
        finally:
            await store.close_session(dead)
            await store.close_session(holder)


class CountingStore(FaultyStore):
    """Counts the attempts a client makes (no faults injected)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.attempts = 0

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        self.attempts += 1
        return await super().attempt(session, name, ticket, enqueue)


async def test_a_release_wakes_exactly_one_waiter(store_url: str) -> None:
    """No herd and no polling: each waiter attempts once to join the queue and once more when
    the release before it wakes it; the others sleep on."""
    got: list[int] = []
    done = anyio.Event()
    stores = [CountingStore(open_store(store_url)) for _ in range(4)]
    async with AsyncExitStack() as stack:
        holder = await stack.enter_async_context(tenure.connect_async(store_url))
        waiters = [await stack.enter_async_context(AsyncClient(s)) for s in stores]
        lease = await holder.lock("one", ttl=30).acquire()
        async with anyio.create_task_group() as tg:
            for index, client in enumerate(waiters):

                async def wait_turn(index: int = index, client: AsyncClient = client) -> None:
                    async with client.lock("one", ttl=30):
                        got.append(index)
                        await done.wait()

                tg.start_soon(wait_turn)
                await until_waiters(holder.store, "one", index + 1)
            assert [s.attempts for s in stores] == [1, 1, 1, 1]  # joining woke nobody
            released = anyio.current_time()
            await lease.release()
            with anyio.fail_after(1):
                while not got:
                    await anyio.sleep(0.005)
            assert anyio.current_time() - released < 0.5
            await anyio.sleep(0.3)  # time for any other waiter to wake and try
            assert got == [0]
            assert [s.attempts for s in stores] == [2, 1, 1, 1]
            [info] = await holder.locks("one")
            assert info.waiters == 3
            done.set()
    assert got == [0, 1, 2, 3]
    assert [s.attempts for s in stores] == [2, 2, 2, 2]


async def test_a_busy_attempt_that_will_not_wait_leaves_no_trace(store: Store) -> None:
    one = await store.open_session(10, Holder("h", 1, "one"))
    two = await store.open_session(10, Holder("h", 2, "two"))
    three = await store.open_session(10, Holder("h", 3, "three"))
    try:
        token = await grant(store, one, "busy")
        outcome = await store.attempt(two, "busy", None, False)
        assert isinstance(outcome, Busy) and outcome.ticket is None
        assert outcome.holder is not None and outcome.holder.token == token
        [info] = await store.locks("busy")
        assert (info.token, info.waiters) == (token, 0)
        await store.release(one, "busy", token)
        assert await store.locks("busy") == []  # nothing of `two` was left to be granted
        assert await grant(store, three, "busy") > token  # free to anyone, at once
    finally:
        for session in (one, two, three):
            await store.close_session(session)


async def test_a_waiter_whose_own_session_is_lost_queues_again_at_once(store_url: str) -> None:
    """A waiting acquire wakes on its own session's loss (its ticket died with it) and queues
    again on a new session at once: not when its nap between attempts ends (up to 10 s on a
    store that wakes its waiters), so a caller that asks after the loss still queues behind it."""
    faulty = CountingStore(open_store(store_url))
    async with (
        tenure.connect_async(store_url) as holder,
        AsyncClient(faulty, lock_delay=0) as waiter,
        tenure.connect_async(store_url) as later,
    ):
        held = await holder.lock("turn", ttl=30).acquire()
        order: list[str] = []

        async def take(client: AsyncClient, who: str) -> None:
            async with client.lock("turn", ttl=3):
                order.append(who)

        async with anyio.create_task_group() as tg:
            tg.start_soon(take, waiter, "waiter")
            await until_waiters(holder.store, "turn", 1)
            assert (faulty.sessions_opened, faulty.attempts) == (1, 1)
            faulty.drop_next_session = True  # the next renewal (1 s on) hears it is gone
            # Bounded at 6 s: a renewal within 1 s, then one leave, one session and one attempt;
            # a waiter that napped on would try again only after 10 s (the holder's TTL is 30).
            with anyio.fail_after(6):
                while faulty.attempts < 2:
                    await anyio.sleep(0.01)
            assert faulty.sessions_opened == 2  # queued again, on a new session
            await until_waiters(holder.store, "turn", 1)
            tg.start_soon(take, later, "later")
            await until_waiters(holder.store, "turn", 2)
            await held.release()
    assert order == ["waiter", "later"]
    assert faulty.attempts == 3  # joined, joined again on the new session, woken and granted
