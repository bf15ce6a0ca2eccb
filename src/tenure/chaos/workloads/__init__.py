"""The workloads of ``tenure chaos``, one module each: how its workers take their leases and
what they do with them, what its resource's ``meta`` holds, and whom the nemesis's faults aimed
at "the holder" hit (`Workload`). Their checks are in `..checks`, registered by workload name.

The worker (`..worker`), the nemesis (`..nemesis`), the runner and ``tenure chaos --workload``
read this registry (`get`, `NAMES`)."""

from __future__ import annotations

from ..._errors import InvalidArgument
from . import (
    counter,
    election,
    guarded,
    http_service,
    partition,
    run,
    rwlock,
    semaphore,
    sets,
    state,
)
from ._base import Sizes, Workload

__all__ = ["NAMES", "REGISTRY", "Sizes", "Workload", "get"]

REGISTRY: dict[str, Workload] = {
    module.WORKLOAD.name: module.WORKLOAD
    for module in (
        counter,
        sets,
        election,
        guarded,
        run,
        partition,
        semaphore,
        rwlock,
        state,
        http_service,
    )
}
NAMES = tuple(REGISTRY)
"""The workloads' names, in ``--workload``'s order."""


def get(name: str) -> Workload:
    try:
        return REGISTRY[name]
    except KeyError:
        raise InvalidArgument(f"no chaos workload {name!r} (one of {', '.join(NAMES)})") from None
