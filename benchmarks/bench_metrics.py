#!/usr/bin/env python3
"""What tenure.metrics costs: an uncontended lock cycle on the embedded SQLite store with
metrics on and off, in alternating rounds of one process, and the ratio.

Run from the repository root:

    .venv/bin/python benchmarks/bench_metrics.py            # full run, about 30 s
    .venv/bin/python benchmarks/bench_metrics.py --smoke    # a few seconds (scripts/bench_smoke)
    .venv/bin/python benchmarks/bench_metrics.py --json out.json

One client, one lock name, ``lease = client.lock(name, ttl=30).acquire(); lease.release()``.
Each round times cycles for ``--cycle-seconds`` with ``tenure.metrics.Metrics`` listening (on
a registry of its own), then as long with nobody listening (off), or the other way round on
odd rounds so neither always runs first; the ratio is taken per round, and the table shows the
median. Two figures free of the store's noise: what metrics on add to a cycle (its one
event told to `Metrics`, timed alone), and the seam's own price with nobody listening (one
``if listeners:`` test per acquire), each against the cycle's time. Target: on/off ≤ 1.05.
Needs the metrics extra (prometheus_client).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

import tenure
from _common import cycle_loop, f, progress, table, verdict
from tenure.metrics import Metrics

LOCK_NAME = "bench"
TTL = 30.0
TARGET = 1.05


def measure(client: tenure.Client, seconds: float, on: bool) -> dict[str, Any]:
    """One timed run of cycles, with metrics listening or not."""
    lock = client.lock(LOCK_NAME, ttl=TTL)
    metrics = Metrics(CollectorRegistry()) if on else None
    try:
        return cycle_loop(lock.acquire, lock.release, 50, 10**9, seconds)
    finally:
        if metrics is not None:
            metrics.close()


def seam_ns() -> float:
    """Nanoseconds of the seam's test with nobody listening (what every acquire pays)."""
    from tenure._observe import listeners

    assert not listeners
    loops = 2_000_000
    timer = timeit.Timer("if listeners: pass", globals={"listeners": listeners})
    return min(timer.repeat(5, loops)) / loops * 1e9


def event_us(client: tenure.Client) -> float:
    """Microseconds of what metrics on add to one uncontended cycle: its one event (an
    ``acquired``) told to a listening `Metrics`, timed alone — free of the store's noise."""
    from tenure import _observe

    with Metrics(CollectorRegistry()):
        loops = 20_000

        def tell() -> None:
            _observe.acquired("lock", client.store, LOCK_NAME, "granted", 0.001)

        return min(timeit.repeat(tell, number=loops, repeat=5)) / loops * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds: 2 short rounds")
    p.add_argument("--rounds", type=int, help="rounds, each on then off or off then on (12)")
    p.add_argument("--cycle-seconds", type=float, help="per half-round (1; smoke 0.3)")
    p.add_argument("--dir", type=Path, default=None, help="where the store's temp dir goes")
    p.add_argument("--json", type=Path, default=None, help="also save the raw numbers here")
    a = p.parse_args(argv)
    rounds = a.rounds or (2 if a.smoke else 12)
    seconds = a.cycle_seconds or (0.3 if a.smoke else 1.0)
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="tenure-bench-metrics-", dir=a.dir) as tmp,
        tenure.connect(f"sqlite:///{tmp}/store.db") as client,
    ):
        for i in range(rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            run = {on: measure(client, seconds, on) for on in order}
            on, off = run[True], run[False]
            ratio = on["cycle_us"]["p50"] / off["cycle_us"]["p50"]
            results.append({
                "on": on, "off": off, "p50_ratio": ratio,
                "mean_ratio": off["cycles_per_s"] / on["cycles_per_s"],
                "cpu_ratio": on["cpu_per_cycle_us"] / off["cpu_per_cycle_us"],
            })  # fmt: skip
            progress(f"round {i + 1}/{rounds}: on/off p50 {ratio:.3f}")
        event = event_us(client)
    seam = seam_ns()
    p50 = statistics.median(r["p50_ratio"] for r in results)
    mean = statistics.median(r["mean_ratio"] for r in results)
    cpu = statistics.median(r["cpu_ratio"] for r in results)
    off_p50 = statistics.median(r["off"]["cycle_us"]["p50"] for r in results)
    on_p50 = statistics.median(r["on"]["cycle_us"]["p50"] for r in results)
    ratios = [r["p50_ratio"] for r in results]
    spread = f"{min(ratios):.3f}-{max(ratios):.3f}"  # wide: the machine was busy, run it again
    print(f"tenure.metrics cost: {rounds} rounds of {seconds:g} s per half, SQLite, one process")
    rows = [
        ["metrics off", f(off_p50, 1), "-", "-", "-"],
        ["metrics on", f(on_p50, 1), f"{p50:.3f}", spread, f"<= {TARGET} {verdict(p50 <= TARGET)}"],
    ]
    print(table(["variant", "p50 us", "on/off p50", "rounds' range", "target"], rows))
    print(f"on/off, mean cycle time: {mean:.3f}; CPU per cycle: {cpu:.3f} (medians over rounds)")
    print(
        f"seam with nobody listening: {seam:.1f} ns per acquire = "
        f"{seam / (off_p50 * 1e3) * 100:.4f} % of a cycle"
    )
    print(
        f"metrics on, timed alone: {event:.2f} us per cycle = "
        f"{event / off_p50 * 100:.2f} % of a cycle"
    )
    if a.json:
        raw = {"rounds": results, "seam_ns": seam, "event_us": event}
        a.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
