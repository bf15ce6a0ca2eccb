"""The ``run`` workload: its workers are real ``tenure run`` supervisors (`..processes.RunWorker`),
not `..worker` processes, so it has no step here; its commands record when they worked
(`..workchild`), and those spans are the timeline's bars."""

from __future__ import annotations

from collections.abc import Sequence

from ..checks import work_spans
from ..history import Event, LeaseWindow, WorkRecord
from ..resource import RUN
from ._base import Workload


def lanes(lock: str, history: Sequence[Event], work: Sequence[WorkRecord]) -> list[LeaseWindow]:
    """When each command worked, in its worker's lane."""
    return [
        LeaseWindow(lock, s.process, s.token, s.start, s.end, "its last record")
        for s in work_spans(work)
    ]


WORKLOAD = Workload(RUN, lanes=lanes)
