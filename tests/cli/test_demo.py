"""`tenure demo`: the paused holder, refused with fencing, a lost update without."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Cli


def test_demo_tells_both_stories(cli: Cli) -> None:
    began = time.monotonic()
    done = cli("demo", timeout=30)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert took < 10
    out = done.stdout
    fenced, unfenced = out.split("Without fencing")
    # With fencing: A has token N, B N+1, A's late write is refused, B's write stays.
    token_a = int(re.search(r"A takes lock 'demo' \(ttl 1s\): token (\d+)", fenced)[1])  # type: ignore[index]
    assert (
        f"once A's lease has expired and its lock-delay (1s) has passed: token {token_a + 1}"
        in (fenced)
    )
    assert re.search(rf"A wakes up .* with token {token_a}: REFUSED", fenced)
    assert "stale fencing token" in fenced
    assert (
        f"the resource holds 'B-1' (written with token {token_a + 1}): B's write is safe" in fenced
    )
    # Without: A's stale write lands on top of B's.
    assert "accepted, since nothing checks tokens" in unfenced
    assert "the resource holds 'A-2'" in unfenced and "lost update" in unfenced
    # Numbered steps, and nothing left behind: the temporary directory and the workers.
    assert re.search(r"^ 1\. ", unfenced, re.M) and re.search(r"^ 9\. ", unfenced, re.M)
    folder = re.search(r"store: +sqlite:///(\S+)/locks\.db", out)[1]  # type: ignore[index]
    assert not Path(folder).exists()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert folder.encode() not in cmdline.read_bytes()
        except OSError:
            continue
