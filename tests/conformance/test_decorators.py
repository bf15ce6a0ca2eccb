"""The decorators on every store: ``exclusive`` runs the function only while holding the lock
(skipped, visibly, while another holds it; cancelled on loss in async code) and ``once_per``
runs it once per slot (done, failed with the function's exception, skipped after)."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import AsyncClient, LeaseLost, Skipped
from tenure._url import open_store
from tenure.testing import FaultyStore


@pytest.mark.anyio
async def test_exclusive_runs_one_call_at_a_time_and_says_who_skipped(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url, label="a") as a,
        tenure.connect_async(store_url, label="b") as b,
    ):
        seen: list[int] = []

        @b.exclusive("report", ttl=10)
        async def from_b() -> str:
            return "b ran"

        @a.exclusive("report", ttl=10)
        async def from_a(day: str, lease: tenure.AsyncLease | None = None) -> str:
            assert lease is not None
            seen.append(lease.token)
            [info] = await a.locks("report")
            assert info.token == lease.token  # held while the function runs
            skipped = await from_b()  # b on the same name, meanwhile
            assert isinstance(skipped, Skipped) and not skipped
            assert skipped.reason == "held" and skipped.holder is not None
            assert skipped.holder.holder.label == "a" and "held by a" in str(skipped)
            return f"a ran for {day}"

        assert await from_a("monday") == "a ran for monday"
        assert len(seen) == 1 and await a.locks("report") == []  # released after the call
        assert await from_b() == "b ran"  # free again: b runs
        assert from_a.__name__ == "from_a"  # a decorated function keeps its name


@pytest.mark.anyio
async def test_exclusive_cancels_an_async_call_whose_lease_is_lost(store_url: str) -> None:
    store = FaultyStore(open_store(store_url))
    async with AsyncClient(store, label="a") as a:
        reached_the_end = False

        @a.exclusive("lossy", ttl=1.0)
        async def slow() -> None:
            nonlocal reached_the_end
            store.hang_keep_alive = True  # renewals stop answering: the lease runs out
            await anyio.sleep(30)
            reached_the_end = True

        with anyio.fail_after(10), pytest.raises(LeaseLost):
            await slow()
        assert not reached_the_end


@pytest.mark.anyio
@pytest.mark.offers("records")
async def test_once_per_runs_each_slot_once_and_records_the_function_s_fate(
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

        @a.once_per("nightly", slot=day, ttl=10)
        async def on_a(run: tenure.AsyncRun | None = None) -> str:
            assert run is not None and run.lease is not None
            runs.append(("a", run.attempt))
            return "done on a"

        @b.once_per("nightly", slot=day, ttl=10)
        async def on_b() -> str:
            runs.append(("b", 0))
            raise RuntimeError("disk full")

        assert await on_a() == "done on a"
        skipped = await on_b()
        assert isinstance(skipped, Skipped) and skipped.reason == "done"
        assert skipped.name == "nightly/2026-12-01" and skipped.slot is not None
        assert skipped.slot.label == "a"
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

        @b.exclusive("sync-job", ttl=10)
        def from_b() -> str:
            return "b ran"

        @a.exclusive("sync-job", ttl=10)
        def from_a(lease: tenure.Lease | None = None) -> Skipped | str:
            assert lease is not None and lease.token > 0
            return from_b()  # meanwhile, on b: skipped

        skipped = from_a()
        assert isinstance(skipped, Skipped) and skipped.reason == "held"
        assert from_b() == "b ran"

        @a.once_per("sync-nightly", slot="2026-12-01", ttl=10)
        def nightly(run: tenure.Run | None = None) -> int:
            assert run is not None
            return int(run.attempt)

        assert nightly() == 1
        later = nightly()
        assert isinstance(later, Skipped) and later.reason == "done"
        assert [s.state for s in b.history("sync-nightly")] == ["done"]
