#!/usr/bin/env python3
"""Benchmark tenure's semaphore against kazoo's ``Semaphore`` recipe on ZooKeeper, and on
SQLite, etcd and PostgreSQL against each store's lock floor.

Run from the repository root (needs what ``bench_stores.py`` needs for these stores —
/usr/bin/etcd, PostgreSQL in /usr/local/bin, Debian's zookeeper package — and kazoo from the
``bench`` extra):

    .venv/bin/python benchmarks/bench_semaphore.py               # all four stores, ~5 minutes
    .venv/bin/python benchmarks/bench_semaphore.py --quick       # short run, ~1 minute
    .venv/bin/python benchmarks/bench_semaphore.py --smoke       # does every row work? (CI)
    .venv/bin/python benchmarks/bench_semaphore.py --only zookeeper --json out.json

Per store (the embedded SQLite file, a 3-member etcd cluster, one PostgreSQL server, a 3-server
ZooKeeper ensemble, all on 127.0.0.1, started with the launchers ``bench_stores.py`` uses), with
``--permits`` (3) permits of one semaphore:

1. uncontended acquire+release cycle of one permit in one process, against the store's floor
   (the bare grant and release of one lock: the floor rows of ``bench_stores.py`` and
   ``bench_sqlite.py``) and, on ZooKeeper, kazoo's ``Semaphore``;
2. ``--procs`` (8) processes contending for the permits: (a) each holding one for
   ``--hold-ms`` (2 ms), (b) for ``--handoff-hold-ms`` (200 ms), long enough that all N permits
   are taken and waiters wait for a release. Throughput, never more than N holders (checked
   from the workers' own hold windows), Jain's fairness index, release -> next grant;
3. fail-over: all N permits held by N processes, a waiter queued, one holder SIGKILLed; time
   from the kill to the waiter's grant (TTL / kazoo session timeout 2 s).

Every measured process is a fresh subprocess of this script (``--worker KIND CONFIG``), with
PR_SET_PDEATHSIG, stopped in ``finally`` blocks; the servers are stopped in ``finally`` blocks
too. Progress goes to stderr, tables to stdout. See benchmarks/README.md for what every row
means.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from _common import (
    SMOKE_SETTLE_S,
    SMOKE_STORES_HELP,
    SMOKE_TTL,
    BenchError,
    Child,
    Smoke,
    acquired_per_s,
    children,
    cycle_loop,
    cycle_loop_async,
    die_with_parent,
    each,
    emit,
    f,
    failover_trial,
    fan_out,
    first_trial,
    jain,
    median_round,
    progress,
    read_command,
    report_failover,
    run_parts,
    skip_args,
    summary,
    table,
    verdict,
)

NAME = "bench"
CYCLE_TTL = 30.0
STORES = ("sqlite", "etcd", "postgres", "zookeeper")
FLOOR = {
    "sqlite": "sqlite-floor",
    "etcd": "etcd-floor",
    "postgres": "pg-floor",
    "zookeeper": "zk-floor",
}
PEER = {"zookeeper": "kazoo-semaphore"}
EXPLAIN = ["tenure-async-nowait", "tenure-lock-async"]  # where the time goes; not with --quick
CYCLE_VARIANTS = {
    store: ["tenure-async", "tenure-sync", *EXPLAIN, FLOOR[store], *PEER.get(store, "").split()]
    for store in STORES
}
CONTEND_VARIANTS = {store: ["tenure-sync", *PEER.get(store, "").split()] for store in STORES}
# tenure-sync keeps the client's default lock-delay (one TTL), tenure-sync-nodelay passes
# lock_delay=0 (the bare expiry); kazoo has no lock-delay. Off ZooKeeper: one spot-check trial.
FAILOVER_VARIANTS = {
    "sqlite": ["tenure-sync-nodelay"],
    "etcd": ["tenure-sync-nodelay"],
    "postgres": ["tenure-sync-nodelay"],
    "zookeeper": ["tenure-sync", "tenure-sync-nodelay", "kazoo-semaphore"],
}
TENURE_SYNC = {"tenure-sync", "tenure-sync-nodelay"}
TENURE_ASYNC = {"tenure-async", "tenure-async-nowait", "tenure-lock-async"}
ASYNC_FLOORS = {"etcd-floor", "pg-floor"}
TARGET_JAIN = 0.99

DESCRIBE = {
    "tenure-async": "async with tenure.connect_async(url): permit = await "
    "client.semaphore(name, N, ttl=30).acquire(); await permit.release()",
    "tenure-sync": "tenure.connect(url); permit = client.semaphore(name, N, ttl=30).acquire(); "
    "permit.release()",
    "tenure-async-nowait": "tenure-async with wait=False: no arrival-order gate, takes the "
    "lowest free slot (one slot lock's grant + release)",
    "tenure-lock-async": "not a semaphore: a plain tenure lock, await client.lock(name, "
    "ttl=30).acquire(); await lease.release() (bench_stores.py's tenure-async row)",
    "sqlite-floor": "bench_sqlite.py's floor: bare sqlite3 (WAL, synchronous=FULL), one lock's "
    "two write transactions (grant with a token counter, release)",
    "etcd-floor": "bench_stores.py's floor: httpx on the JSON gateway, one lock's two txns "
    "(put with a lease + range, compare-delete)",
    "pg-floor": "bench_stores.py's floor: psycopg, one lock's two statements (token upsert + "
    "insert, compare-delete)",
    "zk-floor": "bench_stores.py's floor: kazoo, one session, create(ephemeral, sequence) + "
    "delete: one lock's two writes, not a semaphore (it counts no holders)",
    "kazoo-semaphore": "kazoo Semaphore(path, id, max_leases=N): acquire() takes kazoo's Lock "
    "on path-__lock__, lists the lease pool, creates its lease node, checks it (exists), "
    "releases the Lock; release() deletes the lease node",
}


# -- the semaphores the workers drive ----------------------------------------------------------


class SyncSem(Protocol):
    def acquire(self) -> tuple[int, int]: ...  # (slot, token); -1 where there is none
    def release(self) -> None: ...
    def close(self) -> None: ...


class TenureSem:
    """tenure's sync client: ``semaphore(...).acquire()`` / ``permit.release()``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import tenure

        self._client = tenure.connect(cfg["url"], lock_delay=cfg.get("lock_delay"))
        self._permits, self._ttl = int(cfg["permits"]), float(cfg["ttl"])
        self._permit: tenure.Permit | None = None

    def acquire(self) -> tuple[int, int]:
        self._permit = self._client.semaphore(NAME, self._permits, ttl=self._ttl).acquire()
        return self._permit.index, self._permit.token

    def release(self) -> None:
        assert self._permit is not None
        self._permit.release()
        self._permit = None

    def close(self) -> None:
        self._client.close()


