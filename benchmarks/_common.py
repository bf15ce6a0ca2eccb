"""Helpers shared by the benchmark scripts (``bench_sqlite.py``, ``bench_stores.py``, …).

Statistics (nearest-rank percentiles, Jain's index), the worker side of the line protocol
(``emit``, ``read_command``, ``die_with_parent``), the parent side (``Child``, ``children``),
timing loops for one uncontended acquire+release cycle, the analysis of a contention run from
shared-monotonic stamps, one fail-over trial (SIGKILL the holder, time the waiter's grant), /proc
readings, plain-text tables, and the plumbing of every script's ``--smoke`` run (``Smoke``,
``each``, ``fan_out``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import json
import math
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

PROTO = "@@"  # prefix of protocol lines on a worker's stdout; anything else there is ignored


class BenchError(RuntimeError):
    pass


# -- statistics ----------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1.0 = perfectly even."""
    square_sum = sum(x * x for x in xs)
    if not xs or square_sum == 0:
        return math.nan
    return sum(xs) ** 2 / (len(xs) * square_sum)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": float(len(values)),
        "mean": statistics.fmean(values) if values else math.nan,
        "p50": pct(values, 50),
        "p90": pct(values, 90),
        "p99": pct(values, 99),
        "p99.9": pct(values, 99.9),
        "max": max(values) if values else math.nan,
    }


# -- the worker side -------------------------------------------------------------------------------


def emit(message: str) -> None:
    sys.stdout.write(PROTO + message + "\n")
    sys.stdout.flush()


