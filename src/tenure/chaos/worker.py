"""One worker process of a chaos run: take the lock, do the workload's step on the resource,
release; again, until the run's end. Every operation goes into the worker's history file.

``python -m tenure.chaos.worker --store URL --resource PATH --workload counter
--process w0 --history w0.jsonl --ready w0.ready --go go [--unfenced] [--ttl 1] [--seed 7]
[--clock-rate 1]``

Once started (imports done, the store reached once), the worker creates its ``--ready`` file and
waits for the ``--go`` file, which the runner writes when every worker is ready: it holds the
run's end, a ``time.monotonic()`` instant of the host (shared by all its processes), so a worker
restarted after a kill finds it at once and stops with the others. ``--clock-rate`` runs the
worker's lease clock fast (> 1) or slow (< 1): a slow clock makes the holder believe its lease
lasts longer than the store does — beyond the configured drift bound, only fencing keeps the
resource safe.

``--lock-delay`` is the worker's lock-delay (default 0): the faults are about what the resource
accepts once a lease has expired, which lock-delay only postpones.

Each workload's own part (what a worker asks for, how it takes the lease, the step done while
holding it, or its whole run for ``partition``) is its module's in `workloads`; this module is
the machinery they share: recording (`Worker.op`), taking and releasing leases, deadlines.

The worker does not call ``lease.check()`` before writing, on purpose: a check is always racy
(a pause can fall between the check and the write), so the harness shows what the resource
accepts when a holder acts on a stale belief.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tenure

from .._errors import InvalidArgument
from .._url import open_store
from ..stores._spi import Store
from ..testing.clock import ScaledClock
from ..testing.faults import FaultyStore
from . import workloads
from .history import Recorder
from .ownership import one_line
from .resource import Resource

if TYPE_CHECKING:
    from .guards import Guard


class StallableStore(FaultyStore):
    """The store, with renewals that hang while the stall file exists: the nemesis cuts the
    worker off from the store (not from the resource) on any store, SQLite included. A file,
    not a signal, so that a worker just starting cannot be killed by the switch."""

    def __init__(self, inner: Store, stall_file: Path) -> None:
        super().__init__(inner)
        self.stall_file = stall_file

    @property
    def hang_keep_alive(self) -> bool:
        return self.stall_file.exists()

    @hang_keep_alive.setter
    def hang_keep_alive(self, value: bool) -> None:
        pass  # FaultyStore's own switch is not used here


class Worker:
    """A worker of one of the lock workloads (`workloads`): the shared machinery (recording,
    `op`, taking and releasing leases, deadlines); the workload's own step is its module's."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workload = workloads.get(args.workload)
        self.rng = random.Random(f"{args.seed}:{args.process}:{os.getpid()}")
        self.rec = Recorder(args.history, args.process)
        self.resource = Resource(args.resource, args.process, fenced=not args.unfenced)
        self.guard: Guard | None = None
        if self.workload.setup is not None:
            self.workload.setup(self)
        self.clock = ScaledClock(args.clock_rate)
        self.store = StallableStore(open_store(args.store), Path(args.stall_file))
        # The state workload's positive control: its writes without the store's compare.
        self.store.unguarded_state = args.unfenced
        label = f"chaos {args.process}"
        store, clock = self.store, self.clock
        lock_delay = args.lock_delay
        self.client = tenure.Client(store, label=label, clock=clock, lock_delay=lock_delay)
        self.steps = 0
        self.until = 0.0

    # -- recording ------------------------------------------------------------------------------

    def op(self, f: str, token: int, value: Any, action: Callable[[], Any], ok: Any = None) -> Any:
        """Run ``action`` as operation ``f``, recording invoke and outcome: a read's ok carries
        what it read, another's ``ok`` (a write's data, for ``lost-update``'s acknowledged
        writes)."""
        self.rec.record(f, "invoke", token=token, value=value)
        try:
            result = action()
        except tenure.StaleToken:
            self.rec.record(f, "fail", token=token, error="stale")
            raise
        except tenure.LeaseLost:  # refused by the store itself (lease.state): nothing written
            self.rec.record(f, "fail", token=token, error="lost")
            raise
        except Exception as exc:
            self.rec.record(f, "info", token=token, error=one_line(exc))
            raise
        self.rec.record(f, "ok", token=token, value=result if f == "read" else ok)
        return result

    # -- the loop -------------------------------------------------------------------------------

    def ready(self) -> None:
        """Reach the store once, say so, and wait for the run's clock to start."""
        with contextlib.suppress(tenure.TenureError):
            self.client.locks(self.args.lock)
        Path(self.args.ready).touch()
        go = Path(self.args.go)
        while not go.exists():
            time.sleep(0.005)
        self.until = float(go.read_text())

    def run(self) -> None:
        self.ready()
        self.rec.record("start", "info", pid=os.getpid())
        if self.workload.loop is not None:
            self.workload.loop(self)
        else:
            self.run_steps()
        self.client.close()
        if self.guard is not None:
            self.guard.close()
        self.rec.close()

    def run_steps(self) -> None:
        """Take the lease, do the workload's step, release; again, until the run's end."""
        step = self.workload.step
        if step is None:
            raise InvalidArgument(f"the {self.workload.name} workload has no worker step")
        while time.monotonic() < self.until:
            lease = self.acquire()
            if lease is None:
                continue
            try:
                step(self, lease)
            except (tenure.StaleToken, tenure.LeaseLost):
                pass  # recorded: the fence (or the store) refused a stale holder
            except Exception:
                time.sleep(0.05)  # recorded as unknown; keep going
            finally:
                self.release(lease)

    # -- leases ---------------------------------------------------------------------------------

    def acquire(self) -> tenure.Lease | None:
        asked = self.workload.ask(self)
        self.rec.record("acquire", "invoke", value=asked)
        timeout = max(0.1, self.until - time.monotonic())
        try:
            lease = self.workload.take(self, asked, timeout)
        except tenure.NotAcquired:
            self.rec.record("acquire", "fail", error="timeout")
            return None
        except tenure.TenureError as exc:  # store unavailable: the run's faults at work
            self.rec.record("acquire", "fail", error=one_line(exc))
            time.sleep(min(self.args.ttl / 3, 0.5))
            return None
        granted = self.workload.granted(self, lease)
        self.rec.record("acquire", "ok", token=lease.token, value=granted)
        lease.on_lost(lambda lost: self._lost(lost))
        return lease

    def deadline(self, lease: tenure.Lease) -> float:
        """The lease's deadline on the host's monotonic clock (the checkers' clock): in the
        past once it has passed (``remaining()`` would say now)."""
        return time.monotonic() + (float(lease.deadline) - self.clock.now()) / self.clock.rate

    def _lost(self, lease: tenure.Lease) -> None:
        self.rec.record("lost", "info", token=lease.token, error=lease.lost_reason)

    def release(self, lease: tenure.Lease) -> None:
        self.rec.record("release", "invoke", token=lease.token)
        try:
            lease.release()
        except tenure.TenureError as exc:
            self.rec.record("release", "fail", token=lease.token, error=one_line(exc))
            return
        self.rec.record("release", "ok", token=lease.token)

    def think(self) -> None:
        """The work between read and write: up to about the TTL, renewed meanwhile."""
        time.sleep(self.rng.uniform(0.02, self.args.think))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tenure.chaos.worker")
    parser.add_argument("--store", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--workload", choices=workloads.NAMES, default="counter")
    parser.add_argument("--process", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--go", required=True)
    parser.add_argument("--lock", default="chaos")
    parser.add_argument("--items", type=int, default=8, help="the partition workload's items")
    parser.add_argument("--permits", type=int, default=2, help="the semaphore workload's")
    parser.add_argument("--readers", type=int, default=3, help="the rwlock workload's")
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--think", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock-rate", type=float, default=1.0)
    parser.add_argument("--lock-delay", type=float, default=0.0)
    parser.add_argument("--unfenced", action="store_true")
    parser.add_argument("--stall-file", default="/nonexistent/tenure-chaos-stall")
    parser.add_argument("--service", default="", help="the http workload's service URL")
    return parser.parse_args(argv)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminate)
    Worker(parse(argv)).run()


if __name__ == "__main__":
    main()