class KazooSem:
    """kazoo's ``Semaphore`` recipe; kazoo's own pings keep the session (and the lease node)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from _zk_redis import kazoo_client

        self._client = kazoo_client(cfg)  # session timeout = cfg["ttl"]
        self._sem = self._client.Semaphore(
            f"/{cfg['ns']}/{NAME}", uuid.uuid4().hex, max_leases=int(cfg["permits"])
        )

    def acquire(self) -> tuple[int, int]:
        if not self._sem.acquire():
            raise BenchError("kazoo: blocking acquire returned False")
        return -1, -1

    def release(self) -> None:
        self._sem.release()

    def close(self) -> None:
        self._client.stop()
        self._client.close()


def make_sync(cfg: dict[str, Any]) -> SyncSem:
    variant = cfg["variant"]
    if variant in TENURE_SYNC:
        return TenureSem(cfg)
    if variant == "kazoo-semaphore":
        return KazooSem(cfg)
    raise BenchError(f"no sync semaphore variant {variant!r}")


def run_tenure_async(cfg: dict[str, Any], body: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``body(client)`` inside ``tenure.connect_async(url)`` on asyncio."""
    import anyio

    import tenure

    async def run() -> Any:
        async with tenure.connect_async(cfg["url"]) as client:
            return await body(client)

    return anyio.run(run)


# -- workers (run as subprocesses of this script) -------------------------------------------------


