"""Child-process supervision for the commands that run a program under a lock.

Used by ``tenure run`` (and meant for ``tenure elect`` / ``tenure once``). A child:

- runs in its own process group, so signals reach everything it started (``os.killpg``);
- on Linux, dies with SIGKILL if tenure dies, even by SIGKILL (``PR_SET_PDEATHSIG``). That signal
  fires when the *thread* that forked exits, so `running` must be entered in the main thread;
- is stopped by its lease's deadline (`Child.watch`, the rule is `tenure.cli.stopby`): SIGTERM to
  its group at ``deadline − grace`` when renewals are overdue, SIGKILL at the deadline, SIGKILL at
  once when the store says the session is gone or tenure was paused past the deadline;
- leaves nothing behind: when it ends, whatever is left of its group is killed, and `wait`
  returns only once no process of the group remains (checked, not assumed);
- reports its end the way a shell does: its exit code, or 128+N if signal N killed it.

`resolve_command` tells a missing command (127) from one that cannot be executed (126) before
anything is acquired, with the shell's codes and one line of explanation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from subprocess import Popen
from types import FrameType
from typing import Any, Protocol

from tenure import Clock, Loss

from .stopby import Cause, StopBy

__all__ = [
    "Child",
    "CommandError",
    "die_with_parent_setter",
    "resolve_command",
    "running",
    "settle",
]

NOT_EXECUTABLE = 126
NOT_FOUND = 127
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that tenure passes on to the child's process group while it runs."""

_PR_SET_PDEATHSIG = 1
WATCH_TICK = 0.2
"""Longest sleep of the watchdog: bounds how late it acts on a lease clock running fast."""


class Watched(Protocol):
    """What `Child.watch` reads of a lease (``tenure.Lease`` has it)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def stop_by(self) -> float: ...
    @property
    def loss(self) -> Loss | None: ...
    def on_lost(self, callback: Callable[[Any], Any]) -> None: ...


StopReport = Callable[[signal.Signals, Cause, float], None]
"""Told of each signal the watchdog sends: the signal, its cause, seconds left to the deadline."""


class CommandError(Exception):
    """The command cannot be started; ``code`` is the shell's exit code for it (126 or 127)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def resolve_command(command: str) -> str:
    """The path that would be executed for ``command``, or `CommandError` (127/126)."""
    if not command:
        raise CommandError(NOT_FOUND, "empty command")
    if os.sep in command:
        if not os.path.exists(command):
            raise CommandError(NOT_FOUND, f"{command}: no such file or directory")
        if os.path.isdir(command):
            raise CommandError(NOT_EXECUTABLE, f"{command}: is a directory")
        if not os.access(command, os.X_OK):
            raise CommandError(NOT_EXECUTABLE, f"{command}: permission denied")
        return command
    found = shutil.which(command)
    if found is not None:
        return found
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", command)
        if os.path.isfile(candidate):
            raise CommandError(NOT_EXECUTABLE, f"{command}: permission denied ({candidate})")
    raise CommandError(NOT_FOUND, f"{command}: command not found")


def die_with_parent_setter() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process dies (Linux).

    Made in the parent (loading libc after fork could deadlock on a lock held by another
    thread); a no-op elsewhere. The parent's pid is taken now, so the child can tell that the
    parent died before the request took effect, and kill itself then.
    """
    parent = os.getpid()
    prctl = _prctl()
    if prctl is None:
        return lambda: None

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGKILL)

    return set_death_signal


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


class Child:
    """A started child: its own process group, stopped by its lease's deadline, ended
    shell-style, never outlived by its group."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid
        self._lock = threading.Lock()
        self._exited = threading.Event()
        self._wake = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._lease: Watched | None = None
        self.plan: StopBy | None = None
        """The stop-by rule `watch` applies (None until then)."""
        self.forwarded: list[int] = []
        """Signals this process received and passed on to the child's group."""

    @property
    def stopped(self) -> Cause | None:
        """Why tenure signalled the child to stop (None: it did not)."""
        return None if self.plan is None else self.plan.cause

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child's whole process group (quietly, if it is gone)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def watch(self, lease: Watched, grace: float, report: StopReport) -> None:
        """Stop the child by ``lease``'s deadline (see `tenure.cli.stopby`), from a thread."""
        clock = lease.clock
        plan = self.plan = StopBy(grace, clock.now())
        self._lease = lease
        lease.on_lost(lambda _lease: self._wake.set())

        def run() -> None:
            while not self._exited.is_set():
                now = clock.now()
                with self._lock:
                    if self._exited.is_set():
                        return
                    signum = plan.step(now, lease.stop_by, lease.loss)
                    if signum is not None:
                        self.signal(signum)
                if signum is not None and plan.cause is not None:
                    report(signum, plan.cause, lease.stop_by - now)
                delay = plan.wake_at(lease.stop_by, lease.loss) - clock.now()
                self._wake.wait(max(0.0, min(delay, WATCH_TICK)))
                self._wake.clear()

        self._watchdog = threading.Thread(target=run, name="tenure-stop-by", daemon=True)
        self._watchdog.start()

    def wait(self) -> int:
        """Wait for the child; its exit code, or 128+N if signal N killed it.

        Whatever is left of its process group is then killed, and this returns only once no
        process of the group remains: nothing that ran under the lease outlives this call.
        """
        code = self.process.wait()
        with self._lock:
            self._exited.set()
            lease = self._lease
            if self.plan is not None and lease is not None:
                now = lease.clock.now()
                if lease.loss is not None or now >= lease.stop_by:
                    # Ended after the lease was lost (e.g. during a pause): judged like a stop,
                    # so its end means nothing (the group is killed below either way).
                    self.plan.step(now, lease.stop_by, lease.loss)
        self._wake.set()
        end_group(self.pid)
        return 128 - code if code < 0 else code


