"""The guarded-write workload: a counter kept in the store itself, written only while the store
still says the writer's token holds the lock. Under pauses, guarded runs stay safe (a resumed
holder's write is refused); unguarded runs lose updates (the checkers bite).

First the guard itself on each store, then short fixed-seed chaos runs with real workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure
from tenure.chaos import SCENARIOS, Report, Run
from tenure.chaos.guards import open_guard

STORES = ["sqlite_store_url", "postgres_store_url", "etcd_store_url"]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=STORES, ids=lambda name: name.split("_")[0])
def store_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(request.param)
    return url


# -- the guard ----------------------------------------------------------------------------------


def test_guard_refuses_a_token_that_no_longer_holds(store_url: str) -> None:
    with (
        open_guard(store_url, "g") as guard,
        tenure.connect(store_url) as first,
        tenure.connect(store_url) as second,
    ):
        guard.setup()
        old = first.lock("g", ttl=5.0).acquire()
        guard.write(old.token, 0, 1, "first", guarded=True)
        assert guard.read() == 1
        old.release()
        new = second.lock("g", ttl=5.0).acquire()
        with pytest.raises(tenure.StaleToken):
            guard.write(old.token, 1, 2, "first", guarded=True)
        assert guard.read() == 1  # nothing written
        guard.write(new.token, 1, 2, "second", guarded=True)
        log = guard.read_log()
        new.release()
    assert log.workload == "counter"
    assert log.final == 2
    assert [(a.process, a.token, a.data) for a in log.accepted] == [
        ("first", old.token, {"old": 0, "new": 1}),
        ("second", new.token, {"old": 1, "new": 2}),
    ]


def test_unguarded_write_applies_without_the_lock(store_url: str) -> None:
    with open_guard(store_url, "g") as guard:
        guard.setup()
        guard.write(12345, 0, 1, "nobody", guarded=False)
        log = guard.read_log()
    assert log.final == 1
    assert [a.token for a in log.accepted] == [12345]


def test_setup_starts_afresh(sqlite_store_url: str) -> None:
    with open_guard(sqlite_store_url) as guard:
        guard.setup()
        guard.write(1, 0, 1, "w0", guarded=False)
        guard.setup()
        assert guard.read_log().accepted == []
        assert guard.read() == 0


# -- chaos runs ---------------------------------------------------------------------------------


def paused(tmp_path: Path, url: str, *, fenced: bool = True) -> Report:
    """A short fixed-seed ``pause`` run of the guarded workload. etcd's leases last whole seconds
    (at least 1 s), so there the TTL is 1 s, for pauses of 1-3 TTLs to outlast leases."""
    ttl, seconds = (1.0, 10.0) if url.startswith("etcd") else (0.5, 7.0)
    run = Run(
        SCENARIOS["pause"],
        url,
        tmp_path / "run",
        workers_count=4,
        ttl=ttl,
        seconds=seconds,
        seed=7,
        fenced=fenced,
        workload="guarded",
    )
    report = run.execute()
    assert report.grants > 5, "the workers must have made progress"
    assert not report.info.notes, report.info.notes  # every worker ended on time
    assert report.faults.get("pause", 0) >= 1, "the nemesis must have paused a holder"
    return report


def test_guarded_pauses_are_safe(tmp_path: Path, store_url: str) -> None:
    report = paused(tmp_path, store_url)
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0
    assert report.refused >= 1, "a resumed holder's write must have been refused"


def test_unguarded_pauses_lose_updates(tmp_path: Path, store_url: str) -> None:
    """The positive control: without the guard, a resumed holder overwrites newer updates."""
    report = paused(tmp_path, store_url, fenced=False)
    assert not report.passed
    assert report.violations["lost-update"] >= 1, report.to_text()