def worker_cycle(cfg: dict[str, Any]) -> dict[str, Any]:
    variant = cfg["variant"]
    warmup, max_cycles, seconds = int(cfg["warmup"]), int(cfg["max_cycles"]), float(cfg["seconds"])
    permits, ttl = int(cfg["permits"]), float(cfg["ttl"])
    if variant in TENURE_ASYNC:
        wait = variant == "tenure-async"

        async def body(client: Any) -> dict[str, Any]:
            held: list[Any] = []

            async def acquire() -> None:
                if variant == "tenure-lock-async":
                    held.append(await client.lock(NAME, ttl=ttl).acquire())
                else:
                    held.append(await client.semaphore(NAME, permits, ttl=ttl).acquire(wait=wait))

            async def release() -> None:
                await held.pop().release()

            return await cycle_loop_async(acquire, release, warmup, max_cycles, seconds)

        result: dict[str, Any] = run_tenure_async(cfg, body)
        return result
    if variant in ASYNC_FLOORS:
        import anyio

        from bench_stores import EtcdFloor, PgFloor

        async def floor() -> dict[str, Any]:
            lock = EtcdFloor(cfg) if variant == "etcd-floor" else PgFloor(cfg)
            await lock.open()
            try:
                return await cycle_loop_async(
                    lock.acquire, lock.release, warmup, max_cycles, seconds
                )
            finally:
                await lock.aclose()

        result = anyio.run(floor)
        return result
    lock: Any
    if variant == "sqlite-floor":
        from bench_sqlite import SqliteFloor

        lock = SqliteFloor(Path(cfg["dir"]))
    elif variant == "zk-floor":
        from _zk_redis import ZkFloor

        lock = ZkFloor(cfg)
    else:
        lock = make_sync(cfg)
    try:
        return cycle_loop(lock.acquire, lock.release, warmup, max_cycles, seconds)
    finally:
        lock.close()


def worker_contend(cfg: dict[str, Any]) -> dict[str, Any]:
    """On the parent's go: ask, hold one permit for ``hold_s``, release, ask again, until the
    end. Stamps (asked, got, about to release) on CLOCK_MONOTONIC (one clock for every process
    on Linux), with the permit's index and token. tenure: ``with client.semaphore(...)``."""
    hold, permits, ttl = float(cfg["hold_s"]), int(cfg["permits"]), float(cfg["ttl"])
    mono = time.monotonic
    records: list[tuple[float, float, float, int, int]] = []
    if cfg["variant"] == "tenure-sync":
        import tenure

        client = tenure.connect(cfg["url"])
        try:
            emit("ready")
            end = float(read_command().split()[1])
            cpu0 = time.process_time()
            while mono() < end:
                asked = mono()
                with client.semaphore(NAME, permits, ttl=ttl) as permit:
                    got = mono()
                    time.sleep(hold)
                    releasing = mono()
                records.append((asked, got, releasing, permit.index, permit.token))
            return {"records": records, "cpu_s": time.process_time() - cpu0}
        finally:
            client.close()
    sem = make_sync(cfg)
    try:
        emit("ready")
        end = float(read_command().split()[1])
        cpu0 = time.process_time()
        while mono() < end:
            asked = mono()
            slot, token = sem.acquire()
            got = mono()
            time.sleep(hold)
            releasing = mono()
            sem.release()
            records.append((asked, got, releasing, slot, token))
        return {"records": records, "cpu_s": time.process_time() - cpu0}
    finally:
        sem.close()


def worker_failover(cfg: dict[str, Any]) -> dict[str, Any]:
    """``holder`` (the one to be killed) and ``keeper``: take a permit, keep it, say ``held``,
    wait (for SIGKILL, or the parent's end). ``waiter``: ask, block, report when granted."""
    sem = make_sync(cfg)
    try:
        if cfg["role"] in ("holder", "keeper"):
            sem.acquire()
            emit(f"held {time.monotonic()!r}")
            time.sleep(3600)  # until SIGKILL / SIGTERM
            return {}
        emit("asking")
        slot, _ = sem.acquire()
        got = time.monotonic()
        sem.release()
        return {"got": got, "slot": slot}
    finally:
        sem.close()


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "cycle": worker_cycle,
    "contend": worker_contend,
    "failover": worker_failover,
}


def run_worker(kind: str, config: str) -> int:
    die_with_parent()
    result = WORKERS[kind](json.loads(config))
    emit("result " + json.dumps(result))
    return 0


# -- the parent side: servers, children, measurements ----------------------------------------


def child(kind: str, config: dict[str, Any], log: Path) -> Child:
    return Child(__file__, kind, config, log)


@dataclass
class Settings:
    rounds: int
    cycle_seconds: float
    max_cycles: int
    warmup: int
    permits: int
    procs: int
    hold_s: float
    contend_seconds: float
    handoff_hold_s: float
    handoff_seconds: float
    failover_trials: int
    failover_ttl: float
    warm_up_s: float
    quick: bool
    root: Path
    smoke: bool = False  # variants side by side, waiters settle for SMOKE_SETTLE_S


class SqliteStore:
    """The embedded store has no server: a fresh file per run."""

    store = "sqlite"

    def __init__(self, root: Path) -> None:
        self._root = root
        self._made = itertools.count(1)  # next() is atomic: variants may run side by side
        self.describe = f"embedded SQLite files in {root}"

    def config(self, variant: str, **extra: Any) -> dict[str, Any]:
        workdir = self._root / f"sqlite-{next(self._made):03d}-{variant}"
        workdir.mkdir()
        url = f"sqlite:///{workdir / 'tenure.db'}"
        return {"variant": variant, "store": "sqlite", "dir": str(workdir), "url": url, **extra}

    def cpu_s(self) -> float:
        return 0.0

    def clean(self) -> int:
        return 0

    def close(self) -> None:
        pass


