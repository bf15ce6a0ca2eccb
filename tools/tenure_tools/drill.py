"""The drill "lose 3 of 7 servers, the store's leader among them": does a partition group with
capacity to spare keep its errors low through a correlated failure, and does it stay safe?

Seven *servers* on loopback, each one member of the store (``store``: etcd, a 7-member cluster,
or ZooKeeper, a 7-server ensemble: `drill_cluster`) and one worker process
(`drill_worker`) of a partition group over 64 partitions. A load generator outside them puts
requests into a queue table in PostgreSQL (a service outside every server) at a fixed rate, each
naming a partition at random; the partition's owner must process it — a write fenced by that
partition's token — within the deadline. A request not processed in time is an error. Each
worker processes at most ``capacity`` requests a second; the offered load is a fraction of the
whole group's capacity.

After a warm-up, ``lose`` servers fail at once, the store's leader among them: ``kill`` (SIGKILL
of their store member and worker; both started again at the restore) or ``cut`` (every packet
to or from them dropped by the kernel's packet filter, `fabric.Fabric`, which needs root;
healed at the restore). The group has no leader of its own to kill: every member computes the
assignment itself.

What it measures: the error rate; the errors per event; the time until every partition is owned
again and until the store has a leader again; p50/p99 latency before, during and after the events;
items owned twice (`checks.check_item_overlap` over the workers' histories) and stale writes
accepted (`checks.check_stale_item_writes` over the queue's ``accepted`` log) — both must be 0.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import psycopg

import tenure
from tenure._partitions import assign
from tenure.chaos.checks import check_item_overlap, check_stale_item_writes, item_windows
from tenure.chaos.history import NEMESIS, Accepted, Event, Finding, ResourceLog, read_history
from tenure.chaos.resource import PARTITION
from tenure.stores.postgres.server import PostgresServer

from .drill_cluster import DrillCluster, PortsMoved, Store
from .drill_worker import FENCE, GROUP, member_id, partitions
from .fabric import Fabric

Mode = Literal["kill", "cut"]
START_TRIES = 3
"""Starts of the store's members on fresh ports before the drill gives up (`start_cluster`)."""
SCHEMA = """
    CREATE TABLE requests (
        id bigserial PRIMARY KEY, partition text NOT NULL,
        created timestamptz NOT NULL DEFAULT clock_timestamp(),
        done timestamptz, worker int, token bigint);
    CREATE INDEX pending ON requests (created) WHERE done IS NULL;
    CREATE TABLE accepted (
        id bigserial PRIMARY KEY, partition text NOT NULL, token bigint NOT NULL,
        worker int NOT NULL, request bigint NOT NULL);
"""


@dataclass(frozen=True)
class DrillConfig:
    servers: int = 7
    lose: int = 3
    mode: Mode = "kill"
    store: Store = "etcd"
    load: float = 0.5
    """Offered load as a fraction of the group's capacity (servers × capacity)."""
    seconds: float = 60.0
    events: int = 1
    """Failure events, evenly spaced: the run is cut in 2·events + 1 equal parts, the odd
    ones (1st, 3rd, …, counted from 0) down."""
    partitions: int = 64
    capacity: float = 10.0
    deadline: float = 2.0
    ttl: float = 3.0
    lock_delay: float | None = 0.0
    """The items' lock-delay (None: tenure's default, the TTL). 0 by default: every write is
    fenced by the partition's token, so a wait after a dead owner's lease adds no safety."""
    seed: int = 1

    @property
    def rate(self) -> float:
        return self.load * self.servers * self.capacity

    def schedule(self) -> list[tuple[float, float]]:
        """(failure, restore) instants, in seconds from the start of the run."""
        part = self.seconds / (2 * self.events + 1)
        return [((2 * i + 1) * part, (2 * i + 2) * part) for i in range(self.events)]


@dataclass
class EventResult:
    failed_at: float
    restored_at: float
    servers: list[int]
    leader: int
    """The server whose store member was the leader when they failed."""
    requests: int = 0
    errors: int = 0
    leader_again: float | None = None
    """Seconds from the failure until a surviving member was the store's leader."""
    owned_again: float | None = None
    """Seconds from the failure until every partition the failed servers owned was owned by
    another member (None: not before the restore)."""


