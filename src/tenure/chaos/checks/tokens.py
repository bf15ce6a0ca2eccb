"""Tokens at the resource (``stale-token``: the fence accepted a lower one) and at the store
(``token-order``, ``duplicate-token``: per lock, tokens are unique and grow with real time)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..history import NEMESIS, Accepted, Event, Finding, ResourceLog
from ..resource import PER_ITEM
from . import check
from ._sweep import _unique

STALE_TOKEN = "stale-token"
TOKEN_ORDER = "token-order"
DUPLICATE_TOKEN = "duplicate-token"


@check(
    {
        STALE_TOKEN: "the resource accepted a token lower than one it had already accepted",
    }
)
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


@dataclass(frozen=True)
class _Grant:
    name: str
    process: str
    token: int
    invoked: float  # -inf if the invoke is missing: concurrent with every earlier grant
    granted: float


@check(
    {
        TOKEN_ORDER: "a grant got a lower token than a grant of the same lock that completed"
        " before it",
        DUPLICATE_TOKEN: "the store granted the same token of one lock twice",
    }
)
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