def start_store(store: str, root: Path) -> Any:
    if store == "sqlite":
        return SqliteStore(root)
    from bench_stores import Server

    return Server(store)  # etcd: 3 members, leader first; ZooKeeper: 3 servers, the leader only


class Bench:
    def __init__(self, settings: Settings, server: Any) -> None:
        self.s = settings
        self.server = server
        self.store: str = server.store
        self._logs = itertools.count(1)

    def log(self, label: str) -> Path:
        path = self.s.root / f"{self.store}-{next(self._logs):03d}-{label}"
        path.mkdir()
        return path

    def clean(self) -> None:
        """The server's ``clean`` between two variants; none while variants run side by side (a
        smoke run: it would revoke the others' etcd leases), which clean once at the end."""
        if not self.s.smoke:
            self.server.clean()

    def each(self, variants: Sequence[str], run: Callable[[str], Any]) -> list[Any]:
        """``run`` for every variant: one after the other, side by side in a smoke run."""
        return each(variants, run, self.s.smoke)

    def warm_up(self) -> None:
        """ZooKeeper's JVMs run slowly until the JIT has compiled the hot paths: unrecorded
        floor cycles first, so that no variant pays for the warm-up."""
        if self.store != "zookeeper":
            return
        seconds, floor = self.s.warm_up_s, FLOOR[self.store]
        config = self.server.config(
            floor, ttl=CYCLE_TTL, warmup=0, max_cycles=self.s.max_cycles, seconds=seconds
        )
        config["permits"] = self.s.permits
        with children() as kids:
            kids.append(child("cycle", config, self.log("warm-up") / "worker.log"))
            kids[0].result(timeout=seconds + 90)
        progress(f"{self.store}: server warmed up ({seconds:g} s of {floor})")

    # part 1 ------------------------------------------------------------------------------------

    def cycles(self) -> dict[str, list[dict[str, Any]]]:
        variants = [v for v in CYCLE_VARIANTS[self.store] if not (self.s.quick and v in EXPLAIN)]
        rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for r in range(self.s.rounds):
            shift = r % len(variants)

            def one(variant: str, r: int = r) -> None:
                config = self.server.config(
                    variant,
                    ttl=CYCLE_TTL,
                    permits=self.s.permits,
                    warmup=self.s.warmup,
                    max_cycles=self.s.max_cycles,
                    seconds=self.s.cycle_seconds,
                )
                with children() as kids:
                    kids.append(child("cycle", config, self.log(f"cycle-{variant}") / "w.log"))
                    result = kids[0].result(timeout=self.s.cycle_seconds + 90)
                result["round"] = r
                self.clean()
                rounds[variant].append(result)
                progress(
                    f"{self.store} round {r + 1}/{self.s.rounds} {variant}: "
                    f"{result['cycles_per_s']:.0f}/s"
                )

            self.each(variants[shift:] + variants[:shift], one)  # rotated: no fixed first/last
        return rounds

    # part 2 ------------------------------------------------------------------------------------

    def contend(self, variant: str, hold_s: float, seconds: float) -> dict[str, Any]:
        workdir = self.log(f"contend-{variant}")
        config = self.server.config(variant, ttl=CYCLE_TTL, permits=self.s.permits, hold_s=hold_s)
        with children() as kids:
            for i in range(self.s.procs):
                kids.append(child("contend", config, workdir / f"worker{i}.log"))
            for kid in kids:
                if kid.expect(timeout=90) != "ready":
                    raise BenchError("worker not ready")
            cpu0, start = self.server.cpu_s(), time.monotonic()
            end = start + seconds
            for kid in kids:
                kid.send(f"go {end!r}")
            results = [kid.result(timeout=seconds + 90) for kid in kids]
            cpu1, t1 = self.server.cpu_s(), time.monotonic()
        out = analyse_permits(variant, results, start, end, self.s.permits)
        out["hold_s"] = hold_s
        out["server_cpu"] = (cpu1 - cpu0) / (t1 - start)
        out["server_cpu_s_per_acquisition"] = (cpu1 - cpu0) / max(1, out["acquisitions"])
        self.clean()
        return out

    # part 3 ------------------------------------------------------------------------------------

    def failover(self, variant: str, trials_wanted: int) -> dict[str, Any]:
        ttl = self.s.failover_ttl
        extra: dict[str, Any] = {}
        if variant in TENURE_SYNC:
            import tenure

            asked = 0.0 if variant == "tenure-sync-nodelay" else None  # None: the default
            extra = {"lock_delay": asked}
            extra["lock_delay_s"] = tenure.Timing(ttl, lock_delay=asked).lock_delay
        trials: list[dict[str, Any]] = []
        for _ in range(trials_wanted):
            workdir = self.log(f"failover-{variant}")
            config = self.server.config(variant, ttl=ttl, permits=self.s.permits, **extra)
            with children() as kids:  # the other N-1 permits: held all through the trial
                for i in range(self.s.permits - 1):
                    keeper = {**config, "role": "keeper"}
                    kids.append(child("failover", keeper, workdir / f"keeper{i}.log"))
                for kid in kids:
                    if not kid.expect(timeout=90).startswith("held "):
                        raise BenchError(f"keeper {kid.pid} did not get a permit")
                settle = SMOKE_SETTLE_S if self.s.smoke else 1.0
                trials.append(failover_trial(__file__, config, workdir, settle=settle))
            self.clean()
        return {"variant": variant, "ttl_s": ttl, "trials": trials, **extra}


