"""Rules 1, 5, 6 and 8 of docs/design.md on every store: exclusion, tokens, loss, release,
queueing."""

from __future__ import annotations

import os
import threading
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

import tenure
from tenure import AsyncClient, InvalidArgument, LeaseLost, NotAcquired
from tenure._url import open_store
from tenure.stores._spi import Busy, Grant
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio


async def test_exclusion_and_holder_info(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url, label="first") as a,
        tenure.connect_async(store_url) as b,
    ):
        lease = await a.lock("job", ttl=5).acquire()
        with pytest.raises(NotAcquired) as raised:
            await b.lock("job", ttl=5).acquire(wait=False)
        holder = raised.value.lock
        assert isinstance(holder, tenure.LockInfo)
        assert holder.token == lease.token and holder.holder.label == "first"
        assert 0 < holder.expires_in <= 5
        [info] = await b.locks()
        assert info.name == "job" and info.token == lease.token
        await lease.release()
        again = await b.lock("job", ttl=5).acquire(wait=False)
        assert again.token > lease.token
        await again.release()


async def test_a_caller_asking_again_for_a_lock_it_holds_is_refused_at_once(
    store_url: str,
) -> None:
    """No reentry: the task holding a lock that asks for it again would wait on itself, so it
    is refused before anything reaches the store's queue, by a handle or a block alike; another
    task of the same client just waits its turn."""
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        lease = await a.lock("mine", ttl=5).acquire()
        with anyio.fail_after(5), pytest.raises(InvalidArgument, match="no reentry"):
            await a.lock("mine", ttl=5).acquire()  # it would wait, for ever: refused
        with anyio.fail_after(5), pytest.raises(InvalidArgument, match="no reentry"):
            async with a.lock("mine", ttl=5, timeout=30):
                pass
        [info] = await b.locks("mine")
        assert (info.token, info.waiters) == (lease.token, 0)

        async def elsewhere() -> None:
            with pytest.raises(NotAcquired):  # another task: not reentry, the lock is held
                await a.lock("mine", ttl=5).acquire(wait=False)

        async with anyio.create_task_group() as tg:
            tg.start_soon(elsewhere)
        got: list[int] = []

        async def other_task() -> None:
            async with a.lock("mine", ttl=5) as next_lease:
                got.append(next_lease.token)

        async with anyio.create_task_group() as tg:
            tg.start_soon(other_task)
            await wait_until_waiters(b, "mine", 1)
            await lease.release()
        assert got and got[0] > lease.token


def test_a_sync_client_s_threads_are_callers_of_their_own(store_url: str) -> None:
    with tenure.connect(store_url) as client, client.lock("threads", ttl=5) as lease:
        with pytest.raises(InvalidArgument, match="no reentry"):
            client.lock("threads", ttl=5).acquire()
        outcome: list[Exception | None] = []

        def other_thread() -> None:
            try:
                client.lock("threads", ttl=5).acquire(wait=False)
            except Exception as exc:  # handed to the test's thread
                outcome.append(exc)
            else:
                outcome.append(None)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(10)
        [raised] = outcome
        assert isinstance(raised, NotAcquired), raised  # held, not refused as reentry
        lease.check()


async def test_a_handle_holds_one_grant_and_release_gives_it_back(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        lock = a.lock("one", ttl=5)
        await lock.release()  # holding nothing: a no-op
        first = await lock.acquire()
        with pytest.raises(InvalidArgument, match="holds a grant already"):
            await lock.acquire(wait=False)
        assert [i.token for i in await b.locks("one")] == [first.token]  # still the one grant
        await lock.release()
        assert first.released and await b.locks("one") == []
        second = await lock.acquire()  # the grant given back: the handle may take another
        assert second.token > first.token
        await second.release()  # released by the grant itself: the handle holds none either
        third = await lock.acquire(wait=False)
        assert third.token > second.token
        await lock.release()
        await lock.release()  # again: a no-op
        assert third.released and await b.locks("one") == []


async def test_acquire_s_wait_and_timeout_override_the_handle_s(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        held = await a.lock("defaults", ttl=5).acquire()
        with pytest.raises(NotAcquired):  # the handle waits by default; this call does not
            await b.lock("defaults", ttl=5, timeout=30).acquire(wait=False)
        assert [i.waiters for i in await a.locks("defaults")] == [0]
        patient = b.lock("defaults", ttl=5, wait=False)
        got: list[tenure.AsyncLease] = []

        async def wait_anyway() -> None:
            got.append(await patient.acquire(wait=True, timeout=30))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_anyway)
            await wait_until_waiters(a, "defaults", 1)  # it waits, as this call says
            await held.release()
        [lease] = got
        assert lease.token > held.token
        await patient.release()


async def test_tokens_strictly_increase_across_releases_clients_and_reopen(
    store_url: str,
) -> None:
    tokens: list[int] = []
    for _ in range(3):  # each round a new client: a reopened store
        async with tenure.connect_async(store_url) as client:
            for _ in range(5):
                async with client.lock("counter", ttl=5) as lease:
                    tokens.append(lease.token)
    assert tokens == sorted(set(tokens)), tokens
    assert len(tokens) == 15


async def test_names_are_independent(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url) as client,
        client.lock("a", ttl=5),
        client.lock("b", ttl=5) as b,
    ):
        assert b.token >= 1
        assert {info.name for info in await client.locks()} == {"a", "b"}


