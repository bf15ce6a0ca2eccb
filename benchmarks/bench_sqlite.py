#!/usr/bin/env python3
"""Benchmark tenure's embedded SQLite store against a bare-SQLite floor and plain file locks.

Run from the repository root:

    .venv/bin/python benchmarks/bench_sqlite.py            # full run, ~2 minutes
    .venv/bin/python benchmarks/bench_sqlite.py --quick    # short run, ~30 s
    .venv/bin/python benchmarks/bench_sqlite.py --smoke    # does every row work? (CI), ~10 s
    .venv/bin/python benchmarks/bench_sqlite.py --json out.json

Four parts, each variant side by side (see benchmarks/README.md for what every row means):

1. uncontended acquire+release cycle in one process;
2. N processes contending for one lock, each holding it for a fixed short time;
3. CPU used by waiters blocked behind a long holder;
4. fail-over: SIGKILL the holder, time until the waiter is granted the lock (TTL 2 s), with the
   default lock-delay (one TTL) and with ``lock_delay=0``.

Every measured process is a fresh subprocess of this script (``--worker KIND``), never a fork:
tenure's sync client runs an event-loop thread, and forking after threads is unsafe. Children get
PR_SET_PDEATHSIG and are terminated in ``finally`` blocks, so none outlives the run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from _common import (
    SMOKE_HELP,
    SMOKE_SETTLE_S,
    SMOKE_TTL,
    BenchError,
    Child,
    Smoke,
    acquired_per_s,
    analyse_contention,
    children,
    contend_loop,
    cycle_loop,
    cycle_loop_async,
    die_with_parent,
    each,
    emit,
    f,
    failover_trial,
    first_trial,
    median_round,
    proc_usage,
    progress,
    read_command,
    report_failover,
    run_parts,
    table,
    verdict,
)

LOCK_NAME = "bench"
TTL = 30.0
FAILOVER_TTL = 2.0
FAILOVER_DELAYS = {"tenure-sync": None, "tenure-sync-nodelay": 0.0}  # None: the default

CYCLE_VARIANTS = [
    "tenure-sync",
    "tenure-async",
    "tenure-async-nodelay",
    "sqlite-floor",
    "portalocker",
    "flock",
    "sync-hop",
]
CONTEND_VARIANTS = ["tenure-sync", "portalocker", "flock"]

DESCRIBE = {
    "tenure-sync": "tenure.connect(url); lease = client.lock(name, ttl=30).acquire(); "
    "lease.release()",
    "tenure-async": "async with tenure.connect_async(url): await client.lock(...).acquire(); "
    "await lease.release()",
    "tenure-async-nodelay": "tenure-async with lock_delay=0: what the default lock-delay costs",
    "sqlite-floor": "bare sqlite3, WAL + synchronous=FULL, 2 write transactions per cycle: "
    "BEGIN IMMEDIATE; INSERT..ON CONFLICT DO UPDATE counter RETURNING; INSERT lock row; COMMIT; "
    "BEGIN IMMEDIATE; DELETE lock row; COMMIT",
    "portalocker": "portalocker.Lock(path), defaults; acquire() opens+locks, release() "
    "unlocks+closes",
    "flock": "fcntl.flock(fd, LOCK_EX) / flock(fd, LOCK_UN) on one open fd",
    "sync-hop": "reference, not a lock: 2 x the sync client's hand-off of a no-op to its loop "
    "thread = the 2 thread hops the sync API makes per cycle",
}

TARGET_RATIO = 1.5
TARGET_JAIN = 0.99
TARGET_WAIT_FACTOR = 2.0
TARGET_HANDOFF_S = 0.005
TARGET_IDLE_CPU = 0.01


# -- lock variants used by the workers ------------------------------------------------------------


class SyncLock(Protocol):
    timeouts: int

    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


class TenureLock:
    def __init__(self, workdir: Path) -> None:
        import tenure

        self.timeouts = 0
        self._client = tenure.connect(f"sqlite:///{workdir / 'tenure.db'}")
        self._lease: tenure.Lease | None = None

    def acquire(self) -> None:
        self._lease = self._client.lock(LOCK_NAME, ttl=TTL).acquire()

    def release(self) -> None:
        assert self._lease is not None
        self._lease.release()
        self._lease = None

    def close(self) -> None:
        self._client.close()


class PortaLock:
    def __init__(self, workdir: Path, timeout: float | None = None) -> None:
        import portalocker

        self.timeouts = 0
        self._already = portalocker.exceptions.AlreadyLocked
        # Defaults (timeout 5 s, check_interval 0.25 s) unless a timeout is given.
        self._lock: Any = (
            portalocker.Lock(workdir / "portalocker.lock")
            if timeout is None
            else portalocker.Lock(workdir / "portalocker.lock", timeout=timeout)
        )

    def acquire(self) -> None:
        while True:
            try:
                self._lock.acquire()
                return
            except self._already:
                self.timeouts += 1  # its timeout passed: count it, keep asking

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._lock.release()


class FlockLock:
    def __init__(self, workdir: Path) -> None:
        self.timeouts = 0
        self._fd = os.open(workdir / "flock.lock", os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)


class SqliteFloor:
    """The two write transactions a grant and a release need, and nothing else."""

    def __init__(self, workdir: Path) -> None:
        self.timeouts = 0
        self._db = sqlite3.connect(workdir / "floor.db", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS tokens (name TEXT PRIMARY KEY, last INTEGER NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, token INTEGER NOT NULL,"
            " session INTEGER NOT NULL)"
        )
        self._token = 0

    def acquire(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        (self._token,) = db.execute(
            "INSERT INTO tokens (name, last) VALUES (?, 1)"
            " ON CONFLICT (name) DO UPDATE SET last = last + 1 RETURNING last",
            (LOCK_NAME,),
        ).fetchone()
        db.execute(
            "INSERT INTO locks (name, token, session) VALUES (?, ?, 1)", (LOCK_NAME, self._token)
        )
        db.execute("COMMIT")

    def release(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "DELETE FROM locks WHERE name = ? AND token = ? AND session = 1",
            (LOCK_NAME, self._token),
        )
        db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()


class SyncHop:
    """Not a lock: the sync API's hand-off into its event-loop thread, twice per cycle."""

    def __init__(self, workdir: Path) -> None:
        import tenure

        self.timeouts = 0
        self._client = tenure.connect(f"sqlite:///{workdir / 'hop.db'}")

    @staticmethod
    async def _noop() -> None:
        return None

    def acquire(self) -> None:
        self._client._run(self._noop)  # the same call every sync method makes

    release = acquire

    def close(self) -> None:
        self._client.close()


