"""Prometheus metrics of every client, fence and once job in this process (docs/metrics.md).

``tenure.metrics.Metrics()`` registers tenure's metrics on a ``prometheus_client``
``CollectorRegistry`` (default: the global one, which ``start_http_server`` serves) and listens
from then on; ``close()`` stops listening and unregisters them. Install the extra first:
``pip install 'tenure[metrics]'``; without it, ``tenure`` imports as ever and only making a
`Metrics` fails.

Labels are bounded: the kind of primitive, the store's URL scheme, an outcome or reason. A
lock's, election's or job's name becomes a label only if asked (``names=True``, or an
allow-list of names: any other name is shown as ``other``).

Anything else can listen the same way: subclass `Observer` and `subscribe` it (an
OpenTelemetry exporter would).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._observe import Observer, Outcome, Renewal, StoreError, subscribe, unsubscribe

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["ACQUIRE_BUCKETS", "RENEWAL_BUCKETS", "SLACK_BUCKETS", "Metrics", "Observer",
           "subscribe", "unsubscribe"]  # fmt: skip

ACQUIRE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)  # fmt: skip
"""Seconds: waits run from a millisecond (free) to minutes (queued behind long holders)."""
RENEWAL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)  # fmt: skip
"""Seconds from sending a renewal to its answer."""
SLACK_BUCKETS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds left before the stop-by when a renewal was confirmed: near 2·TTL/3 when healthy,
near 0 just before a loss."""
OTHER = "other"
"""The name label of a name outside the allow-list."""


