"""Rule 5 before the loss, on every store: a lease says when renewals are overdue (``at_risk``,
``on_at_risk``) and by when work must be done (``stop_by``), sync and async."""

from __future__ import annotations

import time

import anyio
import pytest

import tenure
from tenure import AsyncClient
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio


async def test_at_risk_comes_before_the_loss_and_clears_on_renewal(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        lease = await client.lock("risky", ttl=1.5).acquire()
        assert not lease.at_risk and lease.loss is None
        assert lease.stop_by == lease.deadline and lease.stop_by > lease.clock.now()
        seen: list[tuple[float, bool]] = []
        lease.on_at_risk(lambda at_risk: seen.append((at_risk.clock.now(), at_risk.lost)))
        faulty.fail_keep_alive = True  # renewals fail from now on
        with anyio.fail_after(3):
            while not seen:
                await anyio.sleep(0.01)
        warned, lost_then = seen[0]
        assert not lost_then and lease.at_risk, "at risk is said before the lease is lost"
        assert lease.stop_by - warned >= 0.3, "time is left to stop: about ttl/3"
        faulty.fail_keep_alive = False  # the store comes back inside the window
        with anyio.fail_after(2):
            while lease.at_risk:
                await anyio.sleep(0.01)
        assert not lease.lost and len(seen) == 1
        faulty.hang_keep_alive = True  # a second episode: said again, then lost for good
        with anyio.fail_after(3):
            while not lease.lost:
                await anyio.sleep(0.01)
        assert len(seen) == 2 and lease.at_risk
        assert lease.loss is tenure.Loss.DEADLINE
        assert lease.clock.now() >= lease.stop_by


async def test_the_store_saying_gone_is_a_loss_of_its_own_kind(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty) as client:
        lease = await client.lock("gone-kind", ttl=1.5).acquire()
        faulty.drop_sessions = True
        with anyio.fail_after(2):
            while not lease.lost:
                await anyio.sleep(0.01)
        assert lease.loss is tenure.Loss.GONE


def test_sync_leases_say_it_too(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    client = tenure.Client(faulty)
    try:
        lease = client.lock("sync-risky", ttl=1.5).acquire()
        seen: list[tenure.Lease] = []
        lease.on_at_risk(seen.append)
        assert not lease.at_risk
        faulty.hang_keep_alive = True
        give_up = time.monotonic() + 3
        while not seen and time.monotonic() < give_up:
            time.sleep(0.01)
        assert seen == [lease] and lease.at_risk and not lease.lost
        assert lease.stop_by > lease.clock.now()
        faulty.hang_keep_alive = False
        lease.release()
        assert not lease.at_risk  # released: nothing is at risk any more
    finally:
        client.close()
