"""The keepers on their real backings: the order of tokens (exact up to 2**63-1), concurrent
admissions started together by a barrier, and the async twins."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from conftest import ASYNC_KEEPERS, Keeping
from tenure import InvalidArgument, StaleToken
from tenure.fence import MemoryKeeper

BIG = 2**63 - 1


def admitted(keeper: object, resource: str, token: int) -> bool:
    try:
        keeper.admit(resource, token)  # type: ignore[attr-defined]
    except StaleToken as exc:
        assert exc.highest > token and (exc.resource, exc.token) == (resource, token)
        return False
    return True


def test_tokens_are_ordered_as_integers(keeping: Keeping) -> None:
    keeper = keeping.blocking()
    assert admitted(keeper, "r", 9) and admitted(keeper, "r", 10)
    assert not admitted(keeper, "r", 9)  # "9" > "10" as text: compared as numbers
    assert admitted(keeper, "r", 2**53) and admitted(keeper, "r", 2**53 + 1)
    assert not admitted(keeper, "r", 2**53)  # doubles would call these equal
    assert admitted(keeper, "r", BIG) and admitted(keeper, "r", BIG)
    assert not admitted(keeper, "r", BIG - 1)
    assert keeping.highest("r") == BIG
    assert admitted(keeper, "s", 0) and keeping.highest("s") == 0


def test_bad_resources_and_tokens_are_invalid_arguments(keeping: Keeping) -> None:
    keeper = keeping.blocking()
    for resource, token in [("", 1), ("r", -1), ("r", BIG + 1), ("r", True)]:
        with pytest.raises(InvalidArgument):
            keeper.admit(resource, token)
    assert keeping.highest("r") is None


ROUNDS, THREADS = 4, 6


def test_concurrent_admissions_keep_the_highest(keeping: Keeping) -> None:
    """Each round, THREADS threads admit shuffled tokens at once (a barrier lets them go):
    the highest of the round is always admitted and stays the highest, and every refusal names
    a higher token."""
    keepers = [keeping.blocking() for _ in range(THREADS)]  # one client each, as processes have
    barrier = threading.Barrier(THREADS)
    results: dict[int, bool] = {}

    def admit(keeper: object, token: int) -> None:
        barrier.wait()
        results[token] = admitted(keeper, "r", token)

    for round_ in range(ROUNDS):
        tokens = [round_ * 100 + i for i in range(THREADS)]
        random.shuffle(tokens)
        threads = [
            threading.Thread(target=admit, args=(k, t))
            for k, t in zip(keepers, tokens, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert results[max(tokens)] is True
        assert keeping.highest("r") == max(tokens)
    assert len(results) == ROUNDS * THREADS


@pytest.mark.parametrize("keeping", ASYNC_KEEPERS, indirect=True)
def test_the_async_twins_admit_concurrently_too(keeping: Keeping) -> None:
    assert keeping.awaiting is not None
    make = keeping.awaiting

    async def run() -> dict[int, bool]:
        keepers = [make() for _ in range(THREADS)]
        gate = asyncio.Event()
        results: dict[int, bool] = {}

        async def admit(keeper: object, token: int) -> None:
            await gate.wait()
            try:
                await keeper.admit("r", token)  # type: ignore[attr-defined]
            except StaleToken as exc:
                assert exc.highest > token
                results[token] = False
            else:
                results[token] = True

        tokens = list(range(1, THREADS + 1))
        random.shuffle(tokens)
        tasks = [asyncio.create_task(admit(k, t)) for k, t in zip(keepers, tokens, strict=True)]
        gate.set()
        await asyncio.gather(*tasks)
        return results

    results = asyncio.run(run())
    assert results[THREADS] is True and len(results) == THREADS
    assert keeping.highest("r") == THREADS


def test_the_memory_keeper_tells_the_highest_it_admitted() -> None:
    keeper = MemoryKeeper()
    assert keeper.highest("r") is None
    keeper.admit("r", 3)
    assert keeper.highest("r") == 3 and keeper.highest("other") is None