class Metrics(Observer):
    """tenure's metrics on ``registry``, kept from now until `close` (also a context manager).

    ``names``: False (no name labels), True (every lock, election and job name is a label:
    only for a bounded set of names) or the names allowed as labels (others show as
    ``other``)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, names: bool | Iterable[str] = False
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:
            raise ImportError(
                "tenure.metrics needs prometheus_client: pip install 'tenure[metrics]'"
            ) from exc
        self.registry = prom.REGISTRY if registry is None else registry
        """Where the metrics are registered."""
        self._all_names = names is True
        self._allowed = frozenset() if isinstance(names, bool) else frozenset(names)
        self.names = self._all_names or bool(self._allowed)
        """True if name labels are shown (``names`` was True or an allow-list)."""
        named = ["name"] if self.names else []
        reg = self.registry
        self.acquire_seconds = prom.Histogram(
            "tenure_acquire_seconds",
            "Time from asking for a grant to the answer, by outcome (granted, not-acquired, "
            "timeout, error).",
            ["kind", "store", "outcome", *named], buckets=ACQUIRE_BUCKETS, registry=reg,
        )  # fmt: skip
        self.handover_seconds = prom.Histogram(
            "tenure_handover_seconds",
            "For a grant that waited: time from the end of its last wait (woken by the store, or "
            "its nap over) to the grant.",
            ["kind", "store", *named], buckets=ACQUIRE_BUCKETS, registry=reg,
        )  # fmt: skip
        self.renewal_seconds = prom.Histogram(
            "tenure_renewal_seconds",
            "Time from sending a session renewal to its answer, by outcome (ok, retry, timeout, "
            "gone, late, error).",
            ["store", "outcome"], buckets=RENEWAL_BUCKETS, registry=reg,
        )  # fmt: skip
        self.slack_seconds = prom.Histogram(
            "tenure_renewal_slack_seconds",
            "Seconds left before the lease's stop-by when a renewal was confirmed.",
            ["store"], buckets=SLACK_BUCKETS, registry=reg,
        )  # fmt: skip
        self.at_risk_events = prom.Counter(
            "tenure_at_risk", "Times a session's renewals became overdue (its grants at risk).",
            ["store"], registry=reg,
        )  # fmt: skip
        self.session_losses = prom.Counter(
            "tenure_session_losses", "Sessions lost, by reason (deadline, gone, error).",
            ["store", "reason"], registry=reg,
        )  # fmt: skip
        self.grants_lost = prom.Counter(
            "tenure_grants_lost", "Grants (leases) lost with their session, by reason.",
            ["store", "reason"], registry=reg,
        )  # fmt: skip
        self.terms = prom.Counter(
            "tenure_terms", "Terms won by this process (elections it came to lead).",
            ["store"], registry=reg,
        )  # fmt: skip
        self.leading_now = prom.Gauge(
            "tenure_leading", "Elections this process leads now.", ["store"], registry=reg
        )
        self.leader = self.term = None
        if self.names:
            self.leader = prom.Gauge(
                "tenure_election_leader", "1 while this process leads the election, else 0.",
                ["store", "election"], registry=reg,
            )  # fmt: skip
            self.term = prom.Gauge(
                "tenure_election_term", "The term this process won last in the election.",
                ["store", "election"], registry=reg,
            )  # fmt: skip
        self.slots = prom.Counter(
            "tenure_once_slots",
            "Once slots: what a claim answered (claimed, running, done, failed) or what this "
            "process recorded at the end (ended-done, ended-failed).",
            ["outcome", *(["job"] if self.names else [])], registry=reg,
        )  # fmt: skip
        self.fence_refusals = prom.Counter(
            "tenure_fence_refusals", "Stale fencing tokens a fence refused.",
            ["fence", *(["resource"] if self.names else [])], registry=reg,
        )  # fmt: skip
        self.store_errors = prom.Counter(
            "tenure_store_errors",
            "Store calls that failed, by operation (acquire, renew, release) and error "
            "(unavailable, timeout, unexpected).",
            ["store", "operation", "error"], registry=reg,
        )  # fmt: skip
        self._collectors = [
            self.acquire_seconds, self.handover_seconds, self.renewal_seconds,
            self.slack_seconds, self.at_risk_events, self.session_losses, self.grants_lost,
            self.terms, self.leading_now, self.slots, self.fence_refusals, self.store_errors,
            *([self.leader, self.term] if self.leader and self.term else []),
        ]  # fmt: skip
        self._children: dict[tuple[object, ...], Any] = {}
        subscribe(self)

    def __repr__(self) -> str:
        return f"<Metrics names={self.names}>"

    def close(self) -> None:
        """Stop listening and take the metrics off the registry. Idempotent."""
        unsubscribe(self)
        collectors, self._collectors = self._collectors, []
        for collector in collectors:
            self.registry.unregister(collector)

    def __enter__(self) -> Metrics:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _at(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: the look-up costs more than the observation."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _name(self, name: str) -> list[str]:
        """The name label's value, or none if names are not shown."""
        if not self.names:
            return []
        return [name if self._all_names or name in self._allowed else OTHER]

    # -- the events (`Observer`) --------------------------------------------------------------

    def acquired(self, kind: str, scheme: str, name: str, outcome: Outcome, waited: float) -> None:
        """Count the acquisition and its time."""
        self._at(self.acquire_seconds, kind, scheme, outcome, *self._name(name)).observe(waited)

    def handed_over(self, kind: str, scheme: str, name: str, seconds: float) -> None:
        """Record a waiter's hand-over time."""
        self._at(self.handover_seconds, kind, scheme, *self._name(name)).observe(seconds)

    def renewed(self, scheme: str, outcome: Renewal, latency: float, slack: float | None) -> None:
        """Record a renewal's latency, and the slack of a confirmed one."""
        self._at(self.renewal_seconds, scheme, outcome).observe(latency)
        if slack is not None:
            self._at(self.slack_seconds, scheme).observe(max(0.0, slack))

    def at_risk(self, scheme: str, grants: int) -> None:
        """Count an at-risk event."""
        self._at(self.at_risk_events, scheme).inc()

    def lost(self, scheme: str, reason: str, grants: int) -> None:
        """Count a session loss and the grants it held."""
        self._at(self.session_losses, scheme, reason).inc()
        self._at(self.grants_lost, scheme, reason).inc(grants)

    def leading(self, scheme: str, election: str, term: int | None) -> None:
        """Count a term won, and follow who leads."""
        if term is not None:
            self._at(self.terms, scheme).inc()
            self._at(self.leading_now, scheme).inc()
        else:
            self._at(self.leading_now, scheme).dec()
        if self.leader is not None and self.term is not None:
            label = self._name(election)[0]
            self._at(self.leader, scheme, label).set(0 if term is None else 1)
            if term is not None:
                self._at(self.term, scheme, label).set(term)

    def slot(self, job: str, outcome: str) -> None:
        """Count a once slot's outcome."""
        self._at(self.slots, outcome, *self._name(job)).inc()

    def fence_refused(self, fence: str, resource: str) -> None:
        """Count a fencing refusal."""
        self._at(self.fence_refusals, fence, *self._name(resource)).inc()

    def store_error(self, scheme: str, operation: str, error: StoreError) -> None:
        """Count a failed store call."""
        self._at(self.store_errors, scheme, operation, error).inc()
