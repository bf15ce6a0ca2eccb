"""Shell completion (click's ``_TENURE_COMPLETE``, docs/cli.md) and the man pages that
scripts/man_pages.py makes with click-man from the same definitions as ``--help``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import TENURE

ROOT = Path(__file__).resolve().parents[2]


def _complete(shell_mode: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TENURE], capture_output=True, text=True, timeout=30,
        env={**os.environ, "_TENURE_COMPLETE": shell_mode, **env},
    )  # fmt: skip


def test_the_bash_completion_script_is_produced_and_completes_commands() -> None:
    script = _complete("bash_source")
    assert script.returncode == 0, script.stderr
    assert "_tenure_completion()" in script.stdout and "complete -o nosort -F" in script.stdout
    # What the script asks for when the user types `tenure hi<TAB>`: the command's name.
    words = _complete("bash_complete", COMP_WORDS="tenure hi", COMP_CWORD="1")
    assert words.stdout.split() == ["plain,history"], words.stdout


def test_man_pages_are_made_for_tenure_and_each_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "man_pages.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pages = {page.name for page in tmp_path.glob("*.1")}
    assert {"tenure.1", "tenure-run.1", "tenure-history.1", "tenure-ls.1"} <= pages
    run = (tmp_path / "tenure-run.1").read_text()
    assert run.startswith('.TH "TENURE RUN" "1"') and "\\-\\-permits" in run
