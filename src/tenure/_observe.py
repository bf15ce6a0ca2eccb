"""The observer seam: what the core tells whoever listens (``tenure.metrics``; an OpenTelemetry
exporter could be another `Observer`).

One process-wide list, `listeners`: the fence has no client, and a process has one set of
metrics whatever the number of its clients. Each place in the core that has something to say
tests ``if listeners:`` first and only then calls the function here of the same name, so with
nobody listening an event costs one truth test of a list and nothing is computed for it. An
observer's error is logged, never raised into the core: measuring must not change what it
measures.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .stores._spi import Store

log = logging.getLogger("tenure")

Outcome = Literal["granted", "not-acquired", "timeout", "error"]
Renewal = Literal["ok", "retry", "timeout", "gone", "late", "error"]
StoreError = Literal["unavailable", "timeout", "unexpected"]


class Observer:
    """What the core tells a listener. Every method does nothing here: override the ones you
    want. Each is called on the thread that saw the event (a client's event loop, or the
    caller's thread for a fence): keep it short, and never block."""

    def acquired(self, kind: str, scheme: str, name: str, outcome: Outcome, waited: float) -> None:
        """An ``acquire()`` of a handle of ``kind`` ended: ``outcome`` after ``waited`` seconds
        from the call (granted, not-acquired with ``wait=False``, timeout, error)."""

    def handed_over(self, kind: str, scheme: str, name: str, seconds: float) -> None:
        """A grant that had to wait: ``seconds`` from the end of its last wait (woken by the
        store, or its nap over) to the grant — the hand-over as the waiter sees it."""

    def renewed(self, scheme: str, outcome: Renewal, latency: float, slack: float | None) -> None:
        """A session renewal answered (or failed): ``latency`` from sending to the answer;
        ``slack``, for a confirmed one, seconds left before the stop-by it replaced."""

    def at_risk(self, scheme: str, grants: int) -> None:
        """A session's renewals are overdue: its ``grants`` are at risk."""

    def lost(self, scheme: str, reason: str, grants: int) -> None:
        """A session was lost (``reason``: a `tenure.Loss` name, lower case) with ``grants``."""

    def leading(self, scheme: str, election: str, term: int | None) -> None:
        """This process leads ``election`` with ``term`` now, or (None) no longer."""

    def slot(self, job: str, outcome: str) -> None:
        """A once slot: what a claim answered (claimed, running, done, failed) or, prefixed
        ``ended-``, what this process recorded at its end (ended-done, ended-failed)."""

    def fence_refused(self, fence: str, resource: str) -> None:
        """A fence (its class name) refused a stale token for ``resource``."""

    def store_error(self, scheme: str, operation: str, error: StoreError) -> None:
        """A store call failed: ``operation`` (acquire, renew, release), ``error`` its kind."""


listeners: list[Observer] = []
"""Who listens now. Tested with ``if listeners:`` before anything is computed for an event."""


def subscribe(observer: Observer) -> None:
    """Tell ``observer`` of every event from now on (once, however often it subscribes)."""
    if observer not in listeners:
        listeners.append(observer)


def unsubscribe(observer: Observer) -> None:
    """Stop telling ``observer`` (a no-op if it was not told)."""
    if observer in listeners:
        listeners.remove(observer)


def scheme(store: Store) -> str:
    """The store's URL scheme (``sqlite``, ``etcd``…): a bounded label."""
    return store.scheme


def _tell(event: str, *args: object) -> None:
    for observer in list(listeners):
        try:
            getattr(observer, event)(*args)
        except Exception:  # measuring must not change what it measures
            log.exception("tenure: observer %r failed on %s", observer, event)


def acquired(kind: str, store: Store, name: str, outcome: Outcome, waited: float) -> None:
    """See `Observer.acquired`."""
    _tell("acquired", kind, scheme(store), name, outcome, waited)


def handed_over(kind: str, store: Store, name: str, seconds: float) -> None:
    """See `Observer.handed_over`."""
    _tell("handed_over", kind, scheme(store), name, seconds)


def renewed(store: Store, outcome: Renewal, latency: float, slack: float | None = None) -> None:
    """See `Observer.renewed`."""
    _tell("renewed", scheme(store), outcome, latency, slack)


def at_risk(store: Store, grants: int) -> None:
    """See `Observer.at_risk`."""
    _tell("at_risk", scheme(store), grants)


def lost(store: Store, reason: str, grants: int) -> None:
    """See `Observer.lost`."""
    _tell("lost", scheme(store), reason, grants)


def leading(store: Store, election: str, term: int | None) -> None:
    """See `Observer.leading`."""
    _tell("leading", scheme(store), election, term)


def slot(job: str, outcome: str) -> None:
    """See `Observer.slot`."""
    _tell("slot", job, outcome)


def fence_refused(fence: str, resource: str) -> None:
    """See `Observer.fence_refused`."""
    _tell("fence_refused", fence, resource)


def store_error(store: Store, operation: str, error: StoreError) -> None:
    """See `Observer.store_error`."""
    _tell("store_error", scheme(store), operation, error)
