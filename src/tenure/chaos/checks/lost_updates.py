"""``lost-update``: a write the resource accepted or acknowledged that its final state lacks
(the ``counter``, ``set``, ``rwlock`` and per-item workloads)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..history import Accepted, Event, Finding, ResourceLog
from ..resource import COUNTERS, PER_ITEM, STATE
from . import check

LOST_UPDATE = "lost-update"


@check(
    {
        LOST_UPDATE: "an acknowledged or accepted write is missing from the resource's final state",
    }
)
def check_lost_updates(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """Writes that the resource accepted or acknowledged but its final state does not hold."""
    if resource.workload in COUNTERS:  # rwlock: its writers' counter steps
        return [
            *_counter_overwrites(resource.accepted),
            *_counter_unrecorded_acks(history, resource.accepted),
            *_counter_final(resource),
        ]
    if resource.workload == "set":
        return _set_lost_elements(history, resource)
    if resource.workload in ("election", "run"):
        return []  # an append-only log, or no shared state: nothing to overwrite
    if resource.workload in PER_ITEM:
        return _item_lost_updates(resource)
    if resource.workload == STATE:
        return list(_cursor_final(history, resource))
    raise ValueError(f"unknown workload {resource.workload!r}")


def _counter_overwrites(accepted: Iterable[Accepted]) -> Iterator[Finding]:
    """A write computed from a value other than the one the resource held overwrote updates."""
    previous = 0
    for write in accepted:
        old, new = write.data["old"], write.data["new"]
        if old != previous:
            yield Finding(
                LOST_UPDATE,
                f"write #{write.seq} by {write.process} token {write.token} set {new} from a read"
                f" of {old}, but the counter held {previous}: an update was overwritten",
                t=write.t,
                processes=(write.process,),
            )
        previous = new


def _counter_unrecorded_acks(
    history: Iterable[Event], accepted: Iterable[Accepted]
) -> Iterator[Finding]:
    """A worker told its write succeeded must find it in the resource's log."""
    recorded: Counter[tuple[str, int | None, Any]] = Counter(
        (a.process, a.token, a.data["new"]) for a in accepted
    )
    for event in _acknowledged_writes(history, "new"):
        key = (event.process, event.token, event.value["new"])
        if recorded[key] > 0:
            recorded[key] -= 1
            continue
        yield Finding(
            LOST_UPDATE,
            f"{event.process} token {event.token} was told its write"
            f" {event.value.get('old')}->{event.value['new']} succeeded, but the resource has no"
            " such write",
            t=event.t,
            processes=(event.process,),
        )


def _item_lost_updates(resource: ResourceLog) -> list[Finding]:
    """The counter checks, one item at a time (each item is a counter of its own)."""
    by_item: dict[str, list[Accepted]] = defaultdict(list)
    for write in resource.accepted:
        by_item[write.data["item"]].append(write)
    findings = [f for writes in by_item.values() for f in _counter_overwrites(writes)]
    for item, value in sorted(resource.final.items()):
        if value != len(by_item.get(item, ())):
            findings.append(
                Finding(
                    LOST_UPDATE,
                    f"item {item!r}: final counter {value} != {len(by_item.get(item, ()))}"
                    " accepted writes",
                )
            )
    return findings


def _counter_final(resource: ResourceLog) -> Iterator[Finding]:
    """Each accepted write adds one, so the final value counts them."""
    if resource.final != len(resource.accepted):
        yield Finding(
            LOST_UPDATE,
            f"final counter {resource.final} != {len(resource.accepted)} accepted writes",
        )


def _set_lost_elements(history: Sequence[Event], resource: ResourceLog) -> list[Finding]:
    """An element acknowledged or accepted but absent from the final set was overwritten by an
    unfenced read-modify-write of the whole set. Each element is reported once."""
    final = set(resource.final)
    reported: set[Any] = set()
    findings: list[Finding] = []

    def lost(element: Any, how: str, process: str, t: float | None) -> None:
        if element in final or element in reported:
            return
        reported.add(element)
        findings.append(
            Finding(
                LOST_UPDATE,
                f"element {element!r} {how} is missing from the final set: an unfenced"
                " read-modify-write overwrote it",
                t=t,
                processes=(process,),
            )
        )

    for event in _acknowledged_writes(history, "element"):
        how = f"(acknowledged to {event.process} token {event.token})"
        lost(event.value["element"], how, event.process, event.t)
    for write in resource.accepted:
        how = f"(accepted as write #{write.seq} from {write.process} token {write.token})"
        lost(write.data["element"], how, write.process, write.t)
    return findings


def _acknowledged_writes(history: Iterable[Event], key: str) -> Iterator[Event]:
    for event in history:
        value = event.value
        if event.f == "write" and event.type == "ok" and isinstance(value, dict) and key in value:
            yield event


def _cursor_final(history: Iterable[Event], resource: ResourceLog) -> Iterator[Finding]:
    """The ``state`` workload: the cursor the store kept is below an acknowledged advance."""
    acked = [e for e in history if e.f == "write" and e.type == "ok" and isinstance(e.value, dict)]
    top = max(acked, key=lambda e: e.value["new"], default=None)
    if top is not None and resource.final < top.value["new"]:
        yield Finding(
            LOST_UPDATE,
            f"the cursor ended at {resource.final}, below the advance to {top.value['new']}"
            f" acknowledged to {top.process} (token {top.token})",
            t=top.t,
            processes=(top.process,),
        )