def make_lock(variant: str, workdir: Path, portalocker_timeout: float | None = None) -> SyncLock:
    if variant == "tenure-sync":
        return TenureLock(workdir)
    if variant == "portalocker":
        return PortaLock(workdir, portalocker_timeout)
    if variant == "flock":
        return FlockLock(workdir)
    if variant == "sqlite-floor":
        return SqliteFloor(workdir)
    if variant == "sync-hop":
        return SyncHop(workdir)
    raise BenchError(f"no sync lock variant {variant!r}")


# -- workers (run as subprocesses of this script) -------------------------------------------------


def worker_cycle(cfg: dict[str, Any]) -> dict[str, Any]:
    workdir = Path(cfg["dir"])
    warmup, max_cycles, seconds = int(cfg["warmup"]), int(cfg["max_cycles"]), float(cfg["seconds"])
    if cfg["variant"] in ("tenure-async", "tenure-async-nodelay"):
        delay = 0.0 if cfg["variant"] == "tenure-async-nodelay" else None  # None: the default
        return _cycle_async(workdir, warmup, max_cycles, seconds, delay)
    lock = make_lock(cfg["variant"], workdir)
    try:
        return cycle_loop(lock.acquire, lock.release, warmup, max_cycles, seconds)
    finally:
        lock.close()


