"""The decorator form of every handle, on every store: ``@client.lock(...)`` runs the function
only while holding the lock (skipped, visibly, while another holds it; cancelled on loss in async
code), ``@client.once(...)`` runs it once per slot (done, failed with the function's exception,
skipped after), and the other handles hold their grant for each call the same way."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import AsyncClient, Leader, LeaseLost, NotAcquired, Skipped
from tenure._url import open_store
from tenure.testing import FaultyStore


@pytest.mark.anyio
async def test_a_decorated_lock_runs_one_call_at_a_time_and_says_who_skipped(
    store_url: str,
) -> None:
    async with (
        tenure.connect_async(store_url, label="a") as a,
        tenure.connect_async(store_url, label="b") as b,
    ):
        seen: list[int] = []

        @b.lock("report", ttl=10, wait=False)
        async def from_b() -> str:
            return "b ran"

        @a.lock("report", ttl=10, wait=False)
        async def from_a(day: str, lease: tenure.AsyncLease | None = None) -> str:
            assert lease is not None
            seen.append(lease.token)
            [info] = await a.locks("report")
            assert info.token == lease.token  # held while the function runs
            skipped = await from_b()  # b on the same name, meanwhile
            assert isinstance(skipped, Skipped) and not skipped
            assert skipped.reason == "held" and skipped.lock is not None
            assert skipped.lock.holder.label == "a" and "held by a" in str(skipped)
            return f"a ran for {day}"

        assert await from_a("monday") == "a ran for monday"
        assert len(seen) == 1 and await a.locks("report") == []  # released after the call
        assert await from_b() == "b ran"  # free again: b runs
        assert from_a.__name__ == "from_a"  # a decorated function keeps its name


@pytest.mark.anyio
async def test_a_decorated_lock_cancels_an_async_call_whose_lease_is_lost(store_url: str) -> None:
    store = FaultyStore(open_store(store_url))
    async with AsyncClient(store, label="a") as a:
        reached_the_end = False

        @a.lock("lossy", ttl=1.0, wait=False)
        async def slow() -> None:
            nonlocal reached_the_end
            store.hang_keep_alive = True  # renewals stop answering: the lease runs out
            await anyio.sleep(30)
            reached_the_end = True

        with anyio.fail_after(10), pytest.raises(LeaseLost):
            await slow()
        assert not reached_the_end


@pytest.mark.anyio
async def test_every_handle_decorates_a_function_given_its_grant(store_url: str) -> None:
    """``@handle`` on a semaphore, each side of a read-write lock, an election and a partition
    group: each call holds a grant of its own, given by the handle's parameter, and gives it
    back when it returns; with ``wait=False``, a call while another client holds it is skipped."""
    async with (
        tenure.connect_async(store_url, label="a") as a,
        tenure.connect_async(store_url, label="b") as b,
    ):
        rw = a.rwlock("doc", ttl=10, wait=False)
        grants: list[tenure.AsyncLease] = []

        @a.semaphore("sem", 1, ttl=10, wait=False)
        async def with_permit(permit: tenure.AsyncPermit | None = None) -> int:
            assert permit is not None and permit.semaphore == "sem"
            with pytest.raises(NotAcquired):  # the only permit is this call's
                await b.semaphore("sem", 1, ttl=10).acquire(wait=False)
            grants.append(permit)
            return permit.index

        @rw.read
        async def reading(lease: tenure.AsyncRWLease | None = None) -> str:
            assert lease is not None
            with pytest.raises(NotAcquired):
                await b.rwlock("doc", ttl=10).write.acquire(wait=False)
            grants.append(lease)
            return lease.mode

        @rw.write
        async def writing(lease: tenure.AsyncRWLease | None = None) -> str:
            assert lease is not None
            with pytest.raises(NotAcquired):
                await b.rwlock("doc", ttl=10).read.acquire(wait=False)
            grants.append(lease)
            return lease.mode

        @a.election("chief", ttl=10, value="a", wait=False)
        async def leading(leadership: tenure.AsyncLeadership | None = None) -> int:
            assert leadership is not None
            assert await b.election("chief").leader() == Leader(
                "chief", leadership.term, "a", a.holder
            )
            grants.append(leadership)
            return leadership.term

        @a.partitions("team", ["x"], ttl=10, member="a")
        async def member_of(member: tenure.AsyncMember | None = None) -> list[str]:
            assert member is not None
            with anyio.fail_after(10):
                while "x" not in member.owned:
                    await anyio.sleep(0.02)
            grants.append(member.owned["x"])
            return list(member.members)

        assert await with_permit() == 0
        assert await reading() == "read" and await writing() == "write"
        assert await leading() >= 1
        assert await member_of() == ["a"]
        assert all(grant.released for grant in grants) and len(grants) == 5
        assert await a.locks() == []  # every call gave its grant back (the group: it left)
        async with b.semaphore("sem", 1, ttl=10), b.election("chief", ttl=10, value="b"):
            for busy in (with_permit, leading):
                skipped = await busy()
                assert isinstance(skipped, Skipped) and skipped.reason == "held"
        async with b.rwlock("doc", ttl=10).write:
            for busy in (reading, writing):
                assert isinstance(await busy(), Skipped)


@pytest.mark.anyio
@pytest.mark.offers("records")
async def test_a_decorated_once_runs_each_slot_once_and_records_the_function_s_fate(
    store_url: str,
) -> None:
    async with (
        tenure.connect_async(store_url, label="a") as a,
        tenure.connect_async(store_url, label="b") as b,
    ):
        today = ["2026-12-01"]

        def day() -> str:
            return today[0]

        runs: list[tuple[str, int]] = []

        @a.once("nightly", day, ttl=10)
        async def on_a(claim: tenure.AsyncClaim | None = None) -> str:
            assert claim is not None and claim.lease is not None
            runs.append(("a", claim.attempt))
            return "done on a"

        @b.once("nightly", day, ttl=10)
        async def on_b() -> str:
            runs.append(("b", 0))
            raise RuntimeError("disk full")

        assert await on_a() == "done on a"
        skipped = await on_b()
        assert isinstance(skipped, Skipped) and skipped.reason == "done"
        assert skipped.name == "nightly/2026-12-01" and skipped.record is not None
        assert skipped.record.label == "a"
        today[0] = "2026-12-02"  # the next slot: whoever calls first runs it
        with pytest.raises(RuntimeError, match="disk full"):
            await on_b()
        again = await on_a()
        assert isinstance(again, Skipped) and again.reason == "failed"
        assert runs == [("a", 1), ("b", 0)]
        history = await a.history("nightly")
        assert [(s.slot, s.state) for s in history] == [
            ("2026-12-01", "done"),
            ("2026-12-02", "failed"),
        ]
        assert "disk full" in (history[1].error or "")


@pytest.mark.offers("records")
def test_the_sync_decorators_hold_and_record_as_the_async_ones(store_url: str) -> None:
    with tenure.connect(store_url, label="a") as a, tenure.connect(store_url, label="b") as b:

        @b.lock("sync-job", ttl=10, wait=False)
        def from_b() -> str:
            return "b ran"

        @a.lock("sync-job", ttl=10, wait=False)
        def from_a(lease: tenure.Lease | None = None) -> Skipped | str:
            assert lease is not None and lease.token > 0
            return from_b()  # meanwhile, on b: skipped

        skipped = from_a()
        assert isinstance(skipped, Skipped) and skipped.reason == "held"
        assert from_b() == "b ran"

        @a.once("sync-nightly", "2026-12-01", ttl=10)
        def nightly(claim: tenure.Claim | None = None) -> int:
            assert claim is not None
            return int(claim.attempt)

        assert nightly() == 1
        later = nightly()
        assert isinstance(later, Skipped) and later.reason == "done"
        assert [s.state for s in b.history("sync-nightly")] == ["done"]

        @a.election("sync-chief", ttl=10, value="a", wait=False)
        def chief(leadership: tenure.Leadership | None = None) -> int:
            assert leadership is not None and b.election("sync-chief").leader() is not None
            return leadership.term

        assert chief() >= 1 and b.election("sync-chief").leader() is None  # stepped down
        with b.election("sync-chief", ttl=10, value="b"):
            assert isinstance(chief(), Skipped)
