"""The ``semaphore`` workload: never more permits held at once than the semaphore has."""

from __future__ import annotations

from collections.abc import Sequence

from ..history import Event, Finding, LeaseWindow, ResourceLog, lease_windows
from ..resource import SEMAPHORE
from . import check
from ._sweep import _unique

PERMIT_OVERLAP = "permit-overlap"


def permit_windows(history: Sequence[Event]) -> list[LeaseWindow]:
    """Each permit's window of a ``semaphore`` run: its belief (`lease_windows`) cut at the
    latest deadline its holder recorded for it (at the grant, then with each read and write):
    rule 3 says a holder acts only before it, and the store may grant the slot again after.

    A deadline belongs to the window of its process and token that it falls in: each slot
    counts its own tokens, so one worker may hold token 16 of slot 0 and later token 16 of
    slot 1, and the later permit's deadline must not stretch the earlier one."""
    recorded: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for e in history:
        deadline = e.value.get("deadline") if isinstance(e.value, dict) else None
        if e.token is not None and isinstance(deadline, (int, float)):
            recorded.setdefault((e.process, e.token), []).append((e.t, float(deadline)))
    windows = []
    for w in lease_windows(history):
        marks = recorded.get((w.process, w.token if w.token is not None else -1), [])
        deadline = max((d for t, d in marks if w.start <= t <= w.end), default=w.end)
        end = max(w.start, min(w.end, deadline))
        windows.append(LeaseWindow(w.name, w.process, w.token, w.start, end, w.ended_by))
    return windows


@check(
    {
        PERMIT_OVERLAP: "more workers than permits held a permit of the semaphore at the same time"
        " (before their deadlines)",
    },
    workloads=(SEMAPHORE,),
)
def check_permit_overlap(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """Never more permit windows open at once than the semaphore has permits."""
    if resource.workload != SEMAPHORE:
        return []
    permits = int(resource.settings["permits"])
    edges = sorted(
        (
            (t, step, w)
            for w in permit_windows(history)
            if w.end > w.start
            for t, step in ((w.start, 1), (w.end, -1))
        ),
        key=lambda edge: (edge[0], edge[1]),
    )  # at one instant an end (-1) sorts before a start: touching windows do not overlap
    findings: list[Finding] = []
    open_: dict[int, LeaseWindow] = {}
    for t, step, window in edges:
        if step < 0:
            open_.pop(id(window), None)
            continue
        open_[id(window)] = window
        if len(open_) > permits:
            held = sorted(open_.values(), key=lambda w: w.start)
            findings.append(
                Finding(
                    PERMIT_OVERLAP,
                    f"{len(held)} workers held permits at once ({permits} permits): "
                    + ", ".join(f"{w.process} {w.name!r} token {w.token}" for w in held),
                    t=t,
                    processes=_unique(*(w.process for w in held)),
                )
            )
    return findings