def _cycle_async(
    workdir: Path, warmup: int, max_cycles: int, seconds: float, lock_delay: float | None
) -> dict[str, Any]:
    import anyio

    import tenure

    async def main() -> dict[str, Any]:
        url = f"sqlite:///{workdir / 'tenure.db'}"
        async with tenure.connect_async(url, lock_delay=lock_delay) as client:
            lease: tenure.AsyncLease | None = None

            async def acquire() -> None:
                nonlocal lease
                lease = await client.lock(LOCK_NAME, ttl=TTL).acquire()

            async def release() -> None:
                assert lease is not None
                await lease.release()

            return await cycle_loop_async(acquire, release, warmup, max_cycles, seconds)

    result: dict[str, Any] = anyio.run(main)
    return result


def worker_contend(cfg: dict[str, Any]) -> dict[str, Any]:
    return contend_loop(make_lock(cfg["variant"], Path(cfg["dir"])), float(cfg["hold_s"]))


def worker_idle(cfg: dict[str, Any]) -> dict[str, Any]:
    timeout = float(cfg["portalocker_timeout"])
    lock = make_lock(cfg["variant"], Path(cfg["dir"]), portalocker_timeout=timeout)
    try:
        if cfg["role"] == "holder":
            lock.acquire()
            emit("held")
            read_command()
            lock.release()
            return {}
        emit("asking")
        asked = time.monotonic()
        lock.acquire()
        got = time.monotonic()
        lock.release()
        return {"asked": asked, "got": got, "timeouts": lock.timeouts}
    finally:
        lock.close()


def worker_failover(cfg: dict[str, Any]) -> dict[str, Any]:
    """``holder``: take the lock and wait for SIGKILL; ``waiter``: say when it got the lock."""
    import tenure

    url = f"sqlite:///{Path(cfg['dir']) / 'tenure.db'}"
    with tenure.connect(url, lock_delay=cfg["lock_delay"]) as client:
        if cfg["role"] == "waiter":
            emit("asking")
        lease = client.lock(LOCK_NAME, ttl=cfg["ttl"]).acquire()
        got = time.monotonic()
        if cfg["role"] == "holder":
            emit(f"held {got!r}")
            time.sleep(3600)  # until SIGKILL
        lease.release()
    return {"got": got}


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "cycle": worker_cycle,
    "contend": worker_contend,
    "idle": worker_idle,
    "failover": worker_failover,
}


def run_worker(kind: str, config: str) -> int:
    die_with_parent()
    result = WORKERS[kind](json.loads(config))
    emit("result " + json.dumps(result))
    return 0


# -- the parent side: children, and the measurements ----------------------------------------------


def child(kind: str, config: dict[str, Any], log: Path) -> Child:
    """A worker subprocess of this script."""
    return Child(__file__, kind, config, log)


@dataclass
class Settings:
    rounds: int
    cycle_seconds: float
    max_cycles: int
    warmup: int
    procs: int
    hold_s: float
    contend_seconds: float
    idle_hold_s: float
    failover_ttl: float
    root: Path
    smoke: bool = False  # variants side by side, waiters settle for SMOKE_SETTLE_S

    @property
    def settle_s(self) -> float:
        return SMOKE_SETTLE_S if self.smoke else 0.5


