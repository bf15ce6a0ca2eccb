"""Celery beat fail-over: from the leader's death to the next tick run, and the fire times lost
or run twice — tenure's ``LeaderScheduler`` beside celery-redbeat, the HA beat people use.

    .venv/bin/python benchmarks/bench_beat_failover.py                 # about 4 minutes
    .venv/bin/python benchmarks/bench_beat_failover.py --kills 3 --ttl 2 --skip redbeat
    .venv/bin/python benchmarks/bench_beat_failover.py --store etcd://127.0.0.1:2379/bench
    .venv/bin/python benchmarks/bench_beat_failover.py --smoke   # does every row work? (CI)

Each variant: a Redis broker (``redis-server`` on a free loopback port), one worker, three beat
processes of ``examples/celery/celery_example.py`` with a 1 s ``tick`` entry. After three ticks
the leading beat is SIGKILLed, at a random moment of a tick period; the gap is the time from the
kill to the first tick a worker runs that the next leader sent. The killed beat is started
again, and after three ticks of the new leader the next kill comes (``--kills``, 5). Then: fire
times the worker never ran (for tenure, slots missing between the first and the last; for
redbeat, whose messages name no fire time, seconds between two runs beyond the first) and fire
times run twice.

tenure's bound is the TTL (the term holds nothing back: each send is a slot claim with a
lock-delay of its own): ``--ttl 2`` and the default 10 s. redbeat runs with
``redbeat_lock_timeout`` = the smallest TTL and ``beat_max_loop_interval`` 1 s (its followers
poll the lock at that interval): the same bound. Its defaults (a lock of 5 ×
``beat_max_loop_interval`` = 25 minutes, polled every 5 minutes) are not measured: a fail-over
would take up to half an hour. Needs the test extra and ``celery-redbeat`` (the bench extra).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tenure
from _common import SMOKE_HELP, SMOKE_TTL, Smoke, each
from tenure.stores.redis.server import RedisServer
from tenure_tools.celery_nodes import CeleryNodes, Tick, fail_over, read_ticks, wait_until

ROOT = Path(__file__).parents[1]
APP = ROOT / "examples" / "celery"
ELECTION = "celery-beat:celery_example"
REDBEAT_APP = """from celery_example import app
import os
app.conf.update(
    redbeat_redis_url=os.environ["CELERY_BROKER_URL"],
    redbeat_lock_timeout=int(os.environ["REDBEAT_LOCK_TIMEOUT"]),
    beat_max_loop_interval=1,
)
"""


@dataclass
class Outcome:
    name: str
    gaps: list[float]
    lost: int
    twice: int
    ticks: int


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_tenure(root: Path, broker: str, store: str, ttl: float, kills: int, ticks: int) -> Outcome:
    out = root / "ticks"
    out.touch()
    env = {"CELERY_BROKER_URL": broker, "TENURE_STORE": store, "OUT": str(out)}
    env["BEAT_TTL"] = str(ttl)
    gaps: list[float] = []
    with CeleryNodes("celery_example", APP, root, env) as nodes, tenure.connect(store) as client:
        nodes.worker("worker")
        for i in range(3):
            nodes.beat(f"beat-{i}")
        wait_until(lambda: len(read_ticks(out)) >= ticks, 60.0, f"{ticks} ticks")
        for k in range(kills):
            time.sleep(random.uniform(0.0, 1.0))  # a death at any moment of a tick period
            done = fail_over(nodes, client, ELECTION, out)
            gaps.append(done.gap)
            progress(f"  tenure ttl {ttl:g}: kill {k + 1}: {done.gap:.2f} s")
            nodes.beat(done.killed)  # back, as a follower

            def led(term: int = done.term) -> bool:
                return sum(t.term == term for t in read_ticks(out)) >= ticks

            wait_until(led, 60.0, f"{ticks} ticks of the new leader")
        for i in range(3):
            nodes.nodes[f"beat-{i}"].stop()
        time.sleep(1.0)
        ticks = read_ticks(out)
    slots = sorted({t.slot for t in ticks if t.slot is not None})
    span = round((slots[-1] - slots[0]).total_seconds()) + 1
    twice = sum(n - 1 for n in Counter(t.slot for t in ticks).values())
    return Outcome(f"tenure, TTL {ttl:g} s", gaps, span - len(slots), twice, len(ticks))


def run_redbeat(root: Path, broker: str, lock_timeout: int, kills: int, ticks: int) -> Outcome:
    out = root / "ticks"
    out.touch()
    (root / "redbeat_app.py").write_text(REDBEAT_APP)
    env = {"CELERY_BROKER_URL": broker, "OUT": str(out)}
    env["REDBEAT_LOCK_TIMEOUT"] = str(lock_timeout)
    env["PYTHONPATH"] = str(APP)
    gaps: list[float] = []
    with CeleryNodes("redbeat_app", root, root, env) as nodes:
        nodes.env["PYTHONPATH"] = f"{root}:{APP}:{nodes.env['PYTHONPATH']}"
        nodes.worker("worker")
        for i in range(3):
            nodes.beat(f"beat-{i}", scheduler="redbeat.RedBeatScheduler")
        wait_until(lambda: len(read_ticks(out)) >= ticks, 60.0, f"{ticks} ticks")
        for k in range(kills):
            time.sleep(random.uniform(0.0, 1.0))
            leader = redbeat_leader(nodes)
            at = time.time()
            nodes.nodes[leader].kill()
            after: list[Tick] = []

            def ticked(at: float = at, after: list[Tick] = after) -> bool:
                after[:] = [t for t in read_ticks(out) if t.ran > at]
                return len(after) >= ticks

            wait_until(ticked, 120.0, f"{ticks} ticks after the kill")
            gaps.append(after[0].ran - at)
            progress(f"  redbeat lock {lock_timeout} s: kill {k + 1}: {gaps[-1]:.2f} s")
            (root / f"{leader}.log").rename(root / f"{leader}-{k}.log")
            nodes.beat(leader, scheduler="redbeat.RedBeatScheduler")
        for i in range(3):
            nodes.nodes[f"beat-{i}"].stop()
        time.sleep(1.0)
        ticks = read_ticks(out)
    runs = sorted(t.ran for t in ticks)
    between = [b - a for a, b in itertools.pairwise(runs)]
    lost = sum(max(0, round(gap) - 1) for gap in between)
    twice = sum(1 for gap in between if gap < 0.5)
    return Outcome(f"redbeat, lock {lock_timeout} s", gaps, lost, twice, len(ticks))


def redbeat_leader(nodes: CeleryNodes) -> str:
    """The running beat that says it holds redbeat's lock."""
    found: list[str] = []

    def held() -> bool:
        found[:] = [
            name
            for name, node in nodes.nodes.items()
            if name.startswith("beat-")
            and node.running
            and "Acquired lock" in nodes.log(name).read_text()
        ]
        return len(found) == 1

    wait_until(held, 60.0, "one redbeat leader")
    return found[0]


