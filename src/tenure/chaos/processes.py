"""The worker slots of a chaos run: a worker process (``worker``), or, for the ``run`` workload, a
loop of real ``tenure run`` supervisors, each running a child that records when it works
(``workchild``).

Both kinds say when they are ready (imports done, the store reached once), and the run's clock
starts only when every slot is: a cold start (an empty page cache, pyc files to write) costs
nothing of the run's window.

A ``run`` slot (`RunWorker`) starts ``tenure run --ttl T --label "chaos w3" LOCK -- python
workchild.py …`` in a session of its own, waits for it, and starts the next one, until the run's
end: the lock moves from supervisor to supervisor. The child kind (exits at once on SIGTERM,
finishes for 5 s, ignores it) rotates from one command to the next. ``tenure run`` puts its
child in a process group of its own, so pausing "the supervisor group" means both groups: tenure's
first (so it cannot react to its child stopping), then the child's; on resume the child's group
first, then tenure's `RESUME_LAG` later — the worst order, in which a frozen command does its
next bit of work before its supervisor can run.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..testing.proxy import Mode, ThreadedChaosProxy
from .history import Recorder
from .workchild import KINDS

CHILD = Path(__file__).with_name("workchild.py")
RESUME_LAG = 0.05
"""Seconds between resuming a paused child's group and its supervisor's."""
EXIT_UNAVAILABLE = 69


@dataclass
class WorkerProcess:
    """One worker slot (``w3``): its process (replaced after a kill) and its proxies."""

    name: str
    argv: list[str]
    proxies: list[ThreadedChaosProxy] = field(default_factory=list)
    stall_file: Path | None = None
    log: Path = Path(os.devnull)
    ready_file: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        # Its stderr (e.g. a paused worker's "session lost" line) goes to its log, not ours.
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stderr=log)

    def ready(self) -> bool:
        """True once the worker said it is ready; `RuntimeError` if it died before that."""
        if self.ready_file is not None and self.ready_file.exists():
            return True
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.name} exited with status {self.proc.returncode}"
                               f" before it was ready (see {self.log})")  # fmt: skip
        return self.ready_file is None

    def go(self, until: float) -> None:
        """The run's clock has started (a worker process reads its go file itself)."""

    def stall(self, on: bool) -> None:
        """Make the worker's renewals hang (or not): they do while its stall file exists."""
        if self.stall_file is not None:
            if on:
                self.stall_file.touch()
            else:
                self.stall_file.unlink(missing_ok=True)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            self.proc.wait()

    def wait(self, timeout: float) -> int:
        """The worker's exit status (`subprocess.TimeoutExpired` if it is still running)."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def close(self) -> None:
        self.kill()
        for proxy in self.proxies:
            proxy.close()

    def set_links(self, mode: Mode) -> None:
        for proxy in self.proxies:
            proxy.set_mode(mode)


def tenure_command() -> list[str]:
    """The ``tenure`` command of this Python's environment (the entry point a user runs)."""
    found = shutil.which("tenure", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-c", "from tenure.cli import main; main()"]


@dataclass
class RunWorker(WorkerProcess):
    """A slot of the ``run`` workload: ``tenure run`` again and again, from a thread of the
    runner. ``argv`` is the ``tenure run … LOCK`` part; each command adds its child."""

    url: str = ""
    work_dir: Path = Path()
    history: Path = Path(os.devnull)
    index: int = 0
    ttl: float = 1.0
    seed: int = 0
    store_stall: Stall | None = None
    _until: float = 0.0
    _closing: bool = False
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _go: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _record: Recorder | None = None
    _frozen: bool = False

    def spawn(self) -> None:
        """Start the slot's thread (the first time); it warms up, then waits for `go`."""
        if self._thread is None:
            self._record = Recorder(self.history, self.name)
            self._thread = threading.Thread(target=self._loop, name=f"chaos {self.name}")
            self._thread.start()

    def ready(self) -> bool:
        return self._ready.is_set()

    def go(self, until: float) -> None:
        self._until = until
        self._go.set()

    def _loop(self) -> None:
        rec = self._record
        assert rec is not None
        # One store call through the slot's own links first: imports and connections warm.
        with open(self.log, "ab") as log:
            subprocess.run([*tenure_command(), "ls", "--store", self.url],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                           check=False)  # fmt: skip
        self._ready.set()
        self._go.wait()
        rng = random.Random(f"{self.seed}:{self.name}")
        n = 0
        while time.monotonic() < self._until and not self._closing:
            child = f"{self.name}-{n}"
            kind = KINDS[(self.index + n) % len(KINDS)]
            work = rng.uniform(2, 4) * self.ttl
            # A command still waiting at the run's end gives up (exit 75).
            wait = ["--timeout", f"{max(0.1, self._until - time.monotonic()):.3f}"]
            argv = [
                *self.argv[:-1], *wait, self.argv[-1], "--", sys.executable, str(CHILD),
                "--record", str(self.work_dir / f"{child}.work"), "--kind", kind,
                "--seconds", f"{work:.3f}",
            ]  # fmt: skip
            with self._lock, open(self.log, "ab") as log:
                if self._closing:
                    break
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=log,
                                             start_new_session=True)  # fmt: skip
            value = {"child": child, "kind": kind, "work": round(work, 3)}
            rec.record("run", "invoke", pid=self.proc.pid, value=value)
            code = self.proc.wait()
            if code == 0:
                rec.record("run", "ok", value=value)
            else:
                rec.record("run", "fail", value=value, error=f"exit {code}")
            if code == EXIT_UNAVAILABLE:  # the store is down (a fault): not a tight loop
                time.sleep(min(self.ttl / 3, 0.5))
            n += 1
        rec.close()

    # -- faults -----------------------------------------------------------------------------------

    def groups(self) -> list[int]:
        """The process groups of the running supervisor and of everything it started."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return []
        pgids: dict[int, None] = {}
        for pid in [proc.pid, *descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                pgids[os.getpgid(pid)] = None
        return list(pgids)

    def signal(self, sig: signal.Signals) -> None:
        for pgid in self.groups():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def freeze(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGSTOP)  # the supervisor first: it cannot react
        self.signal(signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        proc = self.proc
        if proc is None:
            return
        for pgid in self.groups():
            if pgid != proc.pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGCONT)
        if self._frozen:
            time.sleep(RESUME_LAG)
            self._frozen = False
        self.signal(signal.SIGCONT)

    def stall(self, on: bool) -> None:
        """Renewals hang: the slot's links hold every byte (networked stores), or the SQLite
        store's file is write-locked (every process's store calls wait)."""
        if self.proxies:
            self.set_links("hold" if on else "pass")
        elif self.store_stall is not None:
            self.store_stall.set(on)

    def kill(self) -> None:
        """SIGKILL the running supervisor and its child (the loop starts the next one)."""
        self.signal(signal.SIGKILL)
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()

    def wait(self, timeout: float) -> int:
        """Wait for the slot's last command to end (the loop starts none after the run's end)."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise subprocess.TimeoutExpired(self.argv, timeout)
        return 0

    def close(self) -> None:
        with self._lock:
            self._closing = True
        self._go.set()
        self.signal(signal.SIGCONT)
        self.kill()
        if self._thread is not None:
            self._thread.join()
        for proxy in self.proxies:
            proxy.close()


class Stall:
    """Holds the SQLite store's write lock while on: every renewal (and every attempt) waits."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None

    def set(self, on: bool) -> None:
        if on and self._db is None:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("BEGIN IMMEDIATE")
        elif not on and self._db is not None:
            self._db.close()  # rolls back: the lock is free
            self._db = None

    def close(self) -> None:
        self.set(False)


def descendants(pid: int) -> list[int]:
    """Every process started by ``pid``, and by those, … (Linux ``/proc/PID/task/*/children``)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found
