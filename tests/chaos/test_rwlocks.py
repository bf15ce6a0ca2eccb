"""The ``rwlock`` workload: five workers take one read-write lock, the read lock two times in
three (at most three readers at once), else the write lock. A reader reads the counter twice
around its think, through the read fence (`SQLFence.admit_read`); a writer reads it and writes
it + 1 through the write fence (`admit_write`). Fenced runs under pauses show no writer beside
a reader and no lost or stale write, on every store; the same pauses unfenced show a paused
reader waking up after a writer wrote, its second read seeing the write — the positive control
of ``writer-beside-reader`` (its half judged at the lock, and both halves' planted violations,
are in tests/unit/test_chaos_checkers.py).

Short fixed-seed runs; each starts real worker processes, and the run's clock starts only once
every worker is ready (`Run.execute`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tenure.chaos import SCENARIOS, Report, Run, read_history
from tenure.chaos.checks import permit_windows, rw_modes

TTL = 0.5
SECONDS = 10.0
CONTROL_SECONDS = 12.0
"""The unfenced control needs a reader paused between its reads while a writer writes (or a
writer paused between its read and its write while readers read): each of 24 runs of 10 s had
one at least, but 5 pauses or so make few chances, so under CI load the control runs longer."""
READERS = 3
CHECKS = ("writer-beside-reader", "lost-update", "stale-token", "token-order")
pytestmark = pytest.mark.timeout(120)


def rwlock_run(tmp_path: Path, url: str, **options: object) -> Report:
    options = {"workers_count": 5, "ttl": TTL, "seconds": SECONDS, "seed": 7, **options}
    out = tmp_path / "run"
    report = Run(
        SCENARIOS["pause"], url, out, workload="rwlock", readers=READERS,
        **options,  # type: ignore[arg-type]
    ).execute()  # fmt: skip
    assert not report.info.notes, report.info.notes  # every worker ended on time
    assert report.faults.get("pause", 0) >= 1, "the nemesis must have paused someone"
    history = read_history([out / "history.jsonl"])
    modes = rw_modes(history)
    granted = Counter(modes.values())
    assert granted["read"] >= 3 and granted["write"] >= 1, granted  # both kinds were granted
    reads = [w for w in permit_windows(history) if modes.get((w.process, w.token or -1)) == "read"]
    assert any(
        a.process != b.process and a.start < b.end and b.start < a.end for a in reads for b in reads
    ), "readers must have shared the lock"
    assert all(check in report.violations for check in CHECKS)  # reported, gated
    return report


def test_fenced_readers_and_writers_are_safe_under_pauses(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    report = rwlock_run(tmp_path, sqlite_store_url)
    assert report.passed, report.to_text()
    assert sum(report.violations.values()) == 0
    assert report.losses >= 1, "a paused holder must have lost its lease"


def test_unfenced_readers_see_a_write_land_under_pauses(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    """The positive control: a reader paused between its reads wakes up after its lease
    expired and a writer wrote (or a paused writer wakes up and writes while readers hold the
    lock); without the fence its second read is served, and differs from its first."""
    report = rwlock_run(tmp_path, sqlite_store_url, fenced=False, seconds=CONTROL_SECONDS)
    assert report.violations["writer-beside-reader"] >= 1, report.to_text()
    assert not report.passed
    assert report.violations["token-order"] == 0, report.to_text()  # the lock itself held


@pytest.mark.parametrize("store", ["etcd", "postgres", "zookeeper"])
def test_networked_fenced_readers_and_writers_are_safe_under_pauses(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    url = request.getfixturevalue(f"{store}_store_url")
    report = rwlock_run(tmp_path, url)
    assert report.passed, report.to_text()
