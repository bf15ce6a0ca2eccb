"""tenure.metrics on a CollectorRegistry of its own: each metric moves when its event happens
(on the embedded store, with tenure.testing.FaultyStore for the faults), and no label carries a
lock's name unless names were asked for."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from prometheus_client import CollectorRegistry

import tenure
from tenure import AsyncClient, StaleToken
from tenure._observe import listeners
from tenure._url import open_store
from tenure.fence import SQLFence
from tenure.metrics import Metrics, Observer, subscribe, unsubscribe
from tenure.testing import FaultyStore

pytestmark = pytest.mark.timeout(60)
NAMES = ("orders", "web", "nightly", "ledger")
"""Every name the tests take: none may show in a label unless names were asked for."""


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    with Metrics(registry):
        yield registry
    assert listeners == []  # closed: nobody listens, the core pays nothing
    assert list(registry.collect()) == []


def value(registry: CollectorRegistry, metric: str, /, **labels: str) -> float:
    """A sample's value on the embedded store (0 if it was never set)."""
    return registry.get_sample_value(metric, {"store": "sqlite", **labels}) or 0.0


def no_names(registry: CollectorRegistry) -> None:
    for family in registry.collect():
        for sample in family.samples:
            assert not {"name", "election", "job", "resource"} & set(sample.labels), sample
            assert not set(NAMES) & set(sample.labels.values()), sample


