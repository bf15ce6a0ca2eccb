"""The ``guarded`` workload: the counter step on a counter kept in the store itself
(`..guards`): the write applies only while the store still says the token holds the lock,
checked in the write's own transaction (``--unfenced``: the same write without that check)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tenure

from ..resource import GUARDED
from ._base import Workload

if TYPE_CHECKING:
    from ..worker import Worker


def setup(worker: Worker) -> None:
    from ..guards import open_guard  # every store's client: only for this workload

    worker.guard = open_guard(worker.args.store, worker.args.lock)


def step(worker: Worker, lease: tenure.Lease) -> None:
    guard = worker.guard
    assert guard is not None
    token, guarded = lease.token, not worker.args.unfenced
    value = worker.op("read", token, None, guard.read)
    worker.think()
    data = {"old": value, "new": value + 1}
    process = worker.args.process
    worker.op("write", token, data, lambda: guard.write(token, value, value + 1, process, guarded))


WORKLOAD = Workload(GUARDED, step=step, setup=setup)
