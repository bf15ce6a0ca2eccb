"""The ``election`` workload: one leader per term, terms never go back, and a follower that
observes the election sees every term that led."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..history import NEMESIS, Accepted, Event, Finding, ResourceLog
from . import check
from ._sweep import _unique

TWO_LEADERS = "two-leaders"
TERM_REGRESSION = "term-regression"
UNOBSERVED_TERM = "unobserved-term"
OBSERVER = "observer"
"""The history process of the follower that observes an election (``client.observe``)."""
STORE_FAULTS = frozenset({"member-kill", "member-pause", "majority-loss", "store-restart"})


@check(
    {
        TWO_LEADERS: "one election term has log entries from two different leaders",
        TERM_REGRESSION: "the election log accepted a term lower than an earlier one",
    },
    workloads=("election",),
)
def check_one_leader_per_term(resource: ResourceLog) -> list[Finding]:
    """Never two leaders acting with valid terms: one leader per term, and terms never go back."""
    if resource.workload != "election":
        return []
    return [*_two_leaders(resource.accepted), *_term_regressions(resource.accepted)]


def _two_leaders(accepted: Sequence[Accepted]) -> Iterator[Finding]:
    leaders: dict[Any, dict[Any, Accepted]] = defaultdict(dict)
    for write in accepted:
        leaders[write.data["term"]].setdefault(write.data["leader"], write)
    for term, first in leaders.items():
        if len(first) > 1:
            who = ", ".join(
                f"{leader} (first write #{w.seq} by {w.process})" for leader, w in first.items()
            )
            yield Finding(
                TWO_LEADERS,
                f"term {term} has writes from {len(first)} leaders: {who}",
                t=max((w.t for w in first.values() if w.t is not None), default=None),
                processes=_unique(*(w.process for w in first.values())),
            )


def _term_regressions(accepted: Iterable[Accepted]) -> Iterator[Finding]:
    highest: Accepted | None = None
    for write in accepted:
        term = write.data["term"]
        if highest is not None and term < highest.data["term"]:
            yield Finding(
                TERM_REGRESSION,
                f"write #{write.seq} by {write.process} in term {term} accepted after term"
                f" {highest.data['term']} (write #{highest.seq} by {highest.process})",
                t=write.t,
                processes=_unique(highest.process, write.process),
            )
        if highest is None or term > highest.data["term"]:
            highest = write


@check(
    {
        UNOBSERVED_TERM: "a follower observing the election never saw a term that wrote to the log",
    },
    workloads=("election",),
)
def check_observed_terms(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """A follower observing the election must see every term that led (wrote to the log).

    Only when the run had an observer. After a store fault the store's watch may have to start
    over from the current state (a restarted server, a broken listening connection), so missed
    terms are then a diagnostic, not a violation."""
    observed = {e.token for e in history if e.process == OBSERVER and e.f == "observe"}
    if resource.workload != "election" or not any(e.process == OBSERVER for e in history):
        return []
    store_faults = any(e.process == NEMESIS and e.f in STORE_FAULTS for e in history)
    first: dict[int, Accepted] = {}
    for write in resource.accepted:
        first.setdefault(write.token, write)
    return [
        Finding(
            UNOBSERVED_TERM,
            f"term {term} (leader {write.data['leader']}) wrote to the log but the observer"
            " never reported it",
            gated=not store_faults,
            t=write.t,
            processes=(write.process,),
        )
        for term, write in first.items()
        if term not in observed
    ]
