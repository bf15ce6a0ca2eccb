"""The checkers of a chaos run: they read the merged history and what the protected resource
accepted, and name every broken promise of docs/design.md.

Safety is judged by the resource's own log (what it accepted, in its commit order), not by what
the workers believed: a worker's belief that it holds a lock can be stale under faults, and fencing
makes that harmless. So the gated checks (violations, exit status 1) read the resource log or the
grants the store made; ``belief-overlap`` is a diagnostic only (``gated=False``). For the ``run``
workload, whose commands check no token, the resource is time itself: ``work-overlap`` reads
when each child recorded work.

Each checker is a linear pass or a sort plus a sweep, since histories hold 10^4-10^5 events.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .history import (
    NEMESIS,
    Accepted,
    Event,
    Finding,
    LeaseWindow,
    ResourceLog,
    WorkRecord,
    lease_windows,
    targets_of,
)
from .resource import COUNTERS, PARTITION, PER_ITEM, RWLOCK, SEMAPHORE

LOST_UPDATE = "lost-update"
STALE_TOKEN = "stale-token"
TOKEN_ORDER = "token-order"
DUPLICATE_TOKEN = "duplicate-token"
TWO_LEADERS = "two-leaders"
TERM_REGRESSION = "term-regression"
UNOBSERVED_TERM = "unobserved-term"
BELIEF_OVERLAP = "belief-overlap"
WORK_OVERLAP = "work-overlap"
ITEM_OVERLAP = "item-overlap"
STALE_ITEM_WRITE = "stale-item-write"
ITEM_OWNERLESS = "item-ownerless"
PERMIT_OVERLAP = "permit-overlap"
WRITER_BESIDE_READER = "writer-beside-reader"
OWNERLESS_SLACK = 1.0
"""Seconds, on top of TTL + lock-delay + TTL/3, within which every item of a ``partition`` run
must be owned again once a fault heals: a member re-reads the group at least every TTL/3, and
a notification, a campaign, a grant and a process start (after a kill) fit in this slack."""
WORK_GAP = 0.25
"""Seconds of silence after which a child counts as not working (stopped, or not scheduled):
ten of its 20 ms ticks. A frozen child does no work, so only time both children ran counts."""
OBSERVER = "observer"
"""The history process of the follower that observes an election (``client.observe``)."""
STORE_FAULTS = frozenset({"member-kill", "member-pause", "majority-loss", "store-restart"})

CHECKS: dict[str, str] = {
    LOST_UPDATE: "an acknowledged or accepted write is missing from the resource's final state",
    STALE_TOKEN: "the resource accepted a token lower than one it had already accepted",
    TOKEN_ORDER: "a grant got a lower token than a grant of the same lock that completed before it",
    DUPLICATE_TOKEN: "the store granted the same token of one lock twice",
    TWO_LEADERS: "one election term has log entries from two different leaders",
    TERM_REGRESSION: "the election log accepted a term lower than an earlier one",
    UNOBSERVED_TERM: "a follower observing the election never saw a term that wrote to the log",
    WORK_OVERLAP: "two commands run under tenure run (different children) worked at the same time",
    ITEM_OVERLAP: "two members believed they owned one item at the same time (before deadlines)",
    STALE_ITEM_WRITE: "an item's counter accepted a token lower than one it had already accepted",
    ITEM_OWNERLESS: "an item had no owner for longer than TTL + lock-delay + TTL/3 + 1 s after a"
    " fault healed (or was never owned)",
    PERMIT_OVERLAP: "more workers than permits held a permit of the semaphore at the same time"
    " (before their deadlines)",
    WRITER_BESIDE_READER: "a writer's write landed while a reader held the read-write lock (its"
    " two reads differ), or a writer held it beside another holder (before their deadlines)",
    BELIEF_OVERLAP: "diagnostic: two workers believed they held one lock at the same time",
}
DIAGNOSTICS = frozenset({BELIEF_OVERLAP})
GATED: tuple[str, ...] = tuple(name for name in CHECKS if name not in DIAGNOSTICS)


def check_all(
    history: Sequence[Event], resource: ResourceLog, work: Sequence[WorkRecord] = ()
) -> list[Finding]:
    """Every checker that applies to the resource's workload (``work``: the ``run`` workload's
    work records)."""
    return [
        *check_work_overlap(work),
        *check_lost_updates(history, resource),
        *check_stale_tokens(resource),
        *check_token_order(history),
        *check_one_leader_per_term(resource),
        *check_observed_terms(history, resource),
        *check_belief_overlap(history),
        *check_item_overlap(history),
        *check_stale_item_writes(resource),
        *check_item_ownerless(history, resource),
        *check_permit_overlap(history, resource),
        *check_writer_beside_reader(history, resource),
    ]


def violations(findings: Iterable[Finding]) -> dict[str, int]:
    """Gated findings counted by check; every gated check is present, so a report has every key."""
    counts = dict.fromkeys(GATED, 0)
    for finding in findings:
        if finding.gated:
            counts[finding.check] = counts.get(finding.check, 0) + 1
    return counts


# --- lost updates ---------------------------------------------------------------------------


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


# --- tokens at the resource -----------------------------------------------------------------


def check_stale_tokens(resource: ResourceLog) -> list[Finding]:
    """The fence must refuse a token lower than one it already accepted (for an election log the
    token is the term)."""
    if resource.workload in PER_ITEM:
        return []  # a token per item: `check_stale_item_writes`
    findings: list[Finding] = []
    highest: Accepted | None = None
    for write in resource.accepted:
        if highest is not None and write.token < highest.token:
            findings.append(
                Finding(
                    STALE_TOKEN,
                    f"write #{write.seq} by {write.process} with token {write.token} accepted"
                    f" after token {highest.token} (write #{highest.seq} by {highest.process})",
                    t=write.t,
                    processes=_unique(highest.process, write.process),
                )
            )
        if highest is None or write.token > highest.token:
            highest = write
    return findings


# --- tokens at the store --------------------------------------------------------------------


@dataclass(frozen=True)
class _Grant:
    name: str
    process: str
    token: int
    invoked: float  # -inf if the invoke is missing: concurrent with every earlier grant
    granted: float


def check_token_order(history: Sequence[Event]) -> list[Finding]:
    """Per lock, tokens are unique and grow with real time: a grant that completed before another
    was asked for has the lower token. Concurrent grants may come in either order."""
    by_name: dict[str, list[_Grant]] = defaultdict(list)
    for grant in _grants(history):
        by_name[grant.name].append(grant)
    findings: list[Finding] = []
    for grants in by_name.values():
        findings.extend(_duplicate_tokens(grants))
        findings.extend(_order_violations(grants))
    findings.sort(key=lambda f: f.t if f.t is not None else -math.inf)
    return findings


def _duplicate_tokens(grants: Sequence[_Grant]) -> Iterator[Finding]:
    by_token: dict[int, list[_Grant]] = defaultdict(list)
    for grant in grants:
        by_token[grant.token].append(grant)
    for token, same in by_token.items():
        if len(same) > 1:
            who = ", ".join(g.process for g in same)
            yield Finding(
                DUPLICATE_TOKEN,
                f"lock {same[0].name!r} token {token} granted {len(same)} times: {who}",
                t=same[1].granted,
                processes=_unique(*(g.process for g in same)),
            )


def _order_violations(grants: Sequence[_Grant]) -> Iterator[Finding]:
    """Sweep grants by invoke time, keeping the highest token among grants completed before it:
    O(n log n), and each violating grant is reported once (against that highest token). An equal
    token is left to the duplicate check."""
    completed = sorted(grants, key=lambda g: g.granted)
    done = 0
    highest: _Grant | None = None
    for grant in sorted(grants, key=lambda g: g.invoked):
        while done < len(completed) and completed[done].granted < grant.invoked:
            if highest is None or completed[done].token > highest.token:
                highest = completed[done]
            done += 1
        if highest is not None and highest.token > grant.token:
            yield Finding(
                TOKEN_ORDER,
                f"lock {grant.name!r}: {grant.process} got token {grant.token}, lower than token"
                f" {highest.token} granted to {highest.process}"
                f" {(grant.invoked - highest.granted) * 1000:.1f} ms before it asked",
                t=grant.granted,
                processes=_unique(highest.process, grant.process),
            )


def _grants(history: Iterable[Event]) -> Iterator[_Grant]:
    return (grant for _, grant in _with_grants(history) if grant is not None)


def _with_grants(history: Iterable[Event]) -> Iterator[tuple[Event, _Grant | None]]:
    """Each event, with the grant it completes if it is an acquire ``ok`` (paired with its
    process's latest acquire invoke, which carries the lock's name)."""
    asking: dict[str, Event] = {}
    for event in history:
        grant = None
        if event.f == "acquire" and event.process != NEMESIS:
            if event.type == "invoke":
                asking[event.process] = event
            else:
                invoke = asking.pop(event.process, None)
                if event.type == "ok" and event.token is not None:
                    grant = _Grant(
                        name=_lock_name(invoke) or _lock_name(event),
                        process=event.process,
                        token=event.token,
                        invoked=invoke.t if invoke is not None else -math.inf,
                        granted=event.t,
                    )
        yield event, grant


def _lock_name(event: Event | None) -> str:
    if event is not None and isinstance(event.value, dict):
        return str(event.value.get("name", ""))
    return ""


# --- elections ------------------------------------------------------------------------------


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


# --- work under tenure run ---------------------------------------------------------------


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


# --- beliefs (diagnostic) -------------------------------------------------------------------


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


# --- partition ownership ------------------------------------------------------------------


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


# --- semaphores ---------------------------------------------------------------------------


def permit_windows(history: Sequence[Event]) -> list[LeaseWindow]:
    """Each permit's window of a ``semaphore`` run: its belief (`lease_windows`) cut at the
    latest deadline its holder recorded for it (at the grant, then with each read and write):
    rule 3 says a holder acts only before it, and the store may grant the slot again after."""
    deadlines: dict[tuple[str, int], float] = {}
    for e in history:
        deadline = e.value.get("deadline") if isinstance(e.value, dict) else None
        if e.token is not None and isinstance(deadline, (int, float)):
            key = (e.process, e.token)
            deadlines[key] = max(deadlines.get(key, -math.inf), float(deadline))
    windows = []
    for w in lease_windows(history):
        deadline = deadlines.get((w.process, w.token if w.token is not None else -1), w.end)
        end = max(w.start, min(w.end, deadline))
        windows.append(LeaseWindow(w.name, w.process, w.token, w.start, end, w.ended_by))
    return windows


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


# --- read-write locks -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    process: str
    token: int
    invoked: float
    done: float
    value: Any


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
