"""The ``run`` workload (commands under ``tenure run``, no token checked): the resource is
time itself, so ``work-overlap`` reads when each child recorded work."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..history import Finding, WorkRecord
from . import check
from ._sweep import _overlapping, _unique

WORK_OVERLAP = "work-overlap"
WORK_GAP = 0.25
"""Seconds of silence after which a child counts as not working (stopped, or not scheduled):
ten of its 20 ms ticks. A frozen child does no work, so only time both children ran counts."""


@dataclass(frozen=True)
class WorkSpan:
    """A stretch of time one child recorded work with no silence longer than the gap."""

    child: str
    token: int
    start: float
    end: float

    @property
    def process(self) -> str:
        """The worker that ran the child (``w3`` for ``w3-7``)."""
        return self.child.rpartition("-")[0] or self.child


def work_spans(work: Iterable[WorkRecord], gap: float = WORK_GAP) -> list[WorkSpan]:
    """Each child's records joined into spans, split where it was silent for more than ``gap``
    seconds; sorted by start."""
    by_child: dict[str, list[WorkRecord]] = defaultdict(list)
    for record in work:
        by_child[record.child].append(record)
    spans: list[WorkSpan] = []
    for child, records in by_child.items():
        records.sort(key=lambda r: r.t)
        start = previous = records[0]
        for record in records[1:]:
            if record.t - previous.t > gap:
                spans.append(WorkSpan(child, start.token, start.t, previous.t))
                start = record
            previous = record
        spans.append(WorkSpan(child, start.token, start.t, previous.t))
    return sorted(spans, key=lambda s: s.start)


@check(
    {
        WORK_OVERLAP: "two commands run under tenure run (different children) worked at the same"
        " time",
    }
)
def check_work_overlap(work: Sequence[WorkRecord], gap: float = WORK_GAP) -> list[Finding]:
    """Every interval in which two children worked at once. A command that checks no token is
    safe only if it stopped before anyone else was granted the lock; this reads when each child
    recorded work, not what any supervisor believed."""
    return [_work_finding(*overlap) for overlap in work_overlaps(work, gap)]


def work_overlaps(
    work: Sequence[WorkRecord], gap: float = WORK_GAP
) -> Iterator[tuple[WorkSpan, WorkSpan, float]]:
    """Each pair of spans of different children that overlap, with the overlap in seconds (a
    span of one record inside another's counts, with 0 s: work was done while the other ran)."""
    spans = work_spans(work, gap)
    return _overlapping(spans, lambda a, b: a.child != b.child, touching=True)


def _work_finding(first: WorkSpan, second: WorkSpan, overlap: float) -> Finding:
    return Finding(
        WORK_OVERLAP,
        f"{first.child} (token {first.token}) and {second.child} (token {second.token}) worked"
        f" at once for {overlap * 1000:.1f} ms",
        t=second.start,
        processes=_unique(first.process, second.process),
    )
