"""How long the embedded store's write lock is held, and so how likely a frozen process holds it.

    .venv/bin/python benchmarks/bench_sqlite_writelock.py             # full run, about 25 s
    .venv/bin/python benchmarks/bench_sqlite_writelock.py --smoke     # does it work? (CI)

SQLite has one write lock per file. A process frozen (SIGSTOP, a debugger) inside one of tenure's
write transactions keeps it, and every lock on the file waits until it runs again
(docs/stores/sqlite.md). This measures the holds from outside, as another process sees them: a
probe process tries ``BEGIN IMMEDIATE`` (busy timeout 0) every 0.2 ms; each stretch it finds the
lock taken is one hold by the process under test, timed from the first busy try to the first
free one. Two processes under test, each in turn:

- ``holder``: a sync client holding one lock with TTL 1.5 s, doing nothing else — a `tenure run`
  while its command runs: one renewal transaction every TTL/3.
- ``cycler``: a sync client acquiring and releasing one lock back to back — the busiest a client
  can keep the file.

Printed per process: holds seen, their p50/p99/max, and the share of the time the lock was held —
the chance that a freeze at a random moment lands inside a transaction. For a holder the share
scales with 1/TTL (renewals every TTL/3): the table also gives it at the default TTL.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Smoke, pct, table

HOLDER_TTL = 1.5
DEFAULT_TTL = 30.0  # tenure's DEFAULT_TTL: what the share comes to at the default
PROBE_EVERY = 0.0002

WORKER = """
import sys, time, tenure
url, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
with tenure.connect(url) as client:
    lock = client.lock("probe-me", ttl=float(sys.argv[4]))
    print("ready", flush=True)
    until = time.monotonic() + seconds
    if mode == "holder":
        with lock:
            while time.monotonic() < until:
                time.sleep(0.05)
    else:
        while time.monotonic() < until:
            lock.acquire().release()
"""


def probe(db: Path, seconds: float) -> tuple[list[float], int, int]:
    """Try the write lock every `PROBE_EVERY` s for ``seconds``: the holds seen (seconds), and
    how many tries found it taken, of how many."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    holds: list[float] = []
    busy_since: float | None = None
    tries = taken = 0
    until = time.monotonic() + seconds
    while (now := time.monotonic()) < until:
        tries += 1
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            if busy_since is not None:
                holds.append(now - busy_since)
                busy_since = None
        except sqlite3.OperationalError:
            taken += 1
            busy_since = now if busy_since is None else busy_since
        time.sleep(PROBE_EVERY)
    conn.close()
    return holds, taken, tries


def measure(mode: str, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-writelock-") as tmp:
        db = Path(tmp) / "locks.db"
        url = f"sqlite:///{db}"
        args = [sys.executable, "-c", WORKER, url, mode, str(seconds + 1), str(HOLDER_TTL)]
        with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as worker:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {mode} did not start")
            time.sleep(0.2)  # past its first grant: the clock starts at the steady state
            holds, taken, tries = probe(db, seconds)
            worker.wait(timeout=30)
        if worker.returncode != 0:
            raise RuntimeError(f"the {mode} failed: exit {worker.returncode}")
    if not holds:
        raise RuntimeError(f"the probe saw no write transaction of the {mode}")
    ms = [h * 1e3 for h in holds]
    return {
        "holds": len(ms),
        "p50": pct(ms, 50),
        "p99": pct(ms, 99),
        "max": max(ms),
        "share": taken / tries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="probed per process")
    parser.add_argument("--smoke", action="store_true", help="does it work? tiny counts")
    args = parser.parse_args()
    seconds = 1.2 if args.smoke else args.seconds
    smoke = Smoke() if args.smoke else None
    load = os.getloadavg()[0]
    print(
        f"SQLite write-lock holds, probed every {PROBE_EVERY * 1e3:g} ms for {seconds:g} s"
        f" per process, load {load:.2f}"
    )
    rows = []
    for mode in ("holder", "cycler"):
        try:
            got = measure(mode, seconds)
        except RuntimeError as exc:
            if smoke is None:
                raise
            smoke.fail(mode, str(exc))
            continue
        if smoke is not None:
            smoke.number(mode, got["share"])
        at_default = f"{got['share'] * HOLDER_TTL / DEFAULT_TTL:.5%}" if mode == "holder" else "-"
        rows.append([
            mode, f"{got['holds']:.0f}", f"{got['p50']:.2f}", f"{got['p99']:.2f}",
            f"{got['max']:.2f}", f"{got['share']:.4%}", at_default,
        ])  # fmt: skip
    headers = ["process", "holds", "p50 ms", "p99 ms", "max ms", "share held",
               f"at TTL {DEFAULT_TTL:g} s"]  # fmt: skip
    print(table(headers, rows))
    return smoke.exit_code() if smoke is not None else 0


if __name__ == "__main__":
    sys.exit(main())
