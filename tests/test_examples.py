"""The examples under examples/ run as written, and do what their docstrings say."""

from __future__ import annotations

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
