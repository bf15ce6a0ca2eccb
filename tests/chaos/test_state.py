"""The ``state`` workload: leaders advance a cursor kept in their leadership's own state
(``lease.state``) across fail-overs. Under a slow lease clock with stalled renewals (the
holder believes it leads after the store expired it) and under pauses and cut links, the cursor
never goes back and no acknowledged advance is lost, on every correctness-grade store: the
store's own compare refuses the old leader's late steps. The same runs with that compare
switched off (``--unfenced``) see the cursor go back: the checker bites.

Short fixed-seed runs; each starts real worker processes, and the run's clock starts only once
every worker is ready (`Run.execute`). The checker's own controls, on made-up histories, are in
tests/unit/test_chaos_checkers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.chaos import SCENARIOS, Report, Run

STORES = ["sqlite", "postgres", "etcd", "zookeeper"]
pytestmark = pytest.mark.timeout(120)


def cursor_run(
    tmp_path: Path, scenario: str, url: str, *, fenced: bool = True, seconds: float = 10.0
) -> Report:
    """etcd's leases last whole seconds, so every store gets TTL 1 s (as etcd can)."""
    report = Run(
        SCENARIOS[scenario],
        url,
        tmp_path / "run",
        workers_count=4,
        ttl=1.0,
        seconds=seconds,
        seed=1,
        fenced=fenced,
        workload="state",
    ).execute()
    assert not report.info.notes, report.info.notes  # every worker ended on time
    assert report.faults, "the nemesis must have injected faults"
    assert report.grants >= 3 and report.acknowledged >= 20, report.to_text()  # progress
    assert "cursor-regression" in report.violations  # reported, gated
    return report


@pytest.mark.parametrize("store", STORES)
def test_the_cursor_never_goes_back_under_a_slow_clock(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    report = cursor_run(tmp_path, "clock-drift", request.getfixturevalue(f"{store}_store_url"))
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0


@pytest.mark.parametrize("store", STORES)
def test_without_the_stores_compare_the_cursor_goes_back(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    """The positive control: the old leader's late steps land over the new leader's. Longer
    than the fenced runs, for more stalls: a stall must fall early enough in a term for the old
    leader to step after the new one (etcd expires leases late, so its window is the shortest)."""
    url = request.getfixturevalue(f"{store}_store_url")
    report = cursor_run(tmp_path, "clock-drift", url, fenced=False, seconds=16.0)
    assert report.violations["cursor-regression"] >= 1, report.to_text()


@pytest.mark.parametrize(("store", "scenario"), [("sqlite", "pause"), ("etcd", "partition")])
def test_the_cursor_never_goes_back_under_pauses_and_partitions(
    tmp_path: Path, request: pytest.FixtureRequest, store: str, scenario: str
) -> None:
    report = cursor_run(tmp_path, scenario, request.getfixturevalue(f"{store}_store_url"))
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0
