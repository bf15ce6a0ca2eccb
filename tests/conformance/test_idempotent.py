"""Idempotency keys on every store that keeps records: a request runs once and its result is
replayed, another request under the same key is refused, a dead runner's key is taken over with
a higher token and its late completion refused, and a stored result expires."""

from __future__ import annotations

import anyio
import pytest

import tenure
from tenure import (
    AsyncClient,
    InvalidArgument,
    KeyRecord,
    KeyReused,
    LeaseLost,
    Skipped,
    StaleToken,
)
from tenure._url import open_store
from tenure.testing import FaultyStore, ManualClock

pytestmark = [pytest.mark.anyio, pytest.mark.offers("records")]


async def test_a_replay_returns_the_stored_result_without_running_again(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url, label="a") as a,
        tenure.connect_async(store_url, label="b") as b,
    ):
        first = await a.idempotent("charges", "req-1", fingerprint="fp-1").acquire()
        assert first and first.state == "claimed" and first.token > 0 and first.result is None
        busy = await b.idempotent("charges", "req-1", fingerprint="fp-1").acquire(wait=False)
        assert not busy and busy.state == "running"  # in use: nothing stored yet
        stored = await first.complete({"charge": "ch_1", "cents": 500})
        assert isinstance(stored, KeyRecord) and stored.token == first.token
        replay = await b.idempotent("charges", "req-1", fingerprint="fp-1").acquire()
        assert not replay and replay.state == "done"
        assert replay.result == {"charge": "ch_1", "cents": 500}
        assert replay.record is not None and replay.record.label == "a"
        assert await a.locks() == []  # the key's lock was released; a replay takes none
        assert await a.history() == []  # keys are not once's slots


async def test_a_waiting_claim_replays_the_result_of_the_runner_it_waited_for(
    store_url: str,
) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        first = await a.idempotent("charges", "req-2", fingerprint="x").acquire()
        got: list[object] = []

        async def second() -> None:
            claim = await b.idempotent("charges", "req-2", fingerprint="x").acquire(timeout=10)
            got.append((bool(claim), claim.result))

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            with anyio.fail_after(10):  # the second caller is queued behind the first
                while not (await a.locks())[0].waiters:
                    await anyio.sleep(0.02)
            await first.complete("ok")
        assert got == [(False, "ok")]


