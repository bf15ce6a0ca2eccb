"""The ``partition`` workload: each worker is a member of one partition group (``--lock`` names
it) splitting ``--items`` items (``client.partitions``); for each item it owns it reads the
item's counter, thinks (up to ``--think`` / 5), writes it + 1, each access fenced by that item's
own token (``--unfenced``: without it). One thread consumes the changes, one writes; a write
under way finishes before a leaving or lost item is let go. The resource keeps one counter per
item; its ``meta`` holds the items, TTL and lock-delay, for ``item-ownerless``."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tenure

from ..checks import item_windows
from ..history import Event, LeaseWindow, WorkRecord
from ..ownership import Ownership
from ..resource import PARTITION, partition_items
from ._base import Sizes, Workload

if TYPE_CHECKING:
    from ..worker import Worker


def loop(worker: Worker) -> None:
    """Be a member of the group until the run's end: a thread consumes the changes (and so
    releases leaving items), another writes to every item owned, this one waits."""
    args = worker.args
    own = Ownership(worker.rec, worker.clock.rate)
    items = partition_items(args.items)
    with worker.client.partitions(
        args.lock, items, args.ttl, member=args.process, lock_delay=args.lock_delay,
    ) as member:  # fmt: skip
        threading.Thread(target=own.consume, args=(member,), daemon=True).start()
        writer = threading.Thread(target=write_items, args=(worker, own), daemon=True)
        writer.start()
        while time.monotonic() < worker.until:
            time.sleep(min(0.05, max(0.0, worker.until - time.monotonic())))
        own.stopping.set()
        writer.join()
        worker.rec.record("stop", "info")
        own.let_go()


def write_items(worker: Worker, own: Ownership) -> None:
    while not own.stopping.is_set():
        for item in sorted(own.items):
            with own.holding(item) as lease:
                if lease is None:
                    continue
                with contextlib.suppress(Exception):  # recorded: refused, or unknown
                    step_item(worker, own, item, lease)
        time.sleep(worker.rng.uniform(0.005, 0.02))


def step_item(worker: Worker, own: Ownership, item: str, lease: tenure.Lease) -> None:
    """Read the item's counter, think, write it + 1: by the item's own token."""
    token, resource = lease.token, worker.resource
    asked = own.with_deadline(lease, {"item": item})
    value = worker.op("read", token, asked, lambda: resource.read_item(token, item))
    time.sleep(worker.rng.uniform(0.005, worker.args.think / 5))
    data = {"item": item, "old": value, "new": value + 1}
    invoke = own.with_deadline(lease, data)
    worker.op(
        "write", token, invoke, lambda: resource.write_item(token, item, value + 1, data), ok=data
    )


def settings(sizes: Sizes) -> dict[str, Any]:
    """What the item-ownerless checker needs."""
    items = partition_items(sizes.items)
    return {"items": items, "ttl": sizes.ttl, "lock_delay": sizes.effective_lock_delay}


def lanes(lock: str, history: Sequence[Event], work: Sequence[WorkRecord]) -> list[LeaseWindow]:
    """What each member owned, in its lane."""
    return [
        LeaseWindow(w.item, w.process, w.token, w.start, w.end, w.ended_by)
        for w in item_windows(history)
    ]


WORKLOAD = Workload(PARTITION, loop=loop, settings=settings, lanes=lanes)
