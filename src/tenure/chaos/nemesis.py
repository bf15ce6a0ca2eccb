"""The nemesis: the faults a chaos run injects, each logged in the history with its time.

One fault at a time, chosen by the run's seeded random generator from the scenario's list. A
fault that lasts (a pause, a partition) is an ``invoke`` event when it begins and an ``ok`` when
it ends; an instant one (a kill) is an ``info``. Faults aimed at "the holder" ask the store who
holds the lock (through a direct, unproxied client; whom a workload's lock counts as its holders
is its module's, `workloads`) and fall back to a random worker.

Kinds:

==============  ===============================================================================
pause           SIGSTOP the holder for 1–3 × TTL, then SIGCONT.
long-pause      the same for TTL + lock-delay + a whole step (the longest think) + 0.5 s: a
                holder paused in its work wakes up after the next holder of its lock wrote (the
                positive control of stale writes, whatever the pause's length would decide).
group-pause     SIGSTOP the holder's whole supervisor group (``run`` workload: ``tenure run`` and
                its child's group) for 0.5–0.9 × lock-delay, then SIGCONT (child first).
long-group-pause  the same for TTL + lock-delay + 0.5 s + 0.5–1 × TTL: longer than anything a
                timeout can cover (the positive control of ``work-overlap``).
kill            SIGKILL the holder, start a fresh worker in its place.
kill-any        SIGKILL any worker at a random instant (often inside a transaction).
stall           the holder's renewals hang for 1–3 × TTL while it keeps working: cut off from
                the store but not from the resource (works on every store, SQLite included).
partition       blackhole the holder's links to the store for 1–3 × TTL (the proxy holds the
                connections open and drops every byte), then heal.
short-partition the holder's links hold every byte for 0.1–0.4 × TTL, then deliver them: a
                partition shorter than the lease (and a ZooKeeper session), as TCP lives it.
lost-reply      a waiting worker's requests reach the store but the answers are dropped, for
                0.5–1.5 × TTL.
member-kill     SIGKILL the etcd leader (or the PostgreSQL server), restart it 1–2 × TTL later.
member-pause    SIGSTOP the etcd leader (or the PostgreSQL server) for 1–3 × TTL.
majority-loss   SIGKILL a majority of the etcd members for 2–3 × TTL, then restart them.
store-restart   stop the PostgreSQL server (or all etcd members) cleanly and start it again.
failover        Redis: replication to the replica is cut (its link blackholed) for 0.5–1.5 × TTL
                while grants go on, the primary is SIGKILLed, the replica is promoted and the
                clients' address moved to it; the old primary comes back as the new replica.
clock-jump      Redis: the primary's wall clock jumps 2–3 × TTL forward (clockshift.c, preloaded).
revoke          an operator revokes the holder's grant (``client.revoke``): it learns at its next
                renewal, and nobody is granted the name until its lease could no longer act.
revoke-now      the same with ``now=True``, freeing the name at once while the holder is alive
                (the positive control: its work overlaps the next holder's; only fencing helps).
==============  ===============================================================================
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import tenure

from .._errors import InvalidArgument
from ..stores._server import ServerControl
from . import workloads
from .history import Recorder

if TYPE_CHECKING:
    from ..stores.redis.server import RedisControl
    from .processes import WorkerProcess


class Stage(Protocol):
    """What the nemesis needs of a run (``runner.Run`` is one): where its faults land."""

    store_url: str
    lock: str
    ttl: float
    workers: list[WorkerProcess]
    workload: str

    @property
    def effective_lock_delay(self) -> float: ...

    @property
    def longest_think(self) -> float: ...

    def server(self) -> ServerControl: ...


PROCESS_FAULTS = (
    "pause",
    "long-pause",
    "group-pause",
    "long-group-pause",
    "kill",
    "kill-any",
    "stall",
)
OPERATOR_FAULTS = ("revoke", "revoke-now")
LINK_FAULTS = ("partition", "short-partition", "lost-reply")
STORE_FAULTS = (
    "member-kill",
    "member-pause",
    "majority-loss",
    "store-restart",
    "failover",
    "clock-jump",
)
FAULTS = PROCESS_FAULTS + OPERATOR_FAULTS + LINK_FAULTS + STORE_FAULTS


class Nemesis:
    def __init__(self, run: Stage, rng: random.Random, recorder: Recorder) -> None:
        self.run = run
        self.rng = rng
        self.rec = recorder
        self.ttl = run.ttl
        self._observer: tenure.Client | None = None

    # -- choosing a victim ----------------------------------------------------------------------

    def holder(self) -> WorkerProcess:
        """The worker holding the lock now, per the store; a random live worker if none."""
        return self.holding() or self.rng.choice(self.run.workers)

    def observer(self) -> tenure.Client:
        """The nemesis's own client of the store (direct, unproxied)."""
        if self._observer is None:
            self._observer = tenure.connect(self.run.store_url, label="chaos nemesis")
        return self._observer

    def held(self) -> list[tenure.LockInfo]:
        """The store's locks that make a worker the holder now (the workload says which)."""
        return workloads.get(self.run.workload).holders(self.observer(), self.run.lock)

    def holding(self) -> WorkerProcess | None:
        """The worker holding the lock now, per the store (None: none, or no answer)."""
        with contextlib.suppress(tenure.TenureError):
            infos = self.held()
            labels = {info.holder.label for info in infos}
            holders = [w for w in self.run.workers if f"chaos {w.name}" in labels]
            if len(holders) > 1:
                return self.rng.choice(holders)
            if holders:
                return holders[0]
        return None

    def waiter(self) -> WorkerProcess:
        holder = self.holder()
        others = [w for w in self.run.workers if w is not holder]
        return self.rng.choice(others or self.run.workers)

    def span(self, low: float, high: float) -> float:
        return self.rng.uniform(low, high) * self.ttl

    # -- the faults ------------------------------------------------------------------------------

    def inject(self, kind: str) -> None:
        getattr(self, "fault_" + kind.replace("-", "_"))()

    def lasting(
        self,
        kind: str,
        target: str,
        seconds: float,
        begin: Callable[[], Any],
        end: Callable[[], Any],
        **value: Any,
    ) -> None:
        self.rec.record(kind, "invoke", value={"target": target, **value})
        begin()
        try:
            time.sleep(seconds)
        finally:
            end()
            self.rec.record(kind, "ok", value={"target": target})

    def fault_pause(self) -> None:
        self._pause("pause", self.span(1, 3))

    def fault_long_pause(self) -> None:
        # Past the lease and lock-delay, then time for the next holder's whole step.
        seconds = self.ttl + self.run.effective_lock_delay + self.run.longest_think + 0.5
        self._pause("long-pause", seconds, length=round(seconds, 3))

    def _pause(self, kind: str, seconds: float, **value: Any) -> None:
        worker = self.holder()
        self.lasting(
            kind,
            worker.name,
            seconds,
            lambda: worker.signal(signal.SIGSTOP),
            lambda: worker.signal(signal.SIGCONT),
            **value,
        )

    def fault_group_pause(self) -> None:
        """Shorter than the lock-delay: the store holds the name back until the holder's
        supervisor is running again and can stop its command."""
        self._group_pause("group-pause", self.rng.uniform(0.5, 0.9) * self.run.effective_lock_delay)

    def fault_long_group_pause(self) -> None:
        """Longer than TTL + lock-delay (+ time for the next holder's command to start): the next
        holder works before the frozen command can be stopped."""
        lock_delay = self.run.effective_lock_delay
        self._group_pause("long-group-pause", self.ttl + lock_delay + 0.5 + self.span(0.5, 1))

    def _group_pause(self, kind: str, seconds: float) -> None:
        worker = self.holder()
        self.lasting(
            kind, worker.name, seconds, worker.freeze, worker.thaw, length=round(seconds, 3)
        )

    def fault_kill(self) -> None:
        self._kill(self.holder())

    def fault_kill_any(self) -> None:
        self._kill(self.rng.choice(self.run.workers))

    def _kill(self, worker: WorkerProcess) -> None:
        worker.kill()
        self.rec.record("kill", "info", value={"target": worker.name})
        worker.spawn()

    def fault_stall(self) -> None:
        worker = self.holder()
        self.lasting(
            "stall",
            worker.name,
            self.span(1, 3),
            lambda: worker.stall(True),
            lambda: worker.stall(False),
        )

    def fault_partition(self) -> None:
        worker = self.holder()
        self.lasting(
            "partition",
            worker.name,
            self.span(1, 3),
            lambda: worker.set_links("blackhole"),
            lambda: worker.set_links("pass"),
        )

    def fault_short_partition(self) -> None:
        worker = self.holder()
        self.lasting(
            "short-partition",
            worker.name,
            self.span(0.1, 0.4),
            lambda: worker.set_links("hold"),
            lambda: worker.set_links("pass"),
        )

    def fault_lost_reply(self) -> None:
        worker = self.waiter()
        self.lasting(
            "lost-reply",
            worker.name,
            self.span(0.5, 1.5),
            lambda: worker.set_links("lose_responses"),
            lambda: worker.set_links("pass"),
        )

    def fault_revoke(self) -> None:
        self._revoke("revoke", now=False)

    def fault_revoke_now(self) -> None:
        self._revoke("revoke-now", now=True)

    def _revoke(self, kind: str, now: bool) -> None:
        """Revoke one grant held now, as an operator would (``tenure revoke``): a holder that
        is working, mid-burst. Nothing held (or the store out of reach): nothing revoked."""
        with contextlib.suppress(tenure.TenureError):
            infos = self.held()
            if not infos:
                return
            info = self.rng.choice(infos)
            target = next(
                (w.name for w in self.run.workers if f"chaos {w.name}" == info.holder.label), "-"
            )
            revoked = self.observer().revoke(
                info.name, reason=f"chaos {kind}", now=now, token=info.token
            )
            if revoked is not None:
                value = {"target": target, "lock": info.name, "token": revoked.token}
                self.rec.record(kind, "info", value=value)

    def fault_member_kill(self) -> None:
        server = self.run.server()
        member = server.leader()
        self.rec.record("member-kill", "invoke", value={"target": member.name})
        member.kill()
        try:
            time.sleep(self.span(1, 2))
        finally:
            member.start()
            self.rec.record("member-kill", "ok", value={"target": member.name})

    def fault_member_pause(self) -> None:
        member = self.run.server().leader()
        self.lasting("member-pause", member.name, self.span(1, 3), member.pause, member.resume)

    def fault_majority_loss(self) -> None:
        members = self.run.server().majority()
        names = ",".join(m.name for m in members)
        self.rec.record("majority-loss", "invoke", value={"target": names})
        for member in members:
            member.kill()
        try:
            time.sleep(self.span(2, 3))
        finally:
            for member in members:
                member.start()
            self.rec.record("majority-loss", "ok", value={"target": names})

    def fault_store_restart(self) -> None:
        server = self.run.server()
        self.rec.record("store-restart", "invoke", value={"target": "store"})
        try:
            server.restart()
        finally:
            self.rec.record("store-restart", "ok", value={"target": "store"})

    def redis(self) -> RedisControl:
        from ..stores.redis.server import RedisControl  # imports the Redis store: its faults only

        server = self.run.server()
        if not isinstance(server, RedisControl):
            raise InvalidArgument("this fault needs a Redis primary and replica (--cluster redis)")
        return server

    def fault_failover(self) -> None:
        server = self.redis()
        self.rec.record("failover", "invoke", value={"target": "primary"})
        try:
            server.cut_replication()
            time.sleep(self.span(0.5, 1.5))
            wait = time.monotonic() + self.ttl  # kill while a worker holds: the case that bites
            while self.holding() is None and time.monotonic() < wait:
                time.sleep(0.01)
            promoted = server.fail_over()
        finally:
            self.rec.record("failover", "ok", value={"target": "primary"})
        self.rec.record("promoted", "info", value={"target": promoted})

    def fault_clock_jump(self) -> None:
        seconds = self.span(2, 3)
        self.redis().clock_jump(seconds)
        self.rec.record("clock-jump", "info", value={"target": "store", "seconds": seconds})

    def close(self) -> None:
        if self._observer is not None:
            self._observer.close()
