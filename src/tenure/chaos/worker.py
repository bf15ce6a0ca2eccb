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

Workloads (the step done while holding the lock):

counter   read the counter, think, write value+1.
set       read the set, think, write it back with one new element.
election  each worker campaigns (``client.campaign``); the leader appends 10–30
          (term, leader, n) entries to a log, one every ttl/10, then resigns.
partition each worker is a member of one partition group (``--lock`` names it) splitting
          ``--items`` items (``client.partitions``); for each item it owns it reads the item's
          counter, thinks (up to ``--think`` / 5), writes it + 1, each access fenced by that
          item's own token (``--unfenced``: without it). One thread consumes the changes, one
          writes; a write under way finishes before a leaving or lost item is let go.
semaphore each worker takes one of ``--permits`` permits of a semaphore (``--lock`` names it;
          ``client.acquire_permit``), reads its slot's counter, thinks, writes it + 1, fenced
          by the permit's token, which is its slot's (``--unfenced``: without it).
rwlock    each worker takes the read lock of a read-write lock (``--lock`` names it; at most
          ``--readers`` readers at once) two times in three, else its write lock: a reader
          reads the counter, thinks, reads it again (each read fenced by `admit_read`); a
          writer reads it, thinks, writes it + 1 (both fenced by `admit_write`).
guarded   the counter step on a counter kept in the store itself (`guards`): the write applies
          only while the store still says the token holds the lock, checked in the write's own
          transaction (``--unfenced``: the same write without that check).

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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tenure

from .._rwlock import gate_name, slot_name
from .._url import open_store
from ..stores._spi import Store
from ..testing.clock import ScaledClock
from ..testing.faults import FaultyStore
from .history import Recorder
from .ownership import Ownership, one_line
from .resource import (
    GUARDED,
    PARTITION,
    RWLOCK,
    SEMAPHORE,
    WORKLOADS,
    Resource,
    partition_items,
    slot_item,
)

if TYPE_CHECKING:
    from .guards import Guard

