"""The ``set`` workload: under one lock, read the set, think, write it back with one new
element."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import tenure

from ._base import Workload

if TYPE_CHECKING:
    from ..worker import Worker


def step(worker: Worker, lease: tenure.Lease) -> None:
    token, resource = lease.token, worker.resource
    elements = worker.op("read", token, None, lambda: resource.read(token))
    worker.think()
    worker.steps += 1
    element = f"{worker.args.process}.{os.getpid()}.{worker.steps}"
    data = {"element": element}
    worker.op("write", token, data, lambda: resource.write(token, [*elements, element], data))


WORKLOAD = Workload("set", step=step)