class Settling(Watched, Protocol):
    """What `settle` reads of a lease besides `Watched` (``tenure.Lease`` has it)."""

    @property
    def at_risk(self) -> bool: ...
    @property
    def lost(self) -> bool: ...


def settle(lease: Settling) -> None:
    """Wait until a lease whose renewals are overdue is either renewed again or lost.

    A command that obeys SIGTERM usually ends before its lease's deadline, while the store is
    still unreachable: the lease is then neither lost nor confirmed. Waiting for the verdict
    (at most until the deadline, when the lease is lost) makes what tenure reports what
    happened to the lease, not a guess made halfway through an outage."""
    verdict = threading.Event()
    lease.on_lost(lambda _lease: verdict.set())
    # A loss wakes it at once, a renewal is seen within a tick; past the deadline by a second
    # (the lease marks its own loss at it), it stops waiting rather than ever hang.
    while lease.at_risk and not lease.lost and lease.clock.now() < lease.stop_by + 1.0:
        verdict.wait(WATCH_TICK)


def end_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` and wait until none is left (zombies count as
    gone: they cannot run)."""
    note = time.monotonic() + 5
    while group_alive(pgid):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.005)
        if time.monotonic() > note:  # e.g. a process stuck in the kernel: say why we wait
            print(f"tenure: waiting for process group {pgid} to end", file=sys.stderr)
            note += 5


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` can still run (Linux: read from /proc)."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces or parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


@contextmanager
def running(
    argv: Sequence[str], env: Mapping[str, str], forward: Sequence[int] = FORWARDED
) -> Iterator[Child]:
    """Start ``argv``; inside the block, signals in ``forward`` go to the child's group.

    The child runs in its own process group and (on Linux) is set to die if this process dies.
    Call from the main thread (see the module docstring). Raises `CommandError` if the command
    cannot be executed. Leaving the block kills the child if it still runs, and restores the
    previous signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("running() must be called from the main thread (PR_SET_PDEATHSIG)")
    child: Child | None = None
    early: list[int] = []

    def forward_signal(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            early.append(signum)
        else:
            child.forwarded.append(signum)
            child.signal(signum)

    # Blocked while the child starts, so a signal is either early (no child: re-raised below)
    # or forwarded; never lost in between. The child unblocks them before exec.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, forward)
    previous = {signum: signal.signal(signum, forward_signal) for signum in forward}
    try:
        try:
            child = Child(_popen(argv, env, mask))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            yield child
        finally:
            if child.process.poll() is None:
                child.signal(signal.SIGKILL)
                child.process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in early:
            signal.raise_signal(signum)


def _popen(argv: Sequence[str], env: Mapping[str, str], mask: Iterable[int]) -> Popen[bytes]:
    die_with_parent = die_with_parent_setter()

    def in_child() -> None:  # between fork and exec: keep it to a few system calls
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        die_with_parent()

    try:
        return subprocess.Popen(list(argv), env=dict(env), preexec_fn=in_child)
    except FileNotFoundError:
        raise CommandError(NOT_FOUND, f"{argv[0]}: command not found") from None
    except OSError as exc:
        raise CommandError(NOT_EXECUTABLE, f"{argv[0]}: {exc.strerror or exc}") from None
