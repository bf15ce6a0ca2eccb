"""What every security test checks the same way: the CLI run as a user runs it, an error as
one line with no traceback, and no secret in any of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TENURE = str(Path(sys.executable).with_name("tenure"))


def run_cli(
    *args: str, password: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`tenure ARGS` to the end, without the caller's $TENURE_PASSWORD and $TENURE_STORE;
    ``password`` goes in $TENURE_PASSWORD, ``env`` on top."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TENURE_PASSWORD", "TENURE_STORE")}
    if password is not None:
        environ["TENURE_PASSWORD"] = password
    environ.update(env or {})
    return subprocess.run(
        [TENURE, *args], capture_output=True, text=True, timeout=60, env=environ, check=False
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The CLI failed with one ``tenure:`` line on stderr and no traceback; that line."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tenure: "), done.stderr
    return lines[0]


def one_line(exc: BaseException, *secrets: str) -> str:
    """``exc``'s message, asserted to be one line without any of ``secrets``."""
    message = str(exc)
    assert "\n" not in message, message
    for secret in secrets:
        assert secret not in message, message
    return message