READ_SHARE = 2 / 3
"""The ``rwlock`` workload: the share of its steps that take the read lock."""


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
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(f"{args.seed}:{args.process}:{os.getpid()}")
        self.rec = Recorder(args.history, args.process)
        self.resource = Resource(args.resource, args.process, fenced=not args.unfenced)
        self.guard: Guard | None = None
        if args.workload == GUARDED:
            from .guards import open_guard  # every store's client: only for this workload

            self.guard = open_guard(args.store, args.lock)
        self.clock = ScaledClock(args.clock_rate)
        self.store = StallableStore(open_store(args.store), Path(args.stall_file))
        label = f"chaos {args.process}"
        store, clock = self.store, self.clock
        lock_delay = args.lock_delay
        self.client = tenure.Client(store, label=label, clock=clock, lock_delay=lock_delay)
        self.steps = 0
        self.until = 0.0

    # -- recording ------------------------------------------------------------------------------

    def op(self, f: str, token: int, value: Any, action: Callable[[], Any]) -> Any:
        """Run ``action`` as operation ``f``, recording invoke and outcome."""
        self.rec.record(f, "invoke", token=token, value=value)
        try:
            result = action()
        except tenure.StaleToken:
            self.rec.record(f, "fail", token=token, error="stale")
            raise
        except Exception as exc:
            self.rec.record(f, "info", token=token, error=one_line(exc))
            raise
        self.rec.record(f, "ok", token=token, value=result if f == "read" else None)
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
        if self.args.workload == PARTITION:
            self.run_partition()
            self.client.close()
            self.rec.close()
            return
        while time.monotonic() < self.until:
            lease = self.acquire()
            if lease is None:
                continue
            try:
                getattr(self, f"step_{self.args.workload}")(lease)
            except tenure.StaleToken:
                pass  # recorded: the fence refused a stale holder
            except Exception:
                time.sleep(0.05)  # recorded as unknown; keep going
            finally:
                self.release(lease)
        self.client.close()
        if self.guard is not None:
            self.guard.close()
        self.rec.close()

    # -- the partition workload ------------------------------------------------------------------

    def run_partition(self) -> None:
        """Be a member of the group until the run's end: a thread consumes the changes (and
        so releases leaving items), another writes to every item owned, this one waits."""
        self.own = Ownership(self.rec, self.clock.rate)
        items = partition_items(self.args.items)
        with self.client.partitions(
            self.args.lock, items, self.args.ttl, member=self.args.process,
            lock_delay=self.args.lock_delay,
        ) as member:  # fmt: skip
            threading.Thread(target=self.own.consume, args=(member,), daemon=True).start()
            writer = threading.Thread(target=self.write_items, daemon=True)
            writer.start()
            while time.monotonic() < self.until:
                time.sleep(min(0.05, max(0.0, self.until - time.monotonic())))
            self.own.stopping.set()
            writer.join()
            self.rec.record("stop", "info")
            self.own.let_go()

    def write_items(self) -> None:
        while not self.own.stopping.is_set():
            for item in sorted(self.own.items):
                with self.own.holding(item) as lease:
                    if lease is None:
                        continue
                    with contextlib.suppress(Exception):  # recorded: refused, or unknown
                        self.step_item(item, lease)
            time.sleep(self.rng.uniform(0.005, 0.02))

    def step_item(self, item: str, lease: tenure.Lease) -> None:
        """Read the item's counter, think, write it + 1: by the item's own token."""
        token = lease.token
        asked = self.own.with_deadline(lease, {"item": item})
        value = self.op("read", token, asked, lambda: self.resource.read_item(token, item))
        time.sleep(self.rng.uniform(0.005, self.args.think / 5))
        data = {"item": item, "old": value, "new": value + 1}
        invoke = self.own.with_deadline(lease, data)
        self.rec.record("write", "invoke", token=token, value=invoke)
        try:
            self.resource.write_item(token, item, value + 1, data)
        except tenure.StaleToken:
            self.rec.record("write", "fail", token=token, error="stale")
            raise
        except Exception as exc:
            self.rec.record("write", "info", token=token, error=one_line(exc))
            raise
        self.rec.record("write", "ok", token=token, value=data)

    # -- the lock workloads ---------------------------------------------------------------------

    def acquire(self) -> tenure.Lease | None:
        name = self.args.lock
        semaphore = self.args.workload == SEMAPHORE
        # A permit's lock is its slot's, known only once granted: the ok names it.
        asked: dict[str, Any] = {"semaphore" if semaphore else "name": name}
        if self.args.workload == RWLOCK:
            asked["mode"] = "read" if self.rng.random() < READ_SHARE else "write"
        self.rec.record("acquire", "invoke", value=asked)
        timeout = max(0.1, self.until - time.monotonic())
        try:
            lease: tenure.Lease
            if self.args.workload == "election":  # a campaign: the term is the token
                election = self.client.election(name, self.args.ttl, value=self.args.process)
                lease = election.acquire(timeout=timeout)
            elif semaphore:
                lease = self.client.semaphore(name, self.args.permits, self.args.ttl).acquire(
                    timeout=timeout
                )
            elif "mode" in asked:
                rwlock = self.client.rwlock(name, self.args.ttl, readers=self.args.readers)
                side = rwlock.read if asked["mode"] == "read" else rwlock.write
                lease = side.acquire(timeout=timeout)
            else:
                lease = self.client.lock(name, self.args.ttl).acquire(timeout=timeout)
        except tenure.NotAcquired:
            self.rec.record("acquire", "fail", error="timeout")
            return None
        except tenure.TenureError as exc:  # store unavailable: the run's faults at work
            self.rec.record("acquire", "fail", error=one_line(exc))
            time.sleep(min(self.args.ttl / 3, 0.5))
            return None
        granted = {"name": lease.name, "deadline": self.deadline(lease)}
        if isinstance(lease, tenure.RWLease):
            # The lease's own lock (a reader's slot, a writer's gate) for the belief windows;
            # the invoke's name, the read-write lock's, is the one token order is judged by.
            lock = slot_name(name, lease.index) if lease.mode == "read" else gate_name(name)
            granted = {"name": lock, "mode": lease.mode, "deadline": granted["deadline"]}
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

    # -- workloads ------------------------------------------------------------------------------

    def step_counter(self, lease: tenure.Lease) -> None:
        token = lease.token
        value = self.op("read", token, None, lambda: self.resource.read(token))
        self.think()
        data = {"old": value, "new": value + 1}
        self.op("write", token, data, lambda: self.resource.write(token, value + 1, data))

    def step_guarded(self, lease: tenure.Lease) -> None:
        guard = self.guard
        assert guard is not None
        token, guarded = lease.token, not self.args.unfenced
        value = self.op("read", token, None, guard.read)
        self.think()
        data = {"old": value, "new": value + 1}
        process = self.args.process
        self.op(
            "write", token, data, lambda: guard.write(token, value, value + 1, process, guarded)
        )

    def step_set(self, lease: tenure.Lease) -> None:
        token = lease.token
        elements = self.op("read", token, None, lambda: self.resource.read(token))
        self.think()
        self.steps += 1
        element = f"{self.args.process}.{os.getpid()}.{self.steps}"
        data = {"element": element}
        self.op(
            "write", token, data, lambda: self.resource.write(token, [*elements, element], data)
        )

    def step_semaphore(self, lease: tenure.Lease) -> None:
        """The counter step on the permit's slot's counter, by the slot's token. Each read and
        write records the deadline then, for the ``permit-overlap`` checker."""
        assert isinstance(lease, tenure.Permit)
        token, item = lease.token, slot_item(lease.index)
        asked = {"item": item, "deadline": self.deadline(lease)}
        value = self.op("read", token, asked, lambda: self.resource.read_item(token, item))
        self.think()
        data = {"item": item, "old": value, "new": value + 1}
        self.op(
            "write", token, {**data, "deadline": self.deadline(lease)},
            lambda: self.resource.write_item(token, item, value + 1, data),
        )  # fmt: skip

    def step_rwlock(self, lease: tenure.Lease) -> None:
        """A reader reads the counter, thinks and reads it again: the two reads must agree,
        since no writer may write while a reader holds the lock (``writer-beside-reader``). A
        writer does the counter step. Each access records the deadline then, as the semaphore
        step does, so the lease's window ends at it (`checks.permit_windows`)."""
        assert isinstance(lease, tenure.RWLease)
        token = lease.token
        if lease.mode == "read":
            self.read_as_reader(lease)
            self.think()
            self.read_as_reader(lease)
            return
        # A writer admits its read as a write too (`admit_write`), as the counter workload admits
        # every access: its read is the first half of an exclusive read-modify-write. Any later
        # access by a newer holder (a reader's read included, which raises the highest token
        # admitted) then refuses this writer's write, so a stale writer never writes value+1
        # over a value it did not read; and from its read on the fence serves no older reader
        # or writer, so a stale reader cannot read beside it. (`admit_read` here would keep the
        # first promise, not the second.)
        asked = {"mode": "write", "deadline": self.deadline(lease)}
        value = self.op("read", token, asked, lambda: self.resource.read_exclusive(token))
        self.think()
        data = {"old": value, "new": value + 1}
        invoke = {**data, "mode": "write", "deadline": self.deadline(lease)}
        self.rec.record("write", "invoke", token=token, value=invoke)
        try:
            self.resource.write_exclusive(token, value + 1, data)
        except tenure.StaleToken:
            self.rec.record("write", "fail", token=token, error="stale")
            raise
        except Exception as exc:
            self.rec.record("write", "info", token=token, error=one_line(exc))
            raise
        # The ok carries the write (as the partition step's does), for the acknowledged-write
        # half of ``lost-update``.
        self.rec.record("write", "ok", token=token, value=data)

    def read_as_reader(self, lease: tenure.RWLease) -> int:
        token = lease.token
        asked = {"mode": "read", "deadline": self.deadline(lease)}
        value: int = self.op("read", token, asked, lambda: self.resource.read_shared(token))
        return value

    def step_election(self, lease: tenure.Lease) -> None:
        # A leader appends a set number of entries (not "until a time"), so one paused between
        # two appends wakes up and appends again, as a real leader would.
        term = lease.token
        for n in range(self.rng.randint(10, 30)):  # 1-3 TTLs: pauses land mid-term
            self.append(term, {"term": term, "leader": self.args.process, "n": n})
            time.sleep(self.args.ttl / 10)

    def append(self, term: int, data: dict[str, Any]) -> None:
        self.op("write", term, data, lambda: self.resource.write(term, None, data))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tenure.chaos.worker")
    parser.add_argument("--store", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--workload", choices=WORKLOADS, default="counter")
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
    return parser.parse_args(argv)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminate)
    Worker(parse(argv)).run()


if __name__ == "__main__":
    main()
