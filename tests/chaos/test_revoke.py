"""The ``revoke`` scenario: an operator revokes the holder again and again during its write
burst. Revoked safely, the holder stops at its next renewal and nobody is granted the lock until
its lease could no longer act: no stale write is accepted and no two ``tenure run`` commands
work at once. Revoked with ``now=True`` (the positive control), the next holder starts while the
revoked one still works: unfenced writes are lost, and the commands overlap."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.chaos import SCENARIOS, Report, Run

SECONDS = 6.0
pytestmark = pytest.mark.timeout(90)


def chaos(tmp_path: Path, scenario: str, url: str, **options: object) -> Report:
    options = {"workers_count": 3, "ttl": 0.5, "seconds": SECONDS, "seed": 3, **options}
    report = Run(SCENARIOS[scenario], url, tmp_path / "run", **options).execute()  # type: ignore[arg-type]
    assert not report.info.notes, report.info.notes  # every worker ended on time
    assert report.faults.get(SCENARIOS[scenario].faults[0], 0) >= 2, report.to_text()
    return report


def test_revokes_during_a_write_burst_accept_no_stale_write(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    report = chaos(tmp_path, "revoke", sqlite_store_url)
    assert report.grants >= 3 and report.acknowledged >= 5, report.to_text()
    assert report.passed and sum(report.violations.values()) == 0, report.to_text()


def test_revokes_now_unfenced_lose_writes(tmp_path: Path, sqlite_store_url: str) -> None:
    """The positive control: freed at once, the lock is granted while the revoked holder is
    between its read and its write."""
    report = chaos(tmp_path, "revoke-now", sqlite_store_url, fenced=False)
    assert not report.passed
    assert report.violations["lost-update"] >= 1, report.to_text()


def test_revoked_commands_are_killed_before_the_next_works(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    report = chaos(tmp_path, "revoke", sqlite_store_url, workload="run")
    assert report.commands["exit 78"] >= 1, report.to_text()  # killed: revoked
    assert report.violations["work-overlap"] == 0, report.to_text()
    assert report.passed, report.to_text()


def test_revoked_commands_now_overlap_the_next(tmp_path: Path, sqlite_store_url: str) -> None:
    """The positive control for ``tenure run``: with ``now=True`` the next command starts while
    the revoked one works on until its supervisor's next renewal (ttl/3: 0.33 s here; each of
    6-7 revocations overlapped in trial runs, one is asked for)."""
    report = chaos(tmp_path, "revoke-now", sqlite_store_url, workload="run", ttl=1.0, seconds=9.0)
    assert report.violations["work-overlap"] >= 1, report.to_text()
    assert not report.passed
