"""Real Celery processes — workers and beats — for the tests, the example project and the
fail-over benchmark: each runs ``python -m celery -A <app>`` as a `ServerProcess` (a process
group of its own, its output in a log file), so it can be killed, paused and resumed whole.

Only the standard library here: Celery itself runs in the children."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ._process import ServerProcess

SCHEDULER = "tenure.celery.LeaderScheduler"


class CeleryNodes:
    """Celery processes of app module ``app`` (found in ``path``), with ``env`` set (broker,
    store, the app's own settings); logs and beat files under ``root``."""

    def __init__(self, app: str, path: Path, root: Path, env: dict[str, str]) -> None:
        self.app, self.root = app, root
        self.env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(path), *sys.path])}
        self.nodes: dict[str, ServerProcess] = {}

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _spawn(self, name: str, *args: str) -> ServerProcess:
        node = ServerProcess()
        argv = [sys.executable, "-m", "celery", "-A", self.app, *args, "--loglevel", "INFO"]
        node.spawn(argv, self.log(name), env=self.env)
        self.nodes[name] = node
        return node

    def worker(self, name: str, pool: str = "solo", concurrency: int = 1) -> ServerProcess:
        """A worker, ready (its log says so) when this returns."""
        node = self._spawn(
            name,
            "worker",
            "--hostname",
            f"{name}@%h",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        )
        wait_until(lambda: "ready." in self.log(name).read_text(), 60.0, f"worker {name} ready")
        return node

    def beat(self, name: str, scheduler: str = SCHEDULER) -> ServerProcess:
        return self._spawn(
            name, "beat", "--scheduler", scheduler, "--schedule", str(self.root / f"{name}.db")
        )

    def by_pid(self, pid: int) -> str:
        """The name of the node whose process is ``pid``."""
        for name, node in self.nodes.items():
            if node.proc is not None and node.proc.pid == pid:
                return name
        raise LookupError(f"no node runs as pid {pid}")

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def __enter__(self) -> CeleryNodes:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)
