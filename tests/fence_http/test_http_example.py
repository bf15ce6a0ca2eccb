"""examples/fenced_http.py runs as written and prints what docs/fencing-http.md says; the page's
code is the example's own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "fenced_http.py"
PAGE = ROOT / "docs" / "fencing-http.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_example_refuses_the_old_holders_late_write_as_the_page_shows() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    (shown,) = blocks("text")
    assert done.stdout == shown
    assert "A refused: stale fencing token 1 for 'stock': 2 was already accepted" in done.stdout
    assert done.stdout.endswith("stock: 20\n")  # B's write stands


def test_the_pages_code_is_the_examples() -> None:
    code = EXAMPLE.read_text()
    found = blocks("python")
    assert len(found) == 2
    for block in found:
        assert block in code, block
