"""The examples under examples/ run as written, and do what their docstrings say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_stop_by_example_stops_at_risk_and_is_done_before_the_deadline() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "stop_by.py")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    warned = lines.index("the lease says: renewals are overdue")
    stopped = next(i for i, line in enumerate(lines) if line.startswith("stopped taking work"))
    assert warned < stopped and stopped - warned <= 2  # at most the job in hand is finished
    spare = float(lines[stopped + 1].split()[2].rstrip("s"))
    assert spare > 0, "the worker must be done before stop_by"
    assert lines[-1].startswith("lease lost at its deadline")


def test_decorators_example_does_each_piece_of_work_once() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "decorators.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TENURE_STORE"},
    )
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert len(lines) == 6, lines  # three servers, two calls each
    assert sum("wrote the report" in line for line in lines) == 1
    rebuilt = [line for line in lines if "rebuilt the index" in line]
    assert rebuilt, lines
    skipped = [line for line in lines if "not run here" in line]
    assert len(skipped) == 6 - 1 - len(rebuilt)
    assert any("the lock is held by server-" in line for line in skipped) or len(rebuilt) == 3


def test_lock_state_example_resumes_the_cursor_and_refuses_the_paused_holder() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "lock_state.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[-1] for line in lines[:3]] == ["3", "5", "9"]  # each resumed
    assert lines[3].startswith("the paused holder's write was refused")
    assert lines[4] == "cursor now 10"  # not 4: the stale write never landed