class Bench:
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self._dirs = itertools.count(1)  # next() is atomic: variants may run side by side

    def fresh_dir(self, label: str) -> Path:
        path = self.s.root / f"{next(self._dirs):03d}-{label}"
        path.mkdir()
        return path

    # part 1 ------------------------------------------------------------------------------------

    def cycles(self) -> dict[str, list[dict[str, Any]]]:
        rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in CYCLE_VARIANTS}
        for r in range(self.s.rounds):
            shift = r % len(CYCLE_VARIANTS)
            order = CYCLE_VARIANTS[shift:] + CYCLE_VARIANTS[:shift]  # rotate: no fixed first/last

            def one(variant: str, r: int = r) -> None:
                workdir = self.fresh_dir(f"cycle-{variant}")
                config = {
                    "variant": variant,
                    "dir": str(workdir),
                    "warmup": self.s.warmup,
                    "max_cycles": self.s.max_cycles,
                    "seconds": self.s.cycle_seconds,
                }
                with children() as kids:
                    kids.append(child("cycle", config, workdir / "worker.log"))
                    result = kids[0].result(timeout=self.s.cycle_seconds + 60)
                result["round"] = r
                rounds[variant].append(result)
                progress(f"round {r + 1}/{self.s.rounds} {variant}: {result['cycles_per_s']:.0f}/s")

            each(order, one, self.s.smoke)
        return rounds

    # part 2 ------------------------------------------------------------------------------------

    def contend(self, variant: str) -> dict[str, Any]:
        workdir = self.fresh_dir(f"contend-{variant}")
        config = {"variant": variant, "dir": str(workdir), "hold_s": self.s.hold_s}
        with children() as kids:
            for i in range(self.s.procs):
                kids.append(child("contend", config, workdir / f"worker{i}.log"))
            for kid in kids:
                if kid.expect(timeout=60) != "ready":
                    raise BenchError("worker not ready")
            start = time.monotonic()
            end = start + self.s.contend_seconds
            for kid in kids:
                kid.send(f"go {end!r}")
            results = [kid.result(timeout=self.s.contend_seconds + 60) for kid in kids]
        return analyse_contention(variant, results, start, end, self.s.procs, self.s.hold_s)

    # part 3 ------------------------------------------------------------------------------------

    def idle(self, variant: str) -> dict[str, Any]:
        workdir = self.fresh_dir(f"idle-{variant}")
        config: dict[str, Any] = {
            "variant": variant,
            "dir": str(workdir),
            "portalocker_timeout": self.s.idle_hold_s + 60,
        }
        with children() as kids:
            holder = child("idle", {**config, "role": "holder"}, workdir / "holder.log")
            kids.append(holder)
            if holder.expect(timeout=60) != "held":
                raise BenchError("holder did not take the lock")
            waiters = [
                child("idle", {**config, "role": "waiter"}, workdir / f"waiter{i}.log")
                for i in range(self.s.procs)
            ]
            kids.extend(waiters)
            for waiter in waiters:
                if waiter.expect(timeout=60) != "asking":
                    raise BenchError("waiter did not start")
            time.sleep(self.s.settle_s)  # every waiter makes its first attempt, then waits
            t0 = time.monotonic()
            before = [proc_usage(w.pid) for w in waiters]
            time.sleep(self.s.idle_hold_s)
            after = [proc_usage(w.pid) for w in waiters]
            t1 = time.monotonic()
            released = time.monotonic()
            holder.send("release")
            holder.result(timeout=30)
            got = [w.result(timeout=60) for w in waiters]
        window = t1 - t0
        cpu = [(a.cpu_s - b.cpu_s) / window for a, b in zip(after, before, strict=True)]
        cpu_ticks = [(a.ticks_s - b.ticks_s) / window for a, b in zip(after, before, strict=True)]
        wakeups = [(a.switches - b.switches) / window for a, b in zip(after, before, strict=True)]
        return {
            "variant": variant,
            "window_s": window,
            "cpu_fraction_per_waiter": cpu,
            "cpu_fraction_per_waiter_from_proc_stat": cpu_ticks,
            "context_switches_per_s_per_waiter": wakeups,
            "drain_s": max(g["got"] for g in got) - released,
            "timeouts": sum(int(g.get("timeouts", 0)) for g in got),
        }

    # part 4 ------------------------------------------------------------------------------------

    def failover(self, variant: str, trials: int) -> dict[str, Any]:
        import tenure

        asked = FAILOVER_DELAYS[variant]
        ttl = self.s.failover_ttl
        delay = tenure.Timing(ttl, lock_delay=asked).lock_delay
        times = []
        for _ in range(trials):
            workdir = self.fresh_dir(f"failover-{variant}")
            config = {"variant": variant, "dir": str(workdir), "lock_delay": asked, "ttl": ttl}
            settle = SMOKE_SETTLE_S if self.s.smoke else 1.0
            times.append(failover_trial(__file__, config, workdir, settle=settle))
        return {"variant": variant, "ttl_s": ttl, "lock_delay_s": delay, "trials": times}


