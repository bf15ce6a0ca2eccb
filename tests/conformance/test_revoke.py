"""``client.revoke`` on every store that offers it (docs/revoke.md): the holder loses its lease
as revoked at its next renewal, nobody is granted the name until the old lease could no longer
be acting (its TTL from its last renewal, plus its lock-delay), the next token is higher, and
``now=True`` frees the name at once. A store that does not offer ``revoke`` skips these."""

from __future__ import annotations

import math

import anyio
import pytest

import tenure
from tenure import AsyncClient, Loss, NotAcquired
from tenure._url import open_store
from tenure.testing import FaultyStore

pytestmark = [pytest.mark.anyio, pytest.mark.offers("revoke")]

TTL = 1.5
DELAY = 1.0
LONGEST = math.ceil(TTL) + DELAY + 1.5
"""The longest a revoked name may be held back: its TTL and lock-delay, as etcd rounds them up
to whole seconds plus one for its leader's expiry ticks (docs/stores/etcd.md)."""


async def _renewals(faulty: FaultyStore, count: int) -> None:
    """Until the holder's keeper has sent ``count`` more renewals."""
    target = faulty.keep_alive_calls + count
    with anyio.fail_after(TTL * count + 3):
        while faulty.keep_alive_calls < target:
            await anyio.sleep(0.02)


async def test_the_holder_loses_only_the_revoked_lease_at_its_next_renewal(store_url: str) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=DELAY) as a, tenure.connect_async(store_url) as b:
        lease = await a.lock("revoked", ttl=TTL).acquire()
        other = await a.lock("kept", ttl=TTL).acquire()
        assert lease.same_session(other), "one session holds both: revoke must spare the other"
        revocation = await b.revoke("revoked", reason="stuck since noon")
        revoked_at = anyio.current_time()
        assert revocation is not None and revocation.token == lease.token
        assert revocation.by == b.holder and not revocation.now
        assert 0 < revocation.free_in <= LONGEST
        with anyio.fail_after(TTL + 2):  # told at its next renewal, ttl/3 away
            while not lease.lost:
                await anyio.sleep(0.02)
        assert lease.loss is Loss.REVOKED
        assert lease.lost_reason is not None and "revoked by" in lease.lost_reason
        assert "stuck since noon" in lease.lost_reason
        with pytest.raises(tenure.LeaseLost, match="revoked"):
            lease.check()
        # The session lives on, renewing its other lock; those renewals do not hold the
        # revoked name: it is granted once the old lease's time and its lock-delay are out.
        await _renewals(faulty, 2)
        other.check()
        second = await b.lock("revoked", ttl=TTL).acquire(timeout=TTL + DELAY + 5)
        granted = anyio.current_time()
        assert second.token > lease.token
        assert granted - revoked_at < LONGEST + 2, "the session's renewals held it on"
        await lease.release()  # a no-op: lost
        assert [info.token for info in await b.locks("revoked")] == [second.token]
        await second.release()
        other.check()
        await other.release()


async def test_nobody_is_granted_until_the_old_lease_could_no_longer_be_acting(
    store_url: str,
) -> None:
    faulty = FaultyStore(open_store(store_url))
    async with AsyncClient(faulty, lock_delay=DELAY) as a, tenure.connect_async(store_url) as b:
        sent = anyio.current_time()  # the grant is the lease's last renewal
        lease = await a.lock("paused", ttl=TTL).acquire()
        faulty.hang_keep_alive = True  # the holder is paused: it never hears of the revocation
        revocation = await b.revoke("paused", reason="paused holder", token=lease.token)
        assert revocation is not None
        [held] = await b.lock_delays("paused")  # the record is visible while the name is held
        assert held.token == lease.token and held.revoked is not None
        assert held.revoked.by == b.holder and held.revoked.reason == "paused holder"
        assert held.revoked.user and held.revoked.at > 0 and not held.revoked.now
        assert 0 < held.free_in <= LONGEST
        assert await b.locks("paused") == []
        with pytest.raises(NotAcquired):
            await b.lock("paused", ttl=TTL).acquire(wait=False)
        second = await b.lock("paused", ttl=TTL).acquire(timeout=TTL + DELAY + 5)
        granted = anyio.current_time()
        assert granted - sent >= TTL + DELAY, "granted while the old lease could still act"
        assert granted - sent < LONGEST + 2, "the waiter was not served once it could be"
        assert second.token > lease.token
        assert lease.lost  # by its own deadline, which came first (rule 3)
        await second.release()


async def test_now_frees_the_name_at_once(store_url: str) -> None:
    async with (
        tenure.connect_async(store_url, lock_delay=60) as a,
        tenure.connect_async(store_url) as b,
    ):
        lease = await a.lock("dead", ttl=TTL).acquire()
        revocation = await b.revoke("dead", now=True)
        assert revocation is not None and revocation.now and revocation.free_in == 0
        second = await b.lock("dead", ttl=30).acquire(wait=False)  # no TTL, no lock-delay
        assert second.token > lease.token
        assert await b.lock_delays("dead") == []
        with anyio.fail_after(TTL + 2):  # the old holder, were it alive, still hears of it
            while not lease.lost:
                await anyio.sleep(0.02)
        assert lease.loss is Loss.REVOKED
        await lease.release()  # must not free the new holder's lock
        assert [info.token for info in await b.locks("dead")] == [second.token]
        await second.release()


async def test_revoking_what_is_not_held_changes_nothing(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        assert await b.revoke("nobody") is None
        lease = await a.lock("held", ttl=TTL).acquire()
        assert await b.revoke("held", token=lease.token + 1) is None  # not that grant
        assert [info.token for info in await b.locks("held")] == [lease.token]
        assert await b.lock_delays("held") == []
        await lease.release()
        assert await b.revoke("held") is None  # released: nothing to revoke
        with pytest.raises(tenure.InvalidArgument):
            await b.revoke("held", reason="two\nlines")
