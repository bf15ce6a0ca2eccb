"""The checkers of a chaos run: they read the merged history and what the protected resource
accepted, and name every broken promise of docs/design.md.

Safety is judged by the resource's own log (what it accepted, in its commit order), not by what
the workers believed: a worker's belief that it holds a lock can be stale under faults, and fencing
makes that harmless. So the gated checks (violations, exit status 1) read the resource log or the
grants the store made; ``belief-overlap`` is a diagnostic only (``gated=False``). For the ``run``
workload, whose commands check no token, the resource is time itself: ``work-overlap`` reads
when each child recorded work.

Each checker lives in the module of what it judges (`run`, `lost_updates`, `tokens`,
`elections`, `beliefs`, `partitions`, `semaphores`, `rwlocks`) and is registered with
`check`: the kinds of finding it makes (their names and what they mean) and the workloads it
applies to. `check_all` runs the registered checkers in registration order; `CHECKS`,
`GATED` and `violations` (what a report counts) are read from the registry. Each checker is
a linear pass or a sort plus a sweep, since histories hold 10^4-10^5 events.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..history import Event, Finding, ResourceLog, WorkRecord

INPUTS = ("history", "resource", "work")
"""What a checker may read, by the name of its parameter."""


@dataclass(frozen=True)
class Check:
    """One registered checker: ``run`` reads the `INPUTS` it names (``reads``)."""

    run: Callable[..., list[Finding]]
    kinds: tuple[str, ...]
    """The checks (kinds of finding) it reports."""
    workloads: frozenset[str] | None
    """The workloads it applies to (None: every one; it judges what applies itself)."""
    reads: tuple[str, ...]

    def applies(self, workload: str) -> bool:
        return self.workloads is None or workload in self.workloads

    def __call__(
        self, history: Sequence[Event], resource: ResourceLog, work: Sequence[WorkRecord]
    ) -> list[Finding]:
        given = {"history": history, "resource": resource, "work": work}
        return self.run(**{name: given[name] for name in self.reads})


REGISTERED: list[Check] = []
"""Every checker, in registration order (the order `check_all` runs them in)."""
CHECKS: dict[str, str] = {}
"""Every check's name and what a finding of it means, in registration order."""
DIAGNOSTICS: set[str] = set()
"""The checks whose findings are not violations."""

F = TypeVar("F", bound=Callable[..., list[Finding]])


def check(
    kinds: Mapping[str, str], *, workloads: Iterable[str] | None = None, diagnostic: bool = False
) -> Callable[[F], F]:
    """Register a checker: it reports ``kinds`` (name → what a finding means; ``diagnostic``:
    not violations) and applies to ``workloads`` (None: every workload). It reads the
    `INPUTS` its parameters name; it is returned unchanged, to be called directly too."""

    def register(func: F) -> F:
        taken = [name for name in kinds if name in CHECKS]
        if taken:
            raise ValueError(f"checks registered twice: {', '.join(taken)}")
        reads = tuple(p for p in inspect.signature(func).parameters if p in INPUTS)
        only = None if workloads is None else frozenset(workloads)
        REGISTERED.append(Check(func, tuple(kinds), only, reads))
        CHECKS.update(kinds)
        if diagnostic:
            DIAGNOSTICS.update(kinds)
        return func

    return register


def check_all(
    history: Sequence[Event], resource: ResourceLog, work: Sequence[WorkRecord] = ()
) -> list[Finding]:
    """Every checker that applies to the resource's workload (``work``: the ``run`` workload's
    work records)."""
    return [
        finding
        for registered in REGISTERED
        if registered.applies(resource.workload)
        for finding in registered(history, resource, work)
    ]


def gated() -> tuple[str, ...]:
    """The checks whose findings are violations, in registration order."""
    return tuple(name for name in CHECKS if name not in DIAGNOSTICS)


def violations(findings: Iterable[Finding]) -> dict[str, int]:
    """Gated findings counted by check; every gated check is present, so a report has every key."""
    counts = dict.fromkeys(gated(), 0)
    for finding in findings:
        if finding.gated:
            counts[finding.check] = counts.get(finding.check, 0) + 1
    return counts


# The checkers register on import, in this order (check_all's).
from .run import WORK_GAP, WORK_OVERLAP, WorkSpan, check_work_overlap, work_overlaps, work_spans  # noqa: E402, I001
from .lost_updates import LOST_UPDATE, check_lost_updates  # noqa: E402
from .tokens import (  # noqa: E402
    DUPLICATE_TOKEN,
    STALE_TOKEN,
    TOKEN_ORDER,
    check_stale_tokens,
    check_token_order,
)
from .elections import (  # noqa: E402
    OBSERVER,
    STORE_FAULTS,
    TERM_REGRESSION,
    TWO_LEADERS,
    UNOBSERVED_TERM,
    check_observed_terms,
    check_one_leader_per_term,
)
from .beliefs import BELIEF_OVERLAP, check_belief_overlap  # noqa: E402
from .partitions import (  # noqa: E402
    ITEM_OVERLAP,
    ITEM_OWNERLESS,
    OWNERLESS_SLACK,
    STALE_ITEM_WRITE,
    ItemWindow,
    check_item_overlap,
    check_item_ownerless,
    check_stale_item_writes,
    item_windows,
    ownerless_bound,
)
from .semaphores import PERMIT_OVERLAP, check_permit_overlap, permit_windows  # noqa: E402
from .state import CURSOR_REGRESSION, check_cursor_regression  # noqa: E402
from .rwlocks import (  # noqa: E402
    WRITER_BESIDE_READER,
    check_writer_beside_reader,
    reads_that_moved,
    rw_modes,
    rw_overlaps,
)

GATED: tuple[str, ...] = gated()
"""The checks whose findings are violations (the built-in checkers'), in registration order."""

__all__ = [
    "BELIEF_OVERLAP",
    "CHECKS",
    "CURSOR_REGRESSION",
    "DIAGNOSTICS",
    "DUPLICATE_TOKEN",
    "GATED",
    "ITEM_OVERLAP",
    "ITEM_OWNERLESS",
    "LOST_UPDATE",
    "OBSERVER",
    "OWNERLESS_SLACK",
    "PERMIT_OVERLAP",
    "REGISTERED",
    "STALE_ITEM_WRITE",
    "STALE_TOKEN",
    "STORE_FAULTS",
    "TERM_REGRESSION",
    "TOKEN_ORDER",
    "TWO_LEADERS",
    "UNOBSERVED_TERM",
    "WORK_GAP",
    "WORK_OVERLAP",
    "WRITER_BESIDE_READER",
    "Check",
    "ItemWindow",
    "WorkSpan",
    "check",
    "check_all",
    "check_belief_overlap",
    "check_cursor_regression",
    "check_item_overlap",
    "check_item_ownerless",
    "check_lost_updates",
    "check_observed_terms",
    "check_one_leader_per_term",
    "check_permit_overlap",
    "check_stale_item_writes",
    "check_stale_tokens",
    "check_token_order",
    "check_work_overlap",
    "check_writer_beside_reader",
    "gated",
    "item_windows",
    "ownerless_bound",
    "permit_windows",
    "reads_that_moved",
    "rw_modes",
    "rw_overlaps",
    "violations",
    "work_overlaps",
    "work_spans",
]