async def test_the_same_key_for_another_request_is_refused(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client:
        running = await client.idempotent("charges", "req-3", fingerprint="fp-a").acquire()
        with pytest.raises(KeyReused, match="first used for another request") as refused:
            await client.idempotent("charges", "req-3", fingerprint="fp-b").acquire()
        assert isinstance(refused.value, InvalidArgument)
        assert (refused.value.fingerprint, refused.value.first) == ("fp-b", "fp-a")
        await running.complete(1)
        with pytest.raises(KeyReused):  # and once it is done
            await client.idempotent("charges", "req-3", fingerprint="fp-b").acquire()
        assert await client.locks() == []  # the refused claims left no lock behind
        other = await client.idempotent("refunds", "req-3", fingerprint="fp-b").acquire()
        assert other  # scopes are independent
        await other.complete()


async def test_a_dead_runner_is_taken_over_and_its_late_completion_refused(
    store_url: str,
) -> None:
    # The old runner's clock stands still and its renewals hang: it still believes it holds the
    # key (its own check passes), as a process paused before it stored its result would.
    faulty = FaultyStore(open_store(store_url))
    async with (
        AsyncClient(faulty, clock=ManualClock(), lock_delay=0) as old_client,
        tenure.connect_async(store_url) as new_client,
    ):
        old = await old_client.idempotent("charges", "req-4", fingerprint="f", ttl=1).acquire()
        faulty.hang_keep_alive = True
        new = await new_client.idempotent("charges", "req-4", fingerprint="f").acquire(timeout=15)
        assert new and new.token > old.token and new.attempt == old.attempt + 1
        assert old.lease is not None and not old.lease.lost  # the old runner has not noticed
        with pytest.raises(StaleToken) as refused:
            await old.complete("the old runner's result")
        assert (refused.value.token, refused.value.highest) == (old.token, new.token)
        await new.complete("the new runner's result")
        replay = await new_client.idempotent("charges", "req-4", fingerprint="f").acquire()
        assert replay.result == "the new runner's result" and replay.token == new.token


async def test_a_runner_that_knows_its_lease_is_lost_stores_nothing(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        claim = await client.idempotent("charges", "req-5", fingerprint="f", ttl=1).acquire()
        faulty.hang_keep_alive = True
        with anyio.fail_after(5):
            while claim.lease is None or not claim.lease.lost:
                await anyio.sleep(0.05)
        with pytest.raises(LeaseLost):
            await claim.complete("late")
        faulty.hang_keep_alive = False
        again = await client.idempotent("charges", "req-5", fingerprint="f").acquire(timeout=15)
        assert again and again.attempt == 2  # at-least-once: run again
        await again.complete("second")


async def test_a_stored_result_expires_and_the_key_is_free_again(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client:
        kept = client.idempotent("charges", "req-6", fingerprint="f", retention=3600)
        await (await kept.acquire()).complete("kept")
        assert (await kept.acquire()).result == "kept"
        gone = client.idempotent("charges", "req-7", fingerprint="f", retention=0)
        first = await gone.acquire()
        record = await first.complete("expired at once")
        assert record.expires is not None and record.expired()
        again = await client.idempotent("charges", "req-7", fingerprint="another").acquire()
        assert again and again.token > first.token and again.result is None
        await again.complete("new")
        assert (await kept.acquire()).result == "kept"


async def test_a_block_stores_none_unless_completed_and_nothing_when_it_raises(
    store_url: str,
) -> None:
    async with tenure.connect_async(store_url) as client:
        with pytest.raises(ZeroDivisionError):
            async with client.idempotent("jobs", "k1") as claim:
                assert claim
                1 / 0  # noqa: B018
        async with client.idempotent("jobs", "k1") as claim:
            assert claim and claim.attempt == 2  # nothing was stored: it runs again
            await claim.complete([1, 2])
        async with client.idempotent("jobs", "k1") as replay:
            assert not replay and replay.result == [1, 2]
        async with client.idempotent("jobs", "k2") as claim:
            assert claim
        assert (await client.idempotent("jobs", "k2").acquire()).state == "done"


async def test_the_async_decorator_runs_each_key_once(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client:
        runs: list[str] = []

        @client.idempotent("charges", key=lambda order, cents: order)
        async def charge(order: str, cents: int, claim: tenure.AsyncKeyClaim | None = None) -> dict:
            assert claim is not None and claim.token > 0
            runs.append(order)
            return {"order": order, "cents": cents, "receipt": len(runs)}

        first = await charge("o-1", 500)
        assert await charge("o-1", 500) == first == {"order": "o-1", "cents": 500, "receipt": 1}
        with pytest.raises(KeyReused):
            await charge("o-1", 900)  # the default fingerprint: the call's arguments
        assert await charge("o-2", 100) == {"order": "o-2", "cents": 100, "receipt": 2}
        assert runs == ["o-1", "o-2"]

        @client.idempotent("charges", key=lambda order: order, wait=False)
        async def busy(order: str) -> str:
            return "ran"

        held = await client.idempotent("charges", "o-3", fingerprint=fp(["o-3"])).acquire()
        skipped = await busy("o-3")
        assert isinstance(skipped, Skipped) and skipped.reason == "running"
        await held.complete("held")
        assert await busy("o-3") == "held"


def fp(args: list[object]) -> str:
    from tenure.idempotency import fingerprint

    return fingerprint(args, {})


def test_the_sync_client_and_decorator(store_url: str) -> None:
    with tenure.connect(store_url) as client:
        with client.idempotent("sync", "k", fingerprint="f") as claim:
            assert claim and claim.lease is not None and claim.token == claim.lease.token
            claim.complete({"n": 1})
        assert client.idempotent("sync", "k", fingerprint="f").acquire().result == {"n": 1}
        runs = []

        @client.idempotent("sync", key=lambda n: f"n-{n}")
        def square(n: int) -> int:
            runs.append(n)
            return n * n

        assert [square(3), square(3), square(4)] == [9, 9, 16] and runs == [3, 4]

        @client.idempotent("sync", key=lambda n: f"bad-{n}")
        def fails(n: int) -> int:
            runs.append(-n)
            raise RuntimeError("declined")

        for _ in range(2):  # an exception stores nothing: each call runs again
            with pytest.raises(RuntimeError):
                fails(1)
        assert runs == [3, 4, -1, -1]

        @client.idempotent("sync", key=lambda: "set")
        def not_json() -> object:
            return {1, 2}

        with pytest.raises(InvalidArgument, match="JSON"):
            not_json()
        assert client.locks() == []  # abandoned, not left held


def test_bad_arguments_are_refused_in_one_line(store_url: str) -> None:
    with tenure.connect(store_url) as client:
        for bad in ({"key": ""}, {"key": "a\nb"}, {"key": 7}, {"retention": -1}):
            args = {"scope": "s", "key": "k", **bad}
            with pytest.raises(InvalidArgument):
                client.idempotent(**args)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="decorator"):
            client.idempotent("s", key=lambda x: x).acquire()
        with pytest.raises(InvalidArgument, match="idempotency:"):
            client.lock("idempotency:s/k")  # the keys' locks are reserved
