"""Sweeps shared by the checkers: overlapping intervals, and processes named once each."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar


class _Interval(Protocol):
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...


Span = TypeVar("Span", bound=_Interval)


def _overlapping(
    items: Iterable[Span], apart: Callable[[Span, Span], bool], touching: bool
) -> Iterator[tuple[Span, Span, float]]:
    """Each pair of ``apart`` intervals that overlap (``touching``: also by a point), with the
    overlap in seconds. Sweep by start, keeping the open ones in a heap by end: each pair is met
    once, when the later one starts."""
    active: list[tuple[float, int, Span]] = []
    for index, item in enumerate(sorted(items, key=lambda i: i.start)):
        while active and (active[0][0] < item.start if touching else active[0][0] <= item.start):
            heapq.heappop(active)
        for _, _, other in active:
            overlap = min(other.end, item.end) - item.start
            if apart(other, item) and (touching or overlap > 0):
                yield other, item, overlap
        heapq.heappush(active, (item.end, index, item))


def _unique(*processes: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(processes))
