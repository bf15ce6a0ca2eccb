"""client.versioned(key): a value in the store's records updated by compare-and-set, on every
store that keeps records. Two writers that read the same version conflict (a barrier holds both
between read and write): the loser computes again and no update is lost."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

import tenure
from tenure import InvalidArgument, WriteConflict

pytestmark = pytest.mark.offers("records")


def add(
    amount: int, meet: threading.Barrier | None, calls: list[int]
) -> Callable[[str | None], str]:
    def change(value: str | None) -> str:
        now = json.loads(value) if value else {"balance": 100}
        calls.append(now["balance"])
        if meet is not None and len(calls) == 1:
            meet.wait(30)  # both writers have read the same version
        return json.dumps({"balance": now["balance"] + amount})

    return change


def race(store_url: str, attempts: int) -> tuple[list[object], dict[int, list[int]]]:
    barrier, outcomes, calls = threading.Barrier(2), [], {10: [], 20: []}
    with tenure.connect(store_url) as a, tenure.connect(store_url) as b:
        a.versioned("account").update(add(0, None, []))  # the value exists: balance 100

        def writer(client: tenure.Client, amount: int) -> None:
            try:
                value = client.versioned("account", attempts=attempts).update(
                    add(amount, barrier, calls[amount])
                )
                outcomes.append(json.loads(value))
            except WriteConflict as exc:
                outcomes.append(exc)

        threads = [
            threading.Thread(target=writer, args=(client, amount))
            for client, amount in ((a, 10), (b, 20))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        outcomes.append(json.loads(a.versioned("account").get() or "null"))
    return outcomes, calls


def test_two_conflicting_writers_lose_no_update(store_url: str) -> None:
    outcomes, calls = race(store_url, attempts=5)
    assert outcomes[-1] == {"balance": 130}
    winner, loser = sorted(calls, key=lambda amount: len(calls[amount]))
    assert calls[winner] == [100]  # it wrote what it computed first
    assert calls[loser] == [100, 100 + winner]  # computed again from the winner's value


def test_a_bounded_retry_gives_up_and_writes_nothing(store_url: str) -> None:
    outcomes, _ = race(store_url, attempts=1)
    [refused] = [o for o in outcomes[:2] if isinstance(o, WriteConflict)]
    assert refused.attempts == 1 and "'account'" in str(refused)
    [won] = [o for o in outcomes[:2] if isinstance(o, dict)]
    assert outcomes[-1] == won and won["balance"] in (110, 120)


@pytest.mark.anyio
async def test_the_async_client_and_bad_input(store_url: str, anyio_backend: str) -> None:
    async with tenure.connect_async(store_url) as client:
        value = client.versioned("counter")
        assert await value.get() is None
        assert await value.update(lambda v: str(int(v or "0") + 1)) == "1"
        assert await value.update(lambda v: str(int(v or "0") + 1)) == "2"
        assert await client.history() == []  # not once's slots
        for bad in ("", "a\nb", "k" * 201):
            with pytest.raises(InvalidArgument, match="key"):
                client.versioned(bad)
        with pytest.raises(InvalidArgument, match="attempts"):
            client.versioned("counter", attempts=0)
        with pytest.raises(InvalidArgument, match="string"):
            await value.update(lambda v: 3)  # type: ignore[arg-type,return-value]
        assert await value.get() == "2"