# -- analysis -------------------------------------------------------------------------------------


def analyse_permits(
    variant: str, results: list[dict[str, Any]], start: float, end: float, permits: int
) -> dict[str, Any]:
    """Merge every process's ``(asked, got, about to release, slot, token)`` stamps.

    ``over_n``: grants after which more than ``permits`` recorded hold windows [got, about to
    release] were open at once. Each window lies inside the store's own hold (granted before
    ``got``, released after the stamp), so an overlap of windows is an overlap of holds.
    Hand-over: a release made while every permit was taken and somebody waited is paired,
    first in first out, with the next grant; the pair counts when the granted process had asked
    by the time of that release.
    """
    records = [tuple(rec) for r in results for rec in r["records"]]
    counts = [len(r["records"]) for r in results]
    events: list[tuple[float, int, float]] = []  # (stamp, 0 release / 1 grant / 2 ask, asked)
    for asked, got, releasing, _slot, _token in records:
        events += [(asked, 2, asked), (got, 1, asked), (releasing, 0, asked)]
    events.sort()
    waiting = held = most = over_n = 0
    freed: collections.deque[float] = collections.deque()  # releases that a waiter needed
    handoffs: list[float] = []
    for stamp, kind, asked in events:
        if kind == 2:
            waiting += 1
        elif kind == 1:
            waiting -= 1
            held += 1
            most = max(most, held)
            over_n += held > permits
            if freed:
                released = freed.popleft()
                if asked <= released:
                    handoffs.append(stamp - released)
        else:
            if waiting > len(freed) and held + len(freed) == permits:
                freed.append(stamp)  # no permit was free for the waiters: this one is theirs
            held -= 1
    # Per slot (tenure): one holder at a time, and tokens strictly growing in grant order.
    slot_overlaps = token_regressions = 0
    by_slot: dict[int, list[tuple[float, float, int]]] = collections.defaultdict(list)
    for _asked, got, releasing, slot, token in records:
        if slot >= 0:
            by_slot[int(slot)].append((got, releasing, int(token)))
    for grants in by_slot.values():
        grants.sort()
        for (_g0, r0, t0), (g1, _r1, t1) in itertools.pairwise(grants):
            slot_overlaps += g1 < r0
            token_regressions += t1 <= t0
    waits = [got - asked for asked, got, _r, _s, _t in records]
    last = max((rec[2] for rec in records), default=end)
    span = max(end, last) - start
    return {
        "variant": variant,
        "procs": len(results),
        "permits": permits,
        "span_s": span,
        "acquisitions": len(records),
        "per_s": len(records) / span,
        "counts": counts,
        "jain": jain(counts),
        "wait_s": summary(waits),
        "handoff_s": summary(handoffs),
        "most_held": most,
        "over_n": over_n,
        "slots": sorted(by_slot),
        "slot_overlaps": slot_overlaps,
        "token_regressions": token_regressions,
        "cpu_s_per_acquisition": sum(float(r["cpu_s"]) for r in results) / max(1, len(records)),
        "records": [r["records"] for r in results],
    }


# -- output ---------------------------------------------------------------------------------------


