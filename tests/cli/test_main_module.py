"""`python -m tenure` is the `tenure` command."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_tenure_is_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tenure", "run", "--ttl", "3", "--grace", "8", "x", "--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("tenure: error: grace 8s") and "Traceback" not in done.stderr
