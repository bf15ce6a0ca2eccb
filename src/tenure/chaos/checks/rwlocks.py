"""The ``rwlock`` workload: no writer beside a reader, judged at the resource and at the lock."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..history import NEMESIS, Accepted, Event, Finding, LeaseWindow, ResourceLog
from ..resource import RWLOCK
from . import check
from ._sweep import _overlapping, _unique
from .semaphores import permit_windows

WRITER_BESIDE_READER = "writer-beside-reader"


@dataclass(frozen=True)
class _Read:
    process: str
    token: int
    invoked: float
    done: float
    value: Any


@check(
    {
        WRITER_BESIDE_READER: "a writer's write landed while a reader held the read-write lock (its"
        " two reads differ), or a writer held it beside another holder (before their deadlines)",
    },
    workloads=(RWLOCK,),
)
def check_writer_beside_reader(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """No writer beside a reader of an ``rwlock`` run, judged twice:

    - **At the resource** (`reads_that_moved`): every ``ok`` read of one read grant returned
      the same value. Only an accepted write changes the counter, so two values mean that a
      write landed between two reads of a reader that held the lock by its own account. Fenced,
      none can: a write admitted after the reader's first read carries a higher token
      (`admit_write` refuses one below a reader admitted), and then the reader's second read is
      refused (`admit_read` refuses one below the latest write). Unfenced, a reader paused
      between its reads wakes up after a writer wrote: this half is the positive control.
    - **At the lock** (`rw_overlaps`): no write grant's window overlaps the window of another
      grant, read or write. A window is `permit_windows`'s: the holder's belief cut at the
      latest deadline it recorded (rule 3: it may not act after it, and the store frees the
      lock only after it). This judges the read-write lock itself, which the fence would
      otherwise hide (a writer granted beside a reader has its writes admitted and the
      reader's next read refused). It holds only with clocks within the drift bound: after a
      run whose lease clocks were skewed on purpose (a nemesis ``clock`` event) its findings
      are diagnostics.
    """
    if resource.workload != RWLOCK:
        return []
    findings = [
        _moved_finding(first, second, resource.accepted)
        for first, second in reads_that_moved(history)
    ]
    drifted = any(e.process == NEMESIS and e.f == "clock" for e in history)
    modes = rw_modes(history)
    for writer, other, overlap in rw_overlaps(history):
        other_mode = modes.get((other.process, other.token if other.token is not None else -1))
        findings.append(
            Finding(
                WRITER_BESIDE_READER,
                f"{writer.process} held the write lock (token {writer.token}) while"
                f" {other.process} held the {other_mode} lock (token"
                f" {other.token}), both before their deadlines, for {overlap * 1000:.1f} ms",
                gated=not drifted,
                t=max(writer.start, other.start),
                processes=_unique(writer.process, other.process),
            )
        )
    findings.sort(key=lambda f: f.t if f.t is not None else -math.inf)
    return findings


def rw_modes(history: Iterable[Event]) -> dict[tuple[str, int], str]:
    """Each ``rwlock`` grant's mode (``read`` or ``write``) by (process, token), from the
    acquire ``ok`` (which names it)."""
    modes: dict[tuple[str, int], str] = {}
    for e in history:
        if e.f == "acquire" and e.type == "ok" and e.token is not None:
            mode = e.value.get("mode") if isinstance(e.value, dict) else None
            if mode in ("read", "write"):
                modes[(e.process, e.token)] = mode
    return modes


def reads_that_moved(history: Sequence[Event]) -> Iterator[tuple[_Read, _Read]]:
    """Each read grant's first two consecutive ``ok`` reads that returned different values."""
    modes = rw_modes(history)
    invoked: dict[str, float] = {}
    reads: dict[tuple[str, int], list[_Read]] = defaultdict(list)
    for e in history:
        if e.f != "read" or e.process == NEMESIS:
            continue
        if e.type == "invoke":
            invoked[e.process] = e.t
        elif e.type == "ok" and e.token is not None and modes.get((e.process, e.token)) == "read":
            start = invoked.pop(e.process, e.t)
            reads[(e.process, e.token)].append(_Read(e.process, e.token, start, e.t, e.value))
    for lease in reads.values():
        for first, second in itertools.pairwise(lease):
            if first.value != second.value:
                yield first, second
                break


def _moved_finding(first: _Read, second: _Read, accepted: Sequence[Accepted]) -> Finding:
    between = [
        w for w in accepted if w.t is not None and first.invoked < w.t < second.done
    ]  # the writes the resource committed between the two reads (when it keeps the time)
    landed = "; ".join(f"write #{w.seq} by {w.process} token {w.token}" for w in between)
    return Finding(
        WRITER_BESIDE_READER,
        f"{first.process} (read lock, token {first.token}) read {first.value!r}, then"
        f" {second.value!r}: a writer's write landed while a reader held the lock"
        + (f" ({landed})" if landed else ""),
        t=second.done,
        processes=_unique(first.process, *(w.process for w in between)),
    )


def rw_overlaps(history: Sequence[Event]) -> Iterator[tuple[LeaseWindow, LeaseWindow, float]]:
    """Each write grant's window (`permit_windows`) with another grant's window it overlaps
    (not by a point), and the overlap in seconds; the writer comes first."""
    modes = rw_modes(history)

    def mode(w: LeaseWindow) -> str | None:
        return modes.get((w.process, w.token)) if w.token is not None else None

    windows = [w for w in permit_windows(history) if w.end > w.start and mode(w) is not None]
    for a, b, overlap in _overlapping(
        windows,
        lambda a, b: "write" in (mode(a), mode(b)) and (a.process, a.token) != (b.process, b.token),
        touching=False,
    ):
        yield (a, b, overlap) if mode(a) == "write" else (b, a, overlap)
