"""The named scenarios of ``tenure chaos``: which faults, how often, on which stores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    faults: tuple[str, ...] = ()
    every: tuple[float, float] = (0.2, 0.6)
    """Seconds of calm between two faults (drawn uniformly)."""
    needs: str = "any"
    """``any`` store; ``network`` (a TCP store: its links are proxied); ``server`` (a store
    server the harness controls: ``--cluster``); ``etcd`` (an etcd cluster it controls);
    ``redis`` (a Redis primary and replica it controls: ``--cluster redis``); ``revoke`` (a
    store that offers revoke: ``capabilities.revoke``)."""
    clock_rate: float = 1.0
    """The workers' lease clock rate (1 = true time; 0.5 = half as fast)."""
    think: float = 1.0
    """The longest work between a holder's read and its write, in TTLs (renewed meanwhile)."""


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("smoke", "a healthy store under high contention with short TTLs: no faults"),
        Scenario("pause", "the holder is paused (SIGSTOP) for 1-3 TTLs, then resumed", ("pause",)),
        Scenario(
            "long-pause",
            "the holder is paused for longer than TTL + lock-delay + a work step: paused in its "
            "work, it wakes up after the next holder wrote (the positive control of stale writes)",
            ("long-pause",),
        ),
        Scenario(
            "group-pause",
            "the holder's whole supervisor group (tenure run and its command) is paused for "
            "less than the lock-delay: no two commands may work at once",
            ("group-pause",),
            every=(0.5, 1.0),
        ),
        Scenario(
            "long-group-pause",
            "the same pause for longer than TTL + lock-delay: the frozen command wakes up "
            "while the next holder's works (the positive control: only fencing helps then)",
            ("long-group-pause",),
            every=(0.3, 0.6),
        ),
        Scenario(
            "partition",
            "the holder is cut off from the store for 1-3 TTLs (blackholed links), then healed",
            ("partition",),
            needs="network",
        ),
        Scenario(
            "short-partition",
            "the holder is cut off from the store for 0.1-0.4 TTL, less than its lease: it "
            "should keep its lease (same token) and the run see no lost lease",
            ("short-partition",),
            needs="network",
        ),
        Scenario(
            "lost-reply",
            "a waiter's requests reach the store but the answers are dropped for a while",
            ("lost-reply",),
            needs="network",
        ),
        Scenario(
            "stale-release",
            "the holder is paused past its lease and releases after another took over",
            ("pause",),
            every=(0.1, 0.3),
        ),
        Scenario(
            "kill-in-txn",
            "workers are SIGKILLed at random instants, often inside a store transaction",
            ("kill-any",),
            every=(0.1, 0.4),
        ),
        Scenario(
            "leader-kill",
            "the etcd leader (or the PostgreSQL server) is killed during holds and restarted "
            "1-2 TTLs later",
            ("member-kill",),
            every=(0.5, 1.5),
            needs="server",
        ),
        Scenario(
            "leader-pause",
            "the etcd leader (or the PostgreSQL server) is paused (SIGSTOP) for 1-3 TTLs",
            ("member-pause",),
            every=(0.5, 1.5),
            needs="server",
        ),
        Scenario(
            "majority-loss",
            "a majority of etcd members is killed: grants stop (fail closed), then recover",
            ("majority-loss",),
            every=(1.0, 2.0),
            needs="etcd",
        ),
        Scenario(
            "store-restart",
            "the store server is stopped and started again during holds",
            ("store-restart",),
            every=(1.0, 2.0),
            needs="server",
        ),
        Scenario(
            "failover",
            "Redis: replication to the replica lags, the primary dies after granting, the "
            "replica is promoted: a lock and its token counter go back in time",
            ("failover",),
            every=(1.0, 2.0),
            needs="redis",
        ),
        Scenario(
            "clock-jump",
            "Redis: the server's clock jumps 2-3 TTLs forward (a clock shim): held leases "
            "expire early while their holders still believe they hold",
            ("clock-jump",),
            every=(1.0, 2.0),
            needs="redis",
        ),
        Scenario(
            "revoke",
            "an operator revokes the current holder again and again during its write burst: it "
            "stops at its next renewal, and nobody is granted the lock until its lease could "
            "no longer act (TTL + lock-delay)",
            ("revoke",),
            every=(0.3, 0.8),
            needs="revoke",
        ),
        Scenario(
            "revoke-now",
            "the same revocations with --now, freeing the lock at once while the holder still "
            "works (the positive control: only fencing refuses its writes)",
            ("revoke-now",),
            every=(0.3, 0.8),
            needs="revoke",
        ),
        Scenario(
            "clock-drift",
            "every worker's lease clock runs at half speed (far beyond the drift bound) while "
            "holders' renewals stall: they believe they hold after the store expired them",
            ("stall",),
            clock_rate=0.5,
            think=3.0,
        ),
    )
}
