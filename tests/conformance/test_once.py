"""Once per slot on every store that keeps records: one runner per slot, completion recorded with
its token, a stale completion refused, at-least-once and at-most-once after a runner's loss."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import AsyncClient, InvalidArgument, LeaseLost, StaleToken
from tenure._once import SlotRecord, record_key
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = [pytest.mark.anyio, pytest.mark.offers("records")]


@pytest.fixture
def url(store_url: str) -> str:
    return store_url


async def test_one_runner_then_done_for_everyone(url: str) -> None:
    async with (
        tenure.connect_async(url, label="a") as a,
        tenure.connect_async(url, label="b") as b,
    ):
        claim = await a.once("nightly", "2026-12-01", ttl=10).acquire()
        assert claim and claim.state == "claimed" and claim.attempt == 1 and claim.token > 0
        other = await b.once("nightly", "2026-12-01", ttl=10).acquire()
        assert not other and other.state == "running"
        assert other.record is not None and other.record.label == "a"
        done = await claim.complete(0)
        assert (done.state, done.exit_code, done.token, done.attempts) == (
            "done",
            0,
            claim.token,
            1,
        )
        later = await b.once("nightly", "2026-12-01", ttl=10).acquire()
        assert not later and later.state == "done" and later.record == done
        assert await a.locks() == []  # the slot's lock was released
        # A non-zero exit is an end too: recorded failed, not run again.
        second = await b.once("nightly", "2026-12-02", ttl=10).acquire()
        failed = await second.complete(3)
        assert (failed.state, failed.exit_code) == ("failed", 3)
        assert (await a.once("nightly", "2026-12-02", ttl=10).acquire()).state == "failed"
        history = await a.history("nightly")
        assert [(s.slot, s.state, s.label) for s in history] == [
            ("2026-12-01", "done", "a"),
            ("2026-12-02", "failed", "b"),
        ]
        assert await a.history("nightly-other") == []


async def test_history_of_every_job(url: str) -> None:
    """``client.history()`` with no job: every job's slots, grouped by job (`tenure serve`)."""
    async with tenure.connect_async(url) as client:
        assert await client.history() == []
        for job, slot in (("b/job", "1"), ("a", "2"), ("a", "1"), ("b", "1")):
            await (await client.once(job, slot, ttl=10).acquire()).complete(0)
        every = [(s.job, s.slot) for s in await client.history()]
        assert sorted(every) == [("a", "1"), ("a", "2"), ("b", "1"), ("b/job", "1")]
        jobs = [job for job, _ in every]
        assert all(jobs.index(job) + jobs.count(job) - 1 == max(
            i for i, j in enumerate(jobs) if j == job) for job in jobs)  # fmt: skip
        assert [s for s in every if s[0] == "a"] == [("a", "1"), ("a", "2")]


async def test_at_least_once_runs_again_after_the_runner_lost_the_slot(url: str) -> None:
    async with (
        tenure.connect_async(url, label="a") as a,
        tenure.connect_async(url, label="b") as b,
    ):
        first = await a.once("job", "s1", ttl=10).acquire()
        await first.abandon()  # as if it died: its lock is gone, its record says running
        second = await b.once("job", "s1", ttl=10).acquire()
        assert second and second.attempt == 2 and second.token > first.token
        await second.complete()
        slot = (await a.history("job"))[0]
        assert (slot.state, slot.attempts, slot.label, slot.token) == ("done", 2, "b", second.token)


async def test_at_most_once_marks_a_lost_attempt_failed(url: str) -> None:
    async with (
        tenure.connect_async(url, label="a") as a,
        tenure.connect_async(url, label="b") as b,
    ):
        first = await a.once("job", "s1", ttl=10, policy="at-most-once").acquire()
        await first.abandon()
        second = await b.once("job", "s1", ttl=10, policy="at-most-once").acquire()
        assert not second and second.state == "failed"
        assert second.record is not None and "ended without recording" in (
            second.record.error or ""
        )
        assert (
            await b.once("job", "s1", ttl=10).acquire()
        ).state == "failed"  # never started again
        assert (await a.history("job"))[0].attempts == 1


async def test_a_completion_after_the_slot_was_claimed_again_is_refused(url: str) -> None:
    async with tenure.connect_async(url, label="a") as a:
        claim = await a.once("job", "s1", ttl=10).acquire()
        # Another runner took the slot over (its record moved on), as after a long pause.
        store = open_store(url)
        try:
            now = await store.read_record(record_key("job", "s1"))
            assert now is not None
            newer = SlotRecord.from_record(now)
            taken = SlotRecord(**{**newer.__dict__, "token": claim.token + 1, "attempts": 2})
            assert await store.write_record(now.key, taken.to_json(), now.version) is not None
            with pytest.raises(StaleToken):
                await claim.complete(0)
            after = await store.read_record(now.key)
            assert after is not None and SlotRecord.from_record(after).state == "running"
        finally:
            await store.aclose()


async def test_a_lost_lease_records_nothing(url: str) -> None:
    store = FaultyStore(open_store(url))
    async with AsyncClient(store, label="a") as a:
        claim = await a.once("job", "s1", ttl=1.0).acquire()
        store.hang_keep_alive = True
        with anyio.fail_after(5):
            while not claim.lease or not claim.lease.lost:
                await anyio.sleep(0.05)
        with pytest.raises(LeaseLost):
            await claim.complete(0)
        slot = (await a.history("job"))[0]
        assert slot.state == "running"  # at-least-once: the next claimant runs it again


async def test_the_block_form_records_the_exception(url: str) -> None:
    async with tenure.connect_async(url) as client:
        with pytest.raises(ZeroDivisionError):
            async with client.once("job", "s1", ttl=10) as claim:
                assert claim
                1 / 0  # noqa: B018
        slot = (await client.history("job"))[0]
        assert slot.state == "failed" and "ZeroDivisionError" in (slot.error or "")
        async with client.once("job", "s2", ttl=10) as claim:
            assert claim
        async with client.once("job", "s2", ttl=10) as again:
            assert not again and again.state == "done"
        assert [s.state for s in await client.history("job")] == ["failed", "done"]


def test_sync_client(url: str) -> None:
    with tenure.connect(url) as client:
        with client.once("sync-job", "s1", ttl=10) as claim:
            assert claim and claim.lease is not None and claim.token == claim.lease.token
        assert client.once("sync-job", "s1", ttl=10).acquire().state == "done"
        with pytest.raises(InvalidArgument):
            client.once("sync-job", "bad\nslot")
        with pytest.raises(InvalidArgument):
            client.once("sync-job", "s2", policy="sometimes")  # type: ignore[arg-type]
        assert [s.state for s in client.history("sync-job")] == ["done"]
