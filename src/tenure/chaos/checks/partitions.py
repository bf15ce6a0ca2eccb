"""The ``partition`` workload (and the per-item counters a ``semaphore`` run shares): no item
owned twice, no stale write to an item, every item owned again soon after a fault heals."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..history import NEMESIS, Accepted, Event, Finding, ResourceLog, targets_of
from ..resource import PARTITION, PER_ITEM
from . import check
from ._sweep import _overlapping, _unique

ITEM_OVERLAP = "item-overlap"
STALE_ITEM_WRITE = "stale-item-write"
ITEM_OWNERLESS = "item-ownerless"
OWNERLESS_SLACK = 1.0
"""Seconds, on top of TTL + lock-delay + TTL/3, within which every item of a ``partition`` run
must be owned again once a fault heals: a member re-reads the group at least every TTL/3, and
a notification, a campaign, a grant and a process start (after a kill) fit in this slack."""


@dataclass(frozen=True)
class ItemWindow:
    """The time a member may act on its belief that it owns an item: from its ``own`` record
    to the first of its ``disown``, a kill, its restart, the end — and never past the item's
    lease deadline, the latest one it recorded (rule 3: a holder acts only before it). After
    that deadline a holder may still *act* (a paused one wakes up and writes): that is the
    fence's business (``stale-item-write``), not a second owner. A grant heard of only once its
    deadline had passed (its ``own`` carries none) makes an empty window."""

    item: str
    process: str
    token: int | None
    start: float
    end: float
    ended_by: str  # disown's why (leaving, lost, end), kill, restart, deadline or history-end


def item_windows(history: Sequence[Event], end: float | None = None) -> list[ItemWindow]:
    """Every ``partition`` ownership window of the history, sorted by start."""
    if end is None:
        end = max((e.t for e in history), default=0.0)
    windows: list[ItemWindow] = []
    open_: dict[tuple[str, str], tuple[int | None, float, float]] = {}  # → token, start, deadline

    def close(key: tuple[str, str], t: float, why: str) -> None:
        token, start, deadline = open_.pop(key)
        if deadline < t:
            t, why = deadline, "deadline"
        windows.append(ItemWindow(key[1], key[0], token, start, max(start, t), why))

    def close_all(process: str, t: float, why: str) -> None:
        for key in [k for k in open_ if k[0] == process]:
            close(key, t, why)

    for e in history:
        if e.process == NEMESIS:
            if e.f == "kill" and e.type in ("invoke", "info"):
                for target in targets_of(e):
                    close_all(target, e.t, "kill")
            continue
        if e.f == "start":
            close_all(e.process, e.t, "restart")
            continue
        item, deadline = _item_and_deadline(e)
        if item is None:
            continue
        key = (e.process, item)
        if e.f == "own":
            if key in open_:
                close(key, e.t, "reacquire")
            # No deadline: it had passed when the member heard of the grant (it was paused
            # between the store's grant and reading the change): no ownership at all.
            open_[key] = (e.token, e.t, deadline if deadline is not None else e.t)
        elif e.f == "disown" and key in open_ and open_[key][0] in (None, e.token):
            close(key, e.t, str(e.value.get("why", "disown")))
        elif deadline is not None and e.type == "invoke" and key in open_:
            token, start, latest = open_[key]
            if token == e.token:  # a renewal moved the deadline on: the latest one counts
                open_[key] = (token, start, max(latest, deadline))
    for key in list(open_):
        close(key, end, "history-end")
    return sorted(windows, key=lambda w: w.start)


def _item_and_deadline(event: Event) -> tuple[str | None, float | None]:
    value = event.value
    if not isinstance(value, dict) or not isinstance(value.get("item"), str):
        return None, None
    deadline = value.get("deadline")
    return value["item"], float(deadline) if isinstance(deadline, (int, float)) else None


@check(
    {
        ITEM_OVERLAP: "two members believed they owned one item at the same time (before"
        " deadlines)",
    }
)
def check_item_overlap(history: Sequence[Event]) -> list[Finding]:
    """No item owned by two members at once: their windows (`item_windows`) of one item must
    not overlap, judged as ``belief-overlap`` judges one lock — but gated, since each window
    ends by the holder's own deadline, which comes before the store can grant the item to
    anyone else."""
    by_item: dict[str, list[ItemWindow]] = defaultdict(list)
    for window in item_windows(history):
        by_item[window.item].append(window)
    findings = [
        Finding(
            ITEM_OVERLAP,
            f"item {first.item!r}: {first.process} (token {first.token}) owned it when"
            f" {second.process} got token {second.token}; both for {overlap * 1000:.1f} ms",
            t=second.start,
            processes=(first.process, second.process),
        )
        for windows in by_item.values()
        for first, second, overlap in _overlapping(
            windows, lambda a, b: a.process != b.process, touching=False
        )
    ]
    findings.sort(key=lambda f: f.t if f.t is not None else -math.inf)
    return findings


@check(
    {
        STALE_ITEM_WRITE: "an item's counter accepted a token lower than one it had already"
        " accepted",
    },
    workloads=PER_ITEM,
)
def check_stale_item_writes(resource: ResourceLog) -> list[Finding]:
    """Per item, the resource must refuse a token lower than one it already accepted for that
    item (`check_stale_tokens`, one item at a time). For a semaphore the items are its slots:
    two holders of one permit acted, so more than ``permits`` at once."""
    if resource.workload not in PER_ITEM:
        return []
    findings: list[Finding] = []
    highest: dict[str, Accepted] = {}
    for write in resource.accepted:
        item = write.data["item"]
        best = highest.get(item)
        if best is not None and write.token < best.token:
            findings.append(
                Finding(
                    STALE_ITEM_WRITE,
                    f"item {item!r}: write #{write.seq} by {write.process} with token"
                    f" {write.token} accepted after token {best.token} (write #{best.seq} by"
                    f" {best.process})",
                    t=write.t,
                    processes=_unique(best.process, write.process),
                )
            )
        if best is None or write.token > best.token:
            highest[item] = write
    return findings


def ownerless_bound(ttl: float, lock_delay: float) -> float:
    """Seconds within which every item must be owned again once the last fault healed."""
    return ttl + lock_delay + ttl / 3 + OWNERLESS_SLACK


@check(
    {
        ITEM_OWNERLESS: "an item had no owner for longer than TTL + lock-delay + TTL/3 + 1 s"
        " after a fault healed (or was never owned)",
    },
    workloads=(PARTITION,),
)
def check_item_ownerless(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """Every item owned again within `ownerless_bound` of a fault's healing (kill: its instant).

    Per item, each stretch with no ownership window (`item_windows`) between its first
    ownership and the run's end (the first ``stop``) is measured from the later of its start
    and the healing of the last fault that began before it ended: a fault still under way, or
    healed less than the bound ago, excuses it. An item never owned is a finding too."""
    if resource.workload != PARTITION:
        return []
    items = [str(item) for item in resource.settings.get("items", [])]
    bound = ownerless_bound(
        float(resource.settings.get("ttl", 1.0)), float(resource.settings.get("lock_delay", 0.0))
    )
    last = max((e.t for e in history), default=0.0)
    stop = min((e.t for e in history if e.f == "stop" and e.process != NEMESIS), default=last)
    faults = [(e.t, e.type) for e in history if e.process == NEMESIS and e.f != "clock"]
    by_item: dict[str, list[ItemWindow]] = defaultdict(list)
    for window in item_windows(history):
        by_item[window.item].append(window)
    findings: list[Finding] = []
    for item in items:
        windows = by_item.get(item, [])
        if not windows:
            findings.append(Finding(ITEM_OWNERLESS, f"item {item!r} was never owned"))
            continue
        for gap_start, gap_end in _gaps(windows, stop):
            if _under_way(faults, gap_end):
                continue  # a fault was still under way when the item was owned again
            healed = [t for t, phase in faults if t < gap_end and phase != "invoke"]
            since = max([gap_start, *healed])
            if gap_end - since > bound:
                findings.append(
                    Finding(
                        ITEM_OWNERLESS,
                        f"item {item!r} had no owner for {(gap_end - gap_start) * 1000:.0f} ms,"
                        f" {gap_end - since:.2f} s after"
                        f" {'the last fault healed' if since > gap_start else 'it was let go'}"
                        f" (bound {bound:.2f} s)",
                        t=gap_end,
                    )
                )
    return findings


def _under_way(faults: Sequence[tuple[float, str]], t: float) -> bool:
    """True if a lasting fault had begun (``invoke``) and not yet healed (``ok``) by ``t``."""
    depth = 0
    for when, phase in faults:
        if when >= t:
            break
        if phase == "invoke":
            depth += 1
        elif phase == "ok":
            depth = max(0, depth - 1)
    return depth > 0


def _gaps(windows: Sequence[ItemWindow], stop: float) -> Iterator[tuple[float, float]]:
    """The stretches before ``stop`` that no window covers, after the first one starts (one
    that reaches ``stop`` ends there)."""
    covered = windows[0].start
    for window in sorted(windows, key=lambda w: w.start):
        if window.start >= stop:
            break
        if window.start > covered:
            yield covered, window.start
        covered = max(covered, window.end)
    if covered < stop:
        yield covered, stop