def ratio_per_round(rounds: dict[str, list[dict[str, Any]]], base: str, variant: str) -> float:
    """Cycle time of ``variant`` relative to ``base``'s, per round, then the median of rounds."""
    per_round = []
    for result in rounds[variant]:
        ref = next(x for x in rounds[base] if x["round"] == result["round"])
        per_round.append(ref["cycles_per_s"] / result["cycles_per_s"])
    return float(statistics.median(per_round))


def report_cycles(
    store: str, rounds: dict[str, list[dict[str, Any]]]
) -> tuple[str, dict[str, Any]]:
    floor, peer = FLOOR[store], PEER.get(store)
    ratios: dict[str, Any] = {}
    rows = []
    for variant in rounds:
        med = median_round(rounds[variant])
        spread = [r["cycles_per_s"] for r in rounds[variant]]
        vs_floor = ratio_per_round(rounds, floor, variant)
        vs_peer = ratio_per_round(rounds, peer, variant) if peer else None
        ratios[variant] = {"vs_floor": vs_floor, "vs_peer": vs_peer}
        rows.append(
            [
                variant,
                f(med["cycles_per_s"]),
                f"{f(min(spread))}-{f(max(spread))}",
                f(med["cycle_us"]["p50"]),
                f(med["cycle_us"]["p99"]),
                f(med["acquire_us"]["p50"]),
                f(med["release_us"]["p50"]),
                f(med["cpu_per_cycle_us"]),
                f"{vs_floor:.2f}x",
                "-" if vs_peer is None else f"{vs_peer:.2f}x",
            ]
        )
    headers = ["variant", "cycles/s", "range/s", "p50 us", "p99 us", "acq p50", "rel p50"]
    headers += ["cpu us", "vs floor", f"vs {peer or 'peer'}"]
    legend = "\n".join(f"  {v:<19} {DESCRIBE[v]}" for v in rounds)
    note = (
        "  vs floor / vs peer: cycle time relative to that row's, per round, median of rounds "
        "(2.00x = takes twice as long); cpu us: process CPU per cycle, all threads"
    )
    return f"{table(headers, rows)}\n{note}\n\nwhat each row does per cycle:\n{legend}", ratios


def jain_verdict(r: dict[str, Any]) -> str:
    """Against the target; "few" when the processes got under 10 grants each on average (a
    spread of one grant then costs more than 0.01)."""
    if statistics.fmean(r["counts"]) < 10:
        return "few"
    return verdict(r["jain"] >= TARGET_JAIN)


def report_contention(results: list[dict[str, Any]], s: Settings, store: str) -> str:
    rows = []
    for r in results:
        wait = {k: v * 1e3 for k, v in r["wait_s"].items()}
        ho = {k: v * 1e3 for k, v in r["handoff_s"].items()}
        tenure = r["variant"].startswith("tenure")
        rows.append(
            [
                r["variant"],
                f(r["per_s"]),
                f"{r['jain']:.4f}" + (f" {jain_verdict(r)}" if tenure else ""),
                f(wait["p50"], 1),
                f(wait["p99"], 1),
                f(wait["max"], 1),
                str(int(r["handoff_s"]["n"])),
                f(ho["p50"], 2),
                f(ho["p99"], 2),
                str(r["most_held"]),
                str(r["over_n"]),
                str(r["slot_overlaps"]) if tenure else "-",
                str(r["token_regressions"]) if tenure else "-",
                "-" if store == "sqlite" else f"{r['server_cpu'] * 100:.0f}",
                f(r["cpu_s_per_acquisition"] * 1e6),
            ]
        )
    headers = ["variant", "acq/s", "Jain", "wait p50 ms", "wait p99 ms", "wait max"]
    headers += ["handoffs", "handoff p50 ms", "handoff p99 ms", "most held", "over N"]
    headers += ["slot overlaps", "token regr.", "server %core", "client cpu us/acq"]
    counts = "\n".join(
        f"  {r['variant']:<17} {' '.join(str(c) for c in r['counts'])}"
        f"   (min {min(r['counts'])}, max {max(r['counts'])})"
        for r in results
    )
    hold = float(results[0]["hold_s"]) if results else s.hold_s
    lines = [
        table(headers, rows),
        "",
        f"over N, slot overlaps, token regr. must be 0; Jain target >= {TARGET_JAIN} (few: under "
        f"10 grants per process, too few to judge); ceiling: "
        f"permits / hold = {s.permits / hold:,.0f} acq/s. handoffs: releases paired with a "
        "waiting process's grant (0: no release found every permit taken and someone waiting)",
    ]
    peers = [r for r in results if not r["variant"].startswith("tenure")]
    for r in results:
        for p in peers if r["variant"].startswith("tenure") else []:
            ho = r["handoff_s"]["p50"] / p["handoff_s"]["p50"]
            lines.append(
                f"{r['variant']} / {p['variant']}: acq/s {r['per_s'] / p['per_s']:.2f}x, "
                f"wait p50 {r['wait_s']['p50'] / p['wait_s']['p50']:.2f}x, handoff p50 "
                f"{f(ho, 2)}x, client cpu per acquisition "
                f"{r['cpu_s_per_acquisition'] / p['cpu_s_per_acquisition']:.2f}x"
            )
    lines.append(f"per-process acquisition counts:\n{counts}")
    return "\n".join(lines)


