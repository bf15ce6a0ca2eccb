"""The ``run`` workload: real ``tenure run`` supervisors whose commands record when they work, and
the ``work-overlap`` checker that reads those records.

A whole supervisor group (tenure and its command) paused for less than the lock-delay shows no
two commands working at once: the store holds the name back until tenure runs again and stops its
command. Paused for longer than TTL + lock-delay, the frozen command wakes up while the next
holder's works, and the checker must say so (the positive control: only fencing helps then).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.chaos import SCENARIOS, Report, Run
from tenure.chaos.checks import work_spans
from tenure.chaos.history import read_history, read_work
from tenure.chaos.report import faults_of

TTL = 0.5
SECONDS = 8.0
pytestmark = pytest.mark.timeout(60)


def run(tmp_path: Path, scenario: str, url: str, **options: object) -> Report:
    options = {"workers_count": 3, "ttl": TTL, "seconds": SECONDS, "seed": 3, **options}
    out = tmp_path / "run"
    report = Run(SCENARIOS[scenario], url, out, workload="run", **options).execute()  # type: ignore[arg-type]
    assert not report.info.notes, report.info.notes  # every supervisor ended on time
    assert report.commands["worked"] >= 3, report.to_text()  # the lock moved around
    return report


def paused_while_working(out: Path, kind: str) -> int:
    """How many of the run's pauses froze a command in the middle of its work (it recorded
    work in the 0.1 s before)."""
    history = read_history([out / "history.jsonl"])
    spans = work_spans(read_work(out / "work"))
    return sum(
        any(s.process in f.targets and s.start < f.start < s.end + 0.1 for s in spans)
        for f in faults_of(history, float("inf"))
        if f.kind == kind
    )


def test_a_pause_shorter_than_the_lock_delay_shows_no_overlap(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    report = run(tmp_path, "group-pause", sqlite_store_url)
    assert paused_while_working(tmp_path / "run", "group-pause") >= 1, report.to_text()
    assert report.violations["work-overlap"] == 0, report.to_text()
    assert report.passed, report.to_text()


def test_a_pause_longer_than_ttl_and_lock_delay_is_reported(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    report = run(tmp_path, "long-group-pause", sqlite_store_url)
    assert paused_while_working(tmp_path / "run", "long-group-pause") >= 1, report.to_text()
    assert report.violations["work-overlap"] >= 1, report.to_text()
    assert not report.passed


def test_postgres_cut_off_holders_stop_before_the_next_works(
    tmp_path: Path, postgres_store_url: str
) -> None:
    """The experiment of issue 15 in the harness: the holder's links are blackholed; tenure
    stops its command (whatever it does with SIGTERM) by its deadline, before the server can
    grant the lock to the next supervisor."""
    report = run(tmp_path, "partition", postgres_store_url)
    assert report.faults.get("partition", 0) >= 1, report.to_text()
    stopped = sum(n for k, n in report.commands.items() if k in ("exit 76", "exit 78"))
    assert stopped >= 1, report.to_text()  # a command was stopped for its lost lease
    assert report.violations["work-overlap"] == 0, report.to_text()
    assert report.passed, report.to_text()
