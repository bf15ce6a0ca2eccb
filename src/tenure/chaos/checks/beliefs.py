"""``belief-overlap`` (a diagnostic): two workers believed they held one lock at once."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence

from ..history import Event, Finding, LeaseWindow, lease_windows
from . import check
from ._sweep import _overlapping

BELIEF_OVERLAP = "belief-overlap"


@check(
    {
        BELIEF_OVERLAP: "diagnostic: two workers believed they held one lock at the same time",
    },
    diagnostic=True,
)
def check_belief_overlap(history: Sequence[Event]) -> list[Finding]:
    """Times when two workers both believed they held one lock. Expected under pauses and
    partitions (fencing makes it harmless), so not gated; it shows that the faults did bite."""
    by_name: dict[str, list[LeaseWindow]] = defaultdict(list)
    for window in lease_windows(history):
        by_name[window.name].append(window)
    findings = [f for windows in by_name.values() for f in _overlaps(windows)]
    findings.sort(key=lambda f: f.t if f.t is not None else -math.inf)
    return findings


def _overlaps(windows: Sequence[LeaseWindow]) -> Iterator[Finding]:
    for first, second, overlap in _overlapping(
        windows, lambda a, b: a.process != b.process, touching=False
    ):
        yield _overlap_finding(first, second, overlap)


def _overlap_finding(first: LeaseWindow, second: LeaseWindow, overlap: float) -> Finding:
    return Finding(
        BELIEF_OVERLAP,
        f"lock {first.name!r}: {first.process} (token {first.token}) still believed it held it"
        f" when {second.process} got token {second.token}; both for {overlap * 1000:.1f} ms",
        gated=False,
        t=second.start,
        processes=(first.process, second.process),
    )