def source_state() -> str:
    """The commit measured, and whether ``src/`` had uncommitted changes."""
    root = str(Path(__file__).resolve().parent.parent)

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", root, *argv], capture_output=True, text=True, timeout=10
        )
        return done.stdout.strip()

    try:
        head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "--", "src")
    except (OSError, subprocess.SubprocessError):
        return "?"
    return (head or "?") + (" + uncommitted changes in src/" if dirty else "")


# -- main -----------------------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run, about 1 minute")
    p.add_argument("--smoke", action="store_true", help=SMOKE_STORES_HELP)
    p.add_argument("--only", action="append", choices=STORES, help="this store (repeatable)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also save raw numbers as JSON")
    p.add_argument("--permits", type=int, default=3, help="permits of the semaphore (N)")
    p.add_argument("--rounds", type=int, help="rounds of part 1 (default 3, quick 1)")
    p.add_argument("--cycle-seconds", type=float, help="seconds per variant per round (1 / 0.3)")
    p.add_argument("--procs", type=int, default=8, help="contending processes")
    p.add_argument("--hold-ms", type=float, default=2.0, help="hold time in part 2a")
    p.add_argument("--contend-seconds", type=float, help="part 2a, per variant (6, quick 1.5)")
    p.add_argument("--handoff-hold-ms", type=float, default=200.0, help="hold time in part 2b")
    p.add_argument("--handoff-seconds", type=float, help="part 2b, per variant (6, quick 2)")
    p.add_argument("--failover-trials", type=int, help="on ZooKeeper, per variant (3, quick 1)")
    p.add_argument("--failover-ttl", type=float, default=2.0, help="TTL / kazoo session timeout")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["cycles", "contend", "permit-bound", "failover"],
    )
    p.add_argument("--worker", nargs=2, metavar=("KIND", "CONFIG"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def bench_store(
    store: str, s: Settings, skip: list[str], smoke: Smoke | None = None
) -> dict[str, Any]:
    server = start_store(store, s.root)
    out: dict[str, Any] = {"describe": server.describe, "loadavg_at_start": os.getloadavg()}
    try:
        print(f"\n######## {store}: {server.describe} (load {os.getloadavg()[0]:.2f})")
        bench = Bench(s, server)
        bench.warm_up()

        def cycles() -> str:
            rounds = bench.cycles()
            text, ratios = report_cycles(store, rounds)
            out["cycles"] = {"rounds": rounds, "ratios": ratios}
            for variant in CYCLE_VARIANTS[store] if smoke is not None else []:
                found = rounds.get(variant)
                value = median_round(found)["cycles_per_s"] if found else None
                smoke.number(f"{store} cycles {variant}", value)
            return text

        def contention(key: str, label: str, hold: float, seconds: float) -> str:
            def contend(variant: str) -> Any:
                r = bench.contend(variant, hold, seconds)
                progress(
                    f"{store} {label} {variant}: {r['per_s']:.0f} acq/s, {r['over_n']} over N, "
                    f"at most {r['most_held']} held"
                )
                return r

            contended = bench.each(CONTEND_VARIANTS[store], contend)
            out[key] = contended
            for variant, r in zip(CONTEND_VARIANTS[store], contended, strict=True):
                if smoke is not None:
                    smoke.number(f"{store} {label} {variant}", acquired_per_s(r))
            return report_contention(contended, s, store)

        trials = s.failover_trials if store == "zookeeper" or s.smoke else 0 if s.quick else 1
        # --quick: the bare expiry only (the lock-delay adds its 2 s)
        variants = [v for v in FAILOVER_VARIANTS[store] if not (s.quick and v == "tenure-sync")]

        def failovers() -> str:
            def failover(variant: str) -> dict[str, Any]:
                result = bench.failover(variant, trials)
                progress(f"{store} fail-over {variant} done")
                return result

            overs = bench.each(variants, failover)
            out["failover"] = overs
            for variant, r in zip(variants, overs, strict=True):
                if smoke is not None:
                    smoke.number(f"{store} fail-over {variant}", first_trial(r))
            return report_failover(overs) + (
                "\n  tenure-sync: tenure.connect(url), the default lock-delay (one TTL); "
                "tenure-sync-nodelay: tenure.connect(url, lock_delay=0); kazoo-semaphore: "
                f"KazooClient(timeout={s.failover_ttl:g}), the session timeout"
            )

        parts: list[tuple[str, Callable[[], str]]] = []
        if "cycles" not in skip:
            header = (
                f"\n== {store} 1. uncontended acquire+release of one permit (N={s.permits}), one "
                f"process ({s.rounds} round{'s' * (s.rounds > 1)} x {s.cycle_seconds:g} s per "
                "variant, order rotated per round; median round shown) =="
            )
            parts.append((header, cycles))
        for key, label, hold, seconds, what in [
            ("contend", "2a", s.hold_s, s.contend_seconds, "short holds"),
            ("permit-bound", "2b", s.handoff_hold_s, s.handoff_seconds, "permit-bound"),
        ]:
            if key not in skip:
                header = (
                    f"\n== {store} {label}. {what}: {s.procs} processes contending for "
                    f"N={s.permits} permits, {seconds:g} s each, holding {hold * 1e3:g} ms (sleep) "
                    "per acquisition =="
                )
                parts.append((header, functools.partial(contention, key, label, hold, seconds)))
        if "failover" not in skip and trials:
            header = (
                f"\n== {store} 3. fail-over: N={s.permits} permits held by {s.permits} processes, "
                f"a waiter queued, one holder SIGKILLed; TTL {s.failover_ttl:g} s (kazoo: session "
                "timeout), time from the kill to the waiter's grant =="
            )
            parts.append((header, failovers))
        run_parts(parts, s.smoke)
        if s.smoke:
            server.clean()  # once: parts and variants ran side by side
    finally:
        server.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return run_worker(*args.worker)
    quick, smoke = args.quick, args.smoke
    if smoke and not args.only:  # one store per process, each with its own server
        return fan_out(__file__, [["--only", store, *skip_args(args.skip)] for store in STORES])
    root = Path(tempfile.mkdtemp(prefix="tenure-bench-semaphore-"))
    settings = Settings(
        rounds=args.rounds or (1 if quick or smoke else 3),
        cycle_seconds=args.cycle_seconds or (0.05 if smoke else 0.3 if quick else 1.0),
        max_cycles=20 if smoke else 200_000,
        warmup=2 if smoke else 10 if quick else 30,
        permits=2 if smoke else args.permits,
        procs=3 if smoke else args.procs,  # one more than the permits: somebody waits
        hold_s=args.hold_ms / 1e3,
        contend_seconds=args.contend_seconds or (0.5 if smoke else 1.5 if quick else 6.0),
        handoff_hold_s=0.05 if smoke else args.handoff_hold_ms / 1e3,
        handoff_seconds=args.handoff_seconds or (0.5 if smoke else 2.0 if quick else 6.0),
        failover_trials=args.failover_trials or (1 if quick or smoke else 3),
        failover_ttl=SMOKE_TTL if smoke else args.failover_ttl,
        warm_up_s=SMOKE_SETTLE_S if smoke else 2.0 if quick else 5.0,
        quick=quick,
        root=root,
        smoke=smoke,
    )
    checks = Smoke() if smoke else None
    began = time.monotonic()
    stores = args.only or list(STORES)
    versions: dict[str, str] = {}
    for dist in ("kazoo", "httpx", "psycopg", "anyio"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[dist] = version(dist)
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "quick": quick,
        "versions": versions,
        "source": source_state(),
    }
    out: dict[str, Any] = {"env": env, "settings": {**settings.__dict__, "root": str(root)}}
    load = env["loadavg_at_start"]
    print(
        f"tenure semaphore benchmark — Python {env['python']}, {env['cpus']} CPUs, load "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) at the start; "
        f"everything on 127.0.0.1\ntenure at {env['source']}; libraries: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
    )
    try:
        for store in stores:
            out[store] = bench_store(store, settings, args.skip, checks)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["elapsed_s"] = time.monotonic() - began
    out["loadavg_at_end"] = os.getloadavg()
    print(f"\ntotal {out['elapsed_s']:.0f} s, load {out['loadavg_at_end'][0]:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
        print(f"raw numbers saved to {args.json}")
    return 0 if checks is None else checks.exit_code()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every worker and server stopped, temp dirs removed", file=sys.stderr)
        sys.exit(130)
