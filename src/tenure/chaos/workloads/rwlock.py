"""The ``rwlock`` workload: each worker takes the read lock of a read-write lock (``--lock``
names it; at most ``--readers`` readers at once) two times in three, else its write lock: a
reader reads the counter, thinks, reads it again (each read fenced by `admit_read`); a writer
reads it, thinks, writes it + 1 (both fenced by `admit_write`). The nemesis's "holder" is one of
the readers holding the lock, else its writer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tenure

from ..._rwlock import PREFIX as RWLOCK_PREFIX
from ..._rwlock import gate_name, slot_name
from ..checks import permit_windows
from ..history import Event, LeaseWindow, WorkRecord
from ..resource import RWLOCK
from ._base import Sizes, Workload, granted_lease

if TYPE_CHECKING:
    from ..worker import Worker

READ_SHARE = 2 / 3
"""The share of the steps that take the read lock."""


def ask(worker: Worker) -> dict[str, Any]:
    mode = "read" if worker.rng.random() < READ_SHARE else "write"
    return {"name": worker.args.lock, "mode": mode}


def take(worker: Worker, asked: dict[str, Any], timeout: float) -> tenure.Lease:
    args = worker.args
    rwlock = worker.client.rwlock(args.lock, args.ttl, readers=args.readers)
    side = rwlock.read if asked["mode"] == "read" else rwlock.write
    return side.acquire(timeout=timeout)


def granted(worker: Worker, lease: tenure.Lease) -> dict[str, Any]:
    """The lease's own lock (a reader's slot, a writer's gate) for the belief windows; the
    invoke's name, the read-write lock's, is the one token order is judged by."""
    assert isinstance(lease, tenure.RWLease)
    name = worker.args.lock
    lock = slot_name(name, lease.index) if lease.mode == "read" else gate_name(name)
    return {"name": lock, "mode": lease.mode, "deadline": granted_lease(worker, lease)["deadline"]}


def step(worker: Worker, lease: tenure.Lease) -> None:
    """A reader reads the counter, thinks and reads it again: the two reads must agree,
    since no writer may write while a reader holds the lock (``writer-beside-reader``). A
    writer does the counter step. Each access records the deadline then, as the semaphore
    step does, so the lease's window ends at it (`checks.permit_windows`)."""
    assert isinstance(lease, tenure.RWLease)
    token, resource = lease.token, worker.resource
    if lease.mode == "read":
        read_as_reader(worker, lease)
        worker.think()
        read_as_reader(worker, lease)
        return
    # A writer admits its read as a write too (`admit_write`), as the counter workload admits
    # every access: its read is the first half of an exclusive read-modify-write. Any later
    # access by a newer holder (a reader's read included, which raises the highest token
    # admitted) then refuses this writer's write, so a stale writer never writes value+1
    # over a value it did not read; and from its read on the fence serves no older reader
    # or writer, so a stale reader cannot read beside it. (`admit_read` here would keep the
    # first promise, not the second.)
    asked = {"mode": "write", "deadline": worker.deadline(lease)}
    value = worker.op("read", token, asked, lambda: resource.read_exclusive(token))
    worker.think()
    data = {"old": value, "new": value + 1}
    invoke = {**data, "mode": "write", "deadline": worker.deadline(lease)}
    # The ok carries the write (as the partition step's does), for the acknowledged-write
    # half of ``lost-update``.
    worker.op(
        "write", token, invoke, lambda: resource.write_exclusive(token, value + 1, data), ok=data
    )


def read_as_reader(worker: Worker, lease: tenure.RWLease) -> int:
    token, resource = lease.token, worker.resource
    asked = {"mode": "read", "deadline": worker.deadline(lease)}
    value: int = worker.op("read", token, asked, lambda: resource.read_shared(token))
    return value


def holders(observer: tenure.Client, lock: str) -> list[tenure.LockInfo]:
    """The holders of the read-write lock: the readers on its slots; if there are none, the
    holder of its gate, a writer. A slot's holder that holds the gate too is no reader (yet): a
    writer waiting out the readers takes their slots as they go, and a reader holds the gate
    only on its way to a slot."""
    gate = gate_name(lock)
    infos = observer.locks(prefix=f"{RWLOCK_PREFIX}{lock}/")
    at_gate = [info for info in infos if info.name == gate]
    passing = {info.holder.label for info in at_gate}
    readers = [info for info in infos if info.name != gate and info.holder.label not in passing]
    return readers or at_gate


def settings(sizes: Sizes) -> dict[str, Any]:
    return {"readers": sizes.readers}


def lanes(lock: str, history: Sequence[Event], work: Sequence[WorkRecord]) -> list[LeaseWindow]:
    """Each grant, to its deadline, in its worker's lane."""
    return permit_windows(history)


WORKLOAD = Workload(
    RWLOCK, step=step, ask=ask, take=take, granted=granted, holders=holders, settings=settings,
    lanes=lanes,
)  # fmt: skip