# -- output ---------------------------------------------------------------------------------------


def report_cycles(rounds: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, float]]:
    # Ratio to the floor per round (both measured minutes apart at most), then the median.
    ratios: dict[str, float] = {}
    for variant, results in rounds.items():
        per_round = []
        for result in results:
            floor = next(x for x in rounds["sqlite-floor"] if x["round"] == result["round"])
            per_round.append(floor["cycles_per_s"] / result["cycles_per_s"])
        ratios[variant] = statistics.median(per_round)
    rows = []
    for variant in CYCLE_VARIANTS:
        med = median_round(rounds[variant])
        spread = [r["cycles_per_s"] for r in rounds[variant]]
        target = ""
        if variant.startswith("tenure"):
            target = f"<= {TARGET_RATIO}x  {verdict(ratios[variant] <= TARGET_RATIO)}"
        rows.append(
            [
                variant,
                f(med["cycles_per_s"]),
                f"{f(min(spread))}-{f(max(spread))}",
                f(med["cycle_us"]["p50"], 1),
                f(med["cycle_us"]["p99"], 1),
                f(med["acquire_us"]["p50"], 1),
                f(med["release_us"]["p50"], 1),
                f(med["cpu_per_cycle_us"], 1),
                f"{ratios[variant]:.2f}x",
                target,
            ]
        )
    text = table(
        [
            "variant",
            "cycles/s",
            "range/s",
            "p50 us",
            "p99 us",
            "acq p50",
            "rel p50",
            "cpu us",
            "vs floor",
            "target",
        ],
        rows,
    )
    # Issue 28's targets within tenure's rows: the sync API within 1.3x of the async one, the
    # default lock-delay within 1.1x of lock_delay=0 (one ratio to the floor over the other).
    for slow, fast, limit in (
        ("tenure-sync", "tenure-async", 1.3),
        ("tenure-async", "tenure-async-nodelay", 1.1),
    ):
        x = ratios[slow] / ratios[fast]
        text += f"\n{slow} vs {fast}: {x:.2f}x, target <= {limit}x {verdict(x <= limit)}"
    width = max(len(v) for v in CYCLE_VARIANTS)
    legend = "\n".join(f"  {v:<{width}} {DESCRIBE[v]}" for v in CYCLE_VARIANTS)
    return text + "\n\nwhat each row does per cycle:\n" + legend, ratios


def report_contention(results: list[dict[str, Any]], s: Settings) -> str:
    wait_target = TARGET_WAIT_FACTOR * s.procs * s.hold_s
    rows = []
    for r in results:
        ms = {k: v * 1e3 for k, v in r["wait_s"].items()}
        ho = {k: v * 1e3 for k, v in r["handoff_s"].items()}
        rows.append(
            [
                r["variant"],
                f(r["per_s"]),
                f"{r['jain']:.4f} {verdict(r['jain'] >= TARGET_JAIN)}",
                f(ms["p50"], 1),
                f"{f(ms['p99'], 1)} {verdict(r['wait_s']['p99'] <= wait_target)}",
                f(ms["max"], 1),
                f(ho["p50"], 2),
                f"{f(ho['p99'], 2)} {verdict(r['handoff_s']['p99'] < TARGET_HANDOFF_S)}",
                str(r["overlaps"]),
                str(r["timeouts"]),
            ]
        )
    text = table(
        [
            "variant",
            "acq/s",
            "Jain",
            "wait p50 ms",
            "wait p99 ms",
            "wait max",
            "handoff p50 ms",
            "handoff p99 ms",
            "overlaps",
            "timeouts",
        ],
        rows,
    )
    counts = "\n".join(
        f"  {r['variant']:<12} {' '.join(str(c) for c in r['counts'])}"
        f"   (min {min(r['counts'])}, max {max(r['counts'])};"
        f" CPU per acquisition, all procs: {r['cpu_s_per_acquisition'] * 1e6:,.0f} us)"
        for r in results
    )
    ideal = 1.0 / s.hold_s
    return (
        f"{text}\n\n"
        f"targets: Jain >= {TARGET_JAIN}; wait p99 <= {TARGET_WAIT_FACTOR:g} x {s.procs} procs x "
        f"{s.hold_s * 1e3:g} ms = {wait_target * 1e3:g} ms; release->next grant p99 < "
        f"{TARGET_HANDOFF_S * 1e3:g} ms. Ceiling: 1 / hold = {ideal:,.0f} acq/s.\n"
        f"per-process acquisition counts:\n{counts}"
    )


