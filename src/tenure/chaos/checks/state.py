"""``cursor-regression``: the ``state`` workload's cursor went back — a leader read it below an
advance acknowledged before its read began, or an advance was acknowledged that does not go
beyond one acknowledged before it began (an old leader's late step landed over a newer
leader's). A final cursor below an acknowledged advance is ``lost-update`` (`.lost_updates`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..history import Event, Finding, ResourceLog
from ..resource import STATE
from . import check

CURSOR_REGRESSION = "cursor-regression"


@check(
    {
        CURSOR_REGRESSION: "the cursor went back: a read below, or an advance not beyond, an "
        "advance acknowledged before it began"
    },
    workloads=(STATE,),
)
def check_cursor_regression(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """One sweep in time order, keeping the highest acknowledged advance so far; each read and
    each advance is judged against that as it stood when it began (one that overlaps another
    advance may see either side of it)."""
    if resource.workload != STATE:
        return []
    findings: list[Finding] = []
    highest, by = 0, ""
    floor: dict[tuple[str, str], tuple[int, str]] = {}  # an operation in flight: its floor
    for event in sorted(history, key=lambda e: e.t):
        if event.f not in ("read", "write"):
            continue
        if event.type == "invoke":
            floor[(event.process, event.f)] = (highest, by)
            continue
        least, writer = floor.pop((event.process, event.f), (0, ""))
        if event.type != "ok":
            continue
        if event.f == "read" and isinstance(event.value, int) and event.value < least:
            findings.append(_went_back(event, f"read cursor {event.value}", least, writer))
        elif event.f == "write" and isinstance(event.value, dict):
            new = event.value["new"]
            if new <= least:
                findings.append(_went_back(event, f"set the cursor to {new}", least, writer))
            if new > highest:
                highest, by = new, f"{event.process} (token {event.token})"
    return findings


def _went_back(event: Event, what: str, least: int, writer: str) -> Finding:
    return Finding(
        CURSOR_REGRESSION,
        f"{event.process} (token {event.token}) {what} after {writer}'s advance to {least}"
        " was acknowledged: the cursor went back",
        t=event.t,
        processes=(event.process,),
    )
