"""Rule 3 on every path, under a cut: a holder whose renewals go unanswered (as when its links
to the store are cut) hears of its loss by its ``stop_by`` — before the store grants the same
thing to anyone else — whatever it holds: a lock, a permit, a read or a write lock, a partition
item (tests/conformance/test_partition_ownership.py) or a leadership
(tests/conformance/test_election.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import tenure
from tenure import AsyncClient
from tenure._lease import LeaseBase
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio

TTL = 1.0
Take = Callable[[AsyncClient], Awaitable[LeaseBase]]

PATHS: dict[str, tuple[Take, Take]] = {
    # what the cut holder takes, and what the other client asks for that needs it gone
    "lock": (
        lambda c: c.lock("cut", ttl=TTL).acquire(),
        lambda c: c.lock("cut", ttl=5).acquire(timeout=15),
    ),
    "permit": (
        lambda c: c.semaphore("cut", 1, ttl=TTL).acquire(),
        lambda c: c.semaphore("cut", 1, ttl=5).acquire(timeout=15),
    ),
    "read": (
        lambda c: c.rwlock("cut", ttl=TTL).read.acquire(),
        lambda c: c.rwlock("cut", ttl=5).write.acquire(timeout=15),
    ),
    "write": (
        lambda c: c.rwlock("cut", ttl=TTL).write.acquire(),
        lambda c: c.rwlock("cut", ttl=5).read.acquire(timeout=15),
    ),
}


@pytest.mark.parametrize("path", PATHS)
async def test_a_cut_holder_stops_by_its_stop_by_before_anyone_else_is_granted(
    store_url: str, path: str
) -> None:
    take, ask = PATHS[path]
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=0) as cut, tenure.connect_async(store_url) as other:
        lease = await take(cut)
        heard: list[tuple[float, float]] = []  # when the holder heard, and its stop-by then
        lease.on_lost(lambda _: heard.append((lease.clock.now(), lease.stop_by)))
        faulty.hang_keep_alive = True  # from now on no renewal is answered
        after = await ask(other)
        granted_at = lease.clock.now()
        assert heard, f"the other client was granted the {path} before the holder heard"
        [(lost_at, stop_by)] = heard
        assert stop_by <= lost_at < granted_at  # told at its stop_by, not before, not after
        assert lease.lost and lease.loss is not None and after.token > lease.token
        assert lease.stop_by == stop_by  # a lost lease's stop-by stays where it was
        await after.release()
