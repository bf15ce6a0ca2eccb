"""The ``http`` workload: workers read and write a counter through a real HTTP service (a
Starlette app on uvicorn, `tenure.chaos.service`) whose fence is `tenure.fence.http.ASGIFence`,
each request carrying the lease's token (`HTTPXAuth`). Fenced, under pauses and cut links, no
update is lost and no stale token is accepted, whatever the lock's store; without the fence
(``--unfenced``) a resumed holder's write overwrites newer ones: the checkers bite.

Short fixed-seed runs; each starts the service and real worker processes, and the run's clock
starts only once every worker is ready (`Run.execute`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.chaos import SCENARIOS, Report, Run

STORES = ["sqlite", "postgres", "etcd", "zookeeper"]
pytestmark = pytest.mark.timeout(120)


def service_run(tmp_path: Path, scenario: str, url: str, *, fenced: bool = True) -> Report:
    """etcd's leases last whole seconds: TTL 1 s there, for pauses of 1-3 TTLs to outlast them."""
    ttl = 1.0 if url.startswith("etcd") else 0.5
    report = Run(
        SCENARIOS[scenario],
        url,
        tmp_path / "run",
        workers_count=4,
        ttl=ttl,
        seconds=10.0,
        seed=7,
        fenced=fenced,
        workload="http",
    ).execute()
    assert not report.info.notes, report.info.notes  # every worker ended on time
    assert report.faults, "the nemesis must have injected faults"
    assert report.grants >= 5 and report.acknowledged >= 5, report.to_text()  # progress
    return report


@pytest.mark.parametrize("store", STORES)
def test_the_fenced_service_loses_nothing_under_pauses(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    report = service_run(tmp_path, "pause", request.getfixturevalue(f"{store}_store_url"))
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0


def test_the_fenced_service_loses_nothing_when_holders_are_cut_off(
    tmp_path: Path, etcd_store_url: str
) -> None:
    report = service_run(tmp_path, "partition", etcd_store_url)
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0


@pytest.mark.parametrize("store", STORES)
def test_without_the_fence_the_service_loses_updates(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    """The positive control: a resumed holder's write overwrites a newer holder's."""
    url = request.getfixturevalue(f"{store}_store_url")
    report = service_run(tmp_path, "pause", url, fenced=False)
    assert report.violations["lost-update"] >= 1, report.to_text()
