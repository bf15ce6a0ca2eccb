"""Keep-alive traffic does not grow with the number of locks a session holds.

    .venv/bin/python benchmarks/bench_keepalive.py [--counts 1,100,10000] [--stores sqlite,etcd]
    .venv/bin/python benchmarks/bench_keepalive.py --smoke   # does every row work? (CI)

For each store and each count N: one client acquires N locks with one TTL (so one session), then
holds them for a few renewal intervals. Printed: the keep-alive calls the client made per renewal
interval, their latency (p50, max), and the time it took to acquire the N locks. Every store
renews a whole session with one request, so the calls per interval stay at one and their latency
flat, whatever N.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import anyio

from _common import SMOKE_STORES_HELP, Smoke, fan_out
from tenure import AsyncClient
from tenure._url import open_store
from tenure.stores._spi import Session
from tenure.testing import FaultyStore

TTL = 3.0
ROW = "{:<9} {:>6} {:>15} {:>8} {:>8} {:>14}"
INTERVALS = 3
SMOKE_INTERVALS = 2  # a smoke run's: at least one keep-alive to time, in two seconds


class TimedStore(FaultyStore):
    """Counts and times keep-alives (no faults injected)."""

    def __init__(self, inner: object) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.latencies: list[float] = []

    async def keep_alive(self, session: Session) -> bool:
        start = time.perf_counter()
        try:
            return await super().keep_alive(session)
        finally:
            self.latencies.append(time.perf_counter() - start)


async def measure(url: str, count: int, intervals: int) -> tuple[float, float, float, float]:
    store = TimedStore(open_store(url))
    async with AsyncClient(store) as client:
        start = time.perf_counter()
        leases = [await client.lock(f"held-{i}", TTL).acquire() for i in range(count)]
        acquire_s = time.perf_counter() - start
        store.keep_alive_calls = 0
        store.latencies.clear()
        await anyio.sleep(TTL / 3 * intervals + 0.05)
        for lease in leases:
            lease.check()
        calls = store.keep_alive_calls / intervals
        p50 = statistics.median(store.latencies) if store.latencies else float("nan")
        worst = max(store.latencies, default=float("nan"))
    return calls, p50 * 1e3, worst * 1e3, acquire_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", help="default 1,100,10000 (a smoke run: 1,3)")
    parser.add_argument("--stores", default="sqlite,postgres,etcd")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_STORES_HELP)
    args = parser.parse_args()
    stores = args.stores.split(",")
    if args.smoke and len(stores) > 1:  # one store per process, each with its own server
        return fan_out(__file__, [["--stores", kind] for kind in stores])
    counts = [int(c) for c in (args.counts or ("1,3" if args.smoke else "1,100,10000")).split(",")]
    intervals = SMOKE_INTERVALS if args.smoke else INTERVALS
    smoke = Smoke() if args.smoke else None
    print(
        f"keep-alive per session, TTL {TTL:g} s (renewal every {TTL / 3:g} s), {intervals} rounds"
    )
    print(ROW.format("store", "locks", "calls/interval", "p50 ms", "max ms", "acquire all s"))
    with ExitStack() as stack:
        for kind in stores:
            if kind == "sqlite":
                url = f"sqlite:///{tempfile.mkdtemp(prefix='tenure-ka-')}/s.db"
            elif kind == "postgres":
                from tenure.stores.postgres.server import PostgresServer

                pg = stack.enter_context(PostgresServer())
                url = f"{pg.dsn}?schema=ka_{uuid.uuid4().hex[:8]}"
            elif kind == "etcd":
                from tenure.stores.etcd.server import EtcdCluster

                etcd = stack.enter_context(EtcdCluster(members=3))
                url = f"etcd://{','.join(etcd.endpoints)}/ka_{uuid.uuid4().hex[:8]}"
            else:
                sys.exit(f"unknown store {kind!r}")
            for count in counts:
                calls, p50, worst, acquire_s = anyio.run(measure, url, count, intervals)
                cells = (f"{calls:.2f}", f"{p50:.2f}", f"{worst:.2f}", f"{acquire_s:.2f}")
                print(ROW.format(kind, count, *cells))
                if smoke is not None:  # NaN when no keep-alive was made
                    smoke.number(f"{kind} {count} locks", p50)
            if kind == "sqlite":
                Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    return 0 if smoke is None else smoke.exit_code()


if __name__ == "__main__":
    sys.exit(main())