def main() -> int:
    # SIGTERM as Ctrl-C: the with-blocks then stop every process this run started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--ttl", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--store", help="a tenure store URL (default: a fresh embedded store)")
    parser.add_argument("--skip", choices=["redbeat"], action="append", default=[])
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + "; variants side by side")
    args = parser.parse_args()
    smoke = Smoke() if args.smoke else None
    # A smoke run: one TTL (each runs the same code), one kill, one tick where three are awaited.
    ttls, kills, ticks = ([SMOKE_TTL], 1, 1) if smoke else (args.ttl, args.kills, 3)

    def tenure_run(ttl: float) -> Outcome:
        with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
            store = args.store or f"sqlite:///{tmp}/store.db"
            broker = f"redis://{redis.endpoint}/0"
            return run_tenure(Path(tmp), broker, store, ttl, kills, ticks)

    def redbeat_run() -> Outcome:
        with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
            lock = max(2, round(min(ttls)))  # above its 1 s loop: the leader renews
            return run_redbeat(Path(tmp), f"redis://{redis.endpoint}/0", lock, kills, ticks)

    runs: list[Callable[[], Outcome]] = [functools.partial(tenure_run, ttl) for ttl in ttls]
    if "redbeat" not in args.skip:
        runs.append(redbeat_run)
    outcomes = each(runs, lambda run: run(), side_by_side=smoke is not None)
    print(f"{'scheduler':<22} {'kills':>5} {'gap p50':>8} {'gap max':>8} {'lost':>5} {'twice':>6}")
    for o in outcomes:
        print(
            f"{o.name:<22} {len(o.gaps):>5} {statistics.median(o.gaps):>7.2f}s"
            f" {max(o.gaps):>7.2f}s {o.lost:>5} {o.twice:>6}"
        )
        if smoke is not None:
            smoke.number(o.name, statistics.median(o.gaps))
    return 0 if smoke is None else smoke.exit_code()


if __name__ == "__main__":
    sys.exit(main())
