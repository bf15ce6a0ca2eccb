"""What a workload is to the harness (`Workload`), and the defaults most workloads share: a
lock taken by name, and the lock's holder as the nemesis's target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import tenure

if TYPE_CHECKING:
    from ..history import Event, LeaseWindow, WorkRecord
    from ..worker import Worker


class Sizes(Protocol):
    """What a workload's resource settings are made from (``runner.Run`` is one)."""

    ttl: float
    lock: str
    items: int
    permits: int
    readers: int

    @property
    def effective_lock_delay(self) -> float: ...


Step = Callable[["Worker", tenure.Lease], None]
"""The step a worker does while holding a lease; `StaleToken` when the fence refused it."""
Loop = Callable[["Worker"], None]
"""A worker's whole run, for a workload that is not a loop of lease, step, release."""
Ask = Callable[["Worker"], dict[str, Any]]
"""The ``acquire`` invoke's value: what the worker asks for."""
Take = Callable[["Worker", dict[str, Any], float], tenure.Lease]
"""Take the lease asked for (`NotAcquired` after the timeout)."""
Granted = Callable[["Worker", tenure.Lease], dict[str, Any]]
"""The ``acquire`` ok's value: what was granted."""
Holders = Callable[[tenure.Client, str], list[tenure.LockInfo]]
"""The nemesis's targets: who holds the run's lock (``lock``) now, per the store."""
Settings = Callable[[Sizes], dict[str, Any] | None]
"""What the resource's ``meta`` holds for the checkers (JSON values)."""
Lanes = Callable[[str, "Sequence[Event]", "Sequence[WorkRecord]"], "list[LeaseWindow] | None"]
"""The timeline's bars in each worker's lane, from the run's lock name, history and work
records; None: each lease as its worker believed it (the timeline's default)."""


def ask_lock(worker: Worker) -> dict[str, Any]:
    return {"name": worker.args.lock}


def take_lock(worker: Worker, asked: dict[str, Any], timeout: float) -> tenure.Lease:
    return worker.client.lock(worker.args.lock, worker.args.ttl).acquire(timeout=timeout)


def granted_lease(worker: Worker, lease: tenure.Lease) -> dict[str, Any]:
    return {"name": lease.name, "deadline": worker.deadline(lease)}


def lock_holders(observer: tenure.Client, lock: str) -> list[tenure.LockInfo]:
    return observer.locks(lock)


def no_settings(sizes: Sizes) -> dict[str, Any] | None:
    return None


def believed_leases(
    lock: str, history: Sequence[Event], work: Sequence[WorkRecord]
) -> list[LeaseWindow] | None:
    return None


@dataclass(frozen=True)
class Workload:
    """One workload of ``tenure chaos``: how its workers take their leases and what they do
    with them (`worker`), what its resource's ``meta`` holds (`runner`), and whom the nemesis's
    faults aimed at "the holder" hit (`nemesis`). Its checks are in `checks`, registered for it
    by name."""

    name: str
    step: Step | None = None
    loop: Loop | None = None
    ask: Ask = ask_lock
    take: Take = take_lock
    granted: Granted = granted_lease
    holders: Holders = lock_holders
    settings: Settings = no_settings
    lanes: Lanes = believed_leases
    observed: bool = False
    """Whether a follower (`..observer`) watches the run's election: does it see every term?"""
    setup: Loop | None = None
    """Run once in the worker before it reaches the store (the ``guarded`` workload's guard)."""
