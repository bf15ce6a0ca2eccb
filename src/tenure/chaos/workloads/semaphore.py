"""The ``semaphore`` workload: each worker takes one of ``--permits`` permits of a semaphore
(``--lock`` names it), reads its slot's counter, thinks, writes it + 1, fenced by the permit's
token, which is its slot's (``--unfenced``: without it). The resource keeps one counter per slot
(`..resource.slot_item`); its ``meta`` holds the slots and the permits, for ``permit-overlap``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tenure

from ..._semaphore import PREFIX as SEMAPHORE_PREFIX
from ..._semaphore import gate_name
from ..checks import permit_windows
from ..history import Event, LeaseWindow, WorkRecord
from ..resource import SEMAPHORE, slot_item, slot_items
from ._base import Sizes, Workload

if TYPE_CHECKING:
    from ..worker import Worker


def ask(worker: Worker) -> dict[str, Any]:
    # A permit's lock is its slot's, known only once granted: the ok names it.
    return {"semaphore": worker.args.lock}


def take(worker: Worker, asked: dict[str, Any], timeout: float) -> tenure.Lease:
    args = worker.args
    return worker.client.semaphore(args.lock, args.permits, args.ttl).acquire(timeout=timeout)


def step(worker: Worker, lease: tenure.Lease) -> None:
    """The counter step on the permit's slot's counter, by the slot's token. Each read and
    write records the deadline then, for the ``permit-overlap`` checker."""
    assert isinstance(lease, tenure.Permit)
    token, item, resource = lease.token, slot_item(lease.index), worker.resource
    asked = {"item": item, "deadline": worker.deadline(lease)}
    value = worker.op("read", token, asked, lambda: resource.read_item(token, item))
    worker.think()
    data = {"item": item, "old": value, "new": value + 1}
    worker.op(
        "write", token, {**data, "deadline": worker.deadline(lease)},
        lambda: resource.write_item(token, item, value + 1, data),
    )  # fmt: skip


def holders(observer: tenure.Client, lock: str) -> list[tenure.LockInfo]:
    """The permits' holders: the slots' locks (the gate's holder is a waiter)."""
    gate = gate_name(lock)
    infos = observer.locks(prefix=f"{SEMAPHORE_PREFIX}{lock}/")
    return [info for info in infos if info.name != gate]


def settings(sizes: Sizes) -> dict[str, Any]:
    """What the permit-overlap checker needs."""
    return {"items": slot_items(sizes.permits), "permits": sizes.permits}


def lanes(lock: str, history: Sequence[Event], work: Sequence[WorkRecord]) -> list[LeaseWindow]:
    """Each grant, to its deadline, in its worker's lane."""
    return permit_windows(history)


WORKLOAD = Workload(
    SEMAPHORE, step=step, ask=ask, take=take, holders=holders, settings=settings, lanes=lanes
)