async def test_locks_lists_only_the_names_under_a_prefix(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url) as client,
        client.lock("group/member/x", ttl=5),
        client.lock("group/member/y", ttl=5),
        client.lock("group/item/1", ttl=5),
        client.lock("groupie", ttl=5),
    ):
        found = await client.locks(prefix="group/member/")
        assert [info.name for info in found] == ["group/member/x", "group/member/y"]
        assert {i.name for i in await client.locks(prefix="group")} == {
            "group/member/x", "group/member/y", "group/item/1", "groupie"
        }  # fmt: skip
        assert await client.locks("groupie", prefix="group/") == []
        with pytest.raises(tenure.InvalidArgument):
            await client.locks(prefix=3)  # type: ignore[arg-type]


async def test_release_is_idempotent_and_never_frees_another_holder(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        first = await a.lock("x", ttl=5).acquire()
        await first.release()
        await first.release()  # no-op
        second = await b.lock("x", ttl=5).acquire(wait=False)
        await first.release()  # still a no-op: it must not free the second holder's lock
        [info] = await b.locks("x")
        assert info.token == second.token
        with pytest.raises(LeaseLost, match="released"):
            first.check()
        second.check()
        await second.release()


async def test_a_stale_release_never_frees_the_next_holders_lock(store_url: str) -> None:
    """Store level: a release with an old token changes nothing, whether it comes from a
    holder whose session died meanwhile (it was paused) or from the session holding the newer
    grant; only the holder's current token frees the name."""
    store = open_store(store_url)
    try:
        paused = await store.open_session(1.5, tenure.Holder("h", 1, "paused"))  # not kept alive
        holder = await store.open_session(10, tenure.Holder("h", 2, "holder"))
        first = await store.attempt(paused, "stale", None, enqueue=False)
        assert isinstance(first, Grant)
        with anyio.fail_after(10):  # until the store has ended the paused holder's session
            while await store.locks("stale"):
                await anyio.sleep(0.02)
        second = await store.attempt(holder, "stale", None, enqueue=False)
        assert isinstance(second, Grant) and second.token > first.token
        await store.release(paused, "stale", first.token)  # it wakes up and releases
        await store.release(holder, "stale", first.token)
        [info] = await store.locks("stale")
        assert (info.token, info.holder.label) == (second.token, "holder")
        await store.release(holder, "stale", second.token)
        third = await store.attempt(holder, "stale", None, enqueue=False)  # the same session
        assert isinstance(third, Grant) and third.token > second.token
        await store.release(holder, "stale", second.token)  # its own earlier grant's token
        assert [i.token for i in await store.locks("stale")] == [third.token]
        await store.release(holder, "stale", third.token)
        assert await store.locks("stale") == []
        for session in (paused, holder):
            await store.close_session(session)
    finally:
        await store.aclose()


async def test_waiters_are_served_in_arrival_order(store_url: str) -> None:
    order: list[int] = []
    async with AsyncExitStack() as stack:
        holder_client = await stack.enter_async_context(tenure.connect_async(store_url))
        clients = [
            await stack.enter_async_context(tenure.connect_async(store_url)) for _ in range(4)
        ]
        lease = await holder_client.lock("fifo", ttl=5).acquire()
        async with anyio.create_task_group() as tg:
            for index, client in enumerate(clients):

                async def wait_turn(index: int = index, client: AsyncClient = client) -> None:
                    async with client.lock("fifo", ttl=5):
                        order.append(index)
                        await anyio.sleep(0.02)

                tg.start_soon(wait_turn)
                await wait_until_waiters(holder_client, "fifo", index + 1)
            await lease.release()
    assert order == [0, 1, 2, 3]


async def wait_until_waiters(client: AsyncClient, name: str, count: int) -> None:
    with anyio.fail_after(5):
        while True:
            infos = await client.locks(name)
            if infos and infos[0].waiters >= count:
                return
            await anyio.sleep(0.01)


async def test_release_wakes_the_next_waiter_promptly(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        lease = await a.lock("wake", ttl=30).acquire()
        got: list[float] = []

        async def waiter() -> None:
            async with b.lock("wake", ttl=30):
                got.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await wait_until_waiters(a, "wake", 1)
            released_at = anyio.current_time()
            await lease.release()
        # Woken by the store, not by a poll (the fallback poll is seconds apart).
        assert got and got[0] - released_at < 0.5


async def test_timeout_gives_up_and_leaves_no_trace(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        lease = await a.lock("t", ttl=5).acquire()
        start = anyio.current_time()
        with pytest.raises(NotAcquired):
            await b.lock("t", ttl=5).acquire(timeout=0.3)
        assert 0.25 < anyio.current_time() - start < 3
        [info] = await a.locks("t")
        assert info.waiters == 0
        await lease.release()


async def test_cancelled_waiter_leaves_the_queue(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        lease = await a.lock("c", ttl=5).acquire()
        with anyio.move_on_after(0.3):
            await b.lock("c", ttl=5).acquire()
        [info] = await a.locks("c")
        assert info.waiters == 0
        await lease.release()
        # and the lock is free for a third party at once
        async with tenure.connect_async(store_url) as c:
            (await c.lock("c", ttl=5).acquire(wait=False)).check()


async def test_crashed_holder_expires_and_next_token_is_higher(store_url: str) -> None:
    """A holder that stops renewing loses the lock after its TTL; the next grant is higher."""
    faulty = FaultyStore(open_store(store_url))
    # About expiry, not lock-delay (test_lock_delay.py): the holder has none.
    async with AsyncClient(faulty, lock_delay=0) as a, tenure.connect_async(store_url) as b:
        first = await a.lock("crash", ttl=1).acquire()
        faulty.hang_keep_alive = True
        start = anyio.current_time()
        second = await b.lock("crash", ttl=1).acquire(timeout=5)
        waited = anyio.current_time() - start
        assert first.lost, "the holder must know it lost before another can be granted"
        assert second.token > first.token
        assert 0.5 < waited < 3
        await second.release()


async def test_loss_cancels_async_body_and_raises(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    reached_end = False
    called: list[int] = []
    async with AsyncClient(faulty) as client:
        with pytest.raises(LeaseLost):
            async with client.lock("body", ttl=1) as lease:
                lease.on_lost(lambda lost: called.append(lost.token))
                faulty.hang_keep_alive = True
                await anyio.sleep(5)  # cancelled at the deadline, well before 5 s
                reached_end = True
        assert not reached_end
        assert lease.lost and called == [lease.token]
        with pytest.raises(LeaseLost, match="lost"):
            lease.check()
        # Lost is final: a new acquire gets a new token.
        faulty.hang_keep_alive = False
        async with client.lock("body", ttl=1) as again:
            assert again.token > lease.token


async def test_store_saying_gone_is_loss_at_once(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        lease = await client.lock("gone", ttl=1.5).acquire()
        faulty.drop_sessions = True
        with anyio.fail_after(1.4):  # the next renewal (ttl/3) learns it: before the deadline
            while not lease.lost:
                await anyio.sleep(0.01)
        assert "gone" in (lease.lost_reason or "")


async def test_failing_renewals_are_retried_then_lost(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        lease = await client.lock("flaky", ttl=1.5).acquire()
        faulty.fail_keep_alive = True
        await anyio.sleep(0.8)
        faulty.fail_keep_alive = False  # the store comes back inside the window: still held
        await anyio.sleep(1.5)
        assert not lease.lost
        calls = faulty.keep_alive_calls
        assert calls >= 3  # retried, not given up after one failure
        faulty.fail_keep_alive = True
        with anyio.fail_after(3):
            while not lease.lost:
                await anyio.sleep(0.01)


async def test_renewal_keeps_a_long_hold_alive(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client, client.lock("long", ttl=0.6) as lease:
        await anyio.sleep(2.0)  # more than three TTLs
        lease.check()
        assert lease.remaining() > 0


async def test_one_session_serves_many_locks(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        leases = [await client.lock(f"many-{i}", ttl=1.5).acquire() for i in range(20)]
        await anyio.sleep(1.2)
        # ttl/3 = 0.5 s: about two renewals in 1.2 s, whatever the number of locks held
        assert 1 <= faulty.keep_alive_calls <= 4
        for lease in leases:
            lease.check()
            await lease.release()


def test_sync_api(store_url: str) -> None:
    with tenure.connect(store_url) as a, tenure.connect(store_url) as b:
        with a.lock("sync", ttl=5) as lease:
            assert isinstance(lease.token, int)
            lease.check()
            with pytest.raises(NotAcquired):
                b.lock("sync", ttl=5).acquire(wait=False)
        with b.lock("sync", ttl=5) as again:
            assert again.token > lease.token
        assert lease.released and not lease.lost


def test_sync_with_block_raises_when_lease_was_lost(store_url: str) -> None:
    import time

    faulty = FaultyStore(open_store(store_url))
    client = tenure.Client(faulty)
    try:
        seen: list[int] = []
        with pytest.raises(LeaseLost), client.lock("s", ttl=1) as lease:
            lease.on_lost(lambda lost: seen.append(lost.token))
            faulty.hang_keep_alive = True
            time.sleep(1.5)
            assert lease.lost
        assert seen == [lease.token]
        # ...unless the body already raised: its own error wins.
        faulty.hang_keep_alive = False
        with pytest.raises(KeyError), client.lock("s", ttl=1):
            faulty.hang_keep_alive = True
            time.sleep(1.5)
            raise KeyError("body")
    finally:
        faulty.hang_keep_alive = False
        client.close()


async def test_waiter_giving_up_as_it_is_granted_passes_the_lock_on(store_url: str) -> None:
    """Store level: a release may grant the lock to a waiter at the moment it gives up; leaving
    must then pass the lock on (or free it), never leave it held by nobody."""
    store = open_store(store_url)
    owner = tenure.Holder("test", os.getpid())
    try:
        a, b, c = [await store.open_session(5, owner) for _ in range(3)]
        granted = await store.attempt(a, "handoff", None, enqueue=True)
        assert isinstance(granted, Grant)
        b_busy = await store.attempt(b, "handoff", None, enqueue=True)
        c_busy = await store.attempt(c, "handoff", None, enqueue=True)
        assert isinstance(b_busy, Busy) and isinstance(c_busy, Busy)
        assert b_busy.ticket is not None and c_busy.ticket is not None
        await store.release(a, "handoff", granted.token)  # next in line: b
        await store.leave(b_busy.ticket)  # ...which gives up at that very moment
        with anyio.fail_after(5):
            while True:
                outcome = await store.attempt(c, "handoff", c_busy.ticket, enqueue=True)
                if isinstance(outcome, Grant):
                    break
                with anyio.move_on_after(0.5):  # the caller times a wait, not the store
                    await store.wait(c_busy.ticket, outcome, 0.5)
        assert outcome.token > granted.token
        [info] = await store.locks("handoff")
        assert info.token == outcome.token
        await store.release(c, "handoff", outcome.token)
        assert await store.locks("handoff") == []
    finally:
        for session in (a, b, c):
            await store.close_session(session)
        await store.aclose()


async def test_body_errors_come_out_unwrapped(store_url: str) -> None:
    """An error in the body of ``async with connect_async()`` is the body's, not a group."""
    with pytest.raises(KeyError):
        async with tenure.connect_async(store_url) as client, client.lock("err", ttl=5):
            raise KeyError("body")
    async with tenure.connect_async(store_url) as client:  # and the lock was released
        (await client.lock("err", ttl=5).acquire(wait=False)).check()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"label": "two\nlines"}, "label"),
        ({"label": "x" * 300}, "label"),
        ({"margin": -1}, "margin"),
        ({"drift": 0.9}, "drift"),
    ],
)
def test_bad_client_options_are_refused_before_the_store_is_touched(
    store_url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(tenure.InvalidArgument, match=message):
        tenure.connect(store_url, **options)
    if store_url.startswith("sqlite:///"):  # nothing was created
        assert not os.path.exists(store_url.removeprefix("sqlite:///"))


async def test_a_store_bug_in_renewal_is_a_loud_loss_not_a_crash(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        with pytest.raises(LeaseLost):
            async with client.lock("bug", ttl=1.5) as lease:
                faulty.break_keep_alive = True
                await anyio.sleep(5)  # cancelled at the next renewal (ttl/3), not at the end
        assert "unexpectedly" in (lease.lost_reason or "")
        faulty.break_keep_alive = False
        async with client.lock("bug", ttl=1.5) as again:  # the client itself is still usable
            assert again.token > lease.token