def die_with_parent() -> None:
    """Have the kernel SIGTERM this worker if the benchmark process dies (Linux)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        sys.exit(1)


def read_command() -> str:
    line = sys.stdin.readline()
    if not line:
        sys.exit(1)  # the benchmark went away
    return line.strip()


def cycle_result(total: list[int], acq: list[int], elapsed_ns: int, cpu_s: float) -> dict[str, Any]:
    rel = [t - a for t, a in zip(total, acq, strict=True)]
    return {
        "cycles": len(total),
        "elapsed_s": elapsed_ns / 1e9,
        "cycles_per_s": len(total) / (elapsed_ns / 1e9),
        "cpu_per_cycle_us": cpu_s / max(1, len(total)) * 1e6,
        "cycle_us": {k: v / 1e3 for k, v in summary(total).items() if k != "n"},
        "acquire_us": {k: v / 1e3 for k, v in summary(acq).items() if k != "n"},
        "release_us": {k: v / 1e3 for k, v in summary(rel).items() if k != "n"},
    }


class ContendLock(Protocol):
    timeouts: int

    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


def contend_loop(lock: ContendLock, hold: float) -> dict[str, Any]:
    """A contention worker: on the parent's go, ask, hold, release, ask again until the end.

    Stamps (asked, got, about to release) on CLOCK_MONOTONIC: one clock for every process (Linux).
    """
    mono = time.monotonic
    records: list[tuple[float, float, float]] = []
    try:
        emit("ready")
        end = float(read_command().split()[1])
        cpu0 = time.process_time()
        while mono() < end:
            asked = mono()
            lock.acquire()
            got = mono()
            time.sleep(hold)
            releasing = mono()
            lock.release()
            records.append((asked, got, releasing))
        cpu = time.process_time() - cpu0
    finally:
        lock.close()
    return {"records": records, "timeouts": lock.timeouts, "cpu_s": cpu}


def cycle_loop(
    acquire: Callable[[], object],
    release: Callable[[], object],
    warmup: int,
    max_cycles: int,
    seconds: float,
) -> dict[str, Any]:
    """Warm up, then time acquire+release cycles for ``seconds`` (at most ``max_cycles``)."""
    for _ in range(warmup):
        acquire()
        release()
    gc.collect()
    clock = time.perf_counter_ns
    total: list[int] = []
    acq: list[int] = []
    start = clock()
    end = start + int(seconds * 1e9)
    cpu0 = time.process_time()
    while len(total) < max_cycles:
        t0 = clock()
        acquire()
        t1 = clock()
        release()
        t2 = clock()
        total.append(t2 - t0)
        acq.append(t1 - t0)
        if t2 >= end:
            break
    return cycle_result(total, acq, clock() - start, time.process_time() - cpu0)


async def cycle_loop_async(
    acquire: Callable[[], Awaitable[object]],
    release: Callable[[], Awaitable[object]],
    warmup: int,
    max_cycles: int,
    seconds: float,
) -> dict[str, Any]:
    """``cycle_loop`` for coroutine functions (run inside the caller's event loop)."""
    for _ in range(warmup):
        await acquire()
        await release()
    gc.collect()
    clock = time.perf_counter_ns
    total: list[int] = []
    acq: list[int] = []
    start = clock()
    end = start + int(seconds * 1e9)
    cpu0 = time.process_time()
    while len(total) < max_cycles:
        t0 = clock()
        await acquire()
        t1 = clock()
        await release()
        t2 = clock()
        total.append(t2 - t0)
        acq.append(t1 - t0)
        if t2 >= end:
            break
    return cycle_result(total, acq, clock() - start, time.process_time() - cpu0)


class Refresher:
    """What a user of a lease-per-lock library must do to hold longer than the TTL: refresh
    the lease every ttl/3 from a thread."""

    def __init__(self, refresh: Callable[[], object], ttl: float) -> None:
        self._refresh = refresh
        self._ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            with contextlib.suppress(Exception):
                self._refresh()

    def stop(self) -> None:
        self._stop.set()


# -- the parent side -------------------------------------------------------------------------------


class Child:
    """One worker subprocess of ``script``, talked to by lines; its stderr goes to a log file."""

    def __init__(
        self,
        script: str | Path,
        kind: str,
        config: dict[str, Any],
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log = log
        self._log_file = log.open("wb")
        self._buf = b""
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--worker", kind, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            bufsize=0,
            env=None if env is None else {**os.environ, **env},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def expect(self, timeout: float) -> str:
        """The next protocol line from the worker, without the prefix."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buf:
                line, _, self._buf = self._buf.partition(b"\n")
                if line.startswith(PROTO.encode()):
                    return line[len(PROTO) :].decode()
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"worker {self.pid} timed out{self._tail()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=5)
                    raise BenchError(
                        f"worker {self.pid} exited ({self.proc.returncode}){self._tail()}"
                    )
                self._buf += chunk

    def result(self, timeout: float) -> dict[str, Any]:
        line = self.expect(timeout)
        if not line.startswith("result "):
            raise BenchError(f"worker {self.pid} said {line!r}, expected its result")
        self.proc.wait(timeout=10)
        data: dict[str, Any] = json.loads(line[len("result ") :])
        return data

    def _tail(self) -> str:
        self._log_file.flush()
        text = self.log.read_text(errors="replace").strip()
        return f"; its stderr ends:\n{text[-2000:]}" if text else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=3)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._log_file.close()


@contextlib.contextmanager
def children() -> Iterator[list[Child]]:
    """A list to add workers to; every one is stopped on the way out, whatever happened."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:
            child.stop()


# -- /proc ---------------------------------------------------------------------------------------


@dataclass
class Usage:
    cpu_s: float  # summed over the process's live threads, from schedstat (ns resolution)
    ticks_s: float  # utime + stime from /proc/PID/stat (includes exited threads; 10 ms ticks)
    switches: int  # voluntary + involuntary context switches over live threads


def proc_usage(pid: int) -> Usage:
    base = Path(f"/proc/{pid}")
    cpu_ns = 0
    switches = 0
    for task in (base / "task").iterdir():
        with contextlib.suppress(OSError):
            cpu_ns += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    switches += int(line.split()[1])
    fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return Usage(cpu_ns / 1e9, ticks / os.sysconf("SC_CLK_TCK"), switches)


def group_cpu_s(pgids: Sequence[int]) -> float:
    """CPU seconds (utime + stime + cutime + cstime) of every process in process groups
    ``pgids``: live processes, plus the children their parents reaped (a PostgreSQL backend
    that exited is counted in the postmaster's cutime/cstime). 10 ms ticks."""
    wanted = {str(g) for g in pgids}
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # state ppid pgrp ... (field 3 onwards)
        if len(fields) > 14 and fields[2] in wanted:
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


# -- analysis --------------------------------------------------------------------------------------


def analyse_contention(
    variant: str,
    results: list[dict[str, Any]],
    start: float,
    end: float,
    procs: int,
    hold_s: float,
) -> dict[str, Any]:
    """Merge every process's ``(asked, got, about to release)`` stamps (one monotonic clock)."""
    counts = [len(r["records"]) for r in results]
    grants = sorted(
        (got, releasing, asked, proc)
        for proc, r in enumerate(results)
        for asked, got, releasing in r["records"]
    )
    waits = [got - asked for got, _, asked, _ in grants]
    handoffs: list[float] = []
    overlaps = 0
    for (_, prev_rel, _, _), (got, _, asked, _) in itertools.pairwise(grants):
        if got < prev_rel:
            overlaps += 1  # granted before the previous holder had even started releasing
        elif asked <= prev_rel:  # the next holder was already waiting when the lock was freed
            handoffs.append(got - prev_rel)
    last = max(g[1] for g in grants) if grants else end
    span = max(end, last) - start
    return {
        "variant": variant,
        "procs": procs,
        "hold_s": hold_s,
        "span_s": span,
        "acquisitions": sum(counts),
        "per_s": sum(counts) / span,
        "counts": counts,
        "jain": jain(counts),
        "wait_s": summary(waits),
        "handoff_s": summary(handoffs),
        "overlaps": overlaps,
        "timeouts": sum(int(r["timeouts"]) for r in results),
        "cpu_s_per_acquisition": sum(float(r["cpu_s"]) for r in results) / max(1, sum(counts)),
        "records": [r["records"] for r in results],
    }


def failover_trial(
    script: str | Path,
    config: dict[str, Any],
    workdir: Path,
    env: Mapping[str, str] | None = None,
    settle: float = 1.0,
) -> dict[str, float]:
    """One fail-over: a ``failover`` worker of ``script`` holds (and says ``held <stamp>``), a
    second one asks (``asking``); ``settle`` seconds later the holder gets SIGKILL. Seconds from
    the kill to the waiter's grant (negative: granted before the kill, a violation)."""
    with children() as kids:
        holder = Child(script, "failover", {**config, "role": "holder"}, workdir / "h.log", env)
        kids.append(holder)
        said = holder.expect(timeout=90)
        if not said.startswith("held "):
            raise BenchError(f"holder said {said!r}")
        held = float(said.split()[1])
        waiter = Child(script, "failover", {**config, "role": "waiter"}, workdir / "w.log", env)
        kids.append(waiter)
        if waiter.expect(timeout=90) != "asking":
            raise BenchError("waiter did not start")
        time.sleep(settle)  # let the waiter settle into waiting
        killed = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        got = float(waiter.result(timeout=90)["got"])
    return {"held_for_s": killed - held, "failover_s": got - killed}


# -- output ---------------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def f(x: float | None, digits: int = 0) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rounds, key=lambda r: r["cycles_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def report_failover(results: list[dict[str, Any]]) -> str:
    """The fail-over table. A result with ``lock_delay_s`` (tenure's rows) gets a target: every
    trial within TTL + lock_delay + TTL/3 (the store frees the name one TTL after the last
    renewal, at most TTL/3 ago, then holds it back for lock_delay)."""
    rows = []
    for r in results:
        times = [t["failover_s"] for t in r["trials"]]
        delay = r.get("lock_delay_s")
        target = "-"
        if delay is not None:
            bound = r["ttl_s"] * 4 / 3 + delay
            target = f"<= {bound:.2f} {verdict(max(times) <= bound)}"
        rows.append(
            [
                r["variant"],
                f(delay, 1),
                str(len(times)),
                f(min(times), 2),
                f(statistics.median(times), 2),
                f(max(times), 2),
                f(statistics.median(times) / r["ttl_s"], 2),
                str(sum(t < 0 for t in times)),
                target,
                " ".join(f"{t:.2f}" for t in times),
            ]
        )
    headers = ["variant", "lock-delay s", "trials", "min s", "median s", "max s", "median / TTL"]
    return table([*headers, "granted before the kill", "target (max)", "each trial s"], rows)


# -- smoke runs -----------------------------------------------------------------------------------
#
# Every script's ``--smoke``: each part, store and row it measures, with tiny counts, for CI
# (scripts/bench_smoke). It checks that the benchmark works — every row produced a number, no
# part failed — never its figures: no timing is judged, so no load on the machine can fail it.

SMOKE_HELP = "check that every part and row runs, with tiny counts; judges no figure (CI)"
SMOKE_STORES_HELP = SMOKE_HELP + "; the stores side by side, a process each"
SMOKE_SETTLE_S = 0.2
"""A smoke run's pause where a measurement lets its waiters settle into waiting (1 s, 0.5 s)."""
SMOKE_TTL = 6.0
"""A smoke run's TTL wherever a row holds a lease or waits one out (the measurements': 2–3 s).
Long, because a smoke run's parts run side by side, each starting its own servers, and a store's
answer is due within a third of the TTL: at 2 s a ZooKeeper ensemble starting beside the rest
(load 12 on two cores) missed its 0.67 s once in CI. No smoke figure is judged, so the longer
TTL costs only the seconds a fail-over waits."""

T = TypeVar("T")
R = TypeVar("R")


def skip_line(row: str, why: str) -> str:
    """The one line a smoke run says about a row that cannot run here."""
    return f"smoke: skipped {row}: {why}"


@dataclass
class Smoke:
    """What a smoke run found: the rows that produced a number, the rows skipped (a comparison
    library that cannot run here, said in one line each) and the problems. ``exit_code`` prints
    the outcome."""

    rows: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def number(self, row: str, value: object) -> None:
        """``row`` must have produced a finite number (which one is not judged)."""
        real = isinstance(value, (int, float)) and not isinstance(value, bool)
        with self._lock:
            if real and math.isfinite(value):
                self.rows.append(row)
            else:
                self.problems.append(f"{row}: no number ({value!r})")

    def fail(self, row: str, why: str) -> None:
        with self._lock:
            self.problems.append(f"{row}: {why}")

    def skip(self, row: str, why: str) -> None:
        """``row`` cannot run here: one line now, and the run goes on without it."""
        line = skip_line(row, why)
        print(line, flush=True)
        with self._lock:
            self.skipped.append(line)

    def exit_code(self) -> int:
        for problem in self.problems:
            print(f"smoke: FAILED {problem}")
        outcome = "FAILED" if self.problems else "ok"
        print(
            f"smoke: {outcome}: {len(self.rows)} rows produced a number, "
            f"{len(self.skipped)} skipped, {len(self.problems)} failed",
            flush=True,
        )
        return 1 if self.problems else 0


def acquired_per_s(result: dict[str, Any] | None) -> float | None:
    """A contention row's acquisitions per second; None when it got the lock not even once."""
    return result["per_s"] if result and result["acquisitions"] else None


def first_trial(result: dict[str, Any] | None) -> float | None:
    """A fail-over row's first trial, in seconds; None when it has none."""
    trials = (result or {}).get("trials") or [{}]
    return trials[0].get("failover_s")


def each(items: Sequence[T], run: Callable[[T], R], side_by_side: bool) -> list[R]:
    """``run(item)`` for every item: one after the other (a measurement: nothing else runs
    meanwhile), or side by side (a smoke run, whose time is mostly waiting: process start-ups,
    TTLs running out). The results in the items' order; the first exception is raised once every
    run has ended."""
    if not side_by_side:
        return [run(item) for item in items]
    with ThreadPoolExecutor(max(1, len(items))) as pool:
        futures = [pool.submit(run, item) for item in items]
    return [future.result() for future in futures]


def run_parts(parts: Sequence[tuple[str, Callable[[], str]]], side_by_side: bool) -> None:
    """Each part's header, then the text it returns: one part after the other, or all side by
    side (a smoke run), printed in order once every part has ended."""
    if not side_by_side:
        for header, run in parts:
            print(header, flush=True)
            print(run(), flush=True)
        return
    texts = each([run for _, run in parts], lambda run: run(), side_by_side=True)
    for (header, _), text in zip(parts, texts, strict=True):
        print(header)
        print(text, flush=True)


def skip_args(skip: Sequence[str]) -> list[str]:
    """``--skip`` options again, for the parts of a fan-out."""
    return [arg for part in skip for arg in ("--skip", part)]


def fan_out(script: str | Path, parts: Sequence[Sequence[str]]) -> int:
    """A smoke run of ``script`` in parts side by side: one subprocess per part (``--smoke``
    and the part's arguments, e.g. ``--only etcd``), each starting its own servers. Their output
    in order, each under a header; non-zero if any part failed."""

    def run(part: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float]:
        argv = [sys.executable, os.path.abspath(script), "--smoke", *part]
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc, time.monotonic() - start

    began = time.monotonic()
    ran = each(parts, run, side_by_side=True)
    done = [proc for proc, _ in ran]
    # Failed parts print last, so the end of the output (all a CI log may keep) shows them.
    for part, (proc, seconds) in sorted(
        zip(parts, ran, strict=True), key=lambda r: bool(r[1][0].returncode)
    ):
        print(
            f"\n======== smoke {' '.join(part)}: exit {proc.returncode}, {seconds:.0f} s ========"
        )
        print(proc.stdout, end="", flush=True)
        print(proc.stderr, end="", file=sys.stderr, flush=True)
    failed = [" ".join(part) for part, proc in zip(parts, done, strict=True) if proc.returncode]
    print(
        f"\nsmoke: {'FAILED' if failed else 'ok'}: {len(parts) - len(failed)} of {len(parts)} "
        f"parts passed in {time.monotonic() - began:.0f} s"
        + (f" (failed: {'; '.join(failed)})" if failed else "")
    )
    return 1 if failed else 0
