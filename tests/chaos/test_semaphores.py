"""The ``semaphore`` workload: four workers share two permits, each writing to its slot's
fenced counter with the permit's token, under pauses and kills. Fenced runs show never more
holders than permits and no stale write accepted; the same pauses unfenced show a paused
holder's write accepted after its slot's next holder wrote — two holders of one permit acted
(the positive control of ``stale-item-write`` on slots; ``permit-overlap``'s own controls are
in tests/unit/test_chaos_checkers.py).

Short fixed-seed runs; each starts real worker processes, and the run's clock starts only once
every worker is ready (`Run.execute`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.chaos import SCENARIOS, Report, Run
from tenure.chaos.resource import read_resource

TTL = 0.5
SECONDS = 10.0
PERMITS = 2
CHECKS = ("permit-overlap", "stale-item-write", "lost-update")
pytestmark = pytest.mark.timeout(120)


def semaphore_run(tmp_path: Path, scenario: str, url: str, **options: object) -> Report:
    options = {"workers_count": 4, "ttl": TTL, "seconds": SECONDS, "seed": 7, **options}
    out = tmp_path / "run"
    report = Run(
        SCENARIOS[scenario], url, out, workload="semaphore", permits=PERMITS,
        **options,  # type: ignore[arg-type]
    ).execute()  # fmt: skip
    assert not report.info.notes, report.info.notes  # every worker ended on time
    assert report.faults, "the nemesis must have injected faults"
    final = read_resource(out / "resource.db").final
    assert sorted(final) == [f"slot-{n}" for n in range(PERMITS)]
    assert all(value > 0 for value in final.values()), final  # both permits were used
    assert all(check in report.violations for check in CHECKS)  # reported, gated
    return report


@pytest.mark.parametrize("scenario", ["pause", "kill-in-txn"])
def test_fenced_permits_are_safe_under_pauses_and_kills(
    tmp_path: Path, sqlite_store_url: str, scenario: str
) -> None:
    report = semaphore_run(tmp_path, scenario, sqlite_store_url)
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0


def test_unfenced_permits_under_pauses_accept_stale_writes(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    """The positive control: a paused holder wakes up and writes with its old token after its
    slot's next holder wrote with a newer one; without the fence the resource takes it. The
    pauses outlast TTL + lock-delay + a whole step, so each one that finds its holder at work
    (most of a hold) gives a stale write: a pause of 1-3 TTLs gave none in one CI run."""
    report = semaphore_run(tmp_path, "long-pause", sqlite_store_url, fenced=False)
    assert report.violations["stale-item-write"] >= 1, report.to_text()
    assert not report.passed
    assert report.violations["permit-overlap"] == 0, report.to_text()  # the permits held


@pytest.mark.parametrize("store", ["etcd", "postgres", "zookeeper"])
def test_networked_fenced_permits_are_safe_under_pauses(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    url = request.getfixturevalue(f"{store}_store_url")
    report = semaphore_run(tmp_path, "pause", url, ttl=1.0, seconds=12.0)
    assert report.passed, report.to_text()
