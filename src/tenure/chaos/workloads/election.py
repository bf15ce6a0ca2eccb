"""The ``election`` workload: each worker campaigns (``client.election``); the leader appends
10–30 (term, leader, n) entries to a log, one every ttl/10, then resigns."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import tenure

from ._base import Workload

if TYPE_CHECKING:
    from ..worker import Worker


def take(worker: Worker, asked: dict[str, Any], timeout: float) -> tenure.Lease:
    """A campaign: the term is the token."""
    args = worker.args
    return worker.client.election(args.lock, args.ttl, value=args.process).acquire(timeout=timeout)


def step(worker: Worker, lease: tenure.Lease) -> None:
    # A leader appends a set number of entries (not "until a time"), so one paused between
    # two appends wakes up and appends again, as a real leader would.
    term = lease.token
    for n in range(worker.rng.randint(10, 30)):  # 1-3 TTLs: pauses land mid-term
        append(worker, term, {"term": term, "leader": worker.args.process, "n": n})
        time.sleep(worker.args.ttl / 10)


def append(worker: Worker, term: int, data: dict[str, Any]) -> None:
    resource = worker.resource
    worker.op("write", term, data, lambda: resource.write(term, None, data))


WORKLOAD = Workload("election", step=step, take=take, observed=True)
