"""The `cli` fixture: real `tenure` processes on a store file in the test's tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TENURE = str(Path(sys.executable).with_name("tenure"))


class Cli:
    """Runs `tenure` against ``self.store`` (a fresh SQLite file) and inspects processes."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.db = tmp_path / "s.db"
        self.store = f"sqlite:///{self.db}"
        self.started: list[subprocess.Popen[str]] = []

    def __call__(
        self, *args: str, timeout: float = 20, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run `tenure ARGS` to the end and capture its output."""
        return subprocess.run(
            [TENURE, *args], capture_output=True, text=True, timeout=timeout, **kw
        )

    def start(self, *args: str, **kw: Any) -> subprocess.Popen[str]:
        """Start `tenure ARGS` in the background, capturing its output."""
        proc = subprocess.Popen(
            [TENURE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
        )
        self.started.append(proc)
        return proc

    def locks(self, name: str | None = None) -> list[dict[str, Any]]:
        done = self("ls", "--json", "--store", self.store, *([name] if name else []))
        assert done.returncode in (0, 1), done.stderr
        result: list[dict[str, Any]] = json.loads(done.stdout)
        return [info for info in result if info["state"] == "held"]

    def held(self, name: str, waiters: int = 0) -> dict[str, Any] | None:
        """The lock's JSON entry if it is held with at least ``waiters`` waiters."""
        found = [info for info in self.locks() if info["name"] == name]
        return found[0] if found and found[0]["waiters"] >= waiters else None

    @staticmethod
    def until(condition: Callable[[], Any], timeout: float = 30.0, what: str = "it") -> Any:
        """Poll until ``condition()`` is truthy; return its value, or fail after ``timeout``
        (generous: most waits include a process start-up, slow on a loaded machine)."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}")
            time.sleep(0.02)

    def pid_in(self, name: str) -> int:
        """Wait for a child to write its pid into tmp_path/NAME; return it."""
        path = self.tmp / name

        def read() -> int | None:
            try:
                return int(path.read_text())
            except (OSError, ValueError):
                return None

        pid: int = self.until(read, what=f"a pid in {name}")
        return pid

    @staticmethod
    def gone(pid: int) -> bool:
        """The process has exited (a zombie counts: init may not reap orphans at once)."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")

    @staticmethod
    def one_error_line(stderr: str) -> str:
        """Assert ``stderr`` is one `tenure:` line and no traceback; return the line."""
        assert "Traceback" not in stderr
        lines = stderr.splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith("tenure: "), stderr
        return lines[0]

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path)
    try:
        yield tool
    finally:
        tool.close()
