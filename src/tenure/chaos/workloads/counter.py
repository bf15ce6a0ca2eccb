"""The ``counter`` workload: under one lock, read the counter, think, write value+1."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tenure

from ._base import Workload

if TYPE_CHECKING:
    from ..worker import Worker


def step(worker: Worker, lease: tenure.Lease) -> None:
    token, resource = lease.token, worker.resource
    value = worker.op("read", token, None, lambda: resource.read(token))
    worker.think()
    data = {"old": value, "new": value + 1}
    worker.op("write", token, data, lambda: resource.write(token, value + 1, data))


WORKLOAD = Workload("counter", step=step)