@dataclass
class DrillResult:
    config: DrillConfig
    requests: int
    errors: int
    latency_ms: dict[str, tuple[float, float] | None]
    events: list[EventResult]
    owned_twice: int
    stale_accepted: int
    stale_refused: int
    timeline: list[dict[str, float]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "error_rate": self.error_rate}, indent=1)


class Drill:
    def __init__(self, config: DrillConfig, root: Path) -> None:
        self.config = config
        self.root = root
        self.rng = random.Random(config.seed)
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.stop_load = threading.Event()
        self.leaders: list[tuple[float, int | None]] = []  # (run time, surviving leader)
        self.down: frozenset[int] = frozenset()

    # -- set-up -------------------------------------------------------------------------------

    def run(self) -> DrillResult:
        with ExitStack() as stack:
            self.pg = stack.enter_context(PostgresServer())
            with psycopg.connect(self.pg.dsn, autocommit=True) as conn:
                conn.execute(SCHEMA)
                FENCE.ensure_table(conn)
            c = self.config
            self.start_cluster(stack)
            self.store_urls = [self.cluster.url(first=w) for w in range(c.servers)]
            stack.callback(self.stop_workers)
            for i in range(self.config.servers):
                self.start_worker(i)
                time.sleep(0.3)  # not all at once: the warm-up is not what is measured
            self.wait_settled()
            return self.drive()

    def start_cluster(self, stack: ExitStack) -> None:
        """The store's members started, and for a cut the fabric marking their ports, both
        closed with ``stack``. The ports are chosen free before the start: if another process
        took one meanwhile (a test worker beside this one), the member moves and the fabric's
        marks would name the other process's port: all is made again, on new ports."""
        c = self.config
        shm = Path("/dev/shm")  # seven members on one disk would queue behind its fsyncs
        for attempt in range(1, START_TRIES + 1):
            with ExitStack() as trial:
                fabric = trial.enter_context(Fabric(c.servers)) if c.mode == "cut" else None
                cluster = DrillCluster(c.store, c.servers, shm if shm.is_dir() else None)
                trial.callback(cluster.close)
                if fabric is not None:  # before they start: every connection is marked
                    for i, member in enumerate(cluster.members):
                        fabric.serve(i, *cluster.ports(i))
                        member.group = fabric.group(i)
                try:
                    cluster.start()
                except PortsMoved:
                    if attempt == START_TRIES:
                        raise
                    continue  # the trial's end closes both
                self.fabric, self.cluster = fabric, cluster
                stack.enter_context(trial.pop_all())
                return

    def start_worker(self, server: int) -> None:
        c = self.config
        ready = self.root / f"{member_id(server)}.ready"
        ready.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "tenure_tools.drill_worker", f"--server={server}",
            f"--store={self.store_urls[server]}", f"--dsn={self.pg.dsn}",
            f"--partitions={c.partitions}", f"--capacity={c.capacity}",
            f"--deadline={c.deadline}", f"--ttl={c.ttl}",
            *([] if c.lock_delay is None else [f"--lock-delay={c.lock_delay}"]),
            f"--history={self.root / member_id(server)}.jsonl", f"--ready={ready}",
        ]  # fmt: skip
        with open(self.root / f"{member_id(server)}.log", "ab") as log:
            group = None if self.fabric is None else self.fabric.group(server)
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT,
                group=group, extra_groups=None if group is None else [],
            )  # fmt: skip
        self.workers[server] = proc

    def stop_workers(self) -> None:
        for proc in self.workers.values():
            proc.terminate()
        for proc in self.workers.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def wait_settled(self, timeout: float = 120.0) -> None:
        """Until every worker is ready and every partition is owned by the member the
        assignment names (then the clock starts)."""
        deadline = time.monotonic() + timeout
        url = self.cluster.url(first=0)
        names = partitions(self.config.partitions)
        want = assign(names, {member_id(i): 1.0 for i in self.workers})
        want = {f"partitions/{GROUP}/item/{item}": f"drill {m}" for item, m in want.items()}
        with tenure.connect(url) as client:
            while True:
                ready = all((self.root / f"{member_id(i)}.ready").exists() for i in self.workers)
                with contextlib.suppress(tenure.StoreUnavailable):  # busy settling: look again
                    found = client.locks(prefix=f"partitions/{GROUP}/item/") if ready else []
                    if {info.name: info.holder.label for info in found} == want:
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the group did not settle in {timeout:.0f}s")
                time.sleep(0.1)

    # -- the run ------------------------------------------------------------------------------

    def drive(self) -> DrillResult:
        c = self.config
        self.mono0, self.wall0 = time.monotonic(), time.time()
        threads = [
            threading.Thread(target=self.generate, daemon=True),
            threading.Thread(target=self.observe, daemon=True),
        ]
        for thread in threads:
            thread.start()
        events: list[EventResult] = []
        self.nemesis: list[Event] = []
        for failed_at, restored_at in c.schedule():
            self.sleep_until(failed_at)
            events.append(self.fail())
            self.sleep_until(restored_at)
            self.restore(events[-1])
            events[-1].restored_at = self.now()
        self.sleep_until(c.seconds)
        self.stop_load.set()
        time.sleep(c.deadline + 0.5)  # the last requests' deadlines pass
        end = self.now()
        for thread in threads:
            thread.join()
        return self.analyse(events, end)

    def now(self) -> float:
        return time.monotonic() - self.mono0

    def sleep_until(self, at: float) -> None:
        time.sleep(max(0.0, at - self.now()))

    def fail(self) -> EventResult:
        leader = self.cluster.leader()
        others = [i for i in range(self.config.servers) if i != leader]
        servers = sorted([leader, *self.rng.sample(others, self.config.lose - 1)])
        result = EventResult(self.now(), 0.0, servers, leader)
        self.leaders.append((self.now(), None))  # the observer looks until a survivor leads
        self.down = frozenset(servers)  # (after: the observer reads `leaders` once this is set)
        if self.config.mode == "kill":
            for i in servers:
                self.workers[i].kill()
                self.cluster.members[i].kill()
            for i in servers:
                self.workers[i].wait()
        else:
            assert self.fabric is not None
            self.fabric.cut(*servers)
        # After the fact: a killed worker's windows end here (cut ones end by their deadlines).
        target = {"target": [member_id(i) for i in servers]}
        self.nemesis.append(
            Event(time.monotonic(), NEMESIS, self.config.mode, "info", value=target)
        )
        return result

    def restore(self, event: EventResult) -> None:
        if self.config.mode == "kill":
            for i in event.servers:
                self.cluster.members[i].launch()
            for i in event.servers:
                self.start_worker(i)
        else:
            assert self.fabric is not None
            self.fabric.heal(*event.servers)
        self.down = frozenset()

    def generate(self) -> None:
        """Put requests into the queue at the configured rate, each for a random partition."""
        rng = random.Random(self.config.seed + 1)
        names = [f"p{n:02d}" for n in range(self.config.partitions)]
        interval, sent = 1 / self.config.rate, 0
        with psycopg.connect(self.pg.dsn, autocommit=True) as conn:
            while not self.stop_load.is_set() and self.now() < self.config.seconds:
                due = int(self.now() / interval) + 1 - sent
                if due > 0:
                    batch = [(rng.choice(names),) for _ in range(due)]
                    with conn.cursor() as cur:
                        cur.executemany("INSERT INTO requests (partition) VALUES (%s)", batch)
                    sent += due
                time.sleep(max(0.0, sent * interval - self.now()))

    def observe(self) -> None:
        """After each failure, which surviving member is the store's leader, 10 times a second
        until there is one (cheap: no polling while nothing is failing)."""
        while not self.stop_load.is_set():
            if self.down and self.leaders[-1][1] is None:
                self.leaders.append((self.now(), self.surviving_leader()))
            time.sleep(0.1)

    def surviving_leader(self) -> int | None:
        survivors = (i for i in range(self.config.servers) if i not in self.down)
        return next((i for i in survivors if self.cluster.leads(i)), None)

    # -- the figures --------------------------------------------------------------------------

    def analyse(self, events: list[EventResult], end: float) -> DrillResult:
        c = self.config
        with psycopg.connect(self.pg.dsn) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM created), extract(epoch FROM done - created)"
                " FROM requests ORDER BY id"
            ).fetchall()
            log = conn.execute(
                "SELECT id, partition, token, worker FROM accepted ORDER BY id"
            ).fetchall()
        requests = [(float(t) - self.wall0, None if d is None else float(d)) for t, d in rows]
        late = [t for t, d in requests if d is None or d > c.deadline]
        history = read_history(self.root.glob("*.jsonl")) + self.nemesis
        history.sort(key=lambda e: e.t)
        overlap = check_item_overlap(history)
        stale = stale_writes(log)
        refused = sum(1 for e in history if e.f == "write" and e.type == "fail")
        for event in events:  # a failure's requests: from it until 2 TTLs after the restore
            until = event.restored_at + c.ttl * 2
            event.requests = sum(1 for t, _ in requests if event.failed_at <= t < until)
            event.errors = sum(1 for t in late if event.failed_at <= t < until)
            event.leader_again = next(
                (
                    t - event.failed_at
                    for t, who in self.leaders
                    if t >= event.failed_at and who is not None and who not in event.servers
                ),
                None,
            )
            event.owned_again = self.owned_again(history, event)
        return DrillResult(
            config=c,
            requests=len(requests),
            errors=len(late),
            latency_ms=self.latencies(requests, events),
            events=events,
            owned_twice=len(overlap),
            stale_accepted=len(stale),
            stale_refused=refused,
            timeline=self.timeline(requests, history, end),
            findings=[f.message for f in overlap + stale],
        )

    def owned_again(self, history: list[Event], event: EventResult) -> float | None:
        failed = self.mono0 + event.failed_at
        lost = {member_id(i) for i in event.servers}
        windows = item_windows(history)
        held = {w.item for w in windows if w.process in lost and w.start <= failed < w.end}
        worst = 0.0
        for item in held:
            again = [
                w.start
                for w in windows
                if w.item == item and w.start >= failed and w.process not in lost
            ]
            if not again or again[0] > self.mono0 + event.restored_at:
                return None
            worst = max(worst, min(again) - failed)
        return worst

    def latencies(
        self, requests: list[tuple[float, float | None]], events: list[EventResult]
    ) -> dict[str, tuple[float, float] | None]:
        def phase(t: float) -> str:
            if not events or t < events[0].failed_at:
                return "before"
            if any(e.failed_at <= t < e.restored_at for e in events):
                return "during"
            return "after"

        by: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        for t, d in requests:
            if d is not None and d <= self.config.deadline:
                by[phase(t)].append(d * 1000)
        return {k: percentiles(v) for k, v in by.items()}

    def timeline(
        self, requests: list[tuple[float, float | None]], history: list[Event], end: float
    ) -> list[dict[str, float]]:
        offered: Counter[int] = Counter()
        ok: Counter[int] = Counter()
        for t, d in requests:
            offered[int(t)] += 1
            if d is not None and d <= self.config.deadline:
                ok[int(t)] += 1
        moves = Counter(int(e.t - self.mono0) for e in history if e.f == "own")
        return [
            {
                "t": s,
                "offered": offered[s],
                "ok": ok[s],
                "errors": offered[s] - ok[s],
                "moves": moves[s],
            }
            for s in range(int(end) + 1)
        ]


def stale_writes(log: list[tuple[int, str, int, int]]) -> list[Finding]:
    """The queue's ``accepted`` rows ``(id, partition, token, worker)`` in commit order, judged
    by the chaos checker: per partition, no token lower than one accepted before it."""
    accepted = [Accepted(i, member_id(w), token, {"item": p}) for i, p, token, w in log]
    return check_stale_item_writes(ResourceLog(PARTITION, accepted, None))


def percentiles(values: list[float]) -> tuple[float, float] | None:
    if not values:
        return None
    values = sorted(values)
    p50, p99 = (values[min(len(values) - 1, int(q * len(values)))] for q in (0.5, 0.99))
    return (round(p50, 1), round(p99, 1))
