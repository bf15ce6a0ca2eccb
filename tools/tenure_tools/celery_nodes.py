"""Real Celery processes — workers and beats — for the tests, the example project and the
fail-over benchmark (its measure: `fail_over`). Each runs ``python -m celery -A <app>`` as a
`ServerProcess` (a process group of its own, its output in a log file), so it can be killed,
paused and resumed whole. Celery itself runs in the children only."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

import tenure
from tenure.stores._server import ServerProcess

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

    def leader(self, client: tenure.Client, election: str, not_term: int = 0) -> tuple[str, int]:
        """The beat that leads ``election`` now, and its term, once that is not ``not_term``."""
        found: list[tenure.Leader] = []

        def led() -> bool:
            leader = client.election(election).leader()
            found[:] = [leader] if leader is not None and leader.term != not_term else []
            return bool(found)

        wait_until(led, 30.0, f"a leader of {election}")
        return self.by_pid(found[0].holder.pid), found[0].term

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def __enter__(self) -> CeleryNodes:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(frozen=True)
class Tick:
    """One run of a beat-sent task, as the example app notes it: ``tick <slot> <term> <time>``."""

    slot: datetime | None
    """The fire time (the ``tenure_slot`` header); None if another scheduler sent it."""
    term: int
    ran: float
    """Wall-clock time the worker ran it."""


def read_ticks(path: Path) -> list[Tick]:
    """Every tick in ``path``, in the order the workers ran them."""
    return [
        Tick(None if slot == "-" else datetime.fromisoformat(slot), int(term), float(ran))
        for kind, slot, term, ran in (line.split() for line in path.read_text().splitlines())
        if kind == "tick"
    ]


@dataclass(frozen=True)
class FailOver:
    killed: str
    """The beat that led, SIGKILLed."""
    successor: str
    term: int
    """The successor's term."""
    gap: float
    """Seconds from the kill to the first tick of the successor's term the worker ran."""


def fail_over(nodes: CeleryNodes, client: tenure.Client, election: str, out: Path) -> FailOver:
    """SIGKILL the leader of ``election`` and wait for a tick of the next term."""
    killed, term = nodes.leader(client, election)
    at = time.time()
    nodes.nodes[killed].kill()
    successor, new_term = nodes.leader(client, election, not_term=term)
    first: list[Tick] = []

    def ticked() -> bool:
        first[:] = [tick for tick in read_ticks(out) if tick.term == new_term][:1]
        return bool(first)

    wait_until(ticked, 60.0, f"a tick of term {new_term}")
    return FailOver(killed, successor, new_term, first[0].ran - at)


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)