def until(condition: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_grants_refusals_timeouts_and_waits(registry: CollectorRegistry, tmp_path: Path) -> None:
    acquires = "tenure_acquire_seconds_count"
    with tenure.connect(f"sqlite:///{tmp_path}/s.db") as client:
        held = client.lock("orders").acquire()
        assert value(registry, acquires, kind="lock", outcome="granted") == 1

        def refused() -> None:
            with pytest.raises(tenure.NotAcquired):
                client.lock("orders").acquire(wait=False)
            with pytest.raises(tenure.NotAcquired):
                client.lock("orders").acquire(timeout=0.2)

        other = threading.Thread(target=refused)
        other.start()
        other.join()
        assert value(registry, acquires, kind="lock", outcome="not-acquired") == 1
        assert value(registry, acquires, kind="lock", outcome="timeout") == 1
        waited = "tenure_acquire_seconds_sum"
        assert value(registry, waited, kind="lock", outcome="timeout") >= 0.2

        # A waiter queued behind the holder is granted on release: one hand-over measured.
        waiter = threading.Thread(target=lambda: client.lock("orders").acquire().release())
        waiter.start()
        until(lambda: client.locks("orders")[0].waiters == 1, "the waiter to queue")
        assert value(registry, "tenure_handover_seconds_count", kind="lock") == 0
        held.release()
        waiter.join()
        assert value(registry, "tenure_handover_seconds_count", kind="lock") == 1
        assert value(registry, acquires, kind="lock", outcome="granted") == 2
    no_names(registry)


def test_renewals_and_their_slack(registry: CollectorRegistry, tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path}/s.db") as client, client.lock("orders", ttl=1.5):
        renewed = "tenure_renewal_seconds_count"
        until(lambda: value(registry, renewed, outcome="ok") >= 2, "two renewals")
        slack = value(registry, "tenure_renewal_slack_seconds_sum")
        count = value(registry, "tenure_renewal_slack_seconds_count")
        # Renewed every 0.5 s, a lease valid for 1.385 s has about 0.885 s left at each.
        assert count >= 2 and 0.3 < slack / count < 1.385
    no_names(registry)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_at_risk_store_errors_and_loss(
    registry: CollectorRegistry, tmp_path: Path, anyio_backend: str
) -> None:
    faulty = FaultyStore(open_store(f"sqlite:///{tmp_path}/s.db"))
    async with AsyncClient(faulty) as client:
        lease = await client.lock("orders", ttl=1).acquire()
        assert value(registry, "tenure_at_risk_total") == 0
        faulty.fail_keep_alive = True
        with anyio.fail_after(5):
            while not lease.lost:
                await anyio.sleep(0.01)
    assert value(registry, "tenure_at_risk_total") == 1
    errors = "tenure_store_errors_total"
    assert value(registry, errors, operation="renew", error="unavailable") >= 1
    assert value(registry, "tenure_renewal_seconds_count", outcome="retry") >= 1
    assert value(registry, "tenure_session_losses_total", reason="deadline") == 1
    assert value(registry, "tenure_grants_lost_total", reason="deadline") == 1
    no_names(registry)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_store_saying_gone(
    registry: CollectorRegistry, tmp_path: Path, anyio_backend: str
) -> None:
    faulty = FaultyStore(open_store(f"sqlite:///{tmp_path}/s.db"))
    async with AsyncClient(faulty) as client:
        lease = await client.lock("orders", ttl=1.5).acquire()
        faulty.drop_sessions = True
        with anyio.fail_after(5):
            while not lease.lost:
                await anyio.sleep(0.01)
    assert value(registry, "tenure_renewal_seconds_count", outcome="gone") == 1
    assert value(registry, "tenure_session_losses_total", reason="gone") == 1
    assert value(registry, "tenure_grants_lost_total", reason="gone") == 1


def test_fence_refusal(registry: CollectorRegistry, tmp_path: Path) -> None:
    fence = SQLFence()
    conn = sqlite3.connect(tmp_path / "fence.db", isolation_level=None)
    fence.ensure_table(conn)
    with fence.fenced(conn, "ledger", 5):
        pass
    assert registry.get_sample_value("tenure_fence_refusals_total", {"fence": "SQLFence"}) is None
    with pytest.raises(StaleToken), fence.fenced(conn, "ledger", 3):
        pass
    assert registry.get_sample_value("tenure_fence_refusals_total", {"fence": "SQLFence"}) == 1
    no_names(registry)


def test_once_slots(registry: CollectorRegistry, tmp_path: Path) -> None:
    slots = "tenure_once_slots_total"
    with tenure.connect(f"sqlite:///{tmp_path}/s.db") as client:
        with client.once("nightly", "2026-12-03") as claim:
            assert claim
        with client.once("nightly", "2026-12-03") as again:
            assert not again
    assert registry.get_sample_value(slots, {"outcome": "claimed"}) == 1
    assert registry.get_sample_value(slots, {"outcome": "ended-done"}) == 1
    assert registry.get_sample_value(slots, {"outcome": "done"}) == 1
    acquires = "tenure_acquire_seconds_count"
    assert value(registry, acquires, kind="once", outcome="granted") == 1
    assert value(registry, acquires, kind="once", outcome="not-acquired") == 1
    no_names(registry)


def test_elections_without_names(registry: CollectorRegistry, tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path}/s.db") as client:
        with client.election("web", value="a"):
            assert value(registry, "tenure_leading") == 1
            assert value(registry, "tenure_terms_total") == 1
        assert value(registry, "tenure_leading") == 0
        assert registry.get_sample_value("tenure_election_leader", {"election": "web"}) is None
    no_names(registry)


def test_names_when_asked_for(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with (
        Metrics(registry, names=["web", "orders"]),
        tenure.connect(f"sqlite:///{tmp_path}/s.db") as c,
    ):
        with c.election("web", value="a") as leadership:
            leader = {"store": "sqlite", "election": "web"}
            assert registry.get_sample_value("tenure_election_leader", leader) == 1
            assert registry.get_sample_value("tenure_election_term", leader) == leadership.term
        assert registry.get_sample_value("tenure_election_leader", leader) == 0
        c.lock("orders").acquire().release()
        c.lock("ledger").acquire().release()
        acquires = "tenure_acquire_seconds_count"
        assert value(registry, acquires, kind="lock", outcome="granted", name="orders") == 1
        assert value(registry, acquires, kind="lock", outcome="granted", name="other") == 1
        assert value(registry, acquires, kind="lock", outcome="granted", name="ledger") == 0


def test_an_observer_that_fails_changes_nothing(tmp_path: Path) -> None:
    class Broken(Observer):
        def acquired(self, *args: object) -> None:  # type: ignore[override]
            raise RuntimeError("a bug in the observer")

    broken = Broken()
    subscribe(broken)
    try:
        with tenure.connect(f"sqlite:///{tmp_path}/s.db") as client:
            client.lock("orders").acquire().check()
    finally:
        unsubscribe(broken)
    assert listeners == []


def test_tenure_without_the_extra(tmp_path: Path) -> None:
    """Without prometheus_client tenure (its CLI too) imports and runs; asking for metrics is
    one line naming the extra."""
    blocked = "import sys; sys.modules['prometheus_client'] = None\n"
    script = blocked + (
        "import tenure, tenure.metrics, tenure.cli.run\n"
        f"with tenure.connect('sqlite:///{tmp_path}/s.db') as c: c.lock('orders').acquire()\n"
        "try:\n    tenure.metrics.Metrics()\nexcept ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "tenure.metrics needs prometheus_client: pip install 'tenure[metrics]'"
    )
    cli = blocked + "from tenure.cli import main; main()"
    args = ["run", "--store", f"sqlite:///{tmp_path}/s.db", "--metrics-textfile", "m.prom"]
    done = subprocess.run(
        [sys.executable, "-c", cli, *args, "job", "--", "true"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("tenure: error: ") and "tenure[metrics]" in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
