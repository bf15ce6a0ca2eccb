"""The ``state`` workload: each worker campaigns (``client.election``); the leader reads the
cursor kept in its leadership's own state (``lease.state``) and advances it 5-15 times, one
step every ttl/10. The store commits a step only while the leader's grant is current, so a
leader paused or cut off while the next one took over writes nothing. ``--unfenced``: the same
writes with the store's compare switched off (``FaultyStore.unguarded_state``), the positive
control: an old leader's late steps then land over the new leader's, and the cursor goes back.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

import tenure

from ..resource import CURSOR, STATE
from . import election
from ._base import Sizes, Workload

if TYPE_CHECKING:
    from ..worker import Worker


def step(worker: Worker, lease: tenure.Lease) -> None:
    # The leader keeps its own count from its one read, as a real one would (a cursor in hand),
    # so a late step is computed from what it read at the start of its term; a set number of
    # steps (not "until a time"), 1.5-4 TTLs, so that faults land mid-term.
    token = lease.token
    cursor = worker.op("read", token, None, lambda: int(lease.state.get(CURSOR) or 0))
    for _ in range(worker.rng.randint(15, 40)):
        if lease.lost:
            return  # a leader that knows its term is over stops: no write, none refused
        data = {"old": cursor, "new": cursor + 1}
        worker.op("write", token, data, partial(advance, lease, cursor + 1), ok=data)
        cursor += 1
        time.sleep(worker.args.ttl / 10)


def advance(lease: tenure.Lease, cursor: int) -> None:
    """The step; the store's refusal told as a fence's (``StaleToken``), as the harness counts
    refused writes (a lease found lost by its own check just now counts so too)."""
    try:
        lease.state.put(CURSOR, str(cursor))
    except tenure.LeaseLost:
        raise tenure.StaleToken(lease.name, lease.token, lease.token) from None


def settings(sizes: Sizes) -> dict[str, Any]:
    return {"lock": sizes.lock}


WORKLOAD = Workload(STATE, step=step, take=election.take, settings=settings)