def report_idle(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        cpu = r["cpu_fraction_per_waiter"]
        rows.append(
            [
                r["variant"],
                f"{statistics.fmean(cpu) * 100:.3f}",
                f"{max(cpu) * 100:.3f} {verdict(max(cpu) < TARGET_IDLE_CPU)}",
                f"{max(r['cpu_fraction_per_waiter_from_proc_stat']) * 100:.2f}",
                f"{statistics.fmean(r['context_switches_per_s_per_waiter']):.1f}",
                f"{r['drain_s'] * 1e3:,.1f}",
                str(r["timeouts"]),
            ]
        )
    return table(
        [
            "variant",
            "mean %core",
            "max %core",
            "max %core (stat)",
            "ctx sw/s",
            "drain ms",
            "timeouts",
        ],
        rows,
    )


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            mount = parts[1]
            if str(path).startswith(mount.rstrip("/") + "/") and len(mount) >= len(best):
                best, kind = mount, f"{parts[2]} on {parts[0]} ({mount})"
    return kind


# -- main -----------------------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run, about 30 s")
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    p.add_argument("--json", type=Path, metavar="PATH", help="also save raw numbers as JSON")
    p.add_argument("--dir", type=Path, help="where to make temp dirs (default: system temp)")
    p.add_argument("--rounds", type=int, help="rounds of part 1 (default 3, quick 1)")
    p.add_argument("--cycle-seconds", type=float, help="seconds per variant per round (2 / 0.5)")
    p.add_argument("--procs", type=int, default=8, help="contending processes / idle waiters")
    p.add_argument("--hold-ms", type=float, default=2.0, help="hold time under contention")
    p.add_argument("--contend-seconds", type=float, help="per variant (default 10, quick 3)")
    p.add_argument("--idle-seconds", type=float, help="idle-waiter window (default 5, quick 2)")
    p.add_argument("--failover-trials", type=int, help="per variant (default 3, quick 1)")
    p.add_argument(
        "--skip", action="append", default=[], choices=["cycles", "contend", "idle", "failover"]
    )
    p.add_argument("--worker", nargs=2, metavar=("KIND", "CONFIG"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return run_worker(*args.worker)
    quick, smoke = args.quick, args.smoke
    root = Path(tempfile.mkdtemp(prefix="tenure-bench-", dir=args.dir))
    settings = Settings(
        rounds=args.rounds or (1 if quick or smoke else 3),
        cycle_seconds=args.cycle_seconds or (0.05 if smoke else 0.5 if quick else 2.0),
        max_cycles=20 if smoke else 200_000,
        warmup=2 if smoke else 20 if quick else 100,
        procs=2 if smoke else args.procs,
        hold_s=args.hold_ms / 1e3,
        contend_seconds=args.contend_seconds or (0.5 if smoke else 3.0 if quick else 10.0),
        idle_hold_s=args.idle_seconds or (0.3 if smoke else 2.0 if quick else 5.0),
        failover_ttl=SMOKE_TTL if smoke else FAILOVER_TTL,
        root=root,
        smoke=smoke,
    )
    began = time.monotonic()
    env = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "filesystem": fs_type(root),
        "quick": quick,
    }
    out: dict[str, Any] = {"env": env, "settings": {**settings.__dict__, "root": str(root)}}
    print(
        f"tenure SQLite benchmark — Python {env['python']}, SQLite {env['sqlite']}, "
        f"{env['cpus']} CPUs, load {env['loadavg_at_start'][0]:.2f}\n"
        f"temp dirs in {root} — {env['filesystem']} (fsync cost decides the floor)"
    )
    bench = Bench(settings)

    def cycles() -> str:
        cycle_rounds = bench.cycles()
        text, ratios = report_cycles(cycle_rounds)
        out["cycles"] = {"rounds": cycle_rounds, "ratio_to_floor": ratios}
        return text

    def contend(variant: str) -> dict[str, Any]:
        result = bench.contend(variant)
        progress(f"contention {variant}: {result['per_s']:.0f} acq/s")
        return result

    def contention() -> str:
        out["contention"] = each(CONTEND_VARIANTS, contend, smoke)
        return report_contention(out["contention"], settings)

    def idle(variant: str) -> dict[str, Any]:
        result = bench.idle(variant)
        progress(f"idle {variant} done")
        return result

    def idles() -> str:
        out["idle"] = each(CONTEND_VARIANTS, idle, smoke)
        return report_idle(out["idle"]) + (
            "\n  %core from /proc/PID/task/*/schedstat; (stat) = utime+stime ticks, 10 ms grain;"
            " portalocker waiters use timeout = window + 60 s, default check_interval"
        )

    def failovers() -> str:
        trials = args.failover_trials or (1 if quick or smoke else 3)
        out["failover"] = each(list(FAILOVER_DELAYS), lambda v: bench.failover(v, trials), smoke)
        return report_failover(out["failover"])

    s, rounds = settings, settings.rounds
    parts = {
        "cycles": (
            f"\n== 1. uncontended acquire+release cycle, one process, one name "
            f"({rounds} round{'s' * (rounds > 1)} x {s.cycle_seconds:g} s per variant, "
            f"order rotated per round; median round shown) ==",
            cycles,
        ),
        "contend": (
            f"\n== 2. {s.procs} processes contending for one lock, {s.contend_seconds:g} s each, "
            f"holding {s.hold_s * 1e3:g} ms (sleep) per acquisition ==",
            contention,
        ),
        "idle": (
            f"\n== 3. idle waiters: {s.procs} processes blocked behind one holder, CPU over a "
            f"{s.idle_hold_s:g} s window (target < {TARGET_IDLE_CPU * 100:g}% of a core per "
            "waiter) ==",
            idles,
        ),
        "failover": (
            f"\n== 4. fail-over: SIGKILL the holder (TTL {s.failover_ttl:g} s), time to the "
            "waiter's grant; tenure-sync: the default lock-delay, -nodelay: lock_delay=0 ==",
            failovers,
        ),
    }
    try:
        run_parts([part for key, part in parts.items() if key not in args.skip], smoke)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["elapsed_s"] = time.monotonic() - began
    print(f"\ntotal {out['elapsed_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
        print(f"raw numbers saved to {args.json}")
    return smoke_verdict(out, args.skip) if smoke else 0


def smoke_verdict(out: dict[str, Any], skip: list[str]) -> int:
    """Every row of every part that ran produced a number (its figures are not judged)."""
    smoke = Smoke()
    if "cycles" not in skip:
        for variant in CYCLE_VARIANTS:
            rounds = out["cycles"]["rounds"].get(variant)
            smoke.number(f"cycles {variant}", rounds and median_round(rounds)["cycles_per_s"])
    if "contend" not in skip:
        found = {r["variant"]: r for r in out["contention"]}
        for variant in CONTEND_VARIANTS:
            smoke.number(f"contention {variant}", acquired_per_s(found.get(variant)))
    if "idle" not in skip:
        found = {r["variant"]: r for r in out["idle"]}
        for variant in CONTEND_VARIANTS:
            smoke.number(f"idle {variant}", found.get(variant, {}).get("drain_s"))
    if "failover" not in skip:
        found = {r["variant"]: r for r in out["failover"]}
        for variant in FAILOVER_DELAYS:
            smoke.number(f"fail-over {variant}", first_trial(found.get(variant)))
    return smoke.exit_code()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every worker stopped, temp dirs removed", file=sys.stderr)
        sys.exit(130)
